#!/usr/bin/python3
"""Train-step time (forward + backward + AdamW) of MAE through cpc-run vs PyTorch with the same
recipe, one thread each (OPENBLAS_NUM_THREADS=1, torch.set_num_threads(1)), in one script.

    bench/train_step_vs_torch.py [--cases small:16,base:2] [--steps 6] [--threads 1]

Prints per case: cpc and torch ms per step (median of the steps after the first), the ratio
cpc/torch (goal: <= 1.0 on MAE-small batch 16), the first-step losses of both, and cpc's
predicted vs measured peak memory.
"""
import os
import sys

# Pin BLAS/OpenMP threads before numpy or torch load OpenBLAS (it reads them once, at load).
_THREADS = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--threads"), "1")
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = _THREADS

import argparse  # noqa: E402
import json  # noqa: E402
import re
import statistics
import subprocess
import time

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SOURCE, "examples", "mae"))
RECIPE = {"LR": 1.5e-4, "WEIGHT_DECAY": 0.05, "BETAS": [0.9, 0.95], "lr_schedule": "constant",
          "frozen": ["pos_embed$"]}


def bench_case(size, batch, args, torch):
    import numpy as np
    from export import make_inputs
    from mae_model import build_model
    work = os.path.join(args.work_dir, "%s-b%d" % (size, batch))
    os.makedirs(work, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "mae", "export.py"), "--size", size,
                    "--batch", str(batch), "--out-dir", work, "--save-inputs"], check=True, stdout=subprocess.DEVNULL)
    stem = os.path.join(work, "mae-%s-opset17" % size)
    cfg = os.path.join(work, "recipe.json")
    with open(cfg, "w") as f:
        json.dump(dict(RECIPE, TOTAL_BATCH_SIZE=batch), f)
    plan = os.path.join(work, "train.plan")
    subprocess.run([os.path.join(SOURCE, "build", "bin", "cpc"), "compile", stem + ".onnx", "--config", cfg, "-o",
                    plan], check=True, stdout=subprocess.DEVNULL)
    metrics = os.path.join(work, "cpc.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([os.path.join(SOURCE, "build", "bin", "cpc-run"), plan, "--steps", str(args.steps), "--threads",
                    str(args.threads), "--metrics", metrics, "--quiet", "--input", "imgs=%s.imgs.npy" % stem,
                    "--input", "noise=%s.noise.npy" % stem], check=True)
    ours = [json.loads(line) for line in open(metrics)]
    insp = subprocess.run([os.path.join(SOURCE, "build", "bin", "cpc"), "inspect", plan], check=True,
                          capture_output=True, text=True).stdout
    predicted = int(re.search(r"predicted peak memory per rank: .*\((\d+) B\)", insp).group(1))

    model = build_model(size, seed=0)
    model.train()
    model.pos_embed.requires_grad_(False)
    model.decoder_pos_embed.requires_grad_(False)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim > 1 and not n.endswith(".bias")]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and (p.ndim <= 1 or n.endswith(".bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1.5e-4 * batch / 256, betas=(0.9, 0.95))
    imgs, noise = make_inputs(model, batch, 0)
    torch_times, torch_losses = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(imgs, noise)
        loss.backward()
        opt.step()
        torch_times.append(time.perf_counter() - t0)
        torch_losses.append(loss.item())
    cpc_ms = statistics.median(m["step_s"] for m in ours[1:]) * 1e3
    torch_ms = statistics.median(torch_times[1:]) * 1e3
    peak = max(m["peak_bytes"] for m in ours)
    print("MAE-%s batch %d (%d thread): cpc %.1f ms/step, torch %.1f ms/step, ratio cpc/torch %.2f" % (
        size, batch, args.threads, cpc_ms, torch_ms, cpc_ms / torch_ms))
    print("  first-step loss: cpc %.6f torch %.6f; last: cpc %.6f torch %.6f" % (
        ours[0]["loss"], torch_losses[0], ours[-1]["loss"], torch_losses[-1]))
    print("  memory: predicted peak %.1f MiB, measured max RSS %.1f MiB (ratio %.2f)" % (
        predicted / 2**20, peak / 2**20, peak / predicted), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="small:16,base:2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-train"))
    args = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    torch.set_num_threads(args.threads)
    for case in args.cases.split(","):
        size, batch = case.split(":")
        bench_case(size, int(batch), args, torch)


if __name__ == "__main__":
    main()
