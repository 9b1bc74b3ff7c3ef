#!/usr/bin/python3
"""Per-rank memory and communication of data-parallel MAE training against the analytical figures.

    bench/dp_memory_comm.py [--size small] [--batch 16] [--ranks 1,2,4] [--zero 0,1,2,3] [--steps 2]

For each layout prints, per rank:
  - model-state bytes (trainable parameters + gradients + AdamW moments, as cpc-run reports them)
    against the ZeRO formula of the stage (fp32: 16Psi, 8Psi+8Psi/N, 4Psi+12Psi/N, 16Psi/N, plus
    16 B per element of a parameter whose size does not divide by N);
  - bytes sent per step (cpc-run's collective counters) against the ring volumes: data parallelism
    and ZeRO-2 2*4Psi(N-1)/N, ZeRO-1 3*4Psi(N-1)/N (it keeps the all-reduce and all-gathers the
    updated parameters), ZeRO-3 4(Psi + G)(N-1)/N with G the elements all-gathered per step (every
    parameter before its forward use, and again before backward for those backward reads);
  - the compiler's predicted peak memory against the measured one (resident growth while the
    plan runs, with the kernel's peak counter reset when the executor starts, plus the constants
    read in place from the plan);
  - throughput (median samples/s after the first step; ranks beyond the machine's cores share
    them, so this is not a scaling figure on a small machine).
"""
import os

import argparse
import json
import subprocess

from benchlib import BIN, SOURCE, export_mae  # sets the environment first (one thread per rank)

import numpy as np  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--zero", default="0,1,2,3")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-dp"))
    args = ap.parse_args()
    model, cfg = export_mae(args.size, args.batch, args.work_dir)
    print("MAE-%s, global batch %d, per rank:" % (args.size, args.batch))
    print("%-9s %13s %13s %11s %12s %6s %12s %12s %12s %7s %9s" % (
        "layout", "model st. B", "formula B", "sent B/step", "formula B", "x DP", "collectives", "pred peak B",
        "meas peak B", "diff", "samples/s"))
    worst = 0.0
    for n in [int(r) for r in args.ranks.split(",")]:
        for zero in [int(z) for z in args.zero.split(",")] if n > 1 else [0]:
            name = "dp%d-z%d" % (n, zero)
            plan = os.path.join(args.work_dir, name + ".plan")
            cmd = [os.path.join(BIN, "cpc"), "compile", model, "--config", cfg, "-o", plan]
            if n > 1:
                cmd += ["--dp", str(n), "--zero", str(zero)]
            subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
            meta = json.loads(subprocess.run([os.path.join(BIN, "cpc"), "inspect", plan, "--json"], check=True,
                                             capture_output=True, text=True).stdout)
            states = meta["summary"]["model_states"]
            psi = states["trainable_elements"]
            metrics = os.path.join(args.work_dir, name + ".jsonl")
            if os.path.exists(metrics):
                os.remove(metrics)
            subprocess.run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(args.steps), "--metrics", metrics,
                            "--quiet"], check=True)
            lines = [json.loads(line) for line in open(metrics)]
            last = lines[-1]
            rate = float(np.median([m["samples_per_s"] for m in lines[1:] or lines]))
            ring = 4 * psi * (n - 1) / n
            if zero == 3:
                gathered = sum(int(np.prod(meta["buffers"][s["out"][0]]["shape"]))
                               for p in meta["programs"] for s in p["steps"] if s["op"] == "cpc.all_gather")
                volume = 4 * (psi + gathered) * (n - 1) / n
            else:
                volume = ring * {0: 2, 1: 3, 2: 2}[zero]
            sent = last.get("comm_bytes", 0)
            predicted, measured = last["predicted_peak_bytes"], last["measured_peak_bytes"]
            diff = (measured - predicted) / predicted
            worst = max(worst, abs(diff))
            print("%-9s %13d %13d %11d %12d %6s %12d %12d %12d %+6.1f%% %9.1f" % (
                "N=%d z=%d" % (n, zero), states["total"], states["formula"], sent, volume,
                "%.3f" % (sent / (2 * ring)) if n > 1 else "-", last.get("comm_calls", 0), predicted, measured,
                100 * diff, rate))
    print("worst |measured - predicted| / predicted peak: %.2f%%" % (100 * worst))


if __name__ == "__main__":
    main()
