#!/usr/bin/python3
"""Plan quality: `cpc plan MODEL --devices 2` under a cost profile calibrated here, then every
layout it lists compiled and run; prints each layout's predicted and measured step time and
peak memory, and how far the layout `cpc compile --auto` picks (the first) is from the fastest
measured. With --budgets, the same under memory budgets that rule out, in turn, the layouts
whose predicted peak is largest (plain dp, then ZeRO-1, ...): no layout it keeps may exceed the
budget when run.

    /usr/bin/python3 bench/layout_search.py [--models mae-small,gpt-small] [--steps 6] [--budgets]

No pass/fail: timings differ between machines.
"""
import argparse
import os
import re
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


def measure(model, profile, flags, steps, work):
    plan = os.path.join(work, "layout.plan")
    run([os.path.join(BIN, "cpc"), "compile", model, "--profile", profile, "--microbatches", "4", "-o", plan,
         *flags.split()])
    out = run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps)])
    step = float(re.search(r"^step time: measured ([0-9.e+-]+) ms", out, re.M).group(1))
    peak = int(re.search(r"measured (\d+) B", out).group(1))
    return step, peak


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mae-small,gpt-small")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--budgets", action="store_true")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as work:
        models = {name: benchlib.export_model(name, 8, work) for name in args.models.split(",")}
        profile = benchlib.calibrate(models.values(), work)
        for name, model in models.items():
            layouts = ranked(model, profile)
            measured = {}
            print("\n%s on 2 ranks, 4 microbatches of 8: %d layouts" % (name, len(layouts)))
            print("  %-20s %12s %12s %14s %14s" % ("layout", "predicted ms", "measured ms", "predicted MB", "measured MB"))
            for layout, predicted, peak, flags in layouts:
                step, used = measure(model, profile, flags, args.steps, work)
                measured[layout] = (step, used)
                print("  %-20s %12.2f %12.2f %14.1f %14.1f" % (layout, predicted, step, peak / 1e6, used / 1e6))
            fastest = min(measured, key=lambda k: measured[k][0])
            pick = layouts[0][0]
            print("  --auto picks %s: %.2f ms measured, %+.1f%% from the fastest measured (%s, %.2f ms)" % (
                pick, measured[pick][0], 100 * (measured[pick][0] / measured[fastest][0] - 1), fastest,
                measured[fastest][0]))
            if args.budgets:
                peaks = sorted({round(p) for _, _, p, _ in layouts}, reverse=True)
                for limit in [p - 1 for p in peaks[:3]]:
                    kept = ranked(model, profile, limit)
                    if not kept:
                        print("  budget %.1f MB: no layout fits" % (limit / 1e6))
                        continue
                    over = [k for k, *_ in kept if measured[k][1] > limit]
                    print("  budget %.1f MB: --auto picks %s (%.2f ms measured); fastest kept %s; kept but over "
                          "budget when run: %s" % (limit / 1e6, kept[0][0], measured[kept[0][0]][0],
                                                   min((k for k, *_ in kept), key=lambda k: measured[k][0]),
                                                   ", ".join(over) or "none"))


if __name__ == "__main__":
    main()
