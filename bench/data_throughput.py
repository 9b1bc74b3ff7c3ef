#!/usr/bin/python3
"""The image pipeline against the step rate, in one run: MAE-tiny (32x32; --size base: 224x224),
global batch 8, trains from an ImageFolder of 500x375 images (ImageNet's typical size) with
`cpc-run --data` (decode + MAE augmentation on --data-threads threads per rank, two steps
ahead). Prints the step's samples/s, the decode rate per thread, how long the steps waited for
data, and the ratio of what the threads can decode to what the step consumes (above 1: the data
is off the step's critical path).

    /usr/bin/python3 bench/data_throughput.py [--size tiny|base] [--format jpeg|png] [--images 96]
                                              [--steps 6] [--threads 1,2]
"""
import argparse
import json
import os
import statistics
import struct
import subprocess
import sys
import tempfile
import zlib

import benchlib
import numpy as np
from benchlib import BIN


def png_bytes(rgb):
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def make_folder(root, count, rng, fmt):
    """Smooth colour fields with noise (photo-like compressed sizes), in 4 classes."""
    y, x = np.mgrid[0:375, 0:500]
    for i in range(count):
        folder = os.path.join(root, "class%d" % (i % 4))
        os.makedirs(folder, exist_ok=True)
        phase = rng.random(3) * 6.28
        base = np.stack([127 + 100 * np.sin(x / (40 + 9 * c) + y / (55 + 7 * c) + phase[c]) for c in range(3)], -1)
        img = np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.uint8)
        if fmt == "jpeg":  # Pillow (Debian's python3-pil, which scripts/setup installs)
            from PIL import Image
            Image.fromarray(img).save(os.path.join(folder, "img%03d.jpg" % i), quality=90)
        else:
            with open(os.path.join(folder, "img%03d.png" % i), "wb") as f:
                f.write(png_bytes(img))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", choices=["tiny", "base"], default="tiny")
    ap.add_argument("--format", choices=["jpeg", "png"], default="jpeg")
    ap.add_argument("--images", type=int, default=96)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--decode", default="fast,exact", help="--data-decode modes to run (default both)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="cpc-bench-data-") as work:
        folder = os.path.join(work, "images")
        make_folder(folder, args.images, np.random.default_rng(0), args.format)
        model, config = benchlib.export_mae(args.size, 8, work)
        plan = os.path.join(work, args.size + ".plan")
        benchlib.compile_plan(model, config, plan, [])
        print("MAE-%s, global batch 8, %d %s images of 500x375 in 4 classes, %d steps, one rank" % (
            args.size, args.images, args.format.upper(), args.steps))
        print("%-8s %-8s %12s %16s %14s %8s" % ("decode", "threads", "samples/s", "img/s/thread", "data wait ms",
                                                 "ratio"))
        for decode, threads in [(d, int(t)) for d in args.decode.split(",") for t in args.threads.split(",")]:
            metrics = os.path.join(work, "m%s%d.jsonl" % (decode, threads))
            proc = subprocess.run([os.path.join(BIN, "cpc-run"), plan, "--data", folder, "--steps", str(args.steps),
                                   "--data-threads", str(threads), "--data-decode", decode, "--metrics", metrics],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(proc.stderr)
            rows = [json.loads(line) for line in open(metrics)][1:]  # the first step also waits for the first batch
            rate = statistics.median(r["samples_per_s"] for r in rows)
            per_thread = rows[-1]["images_per_thread_s"]
            wait = statistics.median(r["data_s"] for r in rows) * 1e3
            print("%-8s %-8d %12.2f %16.1f %14.2f %8.2f" % (decode, threads, rate, per_thread, wait,
                                                          threads * per_thread / rate))


if __name__ == "__main__":
    main()
