#!/usr/bin/python3
"""Per-rank parameters, activations, collectives and step time of tensor-parallel MAE training.

    bench/tp_memory_comm.py [--size small] [--batch 8] [--layouts 1,tp2,dp2,tp4,dp2tp2] [--steps 4]

For each layout prints, per rank:
  - parameter bytes against split / tp + replicated (the split ones: Megatron's qkv, attention
    output, fc1 and fc2 weights and the qkv/fc1 biases);
  - the activation arena the compiler plans;
  - all-reduces per step and bytes sent, against Megatron's count: per split block (attention or
    MLP) and step, 1 forward + 1 backward all-reduce of b*s*h elements (b this rank's share of
    the microbatch, s the block's tokens, h its width), one per split 2-D weight, whose ring
    volume is 2(N-1)/N of the tensor (attention whose heads do not divide by tp stays whole);
    the rest is the scalar partial sums of the gradient norm (and, with dp, the gradient
    all-reduce);
  - the median step time after the first step, and its ratio to one rank measured in the same
    run (ranks beyond the machine's cores share them: on 2 cores tp4 is not a scaling figure).
Nothing here is asserted: timings on a shared machine are noisy.
"""
import argparse
import os
import sys

from benchlib import SOURCE, compile_plan, export_mae, parameter_bytes, run_metrics  # sets the environment first

import numpy as np  # noqa: E402



def flags_of(layout):
    if layout == "1":
        return 1, 1, []
    dp = int(layout.split("dp")[1].split("tp")[0]) if "dp" in layout else 1
    tp = int(layout.split("tp")[1]) if "tp" in layout else 1
    flags = (["--dp", str(dp)] if dp > 1 else []) + (["--tp", str(tp)] if tp > 1 else [])
    return dp, tp, flags


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layouts", default="1,tp2,dp2,tp4,dp2tp2")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-tp"))
    args = ap.parse_args()
    model, cfg = export_mae(args.size, args.batch, args.work_dir)
    print("MAE-%s, global batch %d, per rank:" % (args.size, args.batch))
    print("%-8s %12s %12s %11s %9s %9s %12s %12s %9s %7s" % (
        "layout", "params B", "formula B", "arena B", "acts AR", "Megatron", "AR B/step", "formula B", "step s",
        "x 1"))
    base_time = None
    whole = None
    for layout in args.layouts.split(","):
        dp, tp, flags = flags_of(layout)
        plan = os.path.join(args.work_dir, "mae-%s.plan" % layout)
        summary = compile_plan(model, cfg, plan, flags)
        params = [b for b in summary["buffers"] if b["kind"] == "parameter" and b["alias_of"] < 0]
        local, split, total = parameter_bytes(summary)
        whole = whole or total
        formula = total - split + split // tp
        # Activation all-reduces: rank-3 [b, s, h] tensors over tp.
        acts = [summary["buffers"][s["in"][0]]["shape"] for p in summary["programs"] for s in p["steps"]
                if s["op"] == "cpc.all_reduce" and len(summary["buffers"][s["in"][0]]["shape"]) == 3]
        # Megatron: one all-reduce per split Linear per step (forward after each row-parallel one,
        # backward before each column-parallel one), i.e. one per split 2-D weight.
        expected = sum(1 for b in params if b.get("shard_dims") and len(b["shape"]) == 2)
        act_bytes = sum(2 * (tp - 1) * 4 * int(np.prod(s)) // tp for s in acts)
        metrics = os.path.join(args.work_dir, "mae-%s.jsonl" % layout)
        lines = run_metrics(plan, args.steps, metrics)
        sent = lines[-1].get("comm", {}).get("all_reduce", {}).get("bytes", 0)
        step = float(np.median([m["step_s"] for m in lines[1:]] or [lines[0]["step_s"]]))
        base_time = base_time or step
        arena = max(p["arena_bytes"] for p in summary["programs"]) if "arena_bytes" in summary["programs"][0] else 0
        print("%-8s %12d %12d %11d %9d %9s %12d %12s %9.4f %7.2f" % (
            layout, local, formula, arena, len(acts), "%d" % expected if tp > 1 else "-", sent,
            "%d+" % act_bytes if tp > 1 else "-", step, step / base_time))
    print("params B: what a rank stores; formula: split/tp + replicated (one rank: %d B). acts AR: the [b, s, h] "
          "all-reduces per step (Megatron: one per split Linear); AR B/step: all-reduce bytes sent per step, formula: the "
          "activation ring volumes plus scalars (and the dp gradient all-reduce)." % whole)
    return 0


if __name__ == "__main__":
    sys.exit(main())
