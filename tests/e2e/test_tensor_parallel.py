"""Tensor parallelism (Megatron 1D) on a residual MLP model exported by torch.onnx.export: the
compiler finds Linear -> GELU -> Linear from the graph (torch names the weights onnx::MatMul_N,
so nothing can come from names), splits the first column-parallel and the second row-parallel
over tp, stores each rank's blocks of the weights and their AdamW moments, and all-reduces
each block's output over tp (forward) and its input gradient (backward). Every layout trains
equal to one rank over 20 steps: loss and grad_norm per step within 1e-5 relative, final
parameters within 1e-5 (gathered into the model's own layout), with a learning rate that
moves the loss and a clip threshold that engages. Also: the per-rank parameter bytes follow
split / N + replicated, and the activation all-reduces are Megatron's 2 per MLP block per step.
With --sp (sequence parallelism, the same model over 8 tokens) the residual stream and the
LayerNorms are split along the sequence, and each block's all-reduces become an all-gather and
a reduce-scatter (forward and backward), still equal to one rank.
"""
import json
import os

import numpy as np

from cpctest import compare_training, train_plan, PYTHON, Results, run, tempdir, tool, MPI_ENV

results = Results()
STEPS = 20
CLIP = 0.3
BATCH, SEQ, WIDTH, HIDDEN = 8, 5, 16, 32
ENV = dict(MPI_ENV)
RECIPE = {"TOTAL_BATCH_SIZE": BATCH, "LR": 0.4, "WARMUP_EPOCHS": 0, "lr_schedule": "constant",
          "clip_grad_norm": CLIP, "WEIGHT_DECAY": 0.05}

EXPORT = r'''
import sys, torch
from torch import nn

class Block(nn.Module):
    """A pre-norm residual MLP block, as in a transformer."""
    def __init__(self, d, h):
        super().__init__()
        self.norm = nn.LayerNorm(d)
        self.fc1 = nn.Linear(d, h)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(h, d)

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(self.norm(x))))

class Net(nn.Module):
    def __init__(self, d, h):
        super().__init__()
        self.inp = nn.Linear(6, d)
        self.b1, self.b2 = Block(d, h), Block(d, h)
        self.head = nn.Linear(d, 3)

    def forward(self, x, target):
        y = self.head(self.b2(self.b1(self.inp(x))))
        return ((y - target) ** 2).mean()

torch.manual_seed(0)
b, s, d, h = (int(v) for v in sys.argv[2:6])
torch.onnx.export(Net(d, h), (torch.randn(b, s, 6), torch.randn(b, s, 3)), sys.argv[1],
                  input_names=["x", "target"], output_names=["loss"], opset_version=17)
'''


def train(work, name, flags, recipe=RECIPE, data="8", model="mlp.onnx"):
    plan = os.path.join(work, name + ".plan")
    config = os.path.join(work, name + ".json")
    with open(config, "w") as f:
        json.dump(recipe, f)
    run([tool("cpc"), "compile", os.path.join(work, model), "--config", config, "-o", plan, *flags])
    return train_plan(plan, STEPS, {"x": os.path.join(work, "x%s.npy" % data),
                                    "target": os.path.join(work, "t%s.npy" % data)}, os.path.join(work, name))


def compare(ours, single, params, single_params):
    return compare_training(ours, single, params, single_params, STEPS)


def parameter_bytes(summary):
    return sum(4 * int(np.prod(b["shape"])) for b in summary["buffers"]
               if b["kind"] == "parameter" and b["alias_of"] < 0)


with tempdir() as work:
    os.environ.update(ENV)
    script = os.path.join(work, "export.py")
    with open(script, "w") as f:
        f.write(EXPORT)
    run([PYTHON, script, os.path.join(work, "mlp.onnx"), str(BATCH), str(SEQ), str(WIDTH), str(HIDDEN)])
    rng = np.random.default_rng(1)
    for n in (8, 16):
        np.save(os.path.join(work, "x%d.npy" % n), rng.standard_normal((n, SEQ, 6)).astype(np.float32))
        np.save(os.path.join(work, "t%d.npy" % n), rng.standard_normal((n, SEQ, 3)).astype(np.float32))
    single, single_params, single_summary = train(work, "one", [])
    # The same learning rate per step (LR is per 256 samples, scaled by TOTAL_BATCH_SIZE).
    accumulated = dict(RECIPE, TOTAL_BATCH_SIZE=2 * BATCH, gradient_accumulation=2, LR=RECIPE["LR"] / 2)
    single_acc, single_acc_params, _ = train(work, "one-acc", [], accumulated, "16")
    whole_bytes = parameter_bytes(single_summary)
    # The MLP weights and fc1's bias are split; the rest (input projection, norms, fc2's bias,
    # head) is replicated.
    split_bytes = 4 * 2 * (2 * WIDTH * HIDDEN + HIDDEN)

    def one_rank():
        clipped = sum(1 for m in single if m["grad_norm"] > CLIP)
        assert single[-1]["loss"] < 0.5 * single[0]["loss"], "the loss did not fall: %s" % [
            m["loss"] for m in single]
        assert 0 < clipped < STEPS, "the clip engaged on %d of %d steps (both sides wanted)" % (clipped, STEPS)
        print("   one rank: loss %.4f -> %.4f, clip engaged on %d of %d steps" % (
            single[0]["loss"], single[-1]["loss"], clipped, STEPS))

    results.check("one rank: the loss falls and the clip engages on some steps", one_rank)

    def layout(name, flags, dp, tp, reference=None, recipe=RECIPE, data="8"):
        def check():
            ref, ref_params = reference or (single, single_params)
            ours, params, summary = train(work, name, flags, recipe, data)
            worst, worst_norm = compare(ours, ref, params, ref_params)
            # Parameter bytes per rank: the split ones / tp, the replicated ones whole.
            per_rank = parameter_bytes(summary)
            expected = whole_bytes - split_bytes + split_bytes // tp
            if flags[-2:] == ["--zero", "3"]:
                # ZeRO-3 also splits each parameter over dp along a dim tp left whole (when one
                # divides): all but fc1's bias (split over tp along its only dim) and the head's [3].
                # (The export shares the two blocks' equal LayerNorm parameters.)
                d, h = WIDTH, HIDDEN
                block = d * h // (tp * dp) + h // tp + h * d // (tp * dp) + d // dp
                expected = 4 * ((6 * d + d) // dp + 2 * d // dp + 2 * block + 3 * d // dp + 3)
            assert per_rank == expected, "parameters take %d B per rank, expected %d" % (per_rank, expected)
            # Megatron's all-reduces: per MLP block one in forward (fc2's partial output) and one
            # in backward (fc1's partial input gradient), each of b*s*h elements (this rank's dp
            # share of the microbatch).
            activation = (BATCH // dp) * SEQ * WIDTH
            acts = [s for p in summary["programs"] for s in p["steps"] if s["op"] == "cpc.all_reduce"
                    and summary["buffers"][s["in"][0]]["shape"] == [BATCH // dp, SEQ, WIDTH]]
            assert len(acts) == 2 * 2, "%d activation all-reduces over tp, Megatron has 4" % len(acts)
            comm = ours[-1]["comm"]["all_reduce"]
            print("   %s: worst per-step difference loss %.2e grad_norm %.2e; parameters %d B per rank "
                  "(one rank %d B); %d all-reduces per step (%d of b*s*h = %d elements), %d B sent" % (
                      name, worst, worst_norm, per_rank, whole_bytes, comm["calls"], len(acts), activation,
                      comm["bytes"]))
        return check

    # Under the sanitizers: tp2, every ZeRO stage over dp2 x tp2 (ZeRO-1 all-reduces the gradients
    # as plain dp2 x tp2 does), accumulation, --shard and the config's policy, sequence
    # parallelism on tp2, every bad flag; tp4, plain dp2 x tp2, parallel.tensor.size (the policy
    # case reads parallel.tensor too) and dp2 x tp2 --sp repeat them.
    results.check("tp=2 equals one rank (Megatron MLP: column- then row-parallel)",
                  layout("tp2", ["--tp", "2"], 1, 2))
    results.check("tp=4 equals one rank", layout("tp4", ["--tp", "4"], 1, 4), repetition=True)
    results.check("dp2 x tp2 equals one rank (the tp ranks of a dp group read the same samples)",
                  layout("dp2tp2", ["--dp", "2", "--tp", "2"], 2, 2), repetition=True)
    results.check("dp2 x tp2 with ZeRO-1 equals one rank (the tp blocks' moments sharded over dp)",
                  layout("dp2tp2-zero1", ["--dp", "2", "--tp", "2", "--zero", "1"], 2, 2))
    results.check("dp2 x tp2 with ZeRO-2 equals one rank (gradients reduce-scattered over dp)",
                  layout("dp2tp2-zero2", ["--dp", "2", "--tp", "2", "--zero", "2"], 2, 2))
    results.check("dp2 x tp2 with ZeRO-3 equals one rank (parameters stored split over dp and tp)",
                  layout("dp2tp2-zero3", ["--dp", "2", "--tp", "2", "--zero", "3"], 2, 2))
    results.check("tp=2 with gradient accumulation 2 equals one rank",
                  layout("tp2-acc2", ["--tp", "2"], 1, 2, (single_acc, single_acc_params), accumulated, "16"))
    results.check("parallel.tensor.size=2 in the config equals --tp 2",
                  layout("config-tp2", [], 1, 2,
                         recipe=dict(RECIPE, parallel={"tensor": {"mode": "1d", "size": 2}})), repetition=True)

    def manual_override():
        # Split the input projection's columns by hand (its weight is [6, 16] as exported): its
        # output is split over tp, gathered before the LayerNorm that needs whole rows.
        ours, params, summary = train(work, "tp2-shard", ["--tp", "2", "--shard", "onnx::MatMul_60=-,tp",
                                                          "--shard", "inp\\.bias=tp"])
        worst, worst_norm = compare(ours, single, params, single_params)
        gathers = ours[-1]["comm"].get("all_gather", {}).get("calls", 0)
        assert gathers > 0, "no all-gather ran: %s" % ours[-1]["comm"]
        per_rank = parameter_bytes(summary)
        expected = whole_bytes - split_bytes + split_bytes // 2 - 4 * (6 * WIDTH + WIDTH) // 2
        assert per_rank == expected, "parameters take %d B per rank, expected %d" % (per_rank, expected)
        print("   --shard: worst per-step difference loss %.2e grad_norm %.2e, %d all-gathers per step" % (
            worst, worst_norm, gathers))

    results.check("--shard splits a parameter the pattern leaves whole, still equal to one rank", manual_override)

    def config_policy():
        # The same splits as a shardformer-style policy in the config (parallel.tensor.shard):
        # the same plan, so the same losses bit for bit.
        policy = dict(RECIPE, parallel={"tensor": {"mode": "1d", "size": 2, "shard": {
            "onnx::MatMul_60": "-,tp", "inp\\.bias": "tp"}}})
        ours, _, _ = train(work, "tp2-policy", [], policy)
        by_flag, _, _ = train(work, "tp2-shard-flags", ["--tp", "2", "--shard", "onnx::MatMul_60=-,tp",
                                                  "--shard", "inp\\.bias=tp"])
        assert [m["loss"] for m in ours] == [m["loss"] for m in by_flag], "the policy and --shard differ"
        config = os.path.join(work, "bad-policy.json")
        with open(config, "w") as f:
            json.dump(dict(RECIPE, parallel={"tensor": {"size": 2, "shard": {"inp\\.bias": 3}}}), f)
        out = run([tool("cpc"), "compile", os.path.join(work, "mlp.onnx"), "--config", config, "-o",
                   os.path.join(work, "bad.plan")], check=False)
        lines = out.stderr.strip().splitlines()
        assert out.returncode == 1 and len(lines) == 1 and "parallel.tensor.shard" in lines[0] and \
            "bad-policy.json" in lines[0], out.stderr
        print("   parallel.tensor.shard: losses equal to --shard's; a bad entry: %s" % lines[0])

    results.check("parallel.tensor.shard in the config splits as --shard does", config_policy)

    def bad_flags():
        model = os.path.join(work, "mlp.onnx")
        for flags, expected in [
                (["--tp", "0"], "for the --tp option: expects a positive number"),
                (["--shard", "fc1"], "--shard expects REGEX=SPEC"),
                (["--tp", "2", "--shard", "onnx::MatMul_61=tp"], "has 1 entries for a parameter of rank 2"),
                (["--tp", "2", "--shard", "onnx::MatMul_61=pp,-"], "'pp', which is not a mesh axis"),
                (["--tp", "2", "--shard", "inp\\.bias=tp,"], "has 2 entries for a parameter of rank 1"),
                (["--tp", "2", "--shard", "nothing=tp"], "matches no parameter"),
                (["--tp", "2", "--sp", "--mode", "infer"], "--tp-mode 2d/2.5d/3d, --tp-depth and --sp apply to training plans"),
                (["--sp"], "--sp splits the sequence over the tensor-parallel ranks")]:
            out = run([tool("cpc"), "compile", model, "-o", os.path.join(work, "bad.plan"), *flags], check=False)
            lines = out.stderr.strip().splitlines()
            assert out.returncode == 1, "%s: exit %d" % (flags, out.returncode)
            assert len(lines) == 1 and expected in lines[0], "%s: %s" % (flags, out.stderr)

    results.check("bad --tp/--shard flags give one clear line and exit 1", bad_flags)

    # Sequence parallelism needs tokens that divide by tp: the same model over 8 tokens.
    run([PYTHON, script, os.path.join(work, "mlp-seq8.onnx"), str(BATCH), "8", str(WIDTH), str(HIDDEN)])
    for n in (8,):
        np.save(os.path.join(work, "xs%d.npy" % n), rng.standard_normal((n, 8, 6)).astype(np.float32))
        np.save(os.path.join(work, "ts%d.npy" % n), rng.standard_normal((n, 8, 3)).astype(np.float32))
    single_seq, single_seq_params, _ = train(work, "one-seq8", [], data="s8", model="mlp-seq8.onnx")

    def sequence_parallel(name, flags, dp):
        def check():
            ours, params, summary = train(work, name, flags, data="s8", model="mlp-seq8.onnx")
            worst, worst_norm = compare(ours, single_seq, params, single_seq_params)
            steps = [(s["op"], summary["buffers"][s["in"][0]]["shape"]) for p in summary["programs"]
                     for s in p["steps"] if s["op"] in ("cpc.all_gather", "cpc.reduce_scatter", "cpc.all_reduce")]
            full, local = [BATCH // dp, 8, WIDTH], [BATCH // dp, 8 // 2, WIDTH]
            # Megatron-SP, per MLP block and step: forward all-gather before fc1 and reduce-scatter
            # after fc2, backward the same pair again; no all-reduce of activations is left.
            scatters = sum(1 for op, shape in steps if op == "cpc.reduce_scatter" and shape == full)
            gathers = sum(1 for op, shape in steps if op == "cpc.all_gather" and shape == local)
            reduces = sum(1 for op, shape in steps if op == "cpc.all_reduce" and shape == full)
            assert scatters == 2 * 2 and reduces == 0, "%d reduce-scatters and %d all-reduces of [b, s, h]" % (
                scatters, reduces)
            assert gathers >= 2 * 2, "%d all-gathers of [b, s/tp, h]" % gathers
            comm = ours[-1]["comm"]
            print("   %s: worst per-step difference loss %.2e grad_norm %.2e; per step %s reduce-scatters, %s "
                  "all-gathers (%d of [b, s/tp, h]: 4 in the blocks, the rest for the input and head weight "
                  "gradients), %s all-reduces (LayerNorm gradients, norm)" % (
                      name, worst, worst_norm, comm["reduce_scatter"]["calls"], comm["all_gather"]["calls"], gathers,
                      comm["all_reduce"]["calls"]))
        return check

    results.check("tp=2 --sp equals one rank: all-gather + reduce-scatter per block instead of all-reduces",
                  sequence_parallel("tp2-sp", ["--tp", "2", "--sp"], 1))
    results.check("dp2 x tp2 --sp equals one rank", sequence_parallel("dp2tp2-sp", ["--dp", "2", "--tp", "2", "--sp"], 2),
                  repetition=True)
results.finish()
