#!/usr/bin/python3
"""The cost model against the clock: `cpc calibrate` measures this machine (collectives over 2
ranks, a GEMM grid, attention, AdamW, memory-bound work, and each op of two one-rank sample
plans: MAE-small's and GPT-small's training steps), then MAE-small and GPT-small are compiled
with that profile in four layouts (one rank, dp2, tp2, pp2 with 4 microbatches) and trained; the
table compares each plan's predicted step time with cpc-run's measured median step. The other
layouts' shapes (split batches, split weights, pipeline stages) are not in the samples.

    /usr/bin/python3 bench/cost_model.py [--steps 8]

Prints one row per (model, layout) and the median and worst error; no pass/fail (timings differ
between machines).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

import benchlib
from benchlib import BIN
LAYOUTS = [("one rank", []), ("dp2", ["--dp", "2"]), ("tp2", ["--tp", "2"]),
           ("pp2 x4", ["--pp", "2", "--microbatches", "4"])]


def run(args):
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(args), proc.stdout[-2000:], proc.stderr[-2000:]))
    return proc.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=8)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        models = {"MAE-small": benchlib.export_model("mae-small", 8, work),
                  "GPT-small": benchlib.export_model("gpt-small", 8, work)}
        profile = benchlib.calibrate(models.values(), work)
        print("%-10s %-9s %12s %12s %8s   %s" % ("model", "layout", "measured ms", "predicted ms", "error",
                                               "predicted compute / communication / idle ms"))
        errors = []
        for name, model in models.items():
            for layout, flags in LAYOUTS:
                plan = os.path.join(work, "plan.bin")
                compiled = run([os.path.join(BIN, "cpc"), "compile", model, "--profile", profile, "-o", plan, *flags])
                parts = re.search(r"compute ([0-9.e+-]+), communication ([0-9.e+-]+), pipeline idle ([0-9.e+-]+) ms",
                                  compiled).groups()
                ran = run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(args.steps)])
                m = re.search(r"^step time: measured ([0-9.e+-]+) ms .*, predicted ([0-9.e+-]+) ms", ran, re.M)
                measured, predicted = float(m.group(1)), float(m.group(2))
                error = (predicted - measured) / measured
                errors.append(abs(error))
                print("%-10s %-9s %12.2f %12.2f %+7.1f%%   %s" % (name, layout, measured, predicted, 100 * error,
                                                              " / ".join("%.2f" % float(p) for p in parts)))
        print("median |error| %.1f%%, worst %.1f%% over %d plans" % (100 * statistics.median(errors),
                                                                    100 * max(errors), len(errors)))


if __name__ == "__main__":
    main()
