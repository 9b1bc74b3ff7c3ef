"""Megatron tensor parallelism on MAE-tiny (examples/mae, exported by torch.onnx.export): every
attention block is split by heads (the fused qkv kept in head-major order, column-parallel;
the output projection row-parallel) and every MLP column- then row-parallel, found from the
graph's structure. tp=2, tp=4, dp2 x tp2 (also with ZeRO 1, 2 and 3), tp=2 with gradient
accumulation, and tp=2 --sp (sequence parallelism: on MAE-tiny's 5/17 tokens it skips every block
with a note; on a 9-patch MAE-tiny whose 4/10 tokens split it runs) train equal to one rank over
20 steps: loss and grad_norm per step within 1e-5 relative, with the learning rate and the
clip threshold of the data-parallel test (the clip engages on most steps); final parameters,
gathered and written back in the model's order (the qkv rows in their original order), within
1e-5 (but the key third of each qkv bias, whose true gradient is zero: cpctest.compare_training). Collectives: Megatron's 2 forward + 2 backward all-reduces of b*s*h per transformer block.
"""
import json
import os

import numpy as np

from cpctest import (compare_training, train_plan, Results, export_mae, run, tempdir, tool, MAE_CLIP, MAE_RECIPE,
                     MPI_ENV, SANITIZED)

results = Results()
STEPS = 20
CLIP = MAE_CLIP
RECIPE = MAE_RECIPE
ENV = dict(MPI_ENV)
# MAE-tiny: 2 encoder blocks of width 64 over 5 tokens (cls + 4 kept patches), 1 decoder block
# of width 32 over 17 tokens.
BLOCKS = [((5, 64), 2), ((17, 32), 1)]


def train(work, model, name, flags, recipe, data):
    config = os.path.join(work, name + ".json")
    with open(config, "w") as f:
        json.dump(recipe, f)
    plan = os.path.join(work, name + ".plan")
    run([tool("cpc"), "compile", model, "--config", config, "-o", plan, *flags])
    return train_plan(plan, STEPS, {"imgs": data[0], "noise": data[1]}, os.path.join(work, name))


def compare(ours, single, params, single_params):
    return compare_training(ours, single, params, single_params, STEPS)


with tempdir() as work:
    os.environ.update(ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", "8"])
    rng = np.random.default_rng(0)
    data = {}
    for n in (8, 16):
        imgs, noise = os.path.join(work, "imgs%d.npy" % n), os.path.join(work, "noise%d.npy" % n)
        np.save(imgs, rng.standard_normal((n, 3, 32, 32)).astype(np.float32))
        np.save(noise, rng.random((n, 16)).astype(np.float32))
        data[n] = (imgs, noise)
    single, single_params, _ = train(work, model, "one", [], RECIPE, data[8])
    accumulated = dict(RECIPE, TOTAL_BATCH_SIZE=16, gradient_accumulation=2, LR=RECIPE["LR"] / 2)
    single_acc = single_acc_params = None  # for tp2 with accumulation: a repetition under the sanitizers
    if not SANITIZED:
        single_acc, single_acc_params, _ = train(work, model, "one-acc", [], accumulated, data[16])

    def one_rank():
        clipped = sum(1 for m in single if m["grad_norm"] > CLIP)
        assert single[-1]["loss"] < single[0]["loss"], "the loss did not fall"
        assert clipped >= STEPS // 2, "the clip engaged on %d of %d steps" % (clipped, STEPS)
        print("   one rank: loss %.4f -> %.4f, clip engaged on %d of %d steps" % (
            single[0]["loss"], single[-1]["loss"], clipped, STEPS))

    results.check("one rank: the loss falls and the clip engages", one_rank)

    def layout(name, flags, dp, reference, recipe, samples):
        def check():
            ref, ref_params = reference
            ours, params, summary = train(work, model, name, flags, recipe, data[samples])
            worst, worst_norm = compare(ours, ref, params, ref_params)
            shapes = [tuple(summary["buffers"][s["in"][0]]["shape"]) for p in summary["programs"]
                      for s in p["steps"] if s["op"] == "cpc.all_reduce"]
            for (tokens, width), blocks in BLOCKS:
                found = shapes.count((8 // dp, tokens, width))
                assert found == 4 * blocks, "%d all-reduces of [%d, %d, %d] for %d blocks, Megatron has %d" % (
                    found, 8 // dp, tokens, width, blocks, 4 * blocks)
            print("   %s: worst per-step difference loss %.2e grad_norm %.2e; %d all-reduces per step, %d B sent" % (
                name, worst, worst_norm, ours[-1]["comm"]["all_reduce"]["calls"],
                ours[-1]["comm"]["all_reduce"]["bytes"]))
        return check

    # Under the sanitizers: tp2 (the heads split, qkv head-major), dp2 x tp2 with ZeRO-3 (those
    # blocks split again over dp, gathered before use) and sequence parallelism, skipped and run
    # on tp2; tp4, the other ZeRO stages, accumulation and dp2 x tp2 --sp repeat them
    # (test_tensor_parallel.py runs every ZeRO stage and accumulation over tp on its MLP).
    results.check("tp=2 (heads and MLPs split) equals one rank",
                  layout("tp2", ["--tp", "2"], 1, (single, single_params), RECIPE, 8))
    results.check("tp=4 (one head per rank) equals one rank",
                  layout("tp4", ["--tp", "4"], 1, (single, single_params), RECIPE, 8), repetition=True)
    results.check("dp2 x tp2 equals one rank",
                  layout("dp2tp2", ["--dp", "2", "--tp", "2"], 2, (single, single_params), RECIPE, 8), repetition=True)
    results.check("dp2 x tp2 with ZeRO-1 equals one rank",
                  layout("dp2tp2-zero1", ["--dp", "2", "--tp", "2", "--zero", "1"], 2, (single, single_params), RECIPE, 8),
                  repetition=True)
    results.check("dp2 x tp2 with ZeRO-2 equals one rank",
                  layout("dp2tp2-zero2", ["--dp", "2", "--tp", "2", "--zero", "2"], 2, (single, single_params), RECIPE, 8),
                  repetition=True)
    results.check("dp2 x tp2 with ZeRO-3 equals one rank",
                  layout("dp2tp2-zero3", ["--dp", "2", "--tp", "2", "--zero", "3"], 2, (single, single_params), RECIPE, 8))
    results.check("tp=2 with gradient accumulation 2 equals one rank",
                  layout("tp2-acc2", ["--tp", "2"], 1, (single_acc, single_acc_params), accumulated, 16),
                  repetition=True)

    def sequence_parallel_skipped():
        # 5 and 17 tokens do not split over 2 ranks: every block keeps its whole sequence (a note
        # each) and trains as plain tp=2, still equal to one rank.
        out = run([tool("cpc"), "compile", model, "--tp", "2", "--sp", "-o", os.path.join(work, "skip.plan")])
        notes = [line for line in out.stderr.splitlines() if "sequence parallelism skips this block" in line]
        assert len(notes) == 6, out.stderr
        ours, params, _ = train(work, model, "tp2-sp-skip", ["--tp", "2", "--sp"], RECIPE, data[8])
        worst, worst_norm = compare(ours, single, params, single_params)
        print("   tp2 --sp on 5/17 tokens: %d notes; worst per-step difference loss %.2e grad_norm %.2e" % (
            len(notes), worst, worst_norm))

    results.check("tp=2 --sp where tokens do not divide: a note per block, equal to one rank",
                  sequence_parallel_skipped)

    # The same MAE-tiny on 24x24 images (9 patches) with a masking ratio of 0.6 keeps 3 patches:
    # 4 encoder and 10 decoder tokens, which split over tp=2.
    seq_model = export_mae("tiny", 17, os.path.join(work, "seq"),
                           extra=["--batch", "8", "--img-size", "24", "--mask-ratio", "0.6"])
    seq_data = (os.path.join(work, "imgs24.npy"), os.path.join(work, "noise9.npy"))
    np.save(seq_data[0], rng.standard_normal((8, 3, 24, 24)).astype(np.float32))
    np.save(seq_data[1], rng.random((8, 9)).astype(np.float32))
    seq_single, seq_single_params, _ = train(work, seq_model, "seq-one", [], RECIPE, seq_data)

    def sequence_parallel(name, flags, dp):
        def check():
            ours, params, summary = train(work, seq_model, name, flags, RECIPE, seq_data)
            worst, worst_norm = compare(ours, seq_single, params, seq_single_params)
            steps = [(s["op"], tuple(summary["buffers"][s["in"][0]]["shape"])) for p in summary["programs"]
                     for s in p["steps"] if s["op"] in ("cpc.all_reduce", "cpc.reduce_scatter", "cpc.all_gather")]
            # Megatron-SP per block and step: a reduce-scatter after each row-parallel Linear
            # (attention and MLP), forward and backward; no all-reduce of [b, s, h] is left.
            for (tokens, width), blocks in [((4, 64), 2), ((10, 32), 1)]:
                full = (8 // dp, tokens, width)
                scatters = steps.count(("cpc.reduce_scatter", full))
                assert scatters == 4 * blocks, "%d reduce-scatters of %s for %d blocks" % (scatters, full, blocks)
                assert ("cpc.all_reduce", full) not in steps, "an all-reduce of %s is left" % (full,)
            gathers = sum(1 for op, _ in steps if op == "cpc.all_gather")
            print("   %s: worst per-step difference loss %.2e grad_norm %.2e; per step %d reduce-scatters, "
                  "%d all-gathers, %d all-reduces" % (name, worst, worst_norm,
                                                       sum(1 for op, _ in steps if op == "cpc.reduce_scatter"),
                                                       gathers, sum(1 for op, _ in steps if op == "cpc.all_reduce")))
        return check

    results.check("tp=2 --sp (residual stream split on the sequence) equals one rank",
                  sequence_parallel("seq-tp2-sp", ["--tp", "2", "--sp"], 1))
    results.check("dp2 x tp2 --sp equals one rank", sequence_parallel("seq-dp2tp2-sp", ["--dp", "2", "--tp", "2", "--sp"], 2),
                  repetition=True)
results.finish()
