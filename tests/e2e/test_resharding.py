"""Resharding: a model that mixes rows across the batch (softmax over dim 0, and over the batch
again after a transpose) needs batch-split values whole. Data parallelism all-gathers them where
the rules say so, and training on 2 and 4 ranks equals one rank (loss and gradient norm per
step 1e-5 relative, final parameters 1e-5).
"""
import json
import os

import numpy as np

from cpctest import PYTHON, Results, run, tempdir, tool

results = Results()
STEPS = 10
ENV = dict(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OPENBLAS_NUM_THREADS="1",
           OMP_NUM_THREADS="1")

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

torch.manual_seed(0)
model = BatchMixer()
torch.onnx.export(model, (torch.randn(8, 6), torch.randn(8, 3)), sys.argv[1], input_names=["x", "target"],
                  output_names=["loss"], opset_version=17)
'''


def train(work, model, dp):
    name = "dp%d" % dp
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
    model = os.path.join(work, "mixer.onnx")
    run([PYTHON, script, model])
    with open(os.path.join(work, "recipe.json"), "w") as f:
        json.dump({"TOTAL_BATCH_SIZE": 8, "LR": 25.6, "WARMUP_EPOCHS": 0, "lr_schedule": "constant"}, f)
    rng = np.random.default_rng(3)
    np.save(os.path.join(work, "x.npy"), rng.standard_normal((8, 6)).astype(np.float32))
    np.save(os.path.join(work, "t.npy"), rng.standard_normal((8, 3)).astype(np.float32))
    single, single_params = train(work, model, 1)

    def layout(dp):
        def check():
            ours, params = train(work, model, dp)
            assert len(ours) == len(single) == STEPS, "%d and %d metric lines" % (len(ours), len(single))
            worst = max(abs(a["loss"] - b["loss"]) / abs(b["loss"]) for a, b in zip(ours, single))
            assert worst <= 1e-5, "per-step loss differs by %.2e" % worst
            worst_norm = max(abs(a["grad_norm"] - b["grad_norm"]) / abs(b["grad_norm"]) for a, b in zip(ours, single))
            assert worst_norm <= 1e-5, "per-step grad_norm differs by %.2e:\n%s" % (worst_norm, "\n".join(
                "%d %.7f %.7f" % (a["step"], a["grad_norm"], b["grad_norm"]) for a, b in zip(ours, single)))
            assert single[-1]["loss"] < single[0]["loss"], "the loss did not go down"
            for name in sorted(os.listdir(single_params)):
                a, b = np.load(os.path.join(single_params, name)), np.load(os.path.join(params, name))
                assert np.allclose(a, b, rtol=1e-5, atol=1e-5), "%s differs by %.3g" % (name, np.abs(a - b).max())
            gathers = ours[-1]["comm"].get("all_gather", {}).get("calls", 0)
            assert gathers > 0, "no all-gather ran: %s" % ours[-1]["comm"]
            print("   dp=%d: worst per-step difference loss %.2e grad_norm %.2e, %d all-gathers per step" % (
                dp, worst, worst_norm, gathers))
        return check

    results.check("2 ranks all-gather the batch where softmax needs it and equal one rank", layout(2))
    results.check("4 ranks all-gather the batch where softmax needs it and equal one rank", layout(4))
results.finish()
