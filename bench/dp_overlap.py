#!/usr/bin/python3
"""How much of data parallelism's communication the backward hides: the step of MAE dp2 against
one rank's step on its half of the batch, measured in the same run.

    bench/dp_overlap.py [--size small] [--batch 16] [--steps 6] [--rounds 2] [--zero 0,2]

Compiles MAE-`size` twice: at the global batch over `--dp 2` (each rank runs batch/2 and
all-reduces its gradients, or reduce-scatters them with ZeRO), and at batch/2 on one rank (the
same compute per rank, no communication). Runs them alternately `rounds` times and prints the
median step time of each (the first step of a run left out) and their ratio: 1.00 would be a
perfect overlap, the communication all hidden behind the backward. The goal of issue 30 is
<= 1.05 for dp2 without ZeRO (PyTorch DDP over gloo: 1.26). Two ranks on a two-core machine share
the memory bandwidth and caches that one rank has alone, which no overlap can hide: the peer row
"two one-rank runs at once" (the one-rank plan run twice at the same time, no communication)
measures that floor, and each row's second ratio is against it.
"""
import argparse
import json
import os
import subprocess

from benchlib import BIN, compile_plan, export_mae, run_metrics, SOURCE  # sets the environment first

import numpy as np  # noqa: E402


def median_step(lines):
    return float(np.median([m["step_s"] for m in lines[1:] or lines]))


def concurrent_steps(plan, steps, work_dir):
    """The step times of two one-rank runs of `plan` at the same time (first steps left out): what
    dp2 would take if its communication were free, the two processes sharing the machine."""
    runs = []
    for i in range(2):
        metrics = os.path.join(work_dir, "concurrent-%d.jsonl" % i)
        if os.path.exists(metrics):
            os.remove(metrics)
        proc = subprocess.Popen([os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps), "--metrics", metrics,
                                 "--quiet"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        runs.append((proc, metrics))
    times = []
    for proc, metrics in runs:
        if proc.wait() != 0:
            raise SystemExit("cpc-run %s failed" % plan)
        with open(metrics) as f:
            times += [json.loads(line)["step_s"] for line in f][1:]
    return times


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--zero", default="0")
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-overlap"))
    args = ap.parse_args()
    half_dir, whole_dir = os.path.join(args.work_dir, "half"), os.path.join(args.work_dir, "whole")
    half_model, half_cfg = export_mae(args.size, args.batch // 2, half_dir)
    whole_model, whole_cfg = export_mae(args.size, args.batch, whole_dir)
    one = os.path.join(half_dir, "one-rank.plan")
    compile_plan(half_model, half_cfg, one, [])
    layouts = {"one rank, batch %d" % (args.batch // 2): one}
    for zero in [int(z) for z in args.zero.split(",")]:
        plan = os.path.join(whole_dir, "dp2-z%d.plan" % zero)
        compile_plan(whole_model, whole_cfg, plan, ["--dp", "2", "--zero", str(zero)])
        layouts["dp2 zero %d, batch %d" % (zero, args.batch)] = plan
    times = {name: [] for name in layouts}
    pair = "two one-rank runs at once"
    times[pair] = []
    for _ in range(args.rounds):
        for name, plan in layouts.items():
            metrics = os.path.join(args.work_dir, os.path.basename(plan) + ".jsonl")
            times[name] += [m["step_s"] for m in run_metrics(plan, args.steps, metrics)[1:]]
        times[pair] += concurrent_steps(one, args.steps, args.work_dir)
    base = float(np.median(times[next(iter(layouts))]))
    print("MAE-%s, %d steps x %d rounds, median step (first of each run left out):" % (args.size, args.steps,
                                                                                       args.rounds))
    floor = float(np.median(times[pair]))
    for name, samples in times.items():
        step = float(np.median(samples))
        print("  %-26s %8.1f ms  %.3fx  (%.3fx of the two at once)" % (name, 1e3 * step, step / base, step / floor))


if __name__ == "__main__":
    main()
