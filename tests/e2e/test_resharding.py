"""Resharding: a model that mixes rows across the batch (softmax over dim 0, and over the batch
again after a transpose) needs batch-split values whole. Data parallelism all-gathers them where
the rules say so, and training on 2 and 4 ranks equals one rank (loss and gradient norm per
step 1e-5 relative, final parameters 1e-5). A second model adds a batch-split value to its own
transpose: the split moves from dim 1 to dim 0 by all-to-all (forward and backward), with the
same equality.
"""
import json
import os

import numpy as np

from cpctest import PYTHON, Results, run, tempdir, tool, MPI_ENV

results = Results()
STEPS = 10
CLIP = 0.05  # below the gradient norm on most steps of both models: the clip engages
ENV = dict(MPI_ENV)

EXPORT = r'''
import sys, torch
from torch import nn

class BatchMixer(nn.Module):
    """Rows attend over the batch: softmax along dim 0 and along the transposed batch."""
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 5)
        self.out = nn.Linear(5, 3)

    def forward(self, x, target):
        h = self.proj(x)                                  # [B, 5], batch split over dp
        over_batch = torch.softmax(h, dim=0)              # needs every row
        mixed = torch.softmax(h.t(), dim=1).t()           # the same, through a transpose
        y = self.out(over_batch * h + mixed)
        return ((y - target) ** 2).mean()

class TransposeAdd(nn.Module):
    """h + h^T over a square [B, B] activation: the transposed operand is split along dim 1."""
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(6, 8)
        self.out = nn.Linear(8, 3)

    def forward(self, x, target):
        h = self.proj(x)                                  # [8, 8], batch split over dp
        y = self.out(torch.tanh(h + h.t()))
        return ((y - target) ** 2).mean()

torch.manual_seed(0)
model = BatchMixer() if sys.argv[2] == "mixer" else TransposeAdd()
torch.onnx.export(model, (torch.randn(8, 6), torch.randn(8, 3)), sys.argv[1], input_names=["x", "target"],
                  output_names=["loss"], opset_version=17)
'''


def train(work, model, dp):
    name = "%s-dp%d" % (os.path.basename(model), dp)
    plan = os.path.join(work, name + ".plan")
    cmd = [tool("cpc"), "compile", model, "--config", os.path.join(work, "recipe.json"), "-o", plan]
    if dp > 1:
        cmd += ["--dp", str(dp)]
    run(cmd)
    metrics, params = os.path.join(work, name + ".jsonl"), os.path.join(work, name + "-params")
    run([tool("cpc-run"), plan, "--steps", str(STEPS), "--metrics", metrics, "--output-dir", params,
         "--input", "x=" + os.path.join(work, "x.npy"), "--input", "target=" + os.path.join(work, "t.npy")])
    with open(metrics) as f:
        return [json.loads(line) for line in f], params


with tempdir() as work:
    os.environ.update(ENV)
    script = os.path.join(work, "export.py")
    with open(script, "w") as f:
        f.write(EXPORT)
    with open(os.path.join(work, "recipe.json"), "w") as f:
        json.dump({"TOTAL_BATCH_SIZE": 8, "LR": 6.4, "WARMUP_EPOCHS": 0, "lr_schedule": "constant",
                   "clip_grad_norm": CLIP}, f)
    rng = np.random.default_rng(3)
    np.save(os.path.join(work, "x.npy"), rng.standard_normal((8, 6)).astype(np.float32))
    np.save(os.path.join(work, "t.npy"), rng.standard_normal((8, 3)).astype(np.float32))

    singles = {}

    def layout(kind, dp, collective):
        model = os.path.join(work, kind + ".onnx")

        def check():
            if kind not in singles:
                run([PYTHON, script, model, kind])
                singles[kind] = train(work, model, 1)
            single, single_params = singles[kind]
            ours, params = train(work, model, dp)
            assert len(ours) == len(single) == STEPS, "%d and %d metric lines" % (len(ours), len(single))
            worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ours, single))
            assert worst <= 1e-5, "per-step loss differs by %.2e" % worst
            worst_norm = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]) for a, b in zip(ours, single))
            assert worst_norm <= 1e-5, "per-step grad_norm differs by %.2e:\n%s" % (worst_norm, "\n".join(
                "%d %.7f %.7f" % (a["step"], a["grad_norm"], b["grad_norm"]) for a, b in zip(ours, single)))
            assert single[-1]["loss"] < single[0]["loss"], "the loss did not go down"
            clipped = sum(1 for m in single if m["grad_norm"] > CLIP)
            assert clipped >= STEPS // 2, "the clip engaged on %d steps only" % clipped
            for name in sorted(os.listdir(single_params)):
                a, b = np.load(os.path.join(single_params, name)), np.load(os.path.join(params, name))
                assert np.allclose(a, b, rtol=1e-5, atol=1e-5), "%s differs by %.3g" % (name, np.abs(a - b).max())
            calls = ours[-1]["comm"].get(collective, {}).get("calls", 0)
            assert calls > 0, "no %s ran: %s" % (collective, ours[-1]["comm"])
            print("   %s dp=%d: worst per-step difference loss %.2e grad_norm %.2e, %d %s calls per step, "
                  "clip engaged on %d of %d steps, loss %.4f -> %.4f" % (kind, dp, worst, worst_norm, calls, collective,
                                                                       clipped, STEPS, single[0]["loss"],
                                                                       single[-1]["loss"]))
        return check

    results.check("2 ranks all-gather the batch where softmax needs it and equal one rank",
                  layout("mixer", 2, "all_gather"))
    results.check("4 ranks all-gather the batch where softmax needs it and equal one rank",
                  layout("mixer", 4, "all_gather"))
    results.check("2 ranks move h^T's split to the batch dim by all-to-all and equal one rank",
                  layout("transpose_add", 2, "all_to_all"))
    results.check("4 ranks move h^T's split to the batch dim by all-to-all and equal one rank",
                  layout("transpose_add", 4, "all_to_all"))
results.finish()
