#!/usr/bin/python3
"""Export the GPT training loss graph to ONNX: DIR/gpt-{size}-opset{N}.onnx with inputs idx and
targets (B, T) int64 and output loss (scalar); with --logits, the inference graph
DIR/gpt-{size}-opset{N}-logits.onnx: input idx, output logits (B, T, vocab)).

Initializers keep their PyTorch names, and the output head stays tied to the token embedding
(one parameter, read by the embedding lookup and, transposed, by the head).

Example:  /usr/bin/python3 examples/gpt/export.py --size tiny --batch 4 --out-dir /tmp/gpt
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_model import CONFIGS, build_model  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="tiny", choices=sorted(CONFIGS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--opset", type=int, default=17)
    ap.add_argument("--dropout", type=float, default=0.0, help="GPT-2's dropout probability (default 0)")
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--logits", action="store_true", help="the inference graph: idx -> logits")
    args = ap.parse_args()
    os.makedirs(args.out_dir, exist_ok=True)
    model = build_model(args.size, dropout=args.dropout)
    cfg = CONFIGS[args.size]
    idx = torch.randint(0, cfg["vocab"], (args.batch, cfg["tokens"]))
    stem = "gpt-%s-opset%d" % (args.size, args.opset) + ("-dropout" if args.dropout > 0 else "") + \
        ("-logits" if args.logits else "")
    path = os.path.join(args.out_dir, stem + ".onnx")
    # As the MAE export: TRAINING mode (eval mode de-duplicates initializers by value, tying every
    # LayerNorm to the first) and no constant folding (which would write the tied head as a
    # separate transposed initializer instead of a Transpose of the embedding).
    args_in, inputs, outputs = ((idx,), ["idx"], ["logits"]) if args.logits else ((idx, idx), ["idx", "targets"], ["loss"])
    torch.onnx.export(model, args_in, path, input_names=inputs, output_names=outputs,
                      opset_version=args.opset, do_constant_folding=False, export_params=True,
                      training=torch.onnx.TrainingMode.TRAINING)
    print(path)


if __name__ == "__main__":
    main()
