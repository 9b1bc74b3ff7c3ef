"""2D, 2.5D and 3D tensor parallelism (Colossal-AI's Optimus, Tesseract and 3D layouts) on MAE-tiny
(examples/mae, exported by torch.onnx.export): the tp ranks form a q x q grid (tp_row x tp_col,
and a depth axis tp_dep for 2.5D); activations are [b/q (row), s, h/q (column)] (the batch also
split over depth and dp), every Linear's weight [in/q (row), out/q (column)], its bias and the
LayerNorm parameters stored [k/q^2] over both and read over the columns, and every Linear matmul, forward and backward, is computed by SUMMA: q broadcasts of
one block along a row and a column of ranks (and q reduces of the gradients' blocks), never a
whole row of blocks on one rank. LayerNorm statistics are all-reduced over the columns.

Checked as a user would, 20 steps with the learning rate and clip of the other tensor-parallel
tests (the clip engages on most steps): 2D q=2 (4 ranks), 2.5D q=2 d=2 (8 ranks), dp2 x 2D
(8 ranks, also with ZeRO-1 and ZeRO-3), 3D q=2 (8 ranks) and 2D q=2 x pp2 (8 ranks, 4
microbatches) equal one rank (loss and grad_norm per step within 1e-5 relative, final parameters
within 1e-5); the SUMMA traffic per step equals 3 (q-1) sum over Linears of (input block +
weight block) bytes (forward: input and weight broadcast; input gradient: weight broadcast,
result reduced; weight gradient: input broadcast, result reduced); each Linear weight is stored
as a [in/q, out/q] block; the config's parallel.tensor {mode, size, depth} gives the flags'
plan byte for byte; bad flags and keys give one line and exit 1.
"""
import json
import os

import numpy as np

from cpctest import (compare_training, train_plan, Results, export_mae, run, tempdir, tool, MAE_CLIP, MAE_RECIPE,
                     MPI_ENV, SANITIZED)

results = Results()
# Under the sanitizers: 6 steps (the clip engages on all of them, the loss falls; a step of 8 ranks
# on 2 cores takes about a second there), every mode once (2D, 2.5D, 3D, 2D inside pipeline
# stages, dp x 2D with ZeRO-3: its blocks split again over dp and gathered before use), one
# config mode (2.5D: the most keys) and every bad flag; plain dp2 x 2D and ZeRO-1 repeat them.
STEPS = 6 if SANITIZED else 20
BATCH = 8
# MAE-tiny's Linears: (input features, output features, tokens). Encoder: 2 blocks of width 64
# over 5 tokens (qkv, proj, fc1, fc2); decoder embedding 64 -> 32; 1 decoder block of width 32
# over 17 tokens; the prediction head 32 -> 8*8*3.
LINEARS = (2 * [(64, 192, 5), (64, 64, 5), (64, 256, 5), (256, 64, 5)] + [(64, 32, 5)] +
           [(32, 96, 17), (32, 32, 17), (32, 128, 17), (128, 32, 17), (32, 192, 17)])


def summa_bytes(q, batch_blocks):
    """Bytes one rank sends per step in SUMMA's broadcasts and reduces: per Linear, q - 1 of the
    q blocks of each of: the input and the weight (forward), the weight and the input gradient
    (backward), the input and the weight gradient (backward); an input block is
    [b / batch_blocks, s, in / q], a weight block [in / q, out / q], f32."""
    total = 0
    for fin, fout, tokens in LINEARS:
        x = BATCH // batch_blocks * tokens * fin // q * 4
        w = fin // q * fout // q * 4
        total += 3 * (q - 1) * (x + w)
    return total


with tempdir() as work:
    os.environ.update(MPI_ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", str(BATCH)])
    rng = np.random.default_rng(0)
    data = {"imgs": os.path.join(work, "imgs.npy"), "noise": os.path.join(work, "noise.npy")}
    np.save(data["imgs"], rng.standard_normal((BATCH, 3, 32, 32)).astype(np.float32))
    np.save(data["noise"], rng.random((BATCH, 16)).astype(np.float32))

    def compile_plan(name, flags, recipe=MAE_RECIPE, onnx=model):
        config = os.path.join(work, name + ".json")
        with open(config, "w") as f:
            json.dump(recipe, f)
        plan = os.path.join(work, name + ".plan")
        run([tool("cpc"), "compile", onnx, "--config", config, "-o", plan, *flags])
        return plan

    def train(name, flags, recipe=MAE_RECIPE):
        return train_plan(compile_plan(name, flags, recipe), STEPS, data, os.path.join(work, name))

    single, single_params, single_summary = train("one", [])

    def parameter_bytes(summary):
        """(bytes of the Linear weights, biases and LayerNorm vectors; bytes of the rest: the
        patch embedding's conv, positional embeddings, cls/mask tokens) of a plan, per rank."""
        split = rest = 0
        for b in summary["buffers"]:
            if b["kind"] != "parameter" or b["alias_of"] >= 0:
                continue
            size = 4 * int(np.prod(b["shape"]))
            grid = len(b.get("global_shape", b["shape"])) in (1, 2) and b["name"] != "patch_embed.proj.bias"
            split, rest = (split + size, rest) if grid else (split, rest + size)
        return split, rest

    PSI_GRID, PSI_REST = parameter_bytes(single_summary)

    def one_rank():
        clipped = sum(1 for m in single if m["grad_norm"] > MAE_CLIP)
        assert single[-1]["loss"] < single[0]["loss"], "the loss did not fall"
        assert clipped >= STEPS // 2, "the clip engaged on %d of %d steps" % (clipped, STEPS)
        print("   one rank: loss %.4f -> %.4f, clip engaged on %d of %d steps" % (
            single[0]["loss"], single[-1]["loss"], clipped, STEPS))

    results.check("one rank: the loss falls and the clip engages", one_rank)

    def layout(name, flags, q, batch_blocks):
        def check():
            ours, params, summary = train(name, flags)
            worst, worst_norm = compare_training(ours, single, params, single_params, STEPS)
            comm = ours[-1]["comm"]
            sent = comm["broadcast_from"]["bytes"] + comm["reduce_to"]["bytes"]
            assert sent == summa_bytes(q, batch_blocks), "SUMMA sent %d B per step, the formula says %d B" % (
                sent, summa_bytes(q, batch_blocks))
            # Per Linear: q broadcasts of each operand forward, q of one operand in each gradient.
            assert comm["broadcast_from"]["calls"] == 4 * q * len(LINEARS), comm["broadcast_from"]
            assert comm["reduce_to"]["calls"] == 2 * q * len(LINEARS), comm["reduce_to"]
            weights = [b for b in summary["buffers"] if b["kind"] == "parameter" and len(b.get("global_shape", [])) == 2]
            assert len(weights) == len(LINEARS), "%d Linear weights stored as blocks" % len(weights)
            for b in weights:
                assert b["shape"] == [n // q for n in b["global_shape"]], "%s: block %s of %s" % (
                    b["name"], b["shape"], b["global_shape"])
                assert sorted(sum(b["shard_dims"], [])) == ["tp_col", "tp_row"], b["shard_dims"]
            # Biases and LayerNorm parameters are stored [k/q^2] (over tp_col, then tp_row), as
            # Colossal-AI's 2D layers store them: 4 per block and 2 per norm (8 of them), one per
            # Linear outside the blocks (decoder embedding, prediction head).
            vectors = [b["name"] for b in summary["buffers"] if b["kind"] == "parameter" and
                       len(b.get("global_shape", [])) == 1 and b.get("shard_dims") == [["tp_col", "tp_row"]]]
            assert len(vectors) == 3 * 4 + 8 * 2 + 2, "vectors stored over the grid: %s" % vectors
            # Per-rank parameter bytes: Psi/q^2 for the grid's parameters (every weight, bias and
            # LayerNorm vector, replicated over depth and dp), the rest whole.
            mine = sum(parameter_bytes(summary))
            assert mine == PSI_GRID // q ** 2 + PSI_REST, "%d parameter bytes per rank, the formula says %d" % (
                mine, PSI_GRID // q ** 2 + PSI_REST)
            print("   %s: worst per-step difference loss %.2e grad_norm %.2e; SUMMA %d broadcasts + %d reduces, "
                  "%d B per step (= 3(q-1) sum(x + w)); all-reduces %d calls %d B" % (
                      name, worst, worst_norm, comm["broadcast_from"]["calls"], comm["reduce_to"]["calls"], sent,
                      comm["all_reduce"]["calls"], comm["all_reduce"]["bytes"]))
        return check

    results.check("2D q=2 (4 ranks) equals one rank, SUMMA traffic as the formula",
                  layout("2d", ["--tp", "4", "--tp-mode", "2d"], 2, 2))
    results.check("2.5D q=2 d=2 (8 ranks) equals one rank",
                  layout("2.5d", ["--tp", "8", "--tp-mode", "2.5d", "--tp-depth", "2"], 2, 4))
    results.check("dp2 x 2D q=2 (8 ranks) equals one rank",
                  layout("dp2-2d", ["--dp", "2", "--tp", "4", "--tp-mode", "2d"], 2, 4), repetition=True)

    def zero():
        # ZeRO composes: each rank's 2D blocks (and their moments) are split again over dp.
        for stage in ("3",) if SANITIZED else ("1", "3"):
            ours, params, summary = train("dp2-2d-zero" + stage, ["--dp", "2", "--tp", "4", "--tp-mode", "2d",
                                                                 "--zero", stage])
            worst, worst_norm = compare_training(ours, single, params, single_params, STEPS)
            print("   dp2 x 2d ZeRO-%s: worst per-step difference loss %.2e grad_norm %.2e; collectives %s" % (
                stage, worst, worst_norm, {k: (v["calls"], v["bytes"]) for k, v in ours[-1]["comm"].items()}))

    results.check("dp2 x 2D q=2 with ZeRO-1 and ZeRO-3 (8 ranks) equals one rank", zero)

    def three_d():
        # 3D q=2 (8 ranks): per Linear and step, the forward gathers its input block over one axis
        # and its weight block over tp_wt and reduce-scatters its output, and each gradient does
        # the same on its own operands; the 3 reduce-scatters send (q-1) (x + w + y) per Linear,
        # with x = b s in / q^3, w = in out / q^3, y = b s out / q^3 elements (the blocks each
        # rank keeps of the input, the weight and the output).
        ours, params, summary = train("3d", ["--tp", "8", "--tp-mode", "3d"])
        worst, worst_norm = compare_training(ours, single, params, single_params, STEPS)
        comm = ours[-1]["comm"]
        q = 2
        blocks = sum((BATCH * tokens * fin + fin * fout + BATCH * tokens * fout) // q ** 3 for fin, fout, tokens in LINEARS)
        assert comm["reduce_scatter"]["calls"] == 3 * len(LINEARS), comm["reduce_scatter"]
        assert comm["reduce_scatter"]["bytes"] == (q - 1) * blocks * 4, "reduce-scatters sent %d B, formula %d B" % (
            comm["reduce_scatter"]["bytes"], (q - 1) * blocks * 4)
        weights = [b for b in summary["buffers"] if b["kind"] == "parameter" and len(b.get("global_shape", [])) == 2]
        assert len(weights) == len(LINEARS), "%d Linear weights stored as blocks" % len(weights)
        # Per-rank parameter bytes: Psi/q^3 for the Linear weights, Psi/q for their biases and the
        # LayerNorm vectors (split over the features' axis), the rest whole.
        weight_bytes = sum(4 * fin * fout for fin, fout, _ in LINEARS)
        mine = sum(parameter_bytes(summary))
        formula = weight_bytes // q ** 3 + (PSI_GRID - weight_bytes) // q + PSI_REST
        assert mine == formula, "%d parameter bytes per rank, the formula says %d" % (mine, formula)
        for b in weights:  # [in/q^2, out/q] (torch's [out, in]: [out/q, in/q^2])
            assert b["shape"] == [b["global_shape"][0] // q, b["global_shape"][1] // q ** 2], (b["name"], b["shape"])
            assert b["shard_dims"][1][1] == "tp_wt", (b["name"], b["shard_dims"])
        print("   3d: worst per-step difference loss %.2e grad_norm %.2e; %d reduce-scatters %d B per step "
              "(= (q-1) sum(x + w + y)), %d all-gathers %d B, %d all-reduces %d B" % (
                  worst, worst_norm, comm["reduce_scatter"]["calls"], comm["reduce_scatter"]["bytes"],
                  comm["all_gather"]["calls"], comm["all_gather"]["bytes"], comm["all_reduce"]["calls"],
                  comm["all_reduce"]["bytes"]))

    results.check("3D q=2 (8 ranks) equals one rank, reduce-scatter traffic as the formula", three_d)

    # 2D inside pipeline stages: MAE-tiny with 4 encoder blocks at microbatch 2, 4 microbatches
    # (the global batch of 8 again; each stage's 2 x 2 grid splits a microbatch over its rows),
    # against one rank accumulating the 4 microbatches.
    deep = export_mae("tiny", 17, os.path.join(work, "deep"), extra=["--batch", "2", "--depth", "4"])
    accumulated = dict(MAE_RECIPE, gradient_accumulation=4)

    def pipelined(name, flags):
        def check():
            ref, ref_params, _ = train_plan(compile_plan("one-acc4", [], accumulated, deep), STEPS, data,
                                            os.path.join(work, "one-acc4"))
            ours, params, _ = train_plan(compile_plan(name, flags, MAE_RECIPE, deep), STEPS, data, os.path.join(work, name))
            worst, worst_norm = compare_training(ours, ref, params, ref_params, STEPS)
            comm = ours[-1]["comm"]
            print("   %s: worst per-step difference loss %.2e grad_norm %.2e; per step %d broadcasts, %d reduces, "
                  "%d sends" % (name, worst, worst_norm, comm["broadcast_from"]["calls"], comm["reduce_to"]["calls"],
                                comm["send"]["calls"]))
        return check

    results.check("2D q=2 x pp2 (8 ranks, 4 microbatches, 1F1B) equals one rank accumulating them",
                  pipelined("2d-pp2", ["--tp", "4", "--tp-mode", "2d", "--pp", "2", "--microbatches", "4"]))

    def config_equals_flags():
        modes = [("2d", ["--tp", "4", "--tp-mode", "2d"], {"mode": "2d", "size": 4}),
                 ("2.5d", ["--tp", "8", "--tp-mode", "2.5d", "--tp-depth", "2"], {"mode": "2.5d", "size": 8, "depth": 2}),
                 ("3d", ["--tp", "8", "--tp-mode", "3d"], {"mode": "3d", "size": 8})]
        for name, flags, tensor in [m for m in modes if m[0] == "2.5d" or not SANITIZED]:
            by_flags = compile_plan("flags-" + name, flags)
            by_config = compile_plan("config-" + name, [], dict(MAE_RECIPE, parallel={"tensor": tensor}))
            with open(by_flags, "rb") as a, open(by_config, "rb") as b:
                assert a.read() == b.read(), "parallel.tensor %s does not give the plan of %s" % (tensor, flags)

    results.check("the config's parallel.tensor mode/size/depth give the flags' plan (2d, 2.5d, 3d)",
                  config_equals_flags)

    def bad_flags():
        for flags, needle in [(["--tp", "6", "--tp-mode", "2d"], "--tp-mode 2d needs --tp = q*q"),
                              (["--tp", "4", "--tp-mode", "3d"], "--tp-mode 3d needs --tp = q*q*q"),
                              (["--tp", "4", "--tp-mode", "4d"], "for the --tp-mode option: expects 1d, 2d, 2.5d or 3d"),
                              (["--tp", "8", "--tp-mode", "2.5d"], "2.5d needs a depth"),
                              (["--tp", "8", "--tp-mode", "2.5d", "--tp-depth", "3"], "needs --tp = 3*q*q"),
                              (["--tp", "4", "--tp-depth", "2"], "--tp-depth belongs to --tp-mode 2.5d, not to --tp-mode 1d"),
                              (["--tp", "4", "--tp-mode", "2d", "--sp"], "--sp is Megatron's"),
                              (["--tp", "9", "--tp-mode", "2d"], "do not divide its 8 samples")]:
            out = run([tool("cpc"), "compile", model, "-o", os.path.join(work, "bad.plan"), *flags], check=False)
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 1 and len(lines) == 1 and needle in lines[0], "%s: exit %d, %r" % (
                flags, out.returncode, out.stderr)
            print("   %s: %s" % (" ".join(flags), lines[0]))

    results.check("bad 2D flags give one clear line and exit 1", bad_flags)
results.finish()
