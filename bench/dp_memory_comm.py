#!/usr/bin/python3
"""Per-rank memory and communication of data-parallel MAE training against the analytical figures.

    bench/dp_memory_comm.py [--size tiny] [--batch 8] [--ranks 2,4] [--zero 0,1] [--steps 3]

For each layout prints, per rank: parameter, optimizer-state and arena bytes (from the plan), the
ZeRO formula for optimizer state (fp32 AdamW: 8 bytes per trainable parameter, divided by N
with ZeRO-1), the bytes sent per step (from cpc-run's collective counters) against the ring
volume 2*4*Psi*(N-1)/N of the gradient all-reduce (+ 4*Psi*(N-1)/N of ZeRO-1's all-gather;
ZeRO-2's reduce-scatter + all-gather is 2*4*Psi*(N-1)/N again),
and rank 0's predicted peak against its measured max RSS.
"""
import os
import sys

_THREADS = "1"
os.environ["OPENBLAS_NUM_THREADS"] = os.environ["OMP_NUM_THREADS"] = _THREADS
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402

import numpy as np  # noqa: E402

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(SOURCE, "build", "bin")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--ranks", default="2,4")
    ap.add_argument("--zero", default="0,1,2")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-dp"))
    args = ap.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "mae", "export.py"), "--size", args.size,
                    "--batch", str(args.batch), "--out-dir", args.work_dir], check=True, stdout=subprocess.DEVNULL)
    model = os.path.join(args.work_dir, "mae-%s-opset17.onnx" % args.size)
    cfg = os.path.join(args.work_dir, "recipe.json")
    with open(cfg, "w") as f:
        json.dump({"TOTAL_BATCH_SIZE": args.batch, "frozen": ["pos_embed$"]}, f)
    print("%-10s %12s %14s %14s %12s %14s %14s %12s %12s" % (
        "layout", "params B", "opt state B", "formula B", "arena B", "sent B/step", "formula B", "pred peak",
        "max RSS"))
    for n in [int(r) for r in args.ranks.split(",")]:
        for zero in [int(z) for z in args.zero.split(",")]:
            plan = os.path.join(args.work_dir, "dp%d-z%d.plan" % (n, zero))
            subprocess.run([os.path.join(BIN, "cpc"), "compile", model, "--config", cfg, "--dp", str(n), "--zero",
                            str(zero), "-o", plan], check=True, stdout=subprocess.DEVNULL)
            meta = json.loads(subprocess.run([os.path.join(BIN, "cpc"), "inspect", plan, "--json"], check=True,
                                             capture_output=True, text=True).stdout)
            size = lambda b: 4 * int(np.prod(b["shape"]))  # noqa: E731  (all f32)
            roots = [b for b in meta["buffers"] if b["alias_of"] < 0]
            params = sum(size(b) for b in roots if b["kind"] == "parameter")
            trainable = sum(size(b) // 4 for b in roots if b["kind"] == "parameter" and b["trainable"])
            state = sum(size(b) for b in roots if b["kind"] == "state")
            arena = max(p["arena_bytes"] for p in meta["programs"])
            metrics = os.path.join(args.work_dir, "dp%d-z%d.jsonl" % (n, zero))
            if os.path.exists(metrics):
                os.remove(metrics)
            subprocess.run([os.path.join(BIN, "cpc-run"), plan, "--steps", str(args.steps), "--metrics", metrics,
                            "--quiet"], check=True)
            steps = [json.loads(line) for line in open(metrics)]
            sent = steps[-1]["comm_bytes"]
            # DP all-reduce 2x; ZeRO-1 adds the parameter all-gather; ZeRO-2 reduce-scatter + all-gather.
            ring = 4 * trainable * (n - 1) / n * {0: 2, 1: 3, 2: 2}[zero]
            formula_state = 8 * trainable // (n if zero else 1)
            print("%-10s %12d %14d %14d %12d %14d %14d %12d %12d" % (
                "N=%d z=%d" % (n, zero), params, state, formula_state, arena, sent, ring, meta["predicted_peak_bytes"],
                steps[-1]["peak_bytes"]))


if __name__ == "__main__":
    main()
