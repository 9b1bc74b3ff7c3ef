#!/usr/bin/python3
"""Per-rank parameters, activations and collectives of 2D / 2.5D / 3D tensor parallelism (Optimus,
Tesseract, 3D) against 1D (Megatron) at the same rank count.

    bench/tp2d_memory_comm.py [--models mlp,mae-small] [--steps 3]

Models: a residual MLP of 4 blocks (width 512, hidden 2048, 64 tokens, batch 8; written here with
torch and exported by torch.onnx.export), and MAE-small (batch 8). Layouts: one rank; 1D tp4
and 2D q=2 on 4 ranks; 1D tp8, 2.5D q=2 d=2 and 3D q=2 on 8 ranks. For each, per rank:
  - parameter bytes, and the formula: 1D split/N + replicated; 2D and 2.5D split/q^2 +
    replicated (a Linear weight is one [in/q, out/q] block; 2.5D replicates it over depth);
  - the activation arena the compiler plans;
  - collective calls and bytes per step by kind, and the formula of the layout's dominant
    traffic: 3D, the reduce-scatters, per Linear (q-1)(x + w + y) with x, w, y = b*s*in/q^3,
    in*out/q^3, b*s*out/q^3 (the 6 all-gathers per Linear move twice that, shown apart);
    1D, Megatron's 2 all-reduces (forward, backward) of b*s*h per split block, each
    2(N-1)/N of the tensor; 2D / 2.5D, SUMMA's 3(q-1) (x + w) per Linear (x an input block of
    b/(q d) * s * in/q elements, w a weight block of in/q * out/q; forward broadcasts both,
    the input gradient broadcasts w and reduces x's shape, the weight gradient broadcasts x
    and reduces w's), f32;
  - the median step time after the first and its ratio to one rank (2 cores: 4 and 8 ranks
    share them, so these are not scaling figures).
MAE-small's encoder has 3 heads: 1D leaves its attention whole, and a q=2 column split cannot
keep heads whole, so 2D gathers the qkv columns there (correct; its SUMMA traffic then differs
from the formula); the MLP shows the layouts' own figures. Nothing is asserted.
"""
import argparse
import os
import subprocess
import sys

from benchlib import BIN, SOURCE, compile_plan, export_mae, parameter_bytes, run_metrics  # sets the environment

import numpy as np  # noqa: E402

MLP = dict(width=512, hidden=2048, blocks=4, tokens=64, batch=8)
# (name, flags, ranks, q, depth): q = 0 for 1D, depth = 0 for 3D.
LAYOUTS = [("1", [], 1, 0, 1), ("1d tp4", ["--tp", "4"], 4, 0, 1), ("2d q2", ["--tp", "4", "--tp-mode", "2d"], 4, 2, 1),
           ("1d tp8", ["--tp", "8"], 8, 0, 1),
           ("2.5d q2d2", ["--tp", "8", "--tp-mode", "2.5d", "--tp-depth", "2"], 8, 2, 2),
           ("3d q2", ["--tp", "8", "--tp-mode", "3d"], 8, 2, 0)]

EXPORT_MLP = r'''
import sys, torch
from torch import nn
w, h, n, s, b = (int(a) for a in sys.argv[2:7])
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(w)
        self.fc1 = nn.Linear(w, h)
        self.fc2 = nn.Linear(h, w)
    def forward(self, x):
        return x + self.fc2(torch.nn.functional.gelu(self.fc1(self.norm(x))))
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))
    def forward(self, x, target):
        for blk in self.blocks:
            x = blk(x)
        return ((x - target) ** 2).mean()
torch.manual_seed(0)
torch.onnx.export(Net().train(), (torch.randn(b, s, w), torch.randn(b, s, w)), sys.argv[1], input_names=["x", "target"],
                  opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
'''


def export_mlp(work):
    os.makedirs(work, exist_ok=True)
    model, config = os.path.join(work, "mlp.onnx"), os.path.join(work, "mlp.json")
    subprocess.run(["/usr/bin/python3", "-c", EXPORT_MLP, model] +
                   [str(MLP[k]) for k in ("width", "hidden", "blocks", "tokens", "batch")], check=True)
    with open(config, "w") as f:
        f.write('{"TOTAL_BATCH_SIZE": %d}' % MLP["batch"])
    rng = np.random.default_rng(0)
    inputs = []
    for name in ("x", "target"):
        path = os.path.join(work, name + ".npy")
        np.save(path, rng.standard_normal((MLP["batch"], MLP["tokens"], MLP["width"])).astype(np.float32))
        inputs += ["--input", "%s=%s" % (name, path)]
    linears = MLP["blocks"] * [(MLP["width"], MLP["hidden"], MLP["tokens"]), (MLP["hidden"], MLP["width"], MLP["tokens"])]
    return model, config, inputs, linears, MLP["batch"], MLP["blocks"] * [(MLP["tokens"], MLP["width"], 0)]


def traffic_formula(name, n, q, depth, linears, batch, blocks):
    if name == "1":
        return 0
    if not q:  # 2 all-reduces of b*s*h per split block (attention or MLP)
        return sum(2 * 2 * (n - 1) * batch * s * h * 4 // n for s, h, heads in blocks if heads % n == 0)
    if not depth:  # 3D: per Linear 3 reduce-scatters of (q-1) blocks (of y, x, w)
        return sum((q - 1) * (batch * s * fin + fin * fout + batch * s * fout) * 4 // q ** 3 for fin, fout, s in linears)
    return sum(3 * (q - 1) * (batch // (q * depth) * s * fin // q + fin // q * fout // q) * 4 for fin, fout, s in linears)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="mlp,mae-small")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-tp2d"))
    args = ap.parse_args()
    for model_name in args.models.split(","):
        work = os.path.join(args.work_dir, model_name)
        if model_name == "mlp":
            model, config, inputs, linears, batch, blocks = export_mlp(work)
        else:
            model, config = export_mae("small", 8, work)
            inputs, batch = [], 8
            # MAE-small: encoder 6 blocks of width 192 over 17 tokens, decoder embedding 192 -> 128,
            # 2 decoder blocks of width 128 over 65 tokens, prediction 128 -> 192.
            enc = [(192, 576, 17), (192, 192, 17), (192, 768, 17), (768, 192, 17)]
            dec = [(128, 384, 65), (128, 128, 65), (128, 512, 65), (512, 128, 65)]
            linears = 6 * enc + [(192, 128, 17)] + 2 * dec + [(128, 192, 65)]
            # Split blocks (tokens, width, heads): an attention block splits only where its heads
            # divide by the ranks (3 encoder heads: never), an MLP block always.
            blocks = 6 * [(17, 192, 3), (17, 192, 0)] + 2 * [(65, 128, 4), (65, 128, 0)]
        print("%s, global batch %d, per rank:" % (model_name, batch))
        print("%-10s %11s %11s %10s %-58s %10s %10s %7s %6s" % ("layout", "params B", "formula B", "arena B",
                                                             "collectives per step: kind calls bytes", "main B",
                                                             "formula B", "step s", "x one"))
        one_rank = None
        for name, flags, n, q, depth in LAYOUTS:
            plan = os.path.join(work, name.replace(" ", "-") + ".plan")
            summary = compile_plan(model, config, plan, flags)
            mine, split, total = parameter_bytes(summary)
            formula = split // (n if not q or not depth else q * q) + (total - split)
            metrics = run_metrics(plan, args.steps, os.path.join(work, "m.jsonl"), inputs)
            comm = metrics[-1].get("comm", {})
            kinds_main = ("all_reduce",) if not q else ("broadcast_from", "reduce_to") if depth else ("reduce_scatter",)
            main = sum(comm.get(k, {}).get("bytes", 0) for k in kinds_main)
            times = sorted(m["step_s"] for m in metrics[1:]) or [metrics[0]["step_s"]]
            step = times[len(times) // 2]
            one_rank = one_rank or step
            kinds = ", ".join("%s %d %d" % (k.replace("broadcast_from", "bcast").replace("reduce_to", "reduce"), v["calls"],
                                            v["bytes"]) for k, v in sorted(comm.items()))
            arena = max(p["arena_bytes"] for p in summary["programs"]) if summary.get("programs") else 0
            print("%-10s %11d %11d %10d %-58s %10d %10d %7.3f %6.2f" % (
                name, mine, formula, arena, kinds, main, traffic_formula(name, n, q, depth, linears, batch, blocks), step,
                step / one_rank))
        print()


if __name__ == "__main__":
    sys.exit(main())
