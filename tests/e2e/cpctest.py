"""Helpers shared by the end-to-end tests: where the tools are, running them, checking output."""
import os
import signal
import subprocess
import sys
import tempfile
import time

SOURCE = os.environ.get("CPC_SOURCE", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN = os.environ.get("CPC_BIN", os.path.join(SOURCE, "build", "bin"))
PYTHON = "/usr/bin/python3"  # Debian's python: has torch and onnx
# What a test that launches ranks sets: root may run mpirun, and one thread per rank.
MPI_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1", "OPENBLAS_NUM_THREADS": "1",
           "OMP_NUM_THREADS": "1"}
# The sanitizer pass (build-asan/: ASan + UBSan, 5-10x slower; tests/CMakeLists.txt sets
# CPC_SANITIZED=1) runs every e2e test again to find memory errors and undefined behaviour, not to
# prove numbers the plain build's pass has proven. There a heavy test runs a smaller but
# representative selection: every code path it covers at least once (each parallel mode, ZeRO
# stage, schedule, precision, checkpoint and data path, every cheap bad-input check), without the
# repetitions (the same path on another model or exporter, another layout of one mode, long step
# counts). A case marked `repetition=True` (Results.check) is left to the plain pass there; each
# heavy test says why its selection is what it is.
SANITIZED = bool(os.environ.get("CPC_SANITIZED"))
# The MAE-tiny recipe of the data- and tensor-parallel tests (global batch 8, 20 steps): the
# single-rank run's grad_norm falls from 0.63 to 0.16, so a threshold of 0.2 clips the first 13
# steps and leaves the rest alone (both sides of the clamp); the loss falls from 1.32 to 1.02.
MAE_CLIP = 0.2
MAE_RECIPE = {"TOTAL_BATCH_SIZE": 8, "LR": 0.05, "WEIGHT_DECAY": 0.05, "NUM_EPOCHS": 4, "WARMUP_EPOCHS": 1,
              "STEPS_PER_EPOCH": 5, "lr_schedule": "cosine", "BETAS": [0.9, 0.95], "clip_grad_norm": MAE_CLIP,
              "frozen": ["pos_embed$"]}


def tool(name):
    return os.path.join(BIN, name)


# Full (DWARF) unwinding on malloc, which tests/CMakeLists.txt gives the sanitizer pass's tests
# that start MPI ranks or OpenMP teams (so that lsan.supp can name those libraries' leaks), makes
# every allocation slow: cpc compile and cpc inspect take 5-7x as long under it. Those commands
# start neither (only cpc calibrate of the cpc subcommands does), so they get ASan's default
# frame-pointer unwinding back, as the other tests run them: the same checks, only the stacks
# recorded per allocation are shorter.
FULL_UNWIND = ":fast_unwind_on_malloc=0"


def unwind_env(args):
    """The environment changes that give `args` fast unwinding back (see FULL_UNWIND), or {}."""
    options = os.environ.get("ASAN_OPTIONS", "")
    if FULL_UNWIND not in options or len(args) < 2 or args[0] != tool("cpc") or args[1] == "calibrate":
        return {}
    return {"ASAN_OPTIONS": options.replace(FULL_UNWIND, "")}


def run(args, check=True, timeout=600, env=None):
    """Runs a command (with `env` added to the environment), returns CompletedProcess with text
    stdout/stderr."""
    env = dict(unwind_env(args), **(env or {}))
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout,
                          env=dict(os.environ, **env) if env else None)
    if check and proc.returncode != 0:
        raise AssertionError("command failed (%d): %s\nstdout:\n%s\nstderr:\n%s" %
                             (proc.returncode, " ".join(args), proc.stdout[-4000:], proc.stderr[-4000:]))
    return proc


# The x86-64 cores of OpenBLAS 0.3.21's DYNAMIC_ARCH build that OPENBLAS_CORETYPE can force, as
# it and openblas_get_corename() spell them (kernels/cpu/GemmCuts.cpp knows these and Cooperlake,
# which 0.3.21's force_coretype cannot find: it searches corename[1..24], Cooperlake is 25th; it
# has SkylakeX's GEMM kernels).
OPENBLAS_CORES = ["Prescott", "Core2", "Penryn", "Dunnington", "Nehalem", "Atom", "Nano", "Opteron", "Opteron_SSE3",
                  "Barcelona", "Bobcat", "Sandybridge", "Bulldozer", "Piledriver", "Steamroller", "Excavator",
                  "Haswell", "Zen", "SkylakeX"]
# One core of each set of GEMM kernel files (kernel/x86_64/KERNEL.*): Dunnington has Penryn's,
# Bobcat Barcelona's, Opteron_SSE3 Opteron's, Steamroller and Excavator Piledriver's, Zen Haswell's.
OPENBLAS_KERNEL_FAMILIES = ["Prescott", "Core2", "Penryn", "Atom", "Nehalem", "Nano", "Opteron", "Barcelona",
                            "Sandybridge", "Bulldozer", "Piledriver", "Haswell", "SkylakeX"]
GEMM_TESTS = "GemmCoreTest.*:GemmSplitTest.*:*GemmThreadsTest.*:GemmBatchTest.*:Float16Kernels.MatmulPanelsEveryLayout"


def run_on_core(args, core, timeout=600):
    """Runs `args` with OpenBLAS forced to `core`; None when this machine cannot execute that
    core's kernels (the process dies of SIGILL), else the CompletedProcess."""
    proc = run(args, check=False, timeout=timeout, env={"OPENBLAS_CORETYPE": core})
    return None if proc.returncode == -signal.SIGILL else proc


def runnable_cores(cores=OPENBLAS_CORES):
    """The OpenBLAS cores of `cores` whose GEMM kernels this machine executes (each asked once, by
    running cpc-unit-tests' check that the forced core is the one loaded)."""
    runnable = []
    for core in cores:
        proc = run_on_core([tool("cpc-unit-tests"), "--gtest_filter=GemmCoreTest.*:GemmBatchTest.*"], core)
        if proc is not None:
            assert proc.returncode == 0, "OPENBLAS_CORETYPE=%s:\n%s%s" % (core, proc.stdout[-3000:], proc.stderr[-2000:])
            runnable.append(core)
    return runnable


def cpu_flags():
    """This CPU's feature flags (/proc/cpuinfo)."""
    with open("/proc/cpuinfo") as f:
        line = next((line for line in f if line.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def export_mae(size, opset, out_dir, extra=()):
    """Exports the examples' MAE at `size` and returns the .onnx path."""
    run([PYTHON, os.path.join(SOURCE, "examples", "mae", "export.py"), "--size", size, "--opset", str(opset),
         "--out-dir", out_dir, *extra])
    return os.path.join(out_dir, "mae-%s-opset%d.onnx" % (size, opset))


def export_gpt(size, batch, out_dir):
    """Exports the examples' GPT at `size` and `batch` and returns the .onnx path."""
    run([PYTHON, os.path.join(SOURCE, "examples", "gpt", "export.py"), "--size", size, "--batch", str(batch),
         "--out-dir", out_dir])
    return os.path.join(out_dir, "gpt-%s-opset17.onnx" % size)


def tiny_batches(work, rng):
    """Random global batches of 8 for GPT-tiny (idx, targets) and MAE-tiny (imgs, noise), drawn
    from `rng` in that order and saved in `work`; returns the two {input: .npy path} dicts."""
    import numpy as np
    gpt = {"idx": os.path.join(work, "idx.npy"), "targets": os.path.join(work, "targets.npy")}
    np.save(gpt["idx"], rng.integers(0, 64, (8, 8)).astype(np.int64))
    np.save(gpt["targets"], rng.integers(0, 64, (8, 8)).astype(np.int64))
    mae = {"imgs": os.path.join(work, "imgs.npy"), "noise": os.path.join(work, "noise.npy")}
    np.save(mae["imgs"], rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    np.save(mae["noise"], rng.random((8, 16)).astype(np.float32))
    return gpt, mae


class Results:
    """Counts checks and prints the closing 'N passed, N failed' line."""

    def __init__(self):
        self.passed = 0
        self.failed = 0
        self.left = 0

    def check(self, name, fn, repetition=False):
        """Runs the case `fn` and reports it with its time. `repetition`: the case repeats a code
        path another case of the test runs (on another model, layout or step count), so under
        the sanitizers it is left to the plain build's pass (see SANITIZED)."""
        if repetition and SANITIZED:
            self.left += 1
            print("SKIP %s (a repetition: the plain build's pass runs it)" % name, flush=True)
            return
        start = time.monotonic()
        try:
            fn()
            self.passed += 1
            print("PASS %s (%.1f s)" % (name, time.monotonic() - start), flush=True)
        except Exception as e:  # report every failing case, not just the first
            self.failed += 1
            print("FAIL %s (%.1f s)" % (name, time.monotonic() - start), "\n  ", str(e).replace("\n", "\n   "),
                  flush=True)

    def finish(self):
        left = ", %d left to the plain build (repetitions)" % self.left if self.left else ""
        print("%d passed, %d failed%s" % (self.passed, self.failed, left))
        sys.exit(1 if self.failed else 0)


def compile_plan(work, model, name, flags, recipe):
    """Writes `recipe` as WORK/NAME.json and compiles `model` with it and `flags` into
    WORK/NAME.plan; returns the plan's path and cpc compile's CompletedProcess."""
    import json
    config = os.path.join(work, name + ".json")
    with open(config, "w") as f:
        json.dump(recipe, f)
    plan = os.path.join(work, name + ".plan")
    return plan, run([tool("cpc"), "compile", model, "--config", config, "-o", plan, *flags])


def train_plan(plan, steps, inputs, out_prefix):
    """Trains `plan` for `steps` with cpc-run on `inputs` ({name: .npy path}); returns the metric
    lines, the --output-dir of final parameters and `cpc inspect --json`'s summary of the plan."""
    import json
    metrics, params = out_prefix + ".jsonl", out_prefix + "-params"
    args = [tool("cpc-run"), plan, "--steps", str(steps), "--metrics", metrics, "--output-dir", params]
    for name, path in inputs.items():
        args += ["--input", "%s=%s" % (name, path)]
    run(args)
    with open(metrics) as f:
        lines = [json.loads(line) for line in f]
    summary = json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)
    return lines, params, summary


def peak_error(plan, steps=2, extra=(), tolerance=0.05):
    """Runs `plan` for `steps` steps and checks cpc-run's measured peak per rank (the largest
    rank's) is within `tolerance` of the predicted; returns (measured over predicted in %, the
    measured bytes). Under the sanitizers their shadow memory is measured too: callers skip it."""
    import re
    out = run([tool("cpc-run"), plan, "--steps", str(steps), *extra], timeout=600).stdout
    m = re.search(r"memory per rank: predicted peak (\d+) B, measured (\d+) B \(the largest rank's", out)
    assert m, out
    predicted, measured = int(m.group(1)), int(m.group(2))
    assert abs(measured - predicted) <= tolerance * predicted, (plan, predicted, measured)
    return 100.0 * (measured - predicted) / predicted, measured


def block_fraction(summary, block_parameter):
    """The fraction of the parameter elements of the blocks (parameters whose name matches the
    regex `block_parameter`) that a plan (`cpc inspect --json`) stores split over tp."""
    total = split = 0
    for b in summary["buffers"]:
        if b["kind"] != "parameter" or b.get("alias_of", -1) >= 0 or not block_parameter.search(b["name"]):
            continue
        elements = 1
        for d in b.get("global_shape", b["shape"]):
            elements *= d
        total += elements
        split += elements if any("tp" in axes for axes in b.get("shard_dims", [])) else 0
    return split / total if total else 0.0


def check_loss_moves_and_clip_engages(steps, clip, fall=0.8):
    """The single-rank run a layout test compares against must be a real test: the loss ends
    below `fall` times where it started and the clip engages on some steps but not all. Returns
    a line that says so."""
    clipped = sum(1 for m in steps if m["grad_norm"] > clip)
    assert steps[-1]["loss"] < fall * steps[0]["loss"], "the loss did not fall: %s" % [round(m["loss"], 4) for m in steps]
    assert 0 < clipped < len(steps), "the clip engaged on %d of %d steps: %s" % (
        clipped, len(steps), [round(m["grad_norm"], 3) for m in steps])
    return "loss %.4f -> %.4f, clip engaged on %d of %d steps" % (steps[0]["loss"], steps[-1]["loss"], clipped, len(steps))


def adamw_recipe(batch, lr, clip, weight_decay, betas):
    """The config under which cpc trains as torch.optim.AdamW(lr, betas, eps=1e-8,
    weight_decay) with clip_grad_norm_(clip) at a constant lr (cpc's LR is per 256 samples;
    norms and biases decay too, as torch's AdamW decays every parameter)."""
    return {"TOTAL_BATCH_SIZE": batch, "LR": lr * 256 / batch, "WEIGHT_DECAY": weight_decay, "BETAS": list(betas),
            "EPS": 1e-8, "lr_schedule": "constant", "clip_grad_norm": clip, "decay_norms_and_biases": True}


def versus_torch(ours, theirs, tol=1e-4):
    """Checks cpc's per-step loss and grad_norm against PyTorch's within `tol` relative; returns
    the worst of each."""
    def apart(a, b, key):
        return abs(a[key] - b[key]) / abs(b[key])
    worst = max(apart(a, b, "loss") for a, b in zip(ours, theirs))
    worst_norm = max(apart(a, b, "grad_norm") for a, b in zip(ours, theirs))
    assert worst <= tol and worst_norm <= tol, "against PyTorch: loss %.1e, grad_norm %.1e; per step %s" % (
        worst, worst_norm, [("%.1e" % apart(a, b, "loss"), "%.1e" % apart(a, b, "grad_norm")) for a, b in zip(ours, theirs)])
    return worst, worst_norm


def compare_training(ours, single, params, single_params, steps, tol=1e-5):
    """Checks a parallel run against the single-rank run: per-step loss and grad_norm within `tol`
    relative, final parameters (the --output-dir .npy files) within `tol`. The key third of a
    fused qkv bias is left out: softmax ignores a shift of the keys, so its true gradient is
    exactly zero and AdamW turns rounding noise into steps in any layout. Returns the worst loss
    and grad_norm differences."""
    import numpy as np
    assert len(ours) == len(single) == steps, "%d and %d metric lines" % (len(ours), len(single))
    worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ours, single))
    worst_norm = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]) for a, b in zip(ours, single))
    assert worst <= tol, "per-step loss differs by %.2e" % worst
    assert worst_norm <= tol, "per-step grad_norm differs by %.2e" % worst_norm
    names = sorted(os.listdir(single_params))
    assert names and names == sorted(os.listdir(params)), "parameter files differ"
    for name in names:
        a, b = np.load(os.path.join(single_params, name)), np.load(os.path.join(params, name))
        assert a.shape == b.shape, "%s: shape %s, one rank %s" % (name, b.shape, a.shape)
        if name.endswith("qkv.bias.npy"):
            third = a.shape[0] // 3
            a, b = np.concatenate([a[:third], a[2 * third:]]), np.concatenate([b[:third], b[2 * third:]])
        assert np.allclose(a, b, rtol=tol, atol=tol), "%s differs by %.3g" % (name, np.abs(a - b).max())
    return worst, worst_norm


_WIDTH = {"f32": 4, "f16": 2, "bf16": 2, "f64": 8, "i64": 8, "i32": 4, "i8": 1, "i1": 1}


def activation_bytes(summary):
    """The peak over each program's steps of the live arena bytes no optimizer step reads (a
    buffer lives from its first step to its last, an alias as its root)."""
    buffers = summary["buffers"]

    def root(k):
        while buffers[k]["alias_of"] >= 0:
            k = buffers[k]["alias_of"]
        return k

    def size(k):
        n = _WIDTH.get(buffers[k]["dtype"], 4)
        for d in buffers[k]["shape"]:
            n *= d
        return n

    peak = 0
    for program in summary["programs"]:
        first, last, optimizer = {}, {}, set()
        for i, step in enumerate(program["steps"]):
            for k in map(root, step["in"] + step["out"]):
                first.setdefault(k, i)
                last[k] = i
            if "adamw" in step["op"]:
                optimizer.update(map(root, step["in"]))
        delta = [0] * (len(program["steps"]) + 1)
        for k in first:
            if buffers[k]["kind"] == "arena" and k not in optimizer:
                delta[first[k]] += size(k)
                delta[last[k] + 1] -= size(k)
        live = 0
        for d in delta:
            live += d
            peak = max(peak, live)
    return peak


def load_jsonl(path):
    """The JSON objects of a JSON-lines file (cpc-run --metrics)."""
    import json
    with open(path) as f:
        return [json.loads(line) for line in f]


def same_steps(ours, theirs, what, tol=0.0):
    """Per-step loss and grad_norm of two metric lists agree within `tol` relative (0: bit for
    bit, as the metrics' round-trip doubles), on the same steps."""
    assert [m["step"] for m in ours] == [m["step"] for m in theirs], "%s: steps %s and %s" % (
        what, [m["step"] for m in ours], [m["step"] for m in theirs])
    for a, b in zip(ours, theirs):
        for key in ("loss", "grad_norm"):
            apart = abs(a[key] - b[key]) / abs(b[key])
            assert apart <= tol, "%s: step %d %s %.9g against %.9g (%.2e apart)" % (what, a["step"], key, a[key],
                                                                                  b[key], apart)


def read_safetensors(path):
    """{name: float32 numpy array} of a safetensors file (what `cpc export-weights` writes)."""
    import json
    import struct
    import numpy as np
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        blob = f.read()
    header.pop("__metadata__", None)
    tensors = {}
    for name, entry in header.items():
        assert entry["dtype"] == "F32", (name, entry["dtype"])
        begin, end = entry["data_offsets"]
        tensors[name] = np.frombuffer(blob[begin:end], dtype=np.float32).reshape(entry["shape"])
    return tensors


def tempdir():
    return tempfile.TemporaryDirectory(prefix="cpc-test-")
