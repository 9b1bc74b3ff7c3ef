#!/usr/bin/python3
"""The training half of bench/gpu_check.sh (run that): MAE-tiny on the GPU against the CPU plan,
dp2 / tp2 over NCCL with two GPUs, and the MAE-base / MAE-large bf16 step time and MFU.

    bench/gpu_check.py [--quick] [--steps 20]

Parity: the same recipe as the e2e tests (lr 0.05 cosine, clip 0.2 engaging), 20 steps; per
step loss and grad_norm within 1e-4 relative (TF32 off: f32 GEMMs in f32), final parameters
within 1e-4. Speed: bf16 mixed precision, batch 64 (base) / 32 (large), median step after two
warm-up steps; MFU = the plan's matmul and convolution FLOPs per step / step time / the GPU's
dense bf16 peak (A100 312, H100/H200 989 TFLOP/s). Exits 1 when a parity check fails.

A GPU machine that cannot build cpc (no MLIR, ONNX, OpenMPI packages and no network, as the
lent H200s) runs the parity half from a bundle (bench/gpu_bundle.sh): `--prepare DIR`, on the
build machine, exports MAE-tiny, compiles the cpu plan and every GPU layout's plan and runs the
cpu plan, and compiles the speed half's plans without weights (--synthetic-weights: MAE-large's
would not travel); `--prepared DIR`, on the GPU machine, trains the GPU plans against that run
and times the weightless plans on synthetic data (the step time does not depend on the values).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.environ.get("CPC_BIN", os.path.join(SOURCE, "build", "bin"))
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
sys.path.insert(0, os.path.join(SOURCE, "examples", "mae"))
from cpctest import MAE_RECIPE  # noqa: E402

PEAK_BF16 = {"A100": 312e12, "H100": 989e12, "H200": 989e12, "H800": 989e12, "A800": 312e12}


# A command that runs longer has hung (a GPU run here takes seconds): it must not spend a lent GPU's minutes.
COMMAND_LIMIT_S = float(os.environ.get("CPC_GPU_CHECK_COMMAND_LIMIT", "240"))


def sh(args, **kw):
    """Runs a command; its output goes to stderr and RuntimeError(its last line) is raised when it
    fails or outlives COMMAND_LIMIT_S."""
    if os.environ.get("CPC_LIBRARY_PATH") and "env" not in kw:  # a bundle's libraries, for cpc's programs only
        kw["env"] = dict(os.environ, LD_LIBRARY_PATH=os.environ["CPC_LIBRARY_PATH"])
    try:
        r = subprocess.run(args, capture_output=True, text=True, timeout=COMMAND_LIMIT_S, **kw)
    except subprocess.TimeoutExpired as e:
        sys.stderr.write((e.stdout or b"").decode(errors="replace") if isinstance(e.stdout, bytes) else (e.stdout or ""))
        sys.stderr.write((e.stderr or b"").decode(errors="replace") if isinstance(e.stderr, bytes) else (e.stderr or ""))
        raise RuntimeError("%s ran past %.0f s" % (os.path.basename(args[0]), COMMAND_LIMIT_S))
    if r.returncode != 0:
        sys.stderr.write(r.stdout + r.stderr)
        lines = (r.stderr or r.stdout).strip().splitlines()
        raise RuntimeError("%s exited %d: %s" % (os.path.basename(args[0]), r.returncode, lines[-1] if lines else ""))
    return r


def gpus():
    out = sh(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]).stdout.strip().splitlines()
    return [line.strip() for line in out if line.strip()]


def export(size, batch, work):
    sh(["/usr/bin/python3", os.path.join(SOURCE, "examples", "mae", "export.py"), "--size", size, "--batch",
        str(batch), "--out-dir", work, "--save-inputs"])
    stem = os.path.join(work, "mae-%s-opset17" % size)
    return stem + ".onnx", {"imgs": stem + ".imgs.npy", "noise": stem + ".noise.npy"}


def compile_plan(model, recipe, plan, flags):
    config = plan + ".json"
    with open(config, "w") as f:
        json.dump(recipe, f)
    sh([os.path.join(BIN, "cpc"), "compile", model, "--config", config, "-o", plan, *flags])
    return json.loads(sh([os.path.join(BIN, "cpc"), "inspect", plan, "--json"]).stdout)


def train(plan, steps, inputs, prefix, save_params=True):
    metrics, params = prefix + ".jsonl", prefix + "-params"
    if os.path.exists(metrics):  # cpc-run appends
        os.remove(metrics)
    args = [os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps), "--metrics", metrics, "--quiet"]
    if save_params:
        args += ["--output-dir", params]
    for name, path in inputs.items():
        args += ["--input", "%s=%s" % (name, path)]
    sh(args)
    with open(metrics) as f:
        return [json.loads(line) for line in f], params


def compare(ours, ref, params, ref_params, tol):
    import numpy as np
    worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ours, ref))
    worst_norm = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]) for a, b in zip(ours, ref))
    worst_param = 0.0
    for name in sorted(os.listdir(ref_params)):
        a, b = np.load(os.path.join(ref_params, name)), np.load(os.path.join(params, name))
        worst_param = max(worst_param, float(np.abs(a - b).max()))
    ok = len(ours) == len(ref) and worst <= tol and worst_norm <= tol and worst_param <= tol
    return ok, "loss %.2e, grad_norm %.2e, parameters %.2e" % (worst, worst_norm, worst_param)


# (key, name, GPUs needed, compile flags) of the layouts checked against the cpu plan.
LAYOUTS = [("gpu1", "1 GPU", 1, ["--device", "cuda"]),
           ("dp2", "dp2 (NCCL)", 2, ["--device", "cuda", "--dp", "2"]),
           ("tp2", "tp2 (NCCL)", 2, ["--device", "cuda", "--tp", "2"]),
           ("summa2", "2D q=2 (NCCL)", 4, ["--device", "cuda", "--tp", "4", "--tp-mode", "2d"])]


def prepare(out, steps):
    """The plans, inputs and cpu run that --prepared needs, made where cpc builds."""
    os.makedirs(out, exist_ok=True)
    model, inputs = export("tiny", 8, out)
    compile_plan(model, dict(MAE_RECIPE), os.path.join(out, "cpu.plan"), [])
    for key, _, _, flags in LAYOUTS:
        compile_plan(model, dict(MAE_RECIPE), os.path.join(out, key + ".plan"), flags)
    train(os.path.join(out, "cpu.plan"), steps, inputs, os.path.join(out, "cpu"))
    os.remove(model)
    prepare_speed(out)
    with open(os.path.join(out, "prepared.json"), "w") as f:
        json.dump({"steps": steps, "inputs": {k: os.path.basename(v) for k, v in inputs.items()}}, f)
    print("prepared MAE-tiny plans, the cpu run (%d steps) and the MAE-base/large bf16 plans in %s" % (steps, out),
          flush=True)


def parity(work, steps, ngpu, prepared=None):
    if prepared:
        with open(os.path.join(prepared, "prepared.json")) as f:
            meta = json.load(f)
        steps = meta["steps"]
        inputs = {k: os.path.join(prepared, v) for k, v in meta["inputs"].items()}
        with open(os.path.join(prepared, "cpu.jsonl")) as f:
            ref = [json.loads(line) for line in f]
        ref_params = os.path.join(prepared, "cpu-params")
    else:
        model, inputs = export("tiny", 8, work)
        cpu_plan = os.path.join(work, "cpu.plan")
        compile_plan(model, dict(MAE_RECIPE), cpu_plan, [])
        ref, ref_params = train(cpu_plan, steps, inputs, os.path.join(work, "cpu"))
    failed = 0
    for key, name, need, flags in LAYOUTS:
        if ngpu < need:
            continue
        plan = os.path.join(prepared, key + ".plan") if prepared else os.path.join(work, key + ".plan")
        if not prepared:
            compile_plan(model, dict(MAE_RECIPE), plan, flags)
        t0 = time.time()
        try:
            ours, params = train(plan, steps, inputs, os.path.join(work, key))
            ok, detail = compare(ours, ref, params, ref_params, 1e-4)
        except RuntimeError as e:
            ok, detail = False, str(e)
        failed += not ok
        print("%s MAE-tiny %s, %d steps vs cpu plan: %s (%.1f s)" % ("PASS" if ok else "FAIL", name, steps, detail,
                                                                   time.time() - t0), flush=True)
    return failed


def matmul_flops(summary):
    """FLOPs of the plan's matmuls, attentions and convolutions for one step (all programs of rank
    0): a matmul (or matmul_bias) 2 x output elements x k, an attention 4 x query elements x keys
    (its gradient's four GEMMs twice that), a convolution 2 x output elements x C/G x KH x KW,
    each of its gradients as much as the convolution."""
    bufs = summary["buffers"]
    total = conv = conv_grads = 0
    for prog in summary["programs"]:
        for s in prog["steps"]:
            if s["op"] in ("cpc.matmul", "cpc.matmul_bias"):
                a, out = bufs[s["in"][0]]["shape"], bufs[s["out"][0]]["shape"]
                k = a[-2] if s["attrs"].get("transpose_lhs") else a[-1]
                total += 2 * k * prod(out)
            elif s["op"] in ("cpc.attention", "cpc.attention_grad"):
                q, k = bufs[s["in"][0]]["shape"], bufs[s["in"][1]]["shape"]
                keys = k[-3] if s["attrs"].get("layout") == "bnhd" else k[-2]
                total += (4 if s["op"] == "cpc.attention" else 8) * prod(q) * keys
            elif s["op"] == "cpc.conv2d":
                w, y = bufs[s["in"][1]]["shape"], bufs[s["out"][0]]["shape"]
                conv = 2 * prod(y) * w[1] * w[2] * w[3]
                total += conv
            elif s["op"] in ("cpc.conv2d_grad_input", "cpc.conv2d_grad_weight"):
                conv_grads += 1
    return total + conv_grads * conv


def prod(shape):
    n = 1
    for d in shape:
        n *= d
    return n


SPEED_RUNS = (("base", 64), ("large", 32))
SPEED_FLAGS = ["--device", "cuda", "--precision", "bf16"]


def speed_plan(work, size, batch, synthetic):
    """Exports MAE-`size` at `batch` and compiles its bf16 GPU plan; returns the plan, its inputs,
    `cpc inspect`'s summary and the compile time."""
    model, inputs = export(size, batch, os.path.join(work, size))
    plan = os.path.join(work, size, "bf16.plan")
    t0 = time.time()
    summary = compile_plan(model, {"TOTAL_BATCH_SIZE": batch, "frozen": ["pos_embed$"], "LR": 1.5e-4}, plan,
                           SPEED_FLAGS + (["--synthetic-weights"] if synthetic else []))
    return plan, inputs, summary, time.time() - t0


def prepare_speed(out):
    """The speed half's plans without weights (MAE-large's would not travel) and their summaries."""
    for size, batch in SPEED_RUNS:
        plan, inputs, summary, compile_s = speed_plan(out, size, batch, True)
        os.rename(plan, os.path.join(out, "%s-bf16.plan" % size))
        with open(os.path.join(out, "%s-bf16.json" % size), "w") as f:
            json.dump({"batch": batch, "compile_s": compile_s, "flops": matmul_flops(summary)}, f)
        for path in os.listdir(os.path.join(out, size)):
            os.remove(os.path.join(out, size, path))
        os.rmdir(os.path.join(out, size))


def speed(work, gpu_name, prepared=None, log_dir=None):
    """Prints each size's step time and MFU; returns how many could not run."""
    peak = next((v for k, v in PEAK_BF16.items() if k in gpu_name), None)
    failed = 0
    for size, batch in SPEED_RUNS:
        if prepared:  # weights and inputs synthetic: the step time does not depend on the values
            plan, inputs = os.path.join(prepared, "%s-bf16.plan" % size), {}
            with open(os.path.join(prepared, "%s-bf16.json" % size)) as f:
                meta = json.load(f)
            flops, compile_s = meta["flops"], meta["compile_s"]
            os.makedirs(os.path.join(work, size), exist_ok=True)
        else:
            plan, inputs, summary, compile_s = speed_plan(work, size, batch, False)
            flops = matmul_flops(summary)
        try:
            lines, _ = train(plan, 8, inputs, os.path.join(work, size, "bf16"), save_params=False)
        except RuntimeError as e:
            print("FAIL MAE-%s bf16 batch %d: %s" % (size, batch, e), flush=True)
            failed += 1
            continue
        step = statistics.median(m["step_s"] for m in lines[2:])
        mfu = "%.1f%%" % (100 * flops / step / peak) if peak else "n/a (unknown GPU peak)"
        line = "MAE-%s bf16 batch %d: cpc %.1f ms/step, %.1f TFLOP/s of matmul+attention+conv, MFU %s (compile %.1f s)" % (
            size, batch, step * 1e3, flops / step / 1e12, mfu, compile_s)
        if log_dir:  # where the step's time goes, op by op (each op synchronized), for later tuning:
            # 1 and 4 steps, so that (4 - 1) / 3 is a steady step without the first one's loading
            try:
                for steps in (1, 4):
                    out = sh([os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps), "--quiet",
                              "--profile-shapes"]).stdout
                    with open(os.path.join(log_dir, "%s-bf16-profile-%d.txt" % (size, steps)), "w") as f:
                        f.write(out)
            except RuntimeError as e:
                print("MAE-%s profile: %s" % (size, e), flush=True)
        try:
            torch_ms = torch_step(size, batch)
        except Exception as e:  # noqa: BLE001 - PyTorch's side is a comparison, not the check
            print("PyTorch's step: failed (%s: %s)" % (type(e).__name__, e), flush=True)
            torch_ms = None
        if torch_ms:
            line += "; PyTorch %.1f ms/step (cpc/torch %.2f)" % (torch_ms, step * 1e3 / torch_ms)
        print(line, flush=True)
    return failed


def torch_step(size, batch):
    """PyTorch's bf16-autocast train step on the same GPU (median ms), or None without CUDA torch."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    try:
        from export import make_inputs
        from mae_model import build_model
    except ImportError as e:
        print("PyTorch's step: skipped (%s)" % e, flush=True)
        return None
    model = build_model(size, seed=0).cuda().train()
    model.pos_embed.requires_grad_(False)
    model.decoder_pos_embed.requires_grad_(False)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1.5e-4, betas=(0.9, 0.95))
    imgs, noise = (t.cuda() for t in make_inputs(model, batch, 0))
    times = []
    for _ in range(8):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(imgs, noise)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times[2:]) * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="parity only")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--prepare", metavar="DIR", help="make the parity half's plans and cpu run in DIR, and stop")
    parser.add_argument("--prepared", metavar="DIR", help="run the parity half from DIR (made by --prepare)")
    parser.add_argument("--log-dir", metavar="DIR", help="keep the speed plans' per-op profiles there")
    args = parser.parse_args()
    if args.prepare:
        prepare(os.path.abspath(args.prepare), args.steps)
        return
    names = gpus()
    print("GPUs: %d x %s" % (len(names), names[0] if names else "none"), flush=True)
    with tempfile.TemporaryDirectory(prefix="cpc-gpu-check-") as work:
        failed = parity(work, args.steps, len(names), args.prepared and os.path.abspath(args.prepared))
        if not args.quick:
            failed += speed(work, names[0], args.prepared and os.path.abspath(args.prepared), args.log_dir)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
