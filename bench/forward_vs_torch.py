#!/usr/bin/python3
"""Forward time of MAE (default: base, batch 8) through cpc-run vs PyTorch, same machine, same
thread count, in one script; also cpc's loss vs PyTorch's and predicted vs measured memory.

    bench/forward_vs_torch.py [--size base] [--batch 8] [--threads 1] [--runs 3]

Prints `ratio cpc/torch` (< 1 means cpc is faster). Timings are the best of --runs.
"""
import os
import sys

# Pin BLAS/OpenMP threads before numpy or torch load OpenBLAS (it reads them once, at load).
_THREADS = next((sys.argv[i + 1] for i, a in enumerate(sys.argv[:-1]) if a == "--threads"), "1")
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = _THREADS

import argparse  # noqa: E402
import re
import subprocess
import time

import numpy as np

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(SOURCE, "examples", "mae"))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="base")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-forward"))
    args = ap.parse_args()
    os.environ["OPENBLAS_NUM_THREADS"] = str(args.threads)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import torch
    from export import make_inputs
    from mae_model import build_model
    torch.set_num_threads(args.threads)

    os.makedirs(args.work_dir, exist_ok=True)
    stem = os.path.join(args.work_dir, "mae-%s-b%d" % (args.size, args.batch))
    model_path = os.path.join(args.work_dir, "mae-%s-opset17.onnx" % args.size)
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "mae", "export.py"), "--size", args.size,
                    "--batch", str(args.batch), "--out-dir", args.work_dir, "--save-inputs"], check=True,
                   stdout=subprocess.DEVNULL)
    prefix = model_path[:-len(".onnx")]
    plan = stem + ".plan"
    t0 = time.perf_counter()
    subprocess.run([os.path.join(SOURCE, "build", "bin", "cpc"), "compile", model_path, "--mode", "infer", "-o", plan], check=True,
                   stdout=subprocess.DEVNULL)
    compile_s = time.perf_counter() - t0

    # cpc: one process, --runs runs; its own timer excludes loading the plan.
    out = subprocess.run([os.path.join(SOURCE, "build", "bin", "cpc-run"), plan, "--threads", str(args.threads),
                          "--steps", str(args.runs), "--input", "imgs=%s.imgs.npy" % prefix,
                          "--input", "noise=%s.noise.npy" % prefix, "--output-dir", stem + ".out"],
                         check=True, capture_output=True, text=True).stdout
    cpc_ms = float(re.search(r"time: ([0-9.e+-]+) ms per run", out).group(1))
    mem = re.search(r"predicted peak (\d+) B, allocated (\d+) B .* max RSS (\d+) B", out)
    predicted, allocated, rss = (int(mem.group(i)) for i in (1, 2, 3))
    cpc_loss = float(np.load(os.path.join(stem + ".out", "loss.npy")))

    model = build_model(args.size, seed=0)
    imgs, noise = make_inputs(model, args.batch, 0)
    torch_times, torch_cpu = [], []
    with torch.no_grad():
        for _ in range(args.runs + 1):
            c0, t0 = time.process_time(), time.perf_counter()
            loss = model(imgs, noise)
            torch_times.append(time.perf_counter() - t0)
            torch_cpu.append(time.process_time() - c0)
    torch_ms = min(torch_times[1:]) * 1e3  # the first run warms up
    rel = abs(cpc_loss - loss.item()) / abs(loss.item())

    print("MAE-%s batch %d, %d thread(s), compile %.2f s" % (args.size, args.batch, args.threads, compile_s))
    print("  loss: cpc %.7f  torch %.7f  rel diff %.2e" % (cpc_loss, loss.item(), rel))
    print("  forward: cpc %.1f ms (mean of %d)  torch %.1f ms (best of %d; %.2f cores busy)  ratio cpc/torch %.2f" % (
        cpc_ms, args.runs, torch_ms, args.runs, sum(torch_cpu[1:]) / sum(torch_times[1:]), cpc_ms / torch_ms))
    print("  memory: predicted peak %.1f MiB, allocated by the executor %.1f MiB (ratio %.3f), "
          "process max RSS %.1f MiB" % (predicted / 2**20, allocated / 2**20, allocated / predicted, rss / 2**20))


if __name__ == "__main__":
    main()
