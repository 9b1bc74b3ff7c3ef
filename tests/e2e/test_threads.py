#!/usr/bin/python3
"""End-to-end: a rank's thread count changes the speed, never the numbers. MAE-small at batch 16
(GEMMs, norms and elementwise ops big enough to be split over threads) trains 5 steps with an lr
that moves the loss and a clip that engages, at --threads 1 and 3: every step's loss and
grad_norm are equal bit for bit, and so are the parameters written at the end. Under the
machine's own OpenBLAS core and again under one core of each GEMM kernel family it can execute
(OPENBLAS_CORETYPE; under the sanitizers only Haswell, whose SGEMM kernel sums by tile position).
"""
import json
import os

import numpy as np

from cpctest import (OPENBLAS_KERNEL_FAMILIES, SANITIZED, Results, export_mae, run, run_on_core, runnable_cores, tempdir,
                     tool)

RECIPE = {"TOTAL_BATCH_SIZE": 16, "LR": 0.05, "WEIGHT_DECAY": 0.05, "clip_grad_norm": 1.0, "BETAS": [0.9, 0.95],
          "lr_schedule": "constant", "frozen": ["pos_embed$"]}


def main():
    results = Results()
    with tempdir() as work:
        model = export_mae("small", 17, work, extra=["--batch", "16", "--save-inputs"])
        stem = model[:-len(".onnx")]
        config = os.path.join(work, "recipe.json")
        with open(config, "w") as f:
            json.dump(RECIPE, f)
        plan = os.path.join(work, "train.plan")
        run([tool("cpc"), "compile", model, "--config", config, "-o", plan])
        def train(threads, core, tag):
            metrics = os.path.join(work, "%s-t%d.jsonl" % (tag, threads))
            out = os.path.join(work, "params-%s-t%d" % (tag, threads))
            args = [tool("cpc-run"), plan, "--steps", "5", "--threads", str(threads), "--metrics", metrics,
                    "--output-dir", out, "--input", "imgs=%s.imgs.npy" % stem, "--input", "noise=%s.noise.npy" % stem]
            proc = run(args) if core is None else run_on_core(args, core)
            assert proc is not None and proc.returncode == 0, proc and proc.stderr[-3000:]
            return [json.loads(line) for line in open(metrics)], out, proc.stderr

        runs = {threads: train(threads, None, "native") for threads in (1, 3)}

        def warns_of_oversubscription():
            cores = len(os.sched_getaffinity(0))
            assert "warning" not in runs[1][2], runs[1][2]
            warned = "cpc-run: warning: 3 threads per rank exceed" in runs[3][2]
            assert warned == (cores < 3), "%d cores; stderr at 3 threads: %r" % (cores, runs[3][2])
        results.check("more threads than cores: one warning line (none at 1 thread)", warns_of_oversubscription)

        def same_steps(runs):
            one, many = runs[1][0], runs[3][0]
            assert one[-1]["loss"] < one[0]["loss"] * 0.97, "the lr does not move the loss: %s" % one
            assert any(m["grad_norm"] > RECIPE["clip_grad_norm"] for m in one), "the clip never engages: %s" % one
            for a, b in zip(one, many):
                assert (a["loss"], a["grad_norm"]) == (b["loss"], b["grad_norm"]), \
                    "step %d: 1 thread loss %r grad_norm %r, 3 threads %r %r" % (
                        a["step"], a["loss"], a["grad_norm"], b["loss"], b["grad_norm"])

        def same_parameters(runs):
            files = sorted(f for f in os.listdir(runs[1][1]) if f.endswith(".npy"))
            assert files, "no parameters written"
            for name in files:
                a, b = np.load(os.path.join(runs[1][1], name)), np.load(os.path.join(runs[3][1], name))
                assert np.array_equal(a, b), "%s differs after 5 steps (max %g)" % (name, np.abs(a - b).max())

        results.check("3 threads give the 1-thread loss and grad_norm of every step, bit for bit",
                      lambda: same_steps(runs))
        results.check("3 threads end with the 1-thread parameters, bit for bit", lambda: same_parameters(runs))
        cores = runnable_cores(["Haswell"] if SANITIZED else OPENBLAS_KERNEL_FAMILIES)
        for core in cores:
            on_core = {threads: train(threads, core, core) for threads in (1, 3)}
            results.check("OPENBLAS_CORETYPE=%s: 3 threads give the 1-thread steps and parameters, bit for bit" % core,
                          lambda: (same_steps(on_core), same_parameters(on_core)))
    results.finish()


if __name__ == "__main__":
    main()
