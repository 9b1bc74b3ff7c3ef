#!/usr/bin/python3
"""Export the MAE training loss graph to ONNX.

Writes DIR/mae-{size}-opset{N}.onnx (the opset is always part of the name, so 13 and 17 exports
sit side by side). Graph inputs: imgs (B,3,H,W) float32, noise (B,L) float32; output: loss (scalar).
Initializers keep their PyTorch parameter names (e.g. blocks.0.attn.qkv.weight).

Models over 2 GB (huge) cannot be a single protobuf: their weights go to one external data file,
DIR/mae-{size}-opset{N}.onnx.data, referenced by relative path from the .onnx file.

With --save-inputs, the exact inputs and the PyTorch loss are written next to the model:
DIR/mae-{size}-opset{N}.imgs.npy, .noise.npy, .loss.npy (float32; loss has shape ()).

Example:  /usr/bin/python3 examples/mae/export.py --size tiny --opset 17 --out-dir /tmp/mae --save-inputs
"""

import argparse
import collections
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mae_model import CONFIGS, MaskedAutoencoderViT, build_model  # noqa: E402

# The exported graph always uses the model's default ratio (len_keep is baked in as a constant).
MASK_RATIO = MaskedAutoencoderViT.DEFAULT_MASK_RATIO


def make_inputs(model, batch, seed):
    """Deterministic imgs ~ N(0,1) and masking noise ~ U[0,1) from a private generator."""
    pe = model.patch_embed
    g = torch.Generator().manual_seed(seed)
    imgs = torch.randn(batch, model.in_chans, pe.img_size, pe.img_size, generator=g)
    noise = torch.rand(batch, pe.num_patches, generator=g)
    return imgs, noise


def export_onnx(model, imgs, noise, path, opset, output_names=("loss",)):
    """torch.onnx.export into a scratch dir, then move the result (and external data) into place.

    The scratch dir is needed because, above 2 GB, torch writes one external file per tensor
    (named after the tensor) next to the model; we gather those into a single <model>.data file.
    """
    out_dir = os.path.dirname(os.path.abspath(path))
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".export-") as tmp:
        tmp_path = os.path.join(tmp, os.path.basename(path))
        torch.onnx.export(
            model, (imgs, noise), tmp_path,
            input_names=["imgs", "noise"], output_names=list(output_names),
            opset_version=opset,
            # No folding: otherwise transposed weights etc. become new anonymous initializers
            # ("onnx::MatMul_123") instead of the named parameters.
            do_constant_folding=False,
            export_params=True,
            # TRAINING, not EVAL: in eval mode the exporter de-duplicates initializers *by value*,
            # merging e.g. all LayerNorm weights (all ones) into one tensor and losing their names.
            training=torch.onnx.TrainingMode.TRAINING,
        )
        extra = [f for f in os.listdir(tmp) if f != os.path.basename(path)]
        data_path = path + ".data"
        for stale in (path, data_path):
            if os.path.exists(stale):
                os.remove(stale)
        if not extra:
            shutil.move(tmp_path, path)
            return None
        # Large model: reload (with the per-tensor files) and save with one data file.
        m = onnx.load(tmp_path, load_external_data=True)
        onnx.save_model(m, path, save_as_external_data=True, all_tensors_to_one_file=True,
                        location=os.path.basename(data_path), size_threshold=1024)
        return data_path


def count_params(model):
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    return trainable, total


def describe_onnx(path):
    m = onnx.load(path, load_external_data=False)
    ops = collections.Counter(n.op_type for n in m.graph.node)
    inits = m.graph.initializer
    return m, ops, inits


def run_one(size, opset, batch, seed, out_dir, save_inputs, img_size=None, mask_ratio=None, depth=None,
            all_outputs=False):
    t0 = time.time()
    overrides = {"img_size": img_size} if img_size else {}
    if depth:
        overrides["depth"] = depth
    model = build_model(size, seed=seed, **overrides)
    if mask_ratio is not None:  # baked into the graph, as the default is
        model.DEFAULT_MASK_RATIO = mask_ratio
    model.train()  # no dropout / drop-path in this model, so train == eval numerically
    model.all_outputs = all_outputs
    imgs, noise = make_inputs(model, batch, seed)
    with torch.no_grad():
        outputs = model(imgs, noise)  # same call as the one traced by the export
    loss = outputs[0] if all_outputs else outputs

    stem = os.path.join(out_dir, f"mae-{size}-opset{opset}" + ("-all" if all_outputs else ""))
    path = stem + ".onnx"
    names = ("loss", "pred", "mask") if all_outputs else ("loss",)
    data_path = export_onnx(model, imgs, noise, path, opset, names)
    t_export = time.time() - t0

    if save_inputs:
        np.save(stem + ".imgs.npy", imgs.numpy().astype(np.float32))
        np.save(stem + ".noise.npy", noise.numpy().astype(np.float32))
        np.save(stem + ".loss.npy", np.array(loss.item(), dtype=np.float32))
        for name, value in zip(names[1:], outputs[1:] if all_outputs else ()):
            np.save(stem + ".%s.npy" % name, value.numpy().astype(np.float32))

    trainable, total = count_params(model)
    m, ops, inits = describe_onnx(path)
    n_named = sum(1 for i in inits if not i.name.startswith("onnx::"))
    print(f"== {size} (opset {opset}) -> {path}" + (f" + {data_path}" if data_path else ""))
    print(f"   params: trainable {trainable:,}  total {total:,} (incl. frozen pos-embeds)")
    print(f"   graph: {len(m.graph.node)} nodes, {len(inits)} initializers "
          f"({n_named} with parameter names), inputs "
          + ", ".join(f"{i.name}{[d.dim_value for d in i.type.tensor_type.shape.dim]}"
                      for i in m.graph.input))
    print("   ops: " + ", ".join(f"{k}:{v}" for k, v in sorted(ops.items())))
    print(f"   loss (PyTorch, mask_ratio={model.DEFAULT_MASK_RATIO}): {loss.item():.6f}   [{t_export:.1f}s]")
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", required=True, choices=list(CONFIGS) + ["all"],
                    help="model size; 'all' exports every size in order (large/huge are big!)")
    ap.add_argument("--opset", type=int, default=17, choices=[13, 17],
                    help="ONNX opset (default 17; 17 keeps LayerNormalization as one op)")
    ap.add_argument("--batch", type=int, default=2, help="batch size baked into the graph")
    ap.add_argument("--out-dir", default=".", help="output directory (created if missing)")
    ap.add_argument("--seed", type=int, default=0, help="seed for weights and inputs")
    ap.add_argument("--img-size", type=int, default=None,
                    help="image side instead of the size's own (e.g. 24 with tiny: 9 patches)")
    ap.add_argument("--depth", type=int, default=None,
                    help="encoder blocks instead of the size's own (e.g. 4 with tiny, for pipeline stages)")
    ap.add_argument("--mask-ratio", type=float, default=None,
                    help=f"masking ratio baked into the graph (default {MASK_RATIO})")
    ap.add_argument("--save-inputs", action="store_true",
                    help="also write <stem>.imgs.npy, .noise.npy and the PyTorch .loss.npy")
    ap.add_argument("--all-outputs", action="store_true",
                    help="an inference graph: outputs loss, pred (N, L, p*p*C) and mask (N, L); "
                         "<stem> ends in -all (with --save-inputs, PyTorch's pred and mask are written too)")
    args = ap.parse_args()

    os.makedirs(args.out_dir, exist_ok=True)
    sizes = list(CONFIGS) if args.size == "all" else [args.size]
    for size in sizes:
        run_one(size, args.opset, args.batch, args.seed, args.out_dir, args.save_inputs, args.img_size,
                args.mask_ratio, args.depth, args.all_outputs)


if __name__ == "__main__":
    main()
