#!/usr/bin/python3
"""How long `cpc plan` takes to choose a layout for many devices (simulated: nothing runs).

    /usr/bin/python3 bench/layout_search_speed.py [--devices 8,64,512] [--models mae-large,gpt-24x1024]
                                                  [--exhaustive-up-to 8]

Exports MAE ViT-L (the examples' mae-large, batch 8) and a GPT of 24 layers x 1024 (16 heads, 128
tokens, vocabulary 1024, batch 8), then times `cpc plan MODEL --devices N` for each N: the
candidates (dp x tp x pp, tp 1d/2d/3d, ZeRO, schedules), how many were compiled, the wall time
against issue 32's bound (10 s at 64 devices, 60 s at 512), and the first layout. Up to 24
candidates every layout is compiled; beyond, each mesh (dp x tp x pp, tp mode) is compiled once,
its other ZeRO stages and schedules estimated from it, and the best 4 compiled. With --exhaustive-up-to N, `--exhaustive` is
also timed on device counts up to N, and its first layout compared. Nothing is asserted.
"""
import argparse
import os
import re
import subprocess
import tempfile
import time

import benchlib
from benchlib import BIN, SOURCE

GPT_EXPORT = r"""
import sys, torch
sys.path.insert(0, %r)
from gpt_model import CONFIGS, build_model
CONFIGS["bench"] = dict(vocab=1024, width=1024, heads=16, tokens=128, layers=24)
model = build_model("bench")
idx = torch.randint(0, 1024, (8, 128))
torch.onnx.export(model, (idx, idx), %r, input_names=["idx", "targets"], output_names=["loss"], opset_version=17,
                  do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
"""
BOUND = {64: 10.0, 512: 60.0}


def export(name, work):
    if name == "mae-large":
        return benchlib.export_mae("large", 8, work)[0]
    os.makedirs(work, exist_ok=True)
    path = os.path.join(work, "gpt-24x1024.onnx")
    subprocess.run(["/usr/bin/python3", "-c", GPT_EXPORT % (os.path.join(SOURCE, "examples", "gpt"), path)],
                   check=True, capture_output=True)
    return path


def plan(model, devices, exhaustive):
    start = time.perf_counter()
    out = subprocess.run([os.path.join(BIN, "cpc"), "plan", model, "--devices", str(devices), "--microbatches", "8",
                          *(["--exhaustive"] if exhaustive else [])], check=True, capture_output=True, text=True).stdout
    seconds = time.perf_counter() - start
    rows = re.findall(r"^\s+(~?)\d+\s+(.+?)\s{2,}([0-9.]+)\s", out, re.M)
    rejected = len(re.findall(r"^\s+rejected\s", out, re.M))
    compiled = sum(1 for estimated, _, _ in rows if not estimated)
    first = "%s (%.0f ms)" % (rows[0][1].strip(), float(rows[0][2])) if rows else "none"
    return seconds, len(rows) + rejected, compiled, first


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--devices", default="8,64,512")
    ap.add_argument("--models", default="mae-large,gpt-24x1024")
    ap.add_argument("--exhaustive-up-to", type=int, default=0)
    args = ap.parse_args()
    print("| model | devices | layouts | compiled | seconds | bound | first layout |")
    print("|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="cpc-bench-search-") as work:
        for name in args.models.split(","):
            model = export(name, os.path.join(work, name))
            for devices in (int(n) for n in args.devices.split(",")):
                for exhaustive in ([False, True] if devices <= args.exhaustive_up_to else [False]):
                    seconds, layouts, compiled, first = plan(model, devices, exhaustive)
                    bound = BOUND.get(devices)
                    print("| %s | %d%s | %d | %d | %.1f | %s | %s |" % (
                        name, devices, " (exhaustive)" if exhaustive else "", layouts, compiled, seconds,
                        "%.0f s: %s" % (bound, "met" if seconds <= bound else "missed") if bound else "-", first),
                        flush=True)


if __name__ == "__main__":
    main()
