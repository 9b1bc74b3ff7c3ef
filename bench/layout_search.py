#!/usr/bin/python3
"""Plan quality: `cpc plan MODEL --devices 2` under a cost profile calibrated here, then every
layout it lists compiled and run; prints each layout's predicted and measured step time and
peak memory, and how far the layout `cpc compile --auto` picks (the first) is from the fastest
measured. With --budgets, the same under three memory budgets, each 1 byte under the predicted
peak of, in turn, plain dp2, dp2 ZeRO-1 and dp2 ZeRO-2 (ruling each out): no layout it keeps may
exceed the budget when run. Last, the cost model over the grid: predicted step time and peak
against measured, median and worst.

    /usr/bin/python3 bench/layout_search.py [--models mae-small,mae-base,gpt-small] [--steps 6] [--rounds 3] [--budgets]
                                            [--settle N]

--settle N: where the layout --auto picks measured over 5% slower than the fastest kept, both are
run N times more (interleaved), so that layouts predicted within a percent or two of each other
are compared on more than a few runs of a noisy machine.

No pass/fail: timings differ between machines.
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
ROW = re.compile(r"^\s+(\d+)\s+(.+?)\s{2,}([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(.*)$")


def run(args):
    proc = subprocess.run(args, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit("failed: %s\n%s%s" % (" ".join(args), proc.stdout[-2000:], proc.stderr[-2000:]))
    return proc.stdout


def ranked(model, profile, budget=0):
    out = run([os.path.join(BIN, "cpc"), "plan", model, "--devices", "2", "--profile", profile,
               "--device-memory", str(budget)])
    return [(m.group(2).strip(), float(m.group(3)), float(m.group(7)) * 1e6, m.group(9).strip().replace("(none)", ""))
            for m in map(ROW.match, out.splitlines()) if m]


def compile_layout(model, profile, flags, work, index):
    plan = os.path.join(work, "layout%d.plan" % index)
    run([os.path.join(BIN, "cpc"), "compile", model, "--profile", profile, "--microbatches", "4", "-o", plan,
         *flags.split()])
    return plan


def measure(plan, steps):
    """(median step ms, the largest rank's measured peak bytes) of one run."""
    out = run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps)])
    step = float(re.search(r"^step time: measured ([0-9.e+-]+) ms", out, re.M).group(1))
    peak = int(re.search(r"measured (\d+) B", out).group(1))
    return step, peak


def budgets_of(layouts):
    """Just under the predicted peak of plain dp, dp ZeRO-1 and dp ZeRO-2, those listed (the table
    rounds to 0.01 MB: 5001 B under what it shows is under the exact peak)."""
    peaks = {name: peak for name, _, peak, _ in layouts}
    return [(name, round(peaks[name]) - 5001) for name in ("dp2", "dp2 zero1", "dp2 zero2") if name in peaks]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mae-small,mae-base,gpt-small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budgets", action="store_true")
    ap.add_argument("--settle", type=int, default=0)
    args = ap.parse_args()
    step_errors, peak_errors = [], []  # (|error|, model, layout)
    with tempfile.TemporaryDirectory() as work:
        models = {name: benchlib.export_model(name, 8, work) for name in args.models.split(",")}
        profile = benchlib.calibrate(models.values(), work)
        for name, model in models.items():
            layouts = ranked(model, profile)
            measured = {}
            print("\n%s on 2 ranks, 4 microbatches of 8: %d layouts" % (name, len(layouts)))
            print("  %-20s %12s %12s %14s %14s" % ("layout", "predicted ms", "measured ms", "predicted MB", "measured MB"))
            plans = [compile_layout(model, profile, flags, work, i) for i, (_, _, _, flags) in enumerate(layouts)]
            # Each plan run --rounds times, the rounds interleaved, its fastest run kept: the
            # machine's noise only ever adds time, and drifts over a round's minutes.
            runs = [[] for _ in plans]
            for _ in range(args.rounds):
                for i, plan in enumerate(plans):
                    runs[i].append(measure(plan, args.steps))
            index = {layout: i for i, (layout, *_) in enumerate(layouts)}
            decisions = [(None, None, layouts)]  # (what the budget rules out, the budget, the layouts kept)
            if args.budgets:
                decisions += [(ruled_out, limit, ranked(model, profile, limit)) for ruled_out, limit in budgets_of(layouts)]
            # --settle: where the pick measured over 5% slower than the fastest kept, both are run
            # that many times more, interleaved (layouts predicted within a percent or two of each
            # other are told apart by more runs, not by the first few of a noisy machine).
            fastest_run = lambda layout: min(r[0] for r in runs[index[layout]])
            contested = set()
            for _, _, kept in decisions:
                if kept:
                    best = min((k for k, *_ in kept), key=fastest_run)
                    if fastest_run(kept[0][0]) > 1.05 * fastest_run(best):
                        contested |= {kept[0][0], best}
            for _ in range(args.settle if contested else 0):
                for layout in sorted(contested, key=index.get):
                    runs[index[layout]].append(measure(plans[index[layout]], args.steps))
            if contested and args.settle:
                print("  settled: %s run %d times more" % (", ".join(sorted(contested, key=index.get)), args.settle))
            for (layout, predicted, peak, _), results in zip(layouts, runs):
                step, used = min(r[0] for r in results), max(r[1] for r in results)
                measured[layout] = (step, used)
                step_errors.append((abs(predicted / step - 1), name, layout))
                peak_errors.append((abs(used / peak - 1), name, layout))
                print("  %-20s %12.2f %12.2f %14.1f %14.1f" % (layout, predicted, step, peak / 1e6, used / 1e6),
                      flush=True)
            fastest = min(measured, key=lambda k: measured[k][0])
            pick = layouts[0][0]
            print("  --auto picks %s: %.2f ms measured, %+.1f%% from the fastest measured (%s, %.2f ms)" % (
                pick, measured[pick][0], 100 * (measured[pick][0] / measured[fastest][0] - 1), fastest,
                measured[fastest][0]))
            for ruled_out, limit, kept in decisions[1:]:
                if not kept:
                    print("  budget %.1f MB (rules out %s): no layout fits" % (limit / 1e6, ruled_out))
                    continue
                over = [k for k, *_ in kept if measured[k][1] > limit]
                best_kept = min((k for k, *_ in kept), key=lambda k: measured[k][0])
                print("  budget %.1f MB (rules out %s): --auto picks %s (%.2f ms measured, %+.1f%% from the "
                      "fastest kept, %s); kept but over budget when run: %s" % (
                          limit / 1e6, ruled_out, kept[0][0], measured[kept[0][0]][0],
                          100 * (measured[kept[0][0]][0] / measured[best_kept][0] - 1), best_kept,
                          ", ".join(over) or "none"))
    for what, errors in (("step time", step_errors), ("peak memory", peak_errors)):
        worst = max(errors)
        print("predicted %s vs measured over %d plans: median |error| %.1f%%, worst %.1f%% (%s %s)" % (
            what, len(errors), 100 * statistics.median(e for e, *_ in errors), 100 * worst[0], worst[1], worst[2]))


if __name__ == "__main__":
    main()
