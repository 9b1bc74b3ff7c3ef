"""Resize, Pad's edge/reflect/wrap modes and MaxPool in training, against PyTorch.

A small CNN that resamples its feature maps the ways torch models do (reflect and replicate
padding; bilinear, bicubic with align_corners, and nearest interpolation; max pooling),
exported by Debian's torch.onnx (opset 17), trains 6 AdamW steps (a learning rate that moves the
loss, a clip that engages):

- one rank equals PyTorch (loss and grad_norm per step within 1e-4, as the model zoo), so the
  gradients through Resize (Gather / MatMul by the interpolation weights) and Pad (Gather of
  the source positions) are torch's;
- `--dp 2` and `--pp 2` equal one rank within 1e-5 (loss, grad_norm, final parameters);
- an opset 19 Pad in wrap mode (circular padding: torch 1.13 exports it as slices that take the
  wrong rows, which ONNX's reference evaluates as cpc does, so it is tested here, not through
  torch) and an opset 18 Resize with `axes` and antialias equal ONNX's
  reference (onnx's ReferenceEvaluator where installed, else numpy) — forms Debian's torch and
  test data predate.
"""
import os

import numpy as np
import torch
import torch.nn.functional as F
from onnx import TensorProto, helper, numpy_helper, save
from torch import nn

from cpctest import (adamw_recipe, check_loss_moves_and_clip_engages, compare_training, compile_plan, run, tool,
                     train_plan, versus_torch, Results, tempdir, MPI_ENV)

results = Results()
STEPS, BATCH, CLASSES = 6, 8, 5
LR, CLIP, WEIGHT_DECAY, BETAS = 0.02, 0.42, 0.05, (0.9, 0.95)
RECIPE = adamw_recipe(BATCH, LR, CLIP, WEIGHT_DECAY, BETAS)


class Resampler(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.conv2 = nn.Conv2d(3, 6, 3), nn.Conv2d(6, 6, 3)
        self.head = nn.Linear(6, CLASSES)

    def forward(self, x, target):
        x = torch.tanh(self.conv1(F.pad(x, (1, 1, 1, 1), mode="reflect")))              # 8x8
        x = F.interpolate(x, scale_factor=2, mode="bilinear", align_corners=False)        # 16x16
        x = F.max_pool2d(x, 2)                                                             # 8x8
        x = torch.tanh(self.conv2(F.pad(x, (1, 1, 1, 1), mode="replicate")))             # 8x8
        x = F.interpolate(x, size=(5, 5), mode="bicubic", align_corners=True)             # 5x5
        x = F.interpolate(x, scale_factor=2, mode="nearest")                               # 10x10
        x = F.pad(x, (2, 1, 1, 2), mode="reflect")                                         # 13x13
        return F.cross_entropy(self.head((x * x).mean(dim=(2, 3))), target)


def torch_train(model, x, target):
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=1e-8, weight_decay=WEIGHT_DECAY)
    steps = []
    for _ in range(STEPS):
        model.zero_grad()
        loss = model(x, target)
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
        opt.step()
        steps.append({"loss": loss.item(), "grad_norm": norm})
    return steps



def infer(work, name, nodes, inputs, outputs, opset, feeds):
    """Runs a one-graph inference plan of `nodes` on `feeds` ({name: array}); returns output 0."""
    graph = helper.make_graph(nodes, name, inputs, outputs)
    path, plan, out = (os.path.join(work, name + e) for e in (".onnx", ".plan", "-out"))
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)
    run([tool("cpc"), "compile", path, "--mode", "infer", "-o", plan])
    args = []
    for feed, value in feeds.items():
        np.save(os.path.join(work, feed + ".npy"), value)
        args += ["--input", "%s=%s" % (feed, os.path.join(work, feed + ".npy"))]
    run([tool("cpc-run"), plan, "--output-dir", out, *args])
    return np.load(os.path.join(out, outputs[0].name + ".npy"))


def reference_or(model_nodes, inputs, outputs, opset, feeds, fallback):
    """ONNX's reference evaluator's answer where this onnx has one (1.13+), else `fallback`."""
    try:
        from onnx.reference import ReferenceEvaluator
    except ImportError:
        return fallback
    model = helper.make_model(helper.make_graph(model_nodes, "ref", inputs, outputs),
                              opset_imports=[helper.make_opsetid("", opset)])
    return ReferenceEvaluator(model).run(None, feeds)[0]


def antialiased_linear_weights(n_in, n_out):
    """Antialiased linear resize weights along one axis (half_pixel), as ONNX's reference: a
    triangle widened by 1 / scale, normalized over its taps, taps past the ends on the edge."""
    scale = n_out / n_in
    first = int(np.floor(-1 / scale)) + 1
    w = np.zeros((n_out, n_in))
    for y in range(n_out):
        x = (y + 0.5) / scale - 0.5
        left = np.floor(x) - (1 if x == np.floor(x) else 0)
        taps = [left + t for t in range(first, 2 - first)]
        coefficients = np.clip(1 - np.abs((np.array(taps) - x) * scale), 0, 1)
        for tap, c in zip(taps, coefficients / coefficients.sum()):
            w[y, int(np.clip(tap, 0, n_in - 1))] += c
    return w


with tempdir() as work:
    os.environ.update(MPI_ENV)
    torch.manual_seed(0)
    model = Resampler().train()

    def export(batch):
        path = os.path.join(work, "resampler-b%d.onnx" % batch)
        torch.onnx.export(model, (torch.zeros(batch, 3, 8, 8), torch.zeros(batch, dtype=torch.int64)), path,
                          input_names=["x", "target"], output_names=["loss"], opset_version=17,
                          do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
        return path

    whole, half = export(BATCH), export(BATCH // 2)  # pp2's microbatches are half the batch
    rng = np.random.default_rng(3)
    x = rng.standard_normal((BATCH, 3, 8, 8)).astype(np.float32)
    target = rng.integers(0, CLASSES, BATCH).astype(np.int64)
    inputs = {"x": os.path.join(work, "x.npy"), "target": os.path.join(work, "target.npy")}
    np.save(inputs["x"], x)
    np.save(inputs["target"], target)
    reference = torch_train(model, torch.tensor(x), torch.tensor(target))

    def train(name, flags, path=whole):
        plan, _ = compile_plan(work, path, name, flags, RECIPE)
        return train_plan(plan, STEPS, inputs, os.path.join(work, name))

    single, single_params, _ = train("one", [])

    def one_rank():
        moved = check_loss_moves_and_clip_engages(single, CLIP, fall=0.85)
        worst, worst_norm = versus_torch(single, reference)
        print("   %s; against PyTorch: loss %.1e, grad_norm %.1e" % (moved, worst, worst_norm))

    results.check("one rank equals PyTorch (reflect/replicate pads, bilinear/bicubic/nearest, max pool)", one_rank)

    def layouts():
        for name, flags, path in (("dp2", ["--dp", "2"], whole), ("pp2", ["--pp", "2", "--microbatches", "2"], half)):
            ours, params, _ = train(name, flags, path)
            worst, worst_norm = compare_training(ours, single, params, single_params, STEPS)
            print("   %s: loss %.1e, grad_norm %.1e" % (name, worst, worst_norm))

    results.check("--dp 2 and --pp 2 equal one rank (1e-5)", layouts)

    def wrap_pad():
        feed = rng.standard_normal((2, 3, 4)).astype(np.float32)
        pads = numpy_helper.from_array(np.array([0, 2, 3, 0, 1, 4], dtype=np.int64), "pads")
        nodes = [helper.make_node("Constant", [], ["pads"], value=pads),
                 helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")]
        ours = infer(work, "wrap", nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])],
                     [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], 19, {"x": feed})
        expected = np.pad(feed, [(0, 0), (2, 1), (3, 4)], mode="wrap")
        assert ours.shape == expected.shape and np.array_equal(ours, expected), "wrap padding differs"

    results.check("opset 19 Pad in wrap mode equals numpy's wrap", wrap_pad)

    def resize_axes_antialias():
        feed = rng.standard_normal((2, 3, 12)).astype(np.float32)
        sizes = numpy_helper.from_array(np.array([5], dtype=np.int64), "sizes")
        nodes = [helper.make_node("Constant", [], ["sizes"], value=sizes),
                 helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="linear", antialias=1, axes=[2])]
        ios = ([helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 12])],
               [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
        ours = infer(work, "antialias", nodes, ios[0], ios[1], 18, {"x": feed})
        expected = reference_or(nodes, ios[0], ios[1], 18, {"x": feed},
                                feed.astype(np.float64) @ antialiased_linear_weights(12, 5).T)
        assert ours.shape == (2, 3, 5), "shape %s" % (ours.shape,)
        assert np.allclose(ours, expected, rtol=1e-5, atol=1e-5), "antialiased resize differs by %.2e" % (
            np.abs(ours - expected).max())

    results.check("opset 18 Resize with axes and antialias equals the reference", resize_axes_antialias)

results.finish()
