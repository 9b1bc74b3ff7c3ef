"""What the tensor-parallel benchmarks share: one thread per rank, the built tools, and compiling,
inspecting and running a plan with metrics. Importing it sets the environment (before numpy)."""
import json
import os
import subprocess

os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(SOURCE, "build", "bin")


def export_mae(size, batch, work_dir):
    """Exports the examples' MAE at `size` with `batch` baked in and writes a recipe beside it (that
    global batch, the positional embeddings frozen); returns (model, config)."""
    os.makedirs(work_dir, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "mae", "export.py"), "--size", size,
                    "--batch", str(batch), "--out-dir", work_dir], check=True, stdout=subprocess.DEVNULL)
    config = os.path.join(work_dir, "recipe.json")
    with open(config, "w") as f:
        json.dump({"TOTAL_BATCH_SIZE": batch, "frozen": ["pos_embed$"]}, f)
    return os.path.join(work_dir, "mae-%s-opset17.onnx" % size), config


def compile_plan(model, config, plan, flags):
    """Compiles `model` into `plan` and returns `cpc inspect --json` of it."""
    subprocess.run([os.path.join(BIN, "cpc"), "compile", model, "--config", config, "-o", plan, *flags], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return json.loads(subprocess.run([os.path.join(BIN, "cpc"), "inspect", plan, "--json"], check=True,
                                     capture_output=True, text=True).stdout)


def run_metrics(plan, steps, metrics, extra=()):
    """Runs `steps` steps of `plan` and returns its metrics lines."""
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps), "--metrics", metrics, "--quiet",
                    *extra], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(metrics) as f:
        return [json.loads(line) for line in f]


def parameter_bytes(summary):
    """(bytes this rank stores, global bytes of the split parameters, global bytes of all of
    them) from `cpc inspect --json` (f32 parameters)."""
    params = [b for b in summary["buffers"] if b["kind"] == "parameter" and b["alias_of"] < 0]

    def size(shape):
        n = 4
        for d in shape:
            n *= d
        return n

    return (sum(size(b["shape"]) for b in params),
            sum(size(b["global_shape"]) for b in params if b.get("shard_dims")),
            sum(size(b.get("global_shape", b["shape"])) for b in params))


def export_model(name, batch, work_dir):
    """Exports the examples' `mae-SIZE` or `gpt-SIZE` training graph with `batch` baked in."""
    family, size = name.split("-")
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", family, "export.py"), "--size", size,
                    "--batch", str(batch), "--out-dir", work_dir], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(work_dir, "%s-%s-opset17.onnx" % (family, size))


def calibrate(models, work_dir):
    """`cpc calibrate` with each model's one-rank training step as a sample plan; prints its
    summary line and returns the profile's path."""
    samples = []
    for i, model in enumerate(models):
        sample = os.path.join(work_dir, "sample%d.plan" % i)
        subprocess.run([os.path.join(BIN, "cpc"), "compile", model, "-o", sample], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        samples += ["--plan", sample]
    profile = os.path.join(work_dir, "profile.json")
    out = subprocess.run([os.path.join(BIN, "cpc"), "calibrate", "-o", profile, *samples], check=True,
                         capture_output=True, text=True).stdout
    print(out.strip().splitlines()[-1])
    return profile
