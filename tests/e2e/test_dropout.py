"""Dropout in training mode (docs/random.md): masks from a counter-based generator keyed by
(seed, step, op, the element's position in the step's global tensor), so every layout drops the
same elements as one rank.

- The project's GPT (examples/gpt) with GPT-2's dropout at p = 0.1 (embeddings, attention
  probabilities, both residual branches), exported by torch.onnx.export in training mode: dp2,
  tp2, pp2 (2 microbatches of half the batch) and one rank with gradient accumulation over 2
  microbatches train equal to one rank on the whole batch over 12 steps (loss and grad_norm per
  step, final parameters, 1e-5), with a learning rate that moves the loss and a clip that engages.
- The seed: the same seed gives the same run, another seed other masks (another loss).
- One Dropout node (p = 0.1) on 2^16 ones, run as an inference plan: the kept fraction is 0.9
  within 5 standard deviations, kept elements are 1 / 0.9, the mask output agrees, and two
  seeds give different masks.
"""
import os

import numpy as np
import onnx
from onnx import TensorProto, helper

from cpctest import check_loss_moves_and_clip_engages, compare_training, compile_plan, train_plan, PYTHON, SOURCE, Results, run, tempdir, tool, MPI_ENV

results = Results()
STEPS = 12
CLIP = 1.0  # between the gradient norms of the steps (0.77 to 1.2): it engages on some
P = 0.1
BATCH, TOKENS, VOCAB = 8, 8, 64
RECIPE = {"TOTAL_BATCH_SIZE": BATCH, "LR": 0.1, "WARMUP_EPOCHS": 0, "lr_schedule": "constant",
          "clip_grad_norm": CLIP}


def export(work, batch):
    out = os.path.join(work, "b%d" % batch)
    run([PYTHON, os.path.join(SOURCE, "examples", "gpt", "export.py"), "--size", "tiny", "--batch", str(batch),
         "--dropout", str(P), "--out-dir", out])
    return os.path.join(out, "gpt-tiny-opset17-dropout.onnx")


def train(work, model, name, flags, recipe=None):
    plan, _ = compile_plan(work, model, name, flags, dict(RECIPE, **(recipe or {})))
    return train_plan(plan, STEPS, {"idx": os.path.join(work, "idx.npy"), "targets": os.path.join(work, "targets.npy")}, os.path.join(work, name))


def dropout_model(path):
    """y, mask = Dropout(x, ratio 0.1, training_mode true) on a [256, 256] float input."""
    ratio = helper.make_node("Constant", [], ["ratio"], value=helper.make_tensor("r", TensorProto.FLOAT, [], [P]))
    training = helper.make_node("Constant", [], ["training"],
                                value=helper.make_tensor("t", TensorProto.BOOL, [], [True]))
    node = helper.make_node("Dropout", ["x", "ratio", "training"], ["y", "mask"])
    graph = helper.make_graph([ratio, training, node], "dropout",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [256, 256])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [256, 256]),
                               helper.make_tensor_value_info("mask", TensorProto.BOOL, [256, 256])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)


with tempdir() as work:
    os.environ.update(MPI_ENV)
    whole, half = export(work, BATCH), export(work, BATCH // 2)
    rng = np.random.default_rng(3)
    np.save(os.path.join(work, "idx.npy"), rng.integers(0, VOCAB, (BATCH, TOKENS)).astype(np.int64))
    np.save(os.path.join(work, "targets.npy"), rng.integers(0, VOCAB, (BATCH, TOKENS)).astype(np.int64))
    single, single_params, _ = train(work, whole, "one", [])

    def one_rank():
        print("   one rank: " + check_loss_moves_and_clip_engages(single, CLIP, fall=0.9))

    results.check("one rank with dropout: the loss falls and the clip engages", one_rank)

    def layout(name, model, flags, recipe=None):
        def check():
            ours, params, _ = train(work, model, name, flags, recipe)
            worst, worst_norm = compare_training(ours, single, params, single_params, STEPS)
            print("   %s: worst loss %.1e, grad_norm %.1e" % (name, worst, worst_norm))
        results.check("%s with dropout equals one rank (1e-5)" % name, check)

    layout("dp2", whole, ["--dp", "2"])
    layout("tp2", whole, ["--tp", "2"])
    layout("pp2", half, ["--pp", "2", "--microbatches", "2"])
    layout("accumulation2", half, [], {"gradient_accumulation": 2})

    def seeds():
        same, _, _ = train(work, whole, "seed0", [], {"seed": 0})
        other, _, _ = train(work, whole, "seed7", [], {"seed": 7})
        assert [m["loss"] for m in same] == [m["loss"] for m in single], "seed 0 (the default) is not reproducible"
        assert other[0]["loss"] != single[0]["loss"], "seeds 0 and 7 give the same first loss"
        print("   first loss: seed 0 %.6f, seed 7 %.6f" % (single[0]["loss"], other[0]["loss"]))

    results.check("the same seed repeats a run; another seed draws other masks", seeds)

    def kept_fraction():
        model = os.path.join(work, "dropout.onnx")
        dropout_model(model)
        x = os.path.join(work, "x.npy")
        np.save(x, np.ones((256, 256), np.float32))
        masks = []
        for seed in (0, 1):
            plan = os.path.join(work, "dropout%d.plan" % seed)
            run([tool("cpc"), "compile", model, "--mode", "infer", "--seed", str(seed), "-o", plan])
            out = os.path.join(work, "out%d" % seed)
            run([tool("cpc-run"), plan, "--input", "x=" + x, "--output-dir", out])
            y, mask = np.load(os.path.join(out, "y.npy")), np.load(os.path.join(out, "mask.npy"))
            kept = mask.mean()
            bound = 5 * np.sqrt(P * (1 - P) / mask.size)
            assert abs(kept - (1 - P)) < bound, "kept fraction %.4f, expected 0.9 +- %.4f" % (kept, bound)
            assert np.array_equal(y != 0, mask), "the mask output differs from the kept elements"
            assert np.allclose(y[mask], 1 / (1 - P), rtol=1e-6), "kept elements are not scaled by 1 / (1 - p)"
            masks.append(mask)
            print("   seed %d: kept %.4f (0.9 +- %.4f)" % (seed, kept, bound))
        assert not np.array_equal(masks[0], masks[1]), "seeds 0 and 1 drew the same mask"
        assert abs((masks[0] == masks[1]).mean() - (0.81 + 0.01)) < 0.01, "the masks of two seeds are correlated"

    results.check("p = 0.1 keeps 0.9 of the elements; two seeds give different masks", kept_fraction)

results.finish()
