#!/usr/bin/python3
"""fp32 / bf16 / fp16 on MAE-small (batch 16, one fixed batch every step), in one script:

    bench/mixed_precision.py [--steps 200] [--size small] [--batch 16] [--no-torch]

Prints per precision: the arena and the predicted and measured peak of one rank, the bytes a
data-parallel rank sends per step (dp2), the step time of one rank (median after the first
step), the mean loss of every window of 20 steps and its distance from fp32's (goal: within 2%),
and for bf16 the same distance from PyTorch's CPU bf16 autocast run of the same model and
recipe (examples/mae/train_reference.py --autocast bf16; goal: within 2%). The loss curves go to
WORK/curves.tsv side by side.

On this CPU every 16-bit kernel computes in f32 (no bf16/f16 GEMM in Debian's OpenBLAS, no
AVX-512 BF16): the 16-bit operands are widened to f32 on the fly, so a 16-bit step costs the f32
step plus the conversions; what shrinks is memory and traffic.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import benchlib  # noqa: E402  (sets the thread environment first)

import numpy as np  # noqa: E402

WINDOW = 20


def recipe(batch, steps):
    # lr 1e-3 with 10 warm-up steps and a cosine over the run; a clip that engages early.
    return {"TOTAL_BATCH_SIZE": batch, "LR": 1e-3 * 256 / batch, "WEIGHT_DECAY": 0.05, "NUM_EPOCHS": steps,
            "WARMUP_EPOCHS": 10, "STEPS_PER_EPOCH": 1, "lr_schedule": "cosine", "BETAS": [0.9, 0.95],
            "clip_grad_norm": 1.0, "frozen": ["pos_embed$"]}


def arena_bytes(summary):
    """The arena of a plan from `cpc inspect --json`: the end of its furthest arena buffer."""
    size = {"f32": 4, "f64": 8, "f16": 2, "bf16": 2, "i64": 8, "i32": 4, "i16": 2, "i8": 1, "u8": 1, "i1": 1}
    return max((b["offset"] + size[b["dtype"]] * int(np.prod(b["shape"], dtype=np.int64))
                for b in summary["buffers"] if b["kind"] == "arena" and b["alias_of"] < 0), default=0)


def windows(losses):
    return [float(np.mean(losses[i:i + WINDOW])) for i in range(0, len(losses), WINDOW)]


def worst_window(ours, reference):
    return max(abs(a - b) / b for a, b in zip(windows(ours), windows(reference)))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="small")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--work-dir", default="/tmp/cpc-bench-mixed-precision")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch runs")
    args = ap.parse_args()
    work = args.work_dir
    os.makedirs(work, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(benchlib.SOURCE, "examples", "mae", "export.py"), "--size",
                    args.size, "--batch", str(args.batch), "--out-dir", work, "--save-inputs"], check=True,
                   stdout=subprocess.DEVNULL)
    stem = os.path.join(work, "mae-%s-opset17" % args.size)
    config = os.path.join(work, "recipe.json")
    with open(config, "w") as f:
        json.dump(recipe(args.batch, args.steps), f)
    data = ["--input", "imgs=%s.imgs.npy" % stem, "--input", "noise=%s.noise.npy" % stem]

    rows, curves = {}, {}
    for precision in ("fp32", "bf16", "fp16"):
        plan = os.path.join(work, precision + ".plan")
        summary = benchlib.compile_plan(stem + ".onnx", config, plan, ["--precision", precision])
        lines = benchlib.run_metrics(plan, args.steps, os.path.join(work, precision + ".jsonl"), data)
        dp_plan = os.path.join(work, precision + "-dp2.plan")
        benchlib.compile_plan(stem + ".onnx", config, dp_plan, ["--precision", precision, "--dp", "2"])
        dp = benchlib.run_metrics(dp_plan, 3, os.path.join(work, precision + "-dp2.jsonl"), data)
        arena = arena_bytes(summary)
        rows[precision] = {
            "arena": arena,
            "predicted": summary["predicted_peak_bytes"],
            "measured": lines[-1]["measured_peak_bytes"],
            "sent": dp[-1].get("comm_bytes", 0),
            "step_s": statistics.median(m["step_s"] for m in lines[1:]),
            "skipped": lines[-1]["skipped_steps"],
            "scale": lines[-1]["loss_scale"],
        }
        curves[precision] = [m["loss"] for m in lines]
    if not args.no_torch:
        for name, extra in (("torch fp32", []), ("torch bf16", ["--autocast", "bf16"])):
            metrics = os.path.join(work, name.replace(" ", "-") + ".jsonl")
            subprocess.run(["/usr/bin/python3", os.path.join(benchlib.SOURCE, "examples", "mae", "train_reference.py"),
                            "--size", args.size, "--config", config, "--imgs", stem + ".imgs.npy", "--noise",
                            stem + ".noise.npy", "--steps", str(args.steps), "--metrics", metrics, *extra],
                           check=True, stdout=subprocess.DEVNULL)
            lines = [json.loads(line) for line in open(metrics)]
            curves[name] = [m["loss"] for m in lines]
            rows[name] = {"step_s": statistics.median(m["step_s"] for m in lines[1:])}

    base = rows["fp32"]
    print("MAE-%s, batch %d, %d steps, one rank (dp2 for the bytes sent)" % (args.size, args.batch, args.steps))
    print("%-11s %12s %12s %12s %14s %9s %9s  %s" % ("precision", "arena MB", "predicted", "measured",
                                                    "dp2 sent/step", "step s", "vs fp32", "loss windows"))
    for name, r in rows.items():
        if "predicted" in r:
            print("%-11s %12.2f %12.2f %12.2f %13.2fM %9.3f %8.2fx  worst window vs fp32 %.2e%s" % (
                name, r["arena"] / 1e6, r["predicted"] / 1e6, r["measured"] / 1e6, r["sent"] / 1e6, r["step_s"],
                r["step_s"] / base["step_s"], worst_window(curves[name], curves["fp32"]),
                "  (skipped %d, scale %g)" % (r["skipped"], r["scale"]) if name == "fp16" else ""))
        else:
            print("%-11s %12s %12s %12s %14s %9.3f %8.2fx  worst window vs cpc fp32 %.2e" % (
                name, "", "", "", "", r["step_s"], r["step_s"] / base["step_s"],
                worst_window(curves[name], curves["fp32"])))
    print("ratios to fp32: predicted peak bf16 %.3f fp16 %.3f; bytes sent bf16 %.3f fp16 %.3f" % (
        rows["bf16"]["predicted"] / base["predicted"], rows["fp16"]["predicted"] / base["predicted"],
        rows["bf16"]["sent"] / max(base["sent"], 1), rows["fp16"]["sent"] / max(base["sent"], 1)))
    if "torch bf16" in curves:
        print("cpc bf16 vs torch bf16 autocast: worst window %.2e (goal <= 2e-2); torch bf16 vs torch fp32 %.2e" % (
            worst_window(curves["bf16"], curves["torch bf16"]), worst_window(curves["torch bf16"], curves["torch fp32"])))
    print("windows of %d steps (mean loss):" % WINDOW)
    for name, c in curves.items():
        print("  %-11s %s" % (name, " ".join("%.4f" % w for w in windows(c))))
    with open(os.path.join(work, "curves.tsv"), "w") as f:
        f.write("step\t" + "\t".join(curves) + "\n")
        for i in range(args.steps):
            f.write("%d\t%s\n" % (i + 1, "\t".join("%.6f" % c[i] for c in curves.values())))
    print("curves: %s" % os.path.join(work, "curves.tsv"))


if __name__ == "__main__":
    main()
