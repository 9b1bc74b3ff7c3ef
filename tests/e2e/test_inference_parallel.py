#!/usr/bin/python3
"""Inference across ranks: `cpc compile --mode infer` with --dp, --tp (patterns and --tp-search),
--pp and --microbatches gives one rank's outputs within 1e-5, on the project's MAE (an inference
export returning loss, pred and mask) and GPT (idx -> logits, the vocabulary-parallel head
gathered back). One rank equals PyTorch. A pipeline's stages return their outputs apart (MAE's
mask from the first stage, loss and pred from the last): cpc-run prints them in the model's order.
With M microbatches the global batch is M model batches and each output the microbatches'
outputs concatenated along dim 0 (a scalar loss one value per microbatch). Flags that only
training has are refused in one line.
"""
import os
import re
import shutil

import numpy as np

from cpctest import MPI_ENV, PYTHON, SOURCE, Results, export_mae, run, tempdir, tool

results = Results()
TOL = 1e-5


def infer(work, model, name, flags, inputs):
    """Compiles `model` for inference with `flags` and runs it on `inputs` ({name: .npy}); returns
    {output: array} and cpc-run's stdout."""
    plan = os.path.join(work, name + ".plan")
    run([tool("cpc"), "compile", model, "--mode", "infer", "-o", plan, *flags])
    out = os.path.join(work, name + "-out")
    args = [tool("cpc-run"), plan, "--output-dir", out]
    for k, path in inputs.items():
        args += ["--input", "%s=%s" % (k, path)]
    proc = run(args, env=MPI_ENV)
    return {f[:-4]: np.load(os.path.join(out, f)) for f in os.listdir(out) if f.endswith(".npy")}, proc.stdout


def assert_close(ours, theirs, what):
    assert set(ours) == set(theirs), "%s: outputs %s vs %s" % (what, sorted(ours), sorted(theirs))
    for k in theirs:
        a, b = np.asarray(ours[k], np.float64), np.asarray(theirs[k], np.float64)
        assert a.shape == b.shape, "%s: %s has shape %s, expected %s" % (what, k, a.shape, b.shape)
        err = np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30) if b.size else 0.0
        assert err <= TOL, "%s: %s differs by %.2e (relative to its largest element)" % (what, k, err)
        print("   %s %s: %.1e" % (what, k, err))


def doubled(work, inputs, name):
    """The inputs with their batch twice over (two microbatches of the same samples)."""
    out = {}
    for k, path in inputs.items():
        p = os.path.join(work, "%s-%s-x2.npy" % (name, k))
        np.save(p, np.concatenate([np.load(path)] * 2))
        out[k] = p
    return out


# What each axis must have communicated: dp all-gathers the outputs' rows, tp all-reduces
# (row-parallel Linears), pp sends activations.
AXIS_COLLECTIVES = {"--dp": "all_gather", "--tp": "all_reduce", "--pp": "send"}


def layouts(work, model, name, inputs, single, cases):
    """Checks every (label, flags, microbatches) of `cases` against the one-rank outputs, and that
    each layout's collectives ran and tensor parallelism split the parameters."""
    for label, flags, micro in cases:
        def check(flags=flags, micro=micro, label=label):
            feed = doubled(work, inputs, name) if micro == 2 else inputs
            plan_name = name + "-" + re.sub(r"\W+", "", label)
            got, stdout = infer(work, model, plan_name, flags, feed)
            comm = re.search(r"^communication per run \(rank 0\):(.*)$", stdout, re.M)
            assert comm, "no communication line:\n" + stdout
            kinds = dict((k, int(n)) for k, n in re.findall(r" (\w+) (\d+) calls", comm.group(1)))
            for flag, kind in AXIS_COLLECTIVES.items():
                # rank 0 of a pipeline is its first stage: the outputs' gathers run on the last
                if flag in flags and not (kind == "all_gather" and "--pp" in flags):
                    assert kinds.get(kind, 0) > 0, "%s: no %s in %s" % (label, kind, comm.group(0))
            if "--tp" in flags:
                inspect = run([tool("cpc"), "inspect", os.path.join(work, plan_name + ".plan")]).stdout
                split = re.search(r"tensor parallel: 2 ranks \(\d+ of \d+ parameters split over tp, ([0-9.]+)%", inspect)
                assert split and float(split.group(1)) > 50, "%s: the parameters are not split:\n%s" % (label, inspect)
            want = single if micro == 1 else {k: (np.stack([v] * 2) if v.ndim == 0 else np.concatenate([v] * 2))
                                              for k, v in single.items()}
            assert_close(got, want, label)
            names = [line.split(":")[0] for line in stdout.splitlines() if re.match(r"^\w+: [a-z0-9]+\[", line)]
            assert names == list(single_order[name]), "%s prints %s, the model's order is %s" % (
                label, names, single_order[name])
        results.check("%s %s equals one rank" % (name, label), check)


single_order = {}
with tempdir() as work:
    # MAE-tiny: loss, pred and mask of a batch of 4, against PyTorch's.
    mae = os.path.join(work, "mae-tiny-opset17-all.onnx")
    export_mae("tiny", 17, work, extra=["--batch", "4", "--all-outputs", "--save-inputs"])
    stem = mae[:-len(".onnx")]
    mae_inputs = {"imgs": stem + ".imgs.npy", "noise": stem + ".noise.npy"}
    mae_single, stdout = infer(work, mae, "mae", [], mae_inputs)
    single_order["mae"] = ("loss", "pred", "mask")

    def mae_vs_torch():
        assert_close(mae_single, {k: np.load(stem + ".%s.npy" % k) for k in ("loss", "pred", "mask")}, "one rank vs torch")
    results.check("mae one rank equals PyTorch (loss, pred, mask)", mae_vs_torch)
    layouts(work, mae, "mae", mae_inputs, mae_single, [
        ("dp2", ["--dp", "2"], 1), ("tp2", ["--tp", "2"], 1), ("tp2 by search", ["--tp", "2", "--tp-search"], 1),
        ("pp2", ["--pp", "2"], 1), ("pp2 2 microbatches", ["--pp", "2", "--microbatches", "2"], 2),
        ("dp2 x tp2", ["--dp", "2", "--tp", "2"], 1), ("pp2 x dp2", ["--pp", "2", "--dp", "2"], 1)])

    # GPT-tiny: idx -> logits (the head tied to the embedding, split over the vocabulary by tp).
    run([PYTHON, os.path.join(SOURCE, "examples", "gpt", "export.py"), "--size", "tiny", "--batch", "4", "--logits",
         "--out-dir", work])
    gpt = os.path.join(work, "gpt-tiny-opset17-logits.onnx")
    idx = os.path.join(work, "idx.npy")
    np.save(idx, np.random.default_rng(3).integers(0, 64, (4, 8)).astype(np.int64))
    gpt_single, _ = infer(work, gpt, "gpt", [], {"idx": idx})
    single_order["gpt"] = ("logits",)

    def gpt_vs_torch():
        import torch
        import sys
        sys.path.insert(0, os.path.join(SOURCE, "examples", "gpt"))
        from gpt_model import build_model
        with torch.no_grad():
            logits = build_model("tiny")(torch.from_numpy(np.load(idx))).numpy()
        assert_close(gpt_single, {"logits": logits}, "one rank vs torch")
    results.check("gpt one rank equals PyTorch (logits)", gpt_vs_torch)
    layouts(work, gpt, "gpt", {"idx": idx}, gpt_single, [
        ("dp2", ["--dp", "2"], 1), ("tp2", ["--tp", "2"], 1), ("tp2 by search", ["--tp", "2", "--tp-search"], 1),
        ("pp2 2 microbatches", ["--pp", "2", "--microbatches", "2"], 2), ("pp2 x tp2", ["--pp", "2", "--tp", "2"], 1)])

    # Exports this project did not write (the default dynamo exporter; graphs returning the loss):
    # each layout's loss equals one rank's, and the layout communicated.
    zoo = os.path.join(SOURCE, "tests", "models")
    for fixture, names in [("hf_gpt2", ("input_ids", "labels")), ("hf_vitmae", ("pixel_values", "noise")),
                           ("timm_vit", ("x", "target"))]:
        def zoo_layouts(fixture=fixture, names=names):
            copy = os.path.join(work, fixture)
            shutil.copytree(os.path.join(zoo, "fixtures", fixture), copy)
            run([PYTHON, os.path.join(zoo, "weights.py"), copy])
            model = os.path.join(copy, "dynamo.onnx")
            feed = {n: os.path.join(copy, n + ".npy") for n in names}
            single, _ = infer(work, model, fixture, [], feed)
            for flags in (["--dp", "2"], ["--tp", "2"], ["--tp", "2", "--tp-search"], ["--pp", "2"]):
                got, stdout = infer(work, model, fixture + "".join(flags).replace("-", ""), flags, feed)
                assert_close(got, single, "%s %s" % (fixture, " ".join(flags)))
                assert re.search(r"^communication per run \(rank 0\): \w+ [1-9]", stdout, re.M), stdout
        results.check("%s (dynamo export) in dp2, tp2, tp2 by search and pp2 equals one rank" % fixture, zoo_layouts)

    def refusals():
        for flags, expected in [(["--dp", "2", "--zero", "1"], "--zero shards optimizer states"),
                                (["--tp", "4", "--tp-mode", "2d"], "--mode infer splits tensors as Megatron's 1d"),
                                (["--pp", "2", "--schedule", "1f1b"], "runs its pipeline stages forward only"),
                                (["--dp", "3"], "--dp 3 does not divide the model's batch of 4"),
                                (["--precision", "bf16"], "--precision applies to training plans"),
                                (["--pp-split", "blocks"], "--pp-split needs --pp N")]:
            proc = run([tool("cpc"), "compile", mae, "--mode", "infer", "-o", os.path.join(work, "bad.plan"), *flags],
                       check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and expected in lines[0], (flags, proc.stderr)
        plan = os.path.join(work, "mae-pp22microbatches.plan")  # expects 2 microbatches of 4 samples
        proc = run([tool("cpc-run"), plan, "--input", "imgs=" + mae_inputs["imgs"]], check=False, env=MPI_ENV)
        assert proc.returncode == 1 and "input 'imgs' expects the global batch f32[8x3x32x32] (2 microbatches of " \
            "[4x3x32x32]), got f32[4x3x32x32]" in proc.stderr, proc.stderr
    results.check("training-only flags and a batch of the wrong size are refused in one line", refusals)

results.finish()
