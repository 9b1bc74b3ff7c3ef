"""Mixed precision on MAE-tiny (examples/mae, exported by torch.onnx.export; 2 microbatches of 4
per step, 20 steps, lr 0.05 cosine, a clip that engages). --precision bf16 and fp16 (and the
config's fp16.mode) autocast the step: 16-bit matmuls and convs, f32 softmax / norms / losses /
sums, f32 master weights and AdamW states. Checked:
- the bf16 and fp16 loss curves stay within 2% of fp32's (mean over windows of 10 steps), and the
  plan really holds 16-bit activations and casts the weights once per step;
- fp16's dynamic loss scaling: a large initial scale overflows the first steps, each of them is
  skipped (parameters bit-identical across it) and halves the scale, which grows back after the
  growth interval; the steps after the skips are bit-identical to a fresh run from the scale they
  reached (so neither the parameters, the moments nor AdamW's step count moved); Colossal's
  hysteresis (fp16.mode "naive") waits for a second overflow; dp2 x tp2 and pp2 skip the same steps;
- dp2 x tp2, pp2 and dp2 with ZeRO-1/3 in bf16 equal one rank in bf16 within 2e-2
  per step; fp16 pp2 skips the steps one rank skips; dp2 sends its 16-bit gradients in 16 bits;
- fp16.mode gives the plan --precision gives; bad precision flags and keys are refused in one line.
"""
import os

import numpy as np
import onnx
from onnx import numpy_helper

from cpctest import Results, compile_plan, export_mae, run, tempdir, tool, train_plan, MAE_RECIPE, MPI_ENV

results = Results()
STEPS = 20
RECIPE = dict(MAE_RECIPE, gradient_accumulation=2)


def windows(lines, size=10):
    losses = [m["loss"] for m in lines]
    return [np.mean(losses[i:i + size]) for i in range(0, len(losses), size)]


def load_params(directory):
    return {n: np.load(os.path.join(directory, n)) for n in sorted(os.listdir(directory))}


with tempdir() as work:
    os.environ.update(MPI_ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", "4"])
    rng = np.random.default_rng(0)
    imgs, noise = os.path.join(work, "imgs.npy"), os.path.join(work, "noise.npy")
    np.save(imgs, rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    np.save(noise, rng.random((8, 16)).astype(np.float32))
    data = {"imgs": imgs, "noise": noise}

    def train(name, flags, recipe=RECIPE, steps=STEPS):
        plan, out = compile_plan(work, model, name, flags, recipe)
        if os.path.exists(os.path.join(work, name + ".jsonl")):  # cpc-run appends to --metrics
            os.remove(os.path.join(work, name + ".jsonl"))
        lines, params, summary = train_plan(plan, steps, data, os.path.join(work, name))
        return lines, params, summary, out

    fp32, _, _, _ = train("fp32", [])

    def curves():
        clipped = sum(1 for m in fp32 if m["grad_norm"] > RECIPE["clip_grad_norm"])
        assert fp32[-1]["loss"] < 0.9 * fp32[0]["loss"], "the loss did not fall"
        assert 0 < clipped < STEPS, "the clip engaged on %d of %d steps" % (clipped, STEPS)
        reference = windows(fp32)
        for precision in ("bf16", "fp16"):
            ours, _, summary, _ = train(precision, ["--precision", precision])
            worst = max(abs(a - b) / b for a, b in zip(windows(ours), reference))
            assert worst <= 0.02, "%s: a 10-step window's mean loss differs by %.2e" % (precision, worst)
            assert not any(m["skipped"] for m in ours), "%s skipped a step" % precision
            scales = {m["loss_scale"] for m in ours}
            assert scales == ({65536.0} if precision == "fp16" else {1.0}), scales
            dtypes = {b["dtype"] for b in summary["buffers"] if b["kind"] == "arena"}
            assert precision.replace("fp", "f") in dtypes, "%s: arena dtypes %s" % (precision, dtypes)
            print("   %s: loss %.4f -> %.4f (fp32 %.4f -> %.4f); worst 10-step window %.2e" % (
                precision, ours[0]["loss"], ours[-1]["loss"], fp32[0]["loss"], fp32[-1]["loss"], worst))

    results.check("bf16 and fp16 loss curves stay within 2% of fp32", curves)

    def casts_once_per_step():
        ir = os.path.join(work, "bf16.mlir")
        compile_plan(work, model, "ir", ["--precision", "bf16", "--dump-ir", ir], RECIPE)
        text = open(ir).read()
        accumulate = text[text.index("func.func @accumulate"):text.index("func.func @apply")]
        weight = 'cpc.parameter @blocks.0.mlp.fc1.weight '
        reads = [line for line in accumulate.splitlines() if weight in line]
        assert len(reads) == 1, reads
        value = reads[0].split("=")[0].strip()
        casts = [line for line in accumulate.splitlines() if "cpc.cast %s " % value in line]
        assert len(casts) == 1 and "xbf16>" in casts[0], casts
        matmuls = [line for line in accumulate.splitlines() if "cpc.matmul" in line]
        assert all("bf16" in line for line in matmuls), [m for m in matmuls if "bf16" not in m][:3]
        # Attention is one op in bf16 (its kernels compute the softmax in f32); the loss's
        # normalization and reductions stay f32.
        attention = [line for line in accumulate.splitlines() if "cpc.attention" in line]
        assert attention and all("xbf16>" in line and "xf32>" not in line for line in attention), attention[:2]
        assert "cpc.reduce_mean" in accumulate and all(
            "xf32>" in line.split("->")[0] for line in accumulate.splitlines() if "cpc.reduce_mean " in line), \
            "reduce_mean not in f32"
        assert "state <loss_scale>" not in text, "bf16 has no loss scaling"

    results.check("bf16: each weight is cast once per step, matmuls and attention in bf16, reductions in f32",
                  casts_once_per_step)

    # fp16 overflow: from 2^24 the first steps overflow (MAE-tiny's scaled gradients pass fp16's
    # range above about 2^21); constant lr so that a run from another step can be compared.
    CONSTANT = dict(RECIPE, lr_schedule="constant")

    def scaler(mode, scale, interval=3):
        return {"mode": mode, "initial_scale": scale, "growth_interval": interval}

    overflowed = {}

    def overflow():
        ours, params, _, _ = train("overflow", [], dict(CONSTANT, fp16=scaler("torch", 2.0 ** 24)))
        overflowed["run"] = ours
        skipped = [m["step"] for m in ours if m["skipped"]]
        assert skipped and skipped[0] == 1 and len(skipped) < STEPS // 2, "skipped steps %s" % skipped
        for a, b in zip(ours, ours[1:]):  # torch's rule: x0.5 on an overflow, x2 after 3 clean steps
            clean_run = 0
            for m in ours[:a["step"]][::-1]:
                if m["skipped"]:
                    break
                clean_run += 1
            want = a["loss_scale"] * (0.5 if a["skipped"] else 2.0 if clean_run % 3 == 0 and clean_run else 1.0)
            assert b["loss_scale"] == want, "step %d: scale %g after %g (skipped %s)" % (
                b["step"], b["loss_scale"], a["loss_scale"], a["skipped"])
        grown = [m["step"] for a, m in zip(ours, ours[1:]) if m["loss_scale"] > a["loss_scale"]]
        assert grown, "the scale never grew back"
        print("   skipped steps %s, scale %g -> %g, grew back at steps %s" % (
            skipped, ours[0]["loss_scale"], ours[-1]["loss_scale"], grown))

    results.check("fp16: overflowing steps are skipped, the scale backs off and grows back", overflow)

    def skips_change_nothing():
        ours = overflowed["run"]
        first_clean = next(m for m in ours if not m["skipped"])
        # Parameters bit-identical across skipped steps: after the first run of skips they are the
        # model's initial values (the exported initializers).
        j = first_clean["step"] - 1
        train("skip-after", [], dict(CONSTANT, fp16=scaler("torch", 2.0 ** 24)), steps=j)
        pa = load_params(os.path.join(work, "skip-after-params"))
        initial = {i.name + ".npy": numpy_helper.to_array(i) for i in onnx.load(model).graph.initializer}
        for n in pa:
            assert np.array_equal(pa[n], initial[n]), "%s changed in the skipped steps 1-%d" % (n, j)
        # After the skips the run is the one that starts at the scale they reached, bit for bit.
        fresh, _, _, _ = train("fresh", [], dict(CONSTANT, fp16=scaler("torch", first_clean["loss_scale"])),
                               steps=STEPS - j)
        for a, b in zip(ours[j:], fresh):
            assert (a["loss"], a["grad_norm"], a["loss_scale"], a["skipped"]) == (
                b["loss"], b["grad_norm"], b["loss_scale"], b["skipped"]), "step %d: %s vs %s" % (a["step"], a, b)
        print("   after the skips = a fresh run from %g" % first_clean["loss_scale"])

    # Under the sanitizers its two runs repeat the overflow run's path (fp16 steps, skipped or not).
    results.check("fp16: skipped steps change nothing (parameters, moments, AdamW's step)", skips_change_nothing,
                  repetition=True)

    def hysteresis():
        ours, _, _, _ = train("naive", [], dict(CONSTANT, fp16=scaler("naive", 2.0 ** 24)))
        assert ours[0]["skipped"] and ours[1]["skipped"], "the first steps did not overflow"
        assert ours[1]["loss_scale"] == ours[0]["loss_scale"] == 2.0 ** 24, "the first overflow backed off"
        assert ours[2]["loss_scale"] == 2.0 ** 23, ours[2]

    results.check("fp16 naive (Colossal's scaler): hysteresis 2 waits for the second overflow", hysteresis)

    overflow_single = {}

    def overflow_layout(name, flags, recipe_changes, ranks):
        # Step 1 overflows at 2^24, then 2^21 is clean: no scale near the edge of fp16's range
        # (about 2^22 for MAE-tiny, where a rounding of the layout decides) and no regrowth.
        recipe = dict(CONSTANT, fp16=dict(scaler("torch", 2.0 ** 24, interval=1000), backoff_factor=0.125))
        if "single" not in overflow_single:
            overflow_single["single"] = train("overflow-1", [], recipe)
        single, single_params, _, _ = overflow_single["single"]
        ours, params, summary, _ = train("overflow-" + name, flags, dict(recipe, **recipe_changes))
        assert summary["world_size"] == ranks
        assert [m["skipped"] for m in ours] == [m["skipped"] for m in single], "the skipped steps differ: %s vs %s" % (
            [m["step"] for m in ours if m["skipped"]], [m["step"] for m in single if m["skipped"]])
        assert any(m["skipped"] for m in ours), "no step overflowed"
        final, single_final = load_params(params), load_params(single_params)
        for n in final:  # a rank that had not skipped would hold NaN or a stepped parameter
            a, b = final[n], single_final[n]
            if n.endswith("qkv.bias.npy"):  # the keys' bias has no true gradient (see compare_training)
                third = a.shape[0] // 3
                a, b = np.concatenate([a[:third], a[2 * third:]]), np.concatenate([b[:third], b[2 * third:]])
            assert np.isfinite(a).all() and np.allclose(a, b, rtol=2e-2, atol=1e-2), "%s differs by %.3g" % (
                n, np.abs(a - b).max())
        assert [m["loss_scale"] for m in ours] == [m["loss_scale"] for m in single], "the scales differ"
        worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(ours, single))
        assert worst <= 2e-2, "loss differs by %.2e" % worst
        print("   %s skips steps %s as one rank; worst loss difference %.2e" % (
            name, [m["step"] for m in ours if m["skipped"]], worst))

    results.check("fp16 dp2 x tp2: every rank skips the same steps",
                  lambda: overflow_layout("dp2-tp2", ["--dp", "2", "--tp", "2"], {}, 4))
    results.check("fp16 pp2: every stage skips the same steps",
                  lambda: overflow_layout("pp2", ["--pp", "2", "--microbatches", "2"], {"gradient_accumulation": 1}, 2))

    bf16, _, _, _ = train("bf16-one", ["--precision", "bf16"])

    def layout(name, flags, recipe):
        def check():
            ours, _, summary, _ = train(name, ["--precision", "bf16"] + flags, recipe)
            worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(ours, bf16))
            worst_norm = max(abs(a["grad_norm"] - b["grad_norm"]) / b["grad_norm"] for a, b in zip(ours, bf16))
            assert worst <= 2e-2 and worst_norm <= 2e-2, "loss %.2e grad_norm %.2e" % (worst, worst_norm)
            print("   %s bf16 (%d ranks): worst per-step difference loss %.2e grad_norm %.2e" % (
                name, summary["world_size"], worst, worst_norm))
        return check

    # Under the sanitizers bf16 ZeRO-3 stays (16-bit gradients reduce-scattered into sharded f32
    # updates, nowhere else); dp2 x tp2 and pp2 in 16 bits run above (fp16's overflow layouts),
    # ZeRO-1's 16-bit all-reduce in the traffic check.
    for name, flags, recipe, repetition in [
            ("dp2 x tp2", "--dp 2 --tp 2", RECIPE, True),
            ("pp2", "--pp 2 --microbatches 2", dict(RECIPE, gradient_accumulation=1), True),
            ("dp2 ZeRO-1", "--dp 2 --zero 1", RECIPE, True),
            ("dp2 ZeRO-3", "--dp 2 --zero 3", RECIPE, False)]:
        results.check("%s in bf16 equals one rank in bf16 (2e-2)" % name,
                      layout(name.replace(" ", "-"), flags.split(), recipe), repetition)

    def traffic():
        # One microbatch per step: the gradients are all-reduced as backward makes them, in the
        # 16-bit type they come in (before the cast to f32 for the update).
        one = dict(RECIPE, gradient_accumulation=1, TOTAL_BATCH_SIZE=4)
        sent = {}
        for precision in ("fp32", "bf16"):
            plan, _ = compile_plan(work, model, "dp-" + precision, ["--dp", "2", "--precision", precision], one)
            small = {"imgs": os.path.join(work, "imgs4.npy"), "noise": os.path.join(work, "noise4.npy")}
            np.save(small["imgs"], np.load(imgs)[:4])
            np.save(small["noise"], np.load(noise)[:4])
            lines, _, _ = train_plan(plan, 1, small, os.path.join(work, "dp-" + precision))
            sent[precision] = lines[-1]["comm_bytes"]
        assert sent["bf16"] <= 0.55 * sent["fp32"], sent
        print("   dp2 bytes sent per step: fp32 %d, bf16 %d" % (sent["fp32"], sent["bf16"]))

    results.check("dp2: 16-bit gradients go on the wire in 16 bits", traffic)

    def config_keys():
        # The curves' plans came from --precision.
        by_config, _ = compile_plan(work, model, "config16", [], dict(RECIPE, fp16={"mode": "torch"}))
        assert open(os.path.join(work, "fp16.plan"), "rb").read() == open(by_config, "rb").read(), "the plans differ"
        by_key, _ = compile_plan(work, model, "key16", [], dict(RECIPE, precision="bf16"))
        assert open(os.path.join(work, "bf16.plan"), "rb").read() == open(by_key, "rb").read(), "the bf16 plans differ"

    results.check("fp16.mode and precision give the plans of --precision", config_keys)

    def bad_input():
        plan = os.path.join(work, "bad.plan")
        config = os.path.join(work, "fp32.json")
        for flags, expected in [(["--precision", "fp8"], "for the --precision option: expects fp32, bf16 or fp16"),
                                (["--precision", "bf16", "--mode", "infer"], "--precision applies to training"),
                                (["--set", 'fp16={"mode": "apex"}'], "fp16.mode"),
                                (["--set", 'fp16={"mode": "torch", "backoff_factor": 2}'], "fp16.backoff_factor"),
                                (["--set", 'fp16={"mode": "torch", "growth_interval": 0}'], "fp16.growth_interval"),
                                (["--set", 'fp16={"loss_scale": 2}'], "fp16.loss_scale"),
                                (["--set", "precision=fp64"], "precision")]:
            proc = run([tool("cpc"), "compile", model, "--config", config, "-o", plan, *flags], check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and expected in lines[0], (flags, proc.stderr)

    results.check("bad precision flags and fp16 keys: one line each, exit 1", bad_input)

results.finish()
