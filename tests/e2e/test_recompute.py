"""Activation recompute (--recompute selective|full|auto): the backward computes forward activations
again instead of keeping them, and training does not change by a bit.

- The project's GPT-tiny and MAE-tiny on one rank: selective and full train bit-identical to
  none over 8 steps (loss and grad_norm per step, final parameters), with a learning rate that
  moves the loss and a clip that engages; full predicts a smaller peak than none, selective no
  larger, and the measured peak of full stays within 5% of its prediction.
- Full recompute under parallel layouts, bit-identical to the same layout without it: GPT dp2,
  dp2 ZeRO-3 (the copies gather their parameters again), tp2 (the row-parallel all-reduces run
  again in the backward), pp2 (the copies go to each chunk's backward program), gradient
  accumulation over 2 microbatches, MAE bf16 and fp16 (loss scaling); selective under tp2.
- GPT-tiny with dropout (p = 0.1): full recompute bit-identical, the masks drawn again in the
  backward rather than kept.
- Hugging Face GPT-2 and Llama exported by torch.onnx.export's default exporter (the model zoo's
  fixtures): full recompute, and auto under a budget halfway between none's and full's peaks,
  bit-identical to none over 4 steps, with a smaller predicted peak.
- `cpc plan --recomputes none,full` lists each layout with and without recompute; under a budget
  between pp2 1F1B's two predicted peaks only the recomputing one is kept, and so with
  `--recomputes none,auto`.
- --recompute auto under a budget between none's and full's predicted peaks fits it, predicts a
  faster step than full and trains bit-identical to none.
- --recompute on an inference plan, an unknown mode, auto without a budget and auto under a
  budget nothing fits are refused in one line.
"""
import json
import os
import re
import shutil

import numpy as np

from cpctest import (MAE_RECIPE, activation_bytes, MPI_ENV, PYTHON, SANITIZED, SOURCE, Results, check_loss_moves_and_clip_engages,
                     compile_plan, export_gpt, export_mae, peak_error, run, same_steps, tempdir, tiny_batches, tool,
                     train_plan)

results = Results()
STEPS = 8
GPT_CLIP = 1.0
MAE_CLIP = 0.5  # MAE-tiny's gradient norm falls from 0.60 to 0.30 over the 8 steps
GPT_RECIPE = {"TOTAL_BATCH_SIZE": 8, "LR": 0.1, "WARMUP_EPOCHS": 0, "lr_schedule": "constant",
              "clip_grad_norm": GPT_CLIP}


def predicted_peak(plan):
    summary = json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)
    return summary["predicted_peak_bytes"]


def same_parameters(params, reference):
    names = sorted(os.listdir(reference))
    assert names and names == sorted(os.listdir(params)), "parameter files differ"
    for name in names:
        a, b = np.load(os.path.join(reference, name)), np.load(os.path.join(params, name))
        assert np.array_equal(a, b), "%s differs by %.3g" % (name, np.abs(a - b).max())


with tempdir() as work:
    os.environ.update(MPI_ENV)
    rng = np.random.default_rng(5)
    gpt = export_gpt("tiny", 8, os.path.join(work, "gpt"))
    gpt_half = export_gpt("tiny", 4, os.path.join(work, "gpt-half"))
    mae = export_mae("tiny", 17, work, extra=["--batch", "8"])
    gpt_data, mae_data = tiny_batches(work, rng)
    models = {"gpt": (gpt, gpt_data, GPT_RECIPE, GPT_CLIP), "mae": (mae, mae_data, dict(MAE_RECIPE, clip_grad_norm=MAE_CLIP), MAE_CLIP)}
    runs = {}

    def train(family, name, flags, model=None, recipe=None):
        path, data, base, _ = models[family]
        plan, _ = compile_plan(work, model or path, family + "-" + name, flags, dict(base, **(recipe or {})))
        metrics, params, _ = train_plan(plan, STEPS, data, os.path.join(work, family + "-" + name))
        runs[family, name] = (metrics, params, plan)
        return metrics, params, plan

    for family in ("gpt", "mae"):
        def one_rank(family=family):
            metrics, _, plan = train(family, "none", [])
            print("   %s: %s" % (family, check_loss_moves_and_clip_engages(metrics, models[family][3], fall=0.95)))
            peaks = {"none": predicted_peak(plan)}
            for mode in ("selective", "full"):
                ours, params, plan = train(family, mode, ["--recompute", mode])
                same_steps(ours, metrics, "%s --recompute %s" % (family, mode))
                same_parameters(params, runs[family, "none"][1])
                peaks[mode] = predicted_peak(plan)
            assert peaks["full"] < peaks["none"], "full recompute predicts no less memory: %s" % peaks
            assert peaks["selective"] <= peaks["none"], "selective recompute predicts more memory: %s" % peaks
            # Under the sanitizers the measured peak holds their shadow memory: not compared.
            measured = "" if SANITIZED else " (measured over predicted %+.1f%%)" % peak_error(runs[family, "full"][2])[0]
            print("   %s predicted peak: none %d B, selective %d B, full %d B%s" % (
                family, peaks["none"], peaks["selective"], peaks["full"], measured))
        results.check("%s: selective and full recompute train bit-identical to none, in less memory" % family,
                      one_rank)

    # Under the sanitizers dp2 and MAE bf16 (the clones as one rank's, on another layout) and the
    # plan search (cpc plan's code runs in test_layout_search) are left to the plain pass;
    # ZeRO-3 (gathers copied), tp2 (collectives copied) and pp2 (copies in backward programs) run.
    def memory(plan, measure):
        summary = json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)
        return activation_bytes(summary) if measure == "activations" else summary["predicted_peak_bytes"]

    # `measure`: what recompute must lower: the arena's activations (the non-gradient live bytes),
    # or with stages the predicted peak (the saved activations a chunk hands its backward are the
    # runtime's, not the arena's); None under ZeRO-3, whose peak is the gradient bucket.
    def layout(family, name, flags, model=None, repetition=False, mode="full", recipe=None, measure="activations"):
        def check():
            reference, reference_params, reference_plan = runs.get((family, name)) or \
                train(family, name, flags, model, recipe)  # once per layout: cpc-run appends to a metrics file
            ours, params, plan = train(family, name + "-" + mode, flags + ["--recompute", mode], model, recipe)
            same_steps(ours, reference, "%s %s --recompute %s" % (family, name, mode))
            same_parameters(params, reference_params)
            shown = ""
            if measure:
                before, after = memory(reference_plan, measure), memory(plan, measure)
                assert after < before, "%s %s --recompute %s: %s %d B, without %d B" % (
                    family, name, mode, measure, after, before)
                shown = ", %s %d -> %d B" % (measure, before, after)
            print("   %s %s: %d steps bit-identical%s" % (family, name, STEPS, shown))
        results.check("%s %s with %s recompute is bit-identical to %s without" % (family, name, mode, name), check,
                      repetition=repetition)

    layout("gpt", "dp2", ["--dp", "2"], repetition=True)
    layout("gpt", "dp2-zero3", ["--dp", "2", "--zero", "3"], measure=None)
    layout("gpt", "tp2", ["--tp", "2"])
    layout("gpt", "tp2", ["--tp", "2"], mode="selective", repetition=True)
    layout("gpt", "pp2", ["--pp", "2", "--microbatches", "2"], gpt_half, measure="peak")
    layout("gpt", "accumulation2", [], gpt_half, recipe={"gradient_accumulation": 2}, repetition=True)
    layout("mae", "bf16", ["--precision", "bf16"], repetition=True)
    layout("mae", "fp16", ["--precision", "fp16"], repetition=True)

    def dropout():
        # GPT-2's dropout (p = 0.1): the masks, drawn from no input data, are drawn again in the
        # backward (counter-based: the same numbers), so full recompute keeps almost none of them.
        out = os.path.join(work, "gpt-dropout")
        run([PYTHON, os.path.join(SOURCE, "examples", "gpt", "export.py"), "--size", "tiny", "--batch", "8",
             "--dropout", "0.1", "--out-dir", out])
        model = os.path.join(out, "gpt-tiny-opset17-dropout.onnx")
        reference, reference_params, plain = train("gpt", "dropout", [], model)
        ours, params, plan = train("gpt", "dropout-full", ["--recompute", "full"], model)
        same_steps(ours, reference, "gpt with dropout --recompute full")
        same_parameters(params, reference_params)
        act = lambda p: memory(p, "activations")
        masks = act(plain) - act(runs["gpt", "none"][2])  # what dropout adds without recompute
        kept = act(plan) - act(runs["gpt", "full"][2])     # and with full recompute
        assert masks > 0 and kept < masks / 2, "full recompute keeps %d of dropout's %d B" % (kept, masks)
        print("   dropout adds %d B of activations without recompute, %d B with full" % (masks, kept))

    results.check("gpt with dropout: full recompute draws the masks again, bit-identical", dropout)

    def foreign_models():
        # Hugging Face GPT-2 and Llama as torch.onnx.export's default exporter writes them
        # (tests/models/fixtures; their weights regenerated by tests/models/weights.py).
        for name in ("hf_gpt2", "hf_llama"):
            fixture = os.path.join(work, name)
            shutil.copytree(os.path.join(SOURCE, "tests", "models", "fixtures", name), fixture)
            run([PYTHON, os.path.join(SOURCE, "tests", "models", "weights.py"), fixture])
            inputs = {f[:-4]: os.path.join(fixture, f) for f in sorted(os.listdir(fixture)) if f.endswith(".npy")}
            recipe = {"LR": 0.5, "lr_schedule": "constant", "WARMUP_EPOCHS": 0, "clip_grad_norm": 0.6}
            found = {}
            for mode in ("none", "full", "auto"):
                flags = ["--recompute", mode]
                if mode == "auto":  # halfway between none's and full's peaks
                    flags += ["--device-memory", str(int((found["none"][2] + found["full"][2]) / 2 * 1.02))]
                plan, _ = compile_plan(work, os.path.join(fixture, "default.onnx"), name + "-" + mode, flags, recipe)
                metrics, params, _ = train_plan(plan, 4, inputs, os.path.join(work, name + "-" + mode))
                found[mode] = (metrics, params, predicted_peak(plan))
            print("   %s: %s" % (name, check_loss_moves_and_clip_engages(found["none"][0], 0.6, fall=0.95)))
            same_steps(found["full"][0], found["none"][0], name + " --recompute full")
            same_parameters(found["full"][1], found["none"][1])
            assert found["full"][2] < found["none"][2], "%s: full recompute predicts no less memory" % name
            same_steps(found["auto"][0], found["none"][0], name + " --recompute auto")
            same_parameters(found["auto"][1], found["none"][1])
            assert found["full"][2] <= found["auto"][2] < found["none"][2], "%s: auto's peak %d B" % (name, found["auto"][2])
            print("   %s: full and auto recompute bit-identical over 4 steps, predicted peak %d -> %d (full), %d B (auto)" % (
                name, found["none"][2], found["full"][2], found["auto"][2]))

    results.check("Hugging Face GPT-2 and Llama (default exporter): full and auto recompute are bit-identical, in less "
                  "memory", 
                  foreign_models)

    def plan_search():
        def table(*extra, modes="none,full"):
            out = run([tool("cpc"), "plan", gpt_half, "--devices", "2", "--recomputes", modes, *extra]).stdout
            rows = {}
            for line in out.splitlines():
                m = re.match(r"^\s+~?\d+\s+(.+?)\s{2,}[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+[0-9.]+\s+([0-9.]+)", line)
                if m:
                    rows[m.group(1)] = float(m.group(2)) * 1e6
                elif line.startswith("  rejected"):
                    rows[line[len("  rejected  "):].split("  ")[0].strip()] = None
            return rows
        rows = table()
        plain, recomputed = rows["pp2 1f1b"], rows["pp2 1f1b recompute full"]
        assert recomputed < plain, "full recompute predicts no less memory for pp2 1f1b: %s" % rows
        budget = int((plain + recomputed * 1.02) / 2)
        fitted = table("--device-memory", str(budget))
        assert fitted["pp2 1f1b"] is None and fitted["pp2 1f1b recompute full"], fitted
        automatic = table("--device-memory", str(budget), modes="none,auto")
        assert automatic["pp2 1f1b"] is None and automatic["pp2 1f1b recompute auto"], automatic
        print("   pp2 1f1b: %d B without recompute, %d B with full, %d B with auto; under %d B only the latter two "
              "are kept" % (plain, recomputed, automatic["pp2 1f1b recompute auto"], budget))

    results.check("cpc plan --recomputes: recompute keeps a layout under a budget its plain form exceeds",
                  plan_search, repetition=True)

    def automatic():
        # A budget halfway between none's and full's predicted peaks: auto fits it (with the
        # search's 2% margin), recomputing less than full (a faster predicted step), bit-identical.
        def inspect(plan):
            return json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)
        none, full = inspect(runs["gpt", "none"][2]), inspect(runs["gpt", "full"][2])
        budget = int((none["predicted_peak_bytes"] + full["predicted_peak_bytes"]) / 2 * 1.02)
        plan, proc = compile_plan(work, gpt, "gpt-auto", ["--recompute", "auto", "--device-memory", str(budget)],
                                  GPT_RECIPE)
        assert "recompute auto:" in proc.stdout, proc.stdout
        ours = inspect(plan)
        assert ours["predicted_peak_bytes"] * 1.02 <= budget, (ours["predicted_peak_bytes"], budget)
        assert ours["predicted_peak_bytes"] < none["predicted_peak_bytes"]
        step = lambda s: s["training"]["predicted_step"]["total_s"]
        assert step(ours) < step(full), "auto predicts no faster a step than full: %g, %g" % (step(ours), step(full))
        metrics, params, _ = train_plan(plan, STEPS, gpt_data, os.path.join(work, "gpt-auto"))
        same_steps(metrics, runs["gpt", "none"][0], "gpt --recompute auto")
        same_parameters(params, runs["gpt", "none"][1])
        print("   budget %d B: predicted peak none %d, auto %d, full %d B; step none %.3g, auto %.3g, full %.3g ms" % (
            budget, none["predicted_peak_bytes"], ours["predicted_peak_bytes"], full["predicted_peak_bytes"],
            step(none) * 1e3, step(ours) * 1e3, step(full) * 1e3))

    results.check("--recompute auto fits a budget between none's and full's peaks, recomputing less than full",
                  automatic)

    def refusals():
        for flags, words in ((["--mode", "infer", "--recompute", "full"], "applies to training plans"),
                             (["--recompute", "sometimes"], "sometimes"),
                             (["--recompute", "auto"], "give the budget"),
                             (["--recompute", "auto", "--device-memory", "1000"], "--device-memory 1000: the plan needs")):
            proc = run([tool("cpc"), "compile", gpt, "-o", os.path.join(work, "bad.plan"), *flags], check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and words in lines[0], (proc.returncode, proc.stderr)
            print("   %s: %s" % (" ".join(flags), lines[0]))

    results.check("--recompute on an inference plan, with an unknown mode, or auto without a budget it can meet is "
                  "refused in one line", refusals)

results.finish()
