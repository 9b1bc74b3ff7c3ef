#!/usr/bin/python3
"""Activation recompute: memory and step time per mode (none, selective, full, auto) on one rank.

For each model, each mode is compiled and run (the modes interleaved, --rounds times, the fastest
run kept); printed per mode: the activation memory (the peak over the step of the arena's live
bytes that are not read by the optimizer, i.e. not the gradients, from `cpc inspect --json`), the
predicted and measured peak per rank, the median step time, each against none. Full recompute's
activations are compared with "1/L of none's plus one block" (L transformer blocks; one block
taken as the most two adjacent segments save: an attention half and an MLP half, or more).
Auto runs under a --device-memory of none's predicted peak less two thirds of none's activations
(issue 34: at a third of the activations, at most 1.15x none's step time).

    /usr/bin/python3 bench/recompute.py [--models mae-base,gpt-small] [--batch 8] [--steps 6] [--rounds 3]

No pass/fail: timings differ between machines.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

import benchlib
from benchlib import BIN

sys.path.insert(0, os.path.join(benchlib.SOURCE, "tests", "e2e"))
from cpctest import activation_bytes  # noqa: E402

MODES = ("none", "selective", "full", "auto")


def export(name, batch, work):
    if name.startswith("mae-"):
        return benchlib.export_mae(name[4:], batch, os.path.join(work, name))
    out = os.path.join(work, name)
    subprocess.run(["/usr/bin/python3", os.path.join(benchlib.SOURCE, "examples", "gpt", "export.py"), "--size",
                    name[4:], "--batch", str(batch), "--out-dir", out], check=True, stdout=subprocess.DEVNULL)
    config = os.path.join(out, "recipe.json")
    with open(config, "w") as f:
        f.write('{"TOTAL_BATCH_SIZE": %d}' % batch)
    return os.path.join(out, "gpt-%s-opset17.onnx" % name[4:]), config


def measure(plan, steps, metrics):
    """(median step seconds after the first, the largest rank's measured peak bytes) of one run."""
    if os.path.exists(metrics):
        os.remove(metrics)  # cpc-run appends
    out = subprocess.run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(steps), "--metrics", metrics],
                         check=True, capture_output=True, text=True).stdout
    peak = int(re.search(r"memory per rank: predicted peak \d+ B, measured (\d+) B", out).group(1))
    with open(metrics) as f:
        lines = [json.loads(line) for line in f]
    return statistics.median(m["step_s"] for m in lines[1:]), peak


# Transformer blocks per model (encoder and decoder): the L of "full keeps 1/L of the activations
# plus one block".
BLOCKS = {"gpt-tiny": 2, "gpt-small": 4, "mae-tiny": 3, "mae-small": 6, "mae-base": 20}


def segments(model, config, work):
    """(segment count, the largest segment's saved bytes, the most two adjacent segments save) of
    full recompute, from the IR."""
    ir = os.path.join(work, "full.mlir")
    subprocess.run([os.path.join(BIN, "cpc"), "compile", model, "--config", config, "--recompute", "full", "-o",
                    os.path.join(work, "ir.plan"), "--dump-ir", ir], check=True, stdout=subprocess.DEVNULL)
    with open(ir) as f:
        text = f.read()
    saved = [int(m) for m in re.findall(r"saved_bytes = (\d+)", text)]
    pair = max([a + b for a, b in zip(saved, saved[1:])] or [0])
    return len(saved), max(saved or [0]), pair


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="mae-base,gpt-small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpc-recompute-") as work:
        for name in args.models.split(","):
            model, config = export(name, args.batch, work)
            plans, rows = {}, {}
            for mode in MODES:
                plan = os.path.join(work, "%s-%s.plan" % (name, mode))
                flags = ["--recompute", mode]
                if mode == "auto":  # a budget that leaves a third of none's activations
                    none = rows["none"]
                    flags += ["--device-memory", str(int(none[1] - none[0] * 2 / 3))]
                summary = benchlib.compile_plan(model, config, plan, flags)
                plans[mode] = plan
                rows[mode] = [activation_bytes(summary), summary["predicted_peak_bytes"], 0, float("inf")]
            for _ in range(args.rounds):
                for mode in MODES:
                    step, peak = measure(plans[mode], args.steps, os.path.join(work, "m.jsonl"))
                    rows[mode][2] = max(rows[mode][2], peak)
                    rows[mode][3] = min(rows[mode][3], step)
            count, largest, pair = segments(model, config, work)
            print("%s, batch %d, one rank (%d recompute segments, the largest saves %.1f MB)" % (
                name, args.batch, count, largest / 1e6))
            print("  mode        activations MB  vs none   predicted peak MB  measured peak MB   step ms  vs none")
            base = rows["none"]
            for mode in MODES:
                act, predicted, measured, step = rows[mode]
                print("  %-10s %15.1f  %6.2fx  %18.1f  %16.1f  %8.1f  %6.2fx" % (
                    mode, act / 1e6, act / base[0], predicted / 1e6, measured / 1e6, step * 1e3, step / base[3]))
            blocks = BLOCKS.get(name)
            if blocks:
                print("  full: %.1f MB of activations; none's / L + one block (L = %d, a block <= %.1f MB) = %.1f MB\n" % (
                    rows["full"][0] / 1e6, blocks, pair / 1e6, (base[0] / blocks + pair) / 1e6))

if __name__ == "__main__":
    main()
