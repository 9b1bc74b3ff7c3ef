"""Training-mode BatchNorm against PyTorch, its running statistics, and per-rank vs synchronized
statistics under data parallelism.

A small CNN (conv, BatchNorm, ReLU twice, global average pool, linear, cross-entropy; the convs
have no bias, as in ResNets: BatchNorm removes it, so its gradient would be rounding noise,
which AdamW's first step turns into a full step in a random direction), exported
by Debian's torch.onnx (opset 17, training mode), trains 6 AdamW steps (a learning rate that
moves the loss, a clip that engages):

- one rank equals PyTorch (loss and grad_norm per step within 1e-4, as the model zoo), and the
  running mean and variance cpc keeps as variables equal PyTorch's buffers after the run (1e-4);
- `--dp 2` (each rank's statistics, as torch DDP) equals PyTorch running DDP's arithmetic in one
  process: each half batch through its own replica (rank 1's a copy of rank 0's, buffers
  included, as DDP broadcasts them), gradients averaged, rank 0's running statistics; and it
  differs from the synchronized run;
- `--dp 2 --sync-bn` (SyncBatchNorm) equals one rank within 1e-5 (loss, grad_norm, every final
  parameter and running statistic);
- gradient accumulation over 2 microbatches equals PyTorch's (each microbatch its own
  statistics and its own update of the running statistics), and `--pp 2` with 2 microbatches
  equals that run within 1e-5.
"""
import copy
import os

import numpy as np
import onnx
import onnx.numpy_helper
import torch
from torch import nn

from cpctest import (adamw_recipe, check_loss_moves_and_clip_engages, compare_training, compile_plan, train_plan,
                     versus_torch, Results, tempdir, MPI_ENV)

results = Results()
STEPS, BATCH, CLASSES = 6, 8, 5
LR, CLIP, WEIGHT_DECAY, BETAS = 0.02, 0.5, 0.05, (0.9, 0.95)
RECIPE = adamw_recipe(BATCH, LR, CLIP, WEIGHT_DECAY, BETAS)


class SmallCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8)
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(8)
        self.head = nn.Linear(8, CLASSES)

    def forward(self, x, target):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return nn.functional.cross_entropy(self.head(x.mean(dim=(2, 3))), target)


def exported_model(path):
    """The model as exported: tracing ran a training-mode forward, which moved the running
    statistics the export holds, so they are read back from the file."""
    model = SmallCnn().train()
    initializers = {t.name: onnx.numpy_helper.to_array(t) for t in onnx.load(path).graph.initializer}
    state = model.state_dict()
    for name in state:
        if name in initializers:
            state[name] = torch.tensor(initializers[name])
    model.load_state_dict(state)
    return model


def torch_train(model, x, target, replicas, accumulate=False):
    """PyTorch's curve: each of `replicas` equal slices of the batch through its own copy of the
    model (DDP's arithmetic; 1: plain training), or with `accumulate` through the model itself
    one after the other (gradient accumulation: each forward updates the running statistics).
    Returns the metrics and (rank 0's) buffers."""
    opt = torch.optim.AdamW(model.parameters(), lr=LR, betas=BETAS, eps=1e-8, weight_decay=WEIGHT_DECAY)
    steps = []
    for _ in range(STEPS):
        copies = [model] * replicas if accumulate else [model] + [copy.deepcopy(model) for _ in range(replicas - 1)]
        losses, grads = [], None
        for r, replica in enumerate(copies):
            rows = slice(r * BATCH // replicas, (r + 1) * BATCH // replicas)
            replica.zero_grad()
            loss = replica(x[rows], target[rows])
            loss.backward()
            losses.append(loss.item())
            g = [p.grad.clone() for p in replica.parameters()]
            grads = g if grads is None else [a + b for a, b in zip(grads, g)]
        for p, g in zip(model.parameters(), grads):
            p.grad = g / replicas
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP).item()
        opt.step()
        steps.append({"loss": sum(losses) / replicas, "grad_norm": norm})
    return steps, {name: b.detach().numpy().copy() for name, b in model.named_buffers() if "running" in name}


def train(work, model, name, flags, recipe=None):
    plan, _ = compile_plan(work, model, name, flags, dict(RECIPE, **(recipe or {})))
    return train_plan(plan, STEPS, {"x": os.path.join(work, "x.npy"), "target": os.path.join(work, "target.npy")}, os.path.join(work, name))


def export(work, batch):
    torch.manual_seed(0)
    model = SmallCnn().train()
    path = os.path.join(work, "cnn-b%d.onnx" % batch)
    torch.onnx.export(model, (torch.zeros(batch, 3, 8, 8), torch.zeros(batch, dtype=torch.int64)), path,
                      input_names=["x", "target"], output_names=["loss"], opset_version=17,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    return path



def running_statistics_match(params, buffers, tol=1e-4):
    for name, expected in buffers.items():
        ours = np.load(os.path.join(params, name + ".npy"))
        assert np.allclose(ours, expected, rtol=tol, atol=tol), "%s differs from PyTorch's by %.2e" % (
            name, np.abs(ours - expected).max())
        assert not np.allclose(expected, 0 if "mean" in name else 1), "%s never moved" % name


with tempdir() as work:
    os.environ.update(MPI_ENV)
    whole, half = export(work, BATCH), export(work, BATCH // 2)
    # A batch on which PyTorch's own curves move by < 1e-6 when the input moves by 1e-6 (others
    # cross a ReLU kink within 6 steps, and any two float32 computations part there by 1e-4).
    rng = np.random.default_rng(9)
    x = rng.standard_normal((BATCH, 3, 8, 8)).astype(np.float32) * 2 + 0.5
    x[BATCH // 2:] = x[BATCH // 2:] * 0.5 - 1  # the halves' statistics differ: per-rank BatchNorm shows
    target = rng.integers(0, CLASSES, BATCH).astype(np.int64)
    np.save(os.path.join(work, "x.npy"), x)
    np.save(os.path.join(work, "target.npy"), target)
    reference, reference_buffers = torch_train(exported_model(whole), torch.tensor(x), torch.tensor(target), 1)
    ddp, ddp_buffers = torch_train(exported_model(whole), torch.tensor(x), torch.tensor(target), 2)
    accumulated, accumulated_buffers = torch_train(exported_model(whole), torch.tensor(x), torch.tensor(target), 2,
                                                   accumulate=True)
    single, single_params, _ = train(work, whole, "one", [])

    def one_rank():
        moved = check_loss_moves_and_clip_engages(single, CLIP, fall=0.9)
        worst, worst_norm = versus_torch(single, reference)
        running_statistics_match(single_params, reference_buffers)
        print("   %s; against PyTorch: loss %.1e, grad_norm %.1e" % (moved, worst, worst_norm))

    results.check("one rank equals PyTorch, running statistics included", one_rank)

    def per_rank():
        ours, params, _ = train(work, whole, "dp2", ["--dp", "2"])
        worst, worst_norm = versus_torch(ours, ddp)
        running_statistics_match(params, ddp_buffers)
        apart = abs(ours[0]["loss"] - single[0]["loss"]) / single[0]["loss"]
        assert apart > 1e-3, "per-rank statistics give the synchronized loss (%.1e apart)" % apart
        print("   against PyTorch DDP: loss %.1e, grad_norm %.1e; %.1e from the synchronized run" % (
            worst, worst_norm, apart))

    results.check("--dp 2: each rank's statistics, as PyTorch DDP", per_rank)

    def synchronized():
        ours, params, _ = train(work, whole, "dp2-sync-bn", ["--dp", "2", "--sync-bn"])
        worst, worst_norm = compare_training(ours, single, params, single_params, STEPS)
        print("   worst loss %.1e, grad_norm %.1e" % (worst, worst_norm))

    results.check("--dp 2 --sync-bn equals one rank (1e-5), running statistics included", synchronized)

    def accumulation():
        ours, params, _ = train(work, half, "accumulation2", [], {"gradient_accumulation": 2})
        worst, worst_norm = versus_torch(ours, accumulated)
        running_statistics_match(params, accumulated_buffers)
        print("   against PyTorch's accumulation: loss %.1e, grad_norm %.1e" % (worst, worst_norm))
        pipelined, pipelined_params, _ = train(work, half, "pp2", ["--pp", "2", "--microbatches", "2"])
        worst, worst_norm = compare_training(pipelined, ours, pipelined_params, params, STEPS)
        print("   pp2 against it: loss %.1e, grad_norm %.1e" % (worst, worst_norm))

    results.check("gradient accumulation over 2 equals PyTorch's; pp2 equals it (1e-5)", accumulation)

results.finish()
