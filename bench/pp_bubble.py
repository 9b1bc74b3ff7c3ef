#!/usr/bin/env python3
"""Pipeline parallelism on MAE: per layout (stages P, schedule, microbatches M) the step time
against the single-rank run of the same global batch (gradient accumulation over M), each rank's
idle share measured from the trace (not computing; of it, waiting on other ranks: the bubble)
next to the schedule's bubble formula, and each rank's predicted peak memory against one rank's.
The stages are cut by a profile `cpc calibrate` measures first (--built-in-costs: the defaults).
Not computing less waiting is the runtime's own time (dispatch, copies between programs).

    /usr/bin/python3 bench/pp_bubble.py [--size small] [--batch 2] [--microbatches 8] [--steps 6]
                                        [--built-in-costs]

This machine has 2 cores: with P = 2 each stage has a core of its own; with P = 4 the ranks share
them, so the measured idle share there also counts waiting for a core (oversubscription). The
bubble formula assumes equal stage costs: (P-1)/(M+P-1), interleaved (P-1)/(V*M+P-1).
"""
import argparse
import json
import os
import re
import subprocess
import tempfile

import benchlib
from benchlib import BIN


def run(plan, steps, work, name):
    """Runs `plan` with a trace; returns (mean step seconds after the first, the shares of each
    rank's time not computing and waiting on other ranks, stdout)."""
    metrics, trace = os.path.join(work, name + ".jsonl"), os.path.join(work, name + ".trace.json")
    if os.path.exists(metrics):
        os.remove(metrics)
    out = subprocess.run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps), "--metrics", metrics,
                          "--trace", trace], check=True, capture_output=True, text=True).stdout
    lines = [json.loads(l) for l in open(metrics)]
    seconds = sum(l["step_s"] for l in lines[1:]) / max(len(lines) - 1, 1)
    parts = "".join(l for l in out.splitlines() if l.startswith("pipeline idle share")).split(";")
    idle, waiting = ([float(v) / 100 for v in re.findall(r"rank \d+ ([0-9.]+)%", part)] for part in (parts + ["", ""])[:2])
    return seconds, idle, waiting, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=2, help="samples per microbatch")
    ap.add_argument("--microbatches", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--built-in-costs", action="store_true",
                    help="cut the stages by the built-in cost constants instead of a profile calibrated here")
    args = ap.parse_args()
    m = args.microbatches
    with tempfile.TemporaryDirectory(prefix="cpc-bench-pp-") as work:
        model, config = benchlib.export_mae(args.size, args.batch, work)
        with open(config, "w") as f:
            json.dump({"TOTAL_BATCH_SIZE": args.batch * m, "frozen": ["pos_embed$"]}, f)
        one = os.path.join(work, "one.plan")
        summary = benchlib.compile_plan(model, config, one, ["--microbatches", str(m)])
        single_s, _, _, _ = run(one, args.steps, work, "one")
        # Stages are cut by measured time: cpc calibrate with the one-rank step as its sample.
        profile = [] if args.built_in_costs else ["--profile", benchlib.calibrate([model], work)]
        single_params = benchlib.parameter_bytes(summary)[0]
        print("MAE-%s, %d microbatches of %d, %d steps; one rank: %.3f s/step, %.1f MB parameters, predicted peak "
              "%.1f MB" % (args.size, m, args.batch, args.steps, single_s, single_params / 1e6,
                           summary["predicted_peak_bytes"] / 1e6))
        print("%-22s %8s %8s  %-22s %-22s %8s %6s  %s" % (
            "layout", "s/step", "vs one", "not computing/rank", "waiting/rank", "formula", "<=1.5x",
            "predicted peak MB per rank (one rank = 1.00)"))
        for stages, schedule in [(2, "gpipe"), (2, "1f1b"), (2, "interleaved"), (4, "gpipe"), (4, "1f1b"),
                                 (4, "interleaved")]:
            if schedule == "interleaved" and m % stages:
                continue
            name = "pp%d-%s" % (stages, schedule)
            plan = os.path.join(work, name + ".plan")
            flags = ["--pp", str(stages), "--microbatches", str(m), "--schedule", schedule, *profile]
            s = benchlib.compile_plan(model, config, plan, flags)
            seconds, idle, waiting, _ = run(plan, args.steps, work, name)
            pipeline = s["training"]["pipeline"]
            v = pipeline["virtual_stages"]
            formula = (stages - 1) / (v * m + stages - 1)
            peaks = s["training"]["peak_bytes_per_rank"]
            shares = lambda values: " ".join("%.0f%%" % (100 * x) for x in values)
            print("%-22s %8.3f %8.2f  %-22s %-22s %7.1f%% %6s  %s" % (
                name + (" V=%d" % v if v > 1 else ""), seconds, single_s / seconds, shares(idle), shares(waiting),
                100 * formula, "yes" if waiting and max(waiting) <= 1.5 * formula else "no",
                " ".join("%.2f" % (p / summary["predicted_peak_bytes"]) for p in peaks)))

if __name__ == "__main__":
    main()
