"""Plans without weights (cpc compile --synthetic-weights), for benchmarks of models whose weights
are too large to move to where the plan runs: the plan holds no parameter values, cpc-run says so
and fills every parameter with the same deterministic pseudo-random values whatever the layout.
Tests that on MAE-tiny (exported by torch.onnx.export): the plan shrinks by its parameter bytes,
`cpc inspect` and cpc-run say the weights are synthetic, the loss moves, and tp2 (sharded and
head-major permuted parameters) and dp2 with ZeRO-3 (flattened per-rank blocks) train equal to
the one-rank synthetic run over 20 steps (loss and grad_norm per step and final parameters within
1e-5): every layout starts from the same values, each rank having cut its block out of the whole.
The recipe is the e2e one with a learning rate that moves the loss by 5% and a clip threshold
for the smaller gradients of the synthetic initial values (std 0.02) that engages on most steps.
"""
import json
import os

import numpy as np

from cpctest import compare_training, train_plan, Results, export_mae, run, tempdir, tool, MAE_RECIPE, MPI_ENV

results = Results()
STEPS = 20
CLIP = 0.017
RECIPE = dict(MAE_RECIPE, LR=0.5, clip_grad_norm=CLIP)

with tempdir() as work:
    os.environ.update(MPI_ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", "8"])
    rng = np.random.default_rng(0)
    data = {"imgs": os.path.join(work, "imgs.npy"), "noise": os.path.join(work, "noise.npy")}
    np.save(data["imgs"], rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    np.save(data["noise"], rng.random((8, 16)).astype(np.float32))
    config = os.path.join(work, "recipe.json")
    with open(config, "w") as f:
        json.dump(RECIPE, f)

    def compile_plan(name, flags):
        plan = os.path.join(work, name + ".plan")
        run([tool("cpc"), "compile", model, "--config", config, "-o", plan, *flags])
        return plan

    weighted = compile_plan("weighted", [])
    synthetic = compile_plan("synthetic", ["--synthetic-weights"])
    single, single_params, summary = train_plan(synthetic, STEPS, data, os.path.join(work, "one"))

    def plan_holds_no_weights():
        parameter_bytes = summary["summary"]["parameter_bytes"]
        saved = os.path.getsize(weighted) - os.path.getsize(synthetic)
        # (its metadata grows by a "synthetic" mark per parameter)
        assert saved >= 0.99 * parameter_bytes, "the plan shrank by %d bytes, its parameters hold %d" % (
            saved, parameter_bytes)
        params = [b for b in summary["buffers"] if b["kind"] == "parameter" and b["alias_of"] < 0]
        assert params and all(b.get("synthetic") for b in params), "parameters not marked synthetic"
        text = run([tool("cpc"), "inspect", synthetic]).stdout
        assert "synthetic" in text, text

    def cpc_run_says_so():
        proc = run([tool("cpc-run"), synthetic, "--steps", "1", "--input", "imgs=" + data["imgs"],
                    "--input", "noise=" + data["noise"]])
        assert "cpc compile --synthetic-weights" in proc.stderr, proc.stderr

    def the_loss_moves_and_the_clip_engages():
        losses = [m["loss"] for m in single]
        assert all(np.isfinite(losses)), losses
        assert losses[-1] < 0.98 * losses[0], "the loss did not fall: %s" % losses
        clipped = sum(1 for m in single if m["grad_norm"] > CLIP)
        assert clipped >= STEPS // 2, "the clip engaged on %d of %d steps" % (clipped, STEPS)
        run([tool("cpc-run"), weighted, "--steps", "1", "--metrics", os.path.join(work, "w.jsonl"),
                            "--input", "imgs=" + data["imgs"], "--input", "noise=" + data["noise"]])
        with open(os.path.join(work, "w.jsonl")) as f:
            first = json.loads(f.readline())["loss"]
        assert first != losses[0], "synthetic weights gave the model's own loss %s" % first

    def layout(name, flags):
        def check():
            plan = compile_plan(name, ["--synthetic-weights", *flags])
            ours, params, _ = train_plan(plan, STEPS, data, os.path.join(work, name))
            compare_training(ours, single, params, single_params, STEPS)
        return check

    results.check("a plan compiled with --synthetic-weights holds no parameter values", plan_holds_no_weights)
    results.check("cpc-run says the parameters are synthetic", cpc_run_says_so)
    results.check("synthetic weights train: the loss moves, the clip engages", the_loss_moves_and_the_clip_engages)
    results.check("tp2 from synthetic weights equals one rank", layout("tp2", ["--tp", "2"]))
    results.check("dp2 ZeRO-3 from synthetic weights equals one rank", layout("zero3", ["--dp", "2", "--zero", "3"]))
results.finish()
