#!/usr/bin/python3
"""Tensor, sequence and vocab parallelism on the GPT example: per-rank memory and collectives.

    bench/tp_gpt_comm.py [--size small] [--batch 8] [--layouts 1,tp2,tp2sp,dp2tp2,tp4,tp4sp] [--steps 4]

For each layout prints, per rank:
  - parameter bytes against split / tp + replicated (Megatron's block weights and the token
    embedding, tied to the head, split by vocabulary rows);
  - the activation arena the compiler plans;
  - the collectives of [b, s, h] activations per step against Megatron's count: per layer 4
    all-reduces (2 forward, 2 backward), plus 2 for the vocab-parallel embedding lookup
    (forward) and the tied head's input gradient (backward); with sp, each becomes a
    reduce-scatter and an all-gather of [b, s/tp, h] before the next split Linear instead (the
    same ring volume); the bytes sent per step by kind;
  - the cross-entropy's all-reduces of [b*s, 1] (its max and sum of exponentials: Megatron's
    forward ones besides the target logit, which goes out with the loss);
  - the median step time after the first step, and its ratio to one rank in the same run
    (ranks beyond the machine's cores share them: on 2 cores tp4 is not a scaling figure).
Nothing here is asserted: timings on a shared machine are noisy.
"""
import argparse
import json
import os
import subprocess
import sys

from benchlib import SOURCE, compile_plan, parameter_bytes, run_metrics  # sets the environment first

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.join(SOURCE, "examples", "gpt"))
from gpt_model import CONFIGS  # noqa: E402


def flags_of(layout):
    """'dp2tp4sp' -> (2, 4, True, flags)."""
    sp = layout.endswith("sp")
    name = layout[:-2] if sp else layout
    dp = int(name.split("dp")[1].split("tp")[0]) if "dp" in name else 1
    tp = int(name.split("tp")[1]) if "tp" in name else 1
    flags = (["--dp", str(dp)] if dp > 1 else []) + (["--tp", str(tp)] if tp > 1 else []) + (["--sp"] if sp else [])
    return dp, tp, sp, flags


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layouts", default="1,tp2,tp2sp,dp2tp2,tp4,tp4sp")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-tp-gpt"))
    args = ap.parse_args()
    cfg = CONFIGS[args.size]
    os.makedirs(args.work_dir, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "gpt", "export.py"), "--size", args.size,
                    "--batch", str(args.batch), "--out-dir", args.work_dir], check=True, stdout=subprocess.DEVNULL)
    model = os.path.join(args.work_dir, "gpt-%s-opset17.onnx" % args.size)
    recipe = os.path.join(args.work_dir, "recipe.json")
    with open(recipe, "w") as f:
        json.dump({"TOTAL_BATCH_SIZE": args.batch, "LR": 0.1, "clip_grad_norm": 1.0}, f)
    rng = np.random.default_rng(0)
    inputs = []
    for name in ("idx", "targets"):
        path = os.path.join(args.work_dir, name + ".npy")
        np.save(path, rng.integers(0, cfg["vocab"], (args.batch, cfg["tokens"])).astype(np.int64))
        inputs += ["--input", "%s=%s" % (name, path)]
    s, h, layers = cfg["tokens"], cfg["width"], cfg["layers"]
    print("GPT-%s (vocab %d, %d layers of width %d over %d tokens), global batch %d, per rank:" % (
        args.size, cfg["vocab"], layers, h, s, args.batch))
    print("%-8s %10s %10s %9s %14s %9s %13s %13s %6s %8s %6s" % (
        "layout", "params B", "formula B", "arena B", "[b,s,h] colls", "Megatron", "AR B/step", "RS+AG B/step",
        "CE AR", "step s", "x 1"))
    base_time = whole = None
    for layout in args.layouts.split(","):
        dp, tp, sp, flags = flags_of(layout)
        plan = os.path.join(args.work_dir, "gpt-%s.plan" % layout)
        summary = compile_plan(model, recipe, plan, flags)
        buffers = summary["buffers"]
        local, split, total = parameter_bytes(summary)
        whole = whole or total
        b = args.batch // dp
        values = [(st["op"], buffers[i]["shape"]) for p in summary["programs"] for st in p["steps"] for i in st["in"]]
        act = [b, s, h]
        reduces = sum(1 for op, shape in values if op == "cpc.all_reduce" and shape == act)
        scatters = sum(1 for op, shape in values if op == "cpc.reduce_scatter" and shape == act)
        gathers = sum(1 for op, shape in values if op == "cpc.all_gather" and shape == [b, s // max(tp, 1), h])
        ce = sum(1 for op, shape in values if op == "cpc.all_reduce" and shape == [b * s, 1])
        megatron = (4 * layers + 2) if tp > 1 else 0
        colls = ("%d RS + %d AG" % (scatters, gathers)) if sp else "%d AR" % reduces
        expected = ("%d RS + %d AG" % (megatron, megatron)) if sp else "%d AR" % megatron
        metrics = os.path.join(args.work_dir, "gpt-%s.jsonl" % layout)
        lines = run_metrics(plan, args.steps, metrics, inputs)
        comm = lines[-1].get("comm", {})
        sent = {k: v["bytes"] for k, v in comm.items()}
        step = float(np.median([m["step_s"] for m in lines[1:]] or [lines[0]["step_s"]]))
        base_time = base_time or step
        arena = max(p.get("arena_bytes", 0) for p in summary["programs"])
        print("%-8s %10d %10d %9d %14s %9s %13d %13d %6d %8.4f %6.2f" % (
            layout, local, total - split + split // tp, arena, colls if tp > 1 else "-",
            expected if tp > 1 else "-", sent.get("all_reduce", 0),
            sent.get("reduce_scatter", 0) + sent.get("all_gather", 0), ce, step, step / base_time))
    print("params B: what a rank stores; formula: split/tp + replicated (one rank: %d B). [b,s,h] colls: the "
          "activation collectives per step; Megatron: 4 per layer + the embedding's and the head's. AR, RS+AG B/step: "
          "bytes sent per step (with dp also the gradient all-reduce). CE AR: the cross-entropy's [b*s, 1] "
          "all-reduces (max, sum of exponentials)." % whole)
    return 0


if __name__ == "__main__":
    sys.exit(main())
