#!/usr/bin/python3
"""The training half of bench/gpu_check.sh (run that): MAE-tiny on the GPU against the CPU plan,
dp2 / tp2 over NCCL with two GPUs, and the MAE-base / MAE-large bf16 step time and MFU.

    bench/gpu_check.py [--quick] [--steps 20]

Parity: the same recipe as the e2e tests (lr 0.05 cosine, clip 0.2 engaging), 20 steps; per
step loss and grad_norm within 1e-4 relative (TF32 off: f32 GEMMs in f32), final parameters
within 1e-4. Speed: bf16 mixed precision, batch 64 (base) / 32 (large), median step after two
warm-up steps; MFU = the plan's matmul and convolution FLOPs per step / step time / the GPU's
dense bf16 peak (A100 312, H100/H200 989 TFLOP/s). Exits 1 when a parity check fails.
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
BIN = os.path.join(SOURCE, "build", "bin")
sys.path.insert(0, os.path.join(SOURCE, "tests", "e2e"))
sys.path.insert(0, os.path.join(SOURCE, "examples", "mae"))
from cpctest import MAE_RECIPE  # noqa: E402

PEAK_BF16 = {"A100": 312e12, "H100": 989e12, "H200": 989e12, "H800": 989e12, "A800": 312e12}


def sh(args, **kw):
    return subprocess.run(args, check=True, capture_output=True, text=True, **kw)


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


def train(plan, steps, inputs, prefix):
    metrics, params = prefix + ".jsonl", prefix + "-params"
    args = [os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps), "--metrics", metrics, "--output-dir", params,
            "--quiet"]
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


def parity(work, steps, ngpu):
    model, inputs = export("tiny", 8, work)
    recipe = dict(MAE_RECIPE)
    layouts = [("1 GPU", ["--device", "cuda"])]
    if ngpu >= 2:
        layouts += [("dp2 (NCCL)", ["--device", "cuda", "--dp", "2"]), ("tp2 (NCCL)", ["--device", "cuda", "--tp", "2"])]
    if ngpu >= 4:
        layouts += [("2D q=2 (NCCL)", ["--device", "cuda", "--tp", "4", "--tp-mode", "2d"])]
    cpu_plan = os.path.join(work, "cpu.plan")
    compile_plan(model, recipe, cpu_plan, [])
    ref, ref_params = train(cpu_plan, steps, inputs, os.path.join(work, "cpu"))
    failed = 0
    for name, flags in layouts:
        plan = os.path.join(work, name.split()[0] + ".plan")
        compile_plan(model, recipe, plan, flags)
        t0 = time.time()
        ours, params = train(plan, steps, inputs, os.path.join(work, name.split()[0]))
        ok, detail = compare(ours, ref, params, ref_params, 1e-4)
        failed += not ok
        print("%s MAE-tiny %s, %d steps vs cpu plan: %s (%.1f s)" % ("PASS" if ok else "FAIL", name, steps, detail,
                                                                   time.time() - t0), flush=True)
    return failed


def matmul_flops(summary):
    """FLOPs of the plan's matmuls and convolutions for one step (all programs of rank 0): a
    matmul 2 x output elements x k, a convolution 2 x output elements x C/G x KH x KW, each of
    its gradients as much as the convolution."""
    bufs = summary["buffers"]
    total = conv = conv_grads = 0
    for prog in summary["programs"]:
        for s in prog["steps"]:
            if s["op"] == "cpc.matmul":
                a, out = bufs[s["in"][0]]["shape"], bufs[s["out"][0]]["shape"]
                k = a[-2] if s["attrs"].get("transpose_lhs") else a[-1]
                total += 2 * k * prod(out)
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


def speed(work, gpu_name):
    peak = next((v for k, v in PEAK_BF16.items() if k in gpu_name), None)
    for size, batch in (("base", 64), ("large", 32)):
        model, inputs = export(size, batch, os.path.join(work, size))
        plan = os.path.join(work, size, "bf16.plan")
        t0 = time.time()
        summary = compile_plan(model, {"TOTAL_BATCH_SIZE": batch, "frozen": ["pos_embed$"], "LR": 1.5e-4}, plan,
                               ["--device", "cuda", "--precision", "bf16"])
        compile_s = time.time() - t0
        lines, _ = train(plan, 8, inputs, os.path.join(work, size, "bf16"))
        step = statistics.median(m["step_s"] for m in lines[2:])
        flops = matmul_flops(summary)
        mfu = "%.1f%%" % (100 * flops / step / peak) if peak else "n/a (unknown GPU peak)"
        line = "MAE-%s bf16 batch %d: cpc %.1f ms/step, %.1f TFLOP/s of matmul+conv, MFU %s (compile %.1f s)" % (
            size, batch, step * 1e3, flops / step / 1e12, mfu, compile_s)
        torch_ms = torch_step(size, batch)
        if torch_ms:
            line += "; PyTorch %.1f ms/step (cpc/torch %.2f)" % (torch_ms, step * 1e3 / torch_ms)
        print(line, flush=True)


def torch_step(size, batch):
    """PyTorch's bf16-autocast train step on the same GPU (median ms), or None without CUDA torch."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    from export import make_inputs
    from mae_model import build_model
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
    args = parser.parse_args()
    names = gpus()
    print("GPUs: %d x %s" % (len(names), names[0] if names else "none"), flush=True)
    with tempfile.TemporaryDirectory(prefix="cpc-gpu-check-") as work:
        failed = parity(work, args.steps, len(names))
        if not args.quick:
            speed(work, names[0])
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
