#!/usr/bin/python3
"""The whole layout by search: `cpc plan MODEL --devices N` compiles every layout cpc builds on N
ranks (dp x tp x pp meshes, tp 1d and 2d where it is a square, ZeRO 0-3 over dp, 1F1B and GPipe;
inference: no ZeRO, forward stages) on the same global batch and ranks them by predicted step
time; a memory budget rejects those whose predicted peak exceeds it, naming both; the table is
the same on every run. `cpc compile --auto --devices N` compiles the first, and that plan trains
equal to one rank (1e-5). Wrong uses get one line.
"""
import json
import os
import re
import time

import numpy as np

from cpctest import MAE_RECIPE, MPI_ENV, SANITIZED, Results, export_mae, run, tempdir, tool

results = Results()
ROW = re.compile(r"^\s+(~?\d+)\s+(.+?)\s{2,}([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+([0-9.]+)\s+(.*)$")
REJECTED = re.compile(r"^\s+rejected\s+(.+?)\s{2,}(.*)$")


def plan_table(model, *flags):
    """cpc plan's ranked rows [(name, step ms, peak MB, flags, estimated)] in order, its rejections
    {name: why} and its output."""
    out = run([tool("cpc"), "plan", model, *flags]).stdout
    ranked, rejected = [], {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            ranked.append((m.group(2).strip(), float(m.group(3)), float(m.group(7)), m.group(9).strip(),
                           m.group(1).startswith("~")))
        m = REJECTED.match(line)
        if m:
            rejected[m.group(1).strip()] = m.group(2)
    return ranked, rejected, out


def check_pruned(ranked, rejected, every):
    """Meshes cpc plan did not compile for their pipeline bound: every layout on them, compiled
    (`every`, --exhaustive), is at least 90% of that bound (what the search allows itself) and
    slower than the pick. Returns how many layouts were not compiled."""
    exact = {name: ms for name, ms, *_ in every}
    pruned = 0
    for name, why in rejected.items():
        m = re.search(r"not compiled: \d+ stages idle [0-9.]+% of a step of at least ([0-9.]+) ms", why)
        if m:
            pruned += 1
            assert name in exact, (name, why)
            assert exact[name] >= 0.9 * float(m.group(1)) and exact[name] >= ranked[0][1], (name, why, exact[name])
    return pruned


with tempdir() as work:
    model = export_mae("tiny", 17, work, extra=["--batch", "4"])
    config = os.path.join(work, "recipe.json")
    recipe = dict(MAE_RECIPE, TOTAL_BATCH_SIZE=16)  # 4 microbatches of the model's 4 samples
    with open(config, "w") as f:
        json.dump(recipe, f)
    base = ["--config", config, "--microbatches", "4"]

    def two_devices():
        ranked, rejected, out = plan_table(model, "--devices", "2", *base)
        names = sorted(name for name, *_ in ranked)
        assert names == sorted(["dp2", "dp2 zero1", "dp2 zero2", "dp2 zero3", "tp2", "pp2 1f1b", "pp2 gpipe"]), out
        assert not rejected, out
        steps = [ms for _, ms, *_ in ranked]
        assert steps == sorted(steps), "not ranked by step time:\n" + out
        again = plan_table(model, "--devices", "2", *base)[2]
        assert again == out, "two runs of cpc plan differ"
        print("   " + " > ".join("%s %.2f ms" % (n, ms) for n, ms, *_ in ranked))
    results.check("cpc plan ranks the 7 layouts of 2 devices by predicted step time, the same every run", two_devices)

    def budget():
        ranked, _, _ = plan_table(model, "--devices", "2", *base)
        peaks = sorted(peak for _, _, peak, *_ in ranked)
        limit = int((peaks[0] + peaks[-1]) / 2 * 1e6)  # between the smallest and the largest peak
        kept, rejected, out = plan_table(model, "--devices", "2", "--device-memory", str(limit), *base)
        assert kept and rejected, out
        assert all(peak * 1e6 <= limit * 1.0001 for _, _, peak, *_ in kept), out
        for name, why in rejected.items():
            assert why.startswith("over budget: predicted peak ") and ("> %d B" % limit) in why, (name, why)
        kept_none, rejected_all, out = plan_table(model, "--devices", "2", "--device-memory", "1000", *base)
        assert not kept_none and len(rejected_all) == 7, out
        # A layout fits only with 2% to spare (kPeakMargin): 1% above its predicted peak is too little.
        name, _, peak, *_ = ranked[0]
        tight = int(peak * 1e6 * 1.01)
        kept, rejected, out = plan_table(model, "--devices", "2", "--device-memory", str(tight), *base)
        assert name in rejected and "+ 2%% > %d B" % tight in rejected[name], out
    results.check("--device-memory rejects the layouts whose predicted peak exceeds it, naming both", budget)

    def four_devices():
        ranked, rejected, out = plan_table(model, "--devices", "4", *base)
        names = set(name for name, *_ in ranked) | set(rejected)
        # dp4 (ZeRO 0-3), dp2 tp2 (0-3), tp4 1d and 2d, dp2 pp2 (0-3) x 2 schedules, tp2 pp2 x 2, pp4 x 2
        expected = 4 + 4 + 2 + 8 + 2 + 2
        assert len(names) == expected, "%d layouts, expected %d:\n%s" % (len(names), expected, out)
        assert "tp4 2d" in names and "dp2 zero1 tp2" in names and "dp2 zero3 pp2 1f1b" in names, out
        for name, why in rejected.items():
            assert why, name
        print("   %d ranked, %d rejected; first %s" % (len(ranked), len(rejected), ranked[0][0]))
    results.check("cpc plan --devices 4 enumerates meshes, 2d where tp is a square, ZeRO and schedules",
                  four_devices)

    def eight_devices():
        # 50 candidates: each mesh compiled once (ZeRO 0, 1F1B), the other layouts on it estimated
        # from that, the 4 best compiled.
        if SANITIZED:  # dozens of compiles under the sanitizers: minutes
            print("   (the normal build's test)")
            return
        start = time.perf_counter()
        ranked, rejected, out = plan_table(model, "--devices", "8", *base)
        estimated_s = time.perf_counter() - start
        compiled = [row for row in ranked if not row[4]]
        assert ranked[0] == compiled[0] and any(row[4] for row in ranked) and "~: estimated" in out, out
        assert len(ranked) + len(rejected) == 50, out
        start = time.perf_counter()
        every, every_rejected, every_out = plan_table(model, "--devices", "8", "--exhaustive", *base)
        exhaustive_s = time.perf_counter() - start
        assert set(n for n, *_ in ranked) | set(rejected) == set(n for n, *_ in every) | set(every_rejected), out
        assert not any(row[4] for row in every), every_out
        # The pick, compiled, is the exhaustive search's first, or within 10% of it.
        exact = {name: ms for name, ms, *_ in every}
        # A mesh not compiled for its pipeline bound: every layout on it, compiled, is at least
        # 90% of that bound (what the search allows itself) and slower than the pick.
        check_pruned(ranked, rejected, every)
        assert exact[ranked[0][0]] <= 1.10 * every[0][1], (ranked[0], every[0])
        assert abs(exact[ranked[0][0]] - ranked[0][1]) <= 1e-6 * max(1.0, ranked[0][1]) + 0.01, (ranked[0], every[0])
        print("   %d layouts: estimated then 4 compiled %.1f s, first %s (%.2f ms); every one compiled %.1f s, "
              "first %s (%.2f ms)" % (len(ranked) + len(rejected), estimated_s, ranked[0][0], ranked[0][1],
                                      exhaustive_s, every[0][0], every[0][1]))
    results.check("cpc plan --devices 8 compiles each mesh once, estimates its other layouts and compiles the "
                  "best 4; its pick is within 10% of compiling every layout", eight_devices)

    def pipeline_bound():
        # MAE-small at batch 8 on 8 devices: eight stages idle 64% of the step (4 microbatches),
        # which puts them above tensor parallelism before they are compiled.
        if SANITIZED:
            print("   (the normal build's test)")
            return
        small = export_mae("small", 17, os.path.join(work, "small"), extra=["--batch", "8"])
        ranked, rejected, out = plan_table(small, "--devices", "8", "--microbatches", "4")
        every, _, _ = plan_table(small, "--devices", "8", "--microbatches", "4", "--exhaustive")
        pruned = check_pruned(ranked, rejected, every)
        assert pruned > 0, out
        assert ranked[0][0] == every[0][0], (ranked[0], every[0])
        print("   %d layouts not compiled for their pipeline bound, each slower compiled; first %s" %
              (pruned, ranked[0][0]))
    results.check("cpc plan does not compile a pipeline whose fill and drain alone put it above the best layout; "
                  "compiled, each is", pipeline_bound)

    def auto_trains_as_one_rank():
        ranked, _, _ = plan_table(model, "--devices", "2", *base)
        plan = os.path.join(work, "auto.plan")
        out = run([tool("cpc"), "compile", model, "--auto", "--devices", "2", *base, "-o", plan]).stdout
        m = re.search(r"^auto: (.+) \((.*)\), the fastest of 7 layouts", out, re.M)
        assert m and m.group(1) == ranked[0][0], out
        one = os.path.join(work, "one.plan")
        run([tool("cpc"), "compile", model, *base, "-o", one])
        rng = np.random.default_rng(0)
        imgs, noise = os.path.join(work, "imgs.npy"), os.path.join(work, "noise.npy")
        np.save(imgs, rng.standard_normal((16, 3, 32, 32)).astype(np.float32))
        np.save(noise, rng.random((16, 16)).astype(np.float32))
        losses = []
        for p in (one, plan):
            metrics = p + ".jsonl"
            run([tool("cpc-run"), p, "--steps", "3", "--metrics", metrics, "--input", "imgs=" + imgs, "--input",
                 "noise=" + noise], env=MPI_ENV)
            losses.append([(line["loss"], line["grad_norm"]) for line in map(json.loads, open(metrics))])
        for (a, ga), (b, gb) in zip(*losses):
            assert abs(a - b) <= 1e-5 * abs(a) and abs(ga - gb) <= 1e-5 * abs(ga), losses
        print("   auto chose %s (%s); losses %s" % (m.group(1), m.group(2), [round(l, 6) for l, _ in losses[1]]))
    results.check("cpc compile --auto --devices 2 compiles cpc plan's first layout, which trains as one rank",
                  auto_trains_as_one_rank)

    def inference():
        infer_model = export_mae("tiny", 17, work, extra=["--batch", "4", "--all-outputs"])
        infer_model = infer_model.replace(".onnx", "-all.onnx")
        ranked, rejected, out = plan_table(infer_model, "--devices", "2", "--mode", "infer", "--microbatches", "2")
        assert sorted(n for n, *_ in ranked) + sorted(rejected) == ["dp2", "pp2 forward", "tp2"], out
    results.check("inference plans: dp, tp and forward pipeline stages, no ZeRO", inference)

    def explain():
        ranked, _, out = plan_table(model, "--devices", "2", "--explain", *base)
        assert "\nwhy %s (rank 1):" % ranked[0][0] in out, out[-2000:]
        searched = next(i for i, row in enumerate(ranked) if "--tp-search" in row[3])
        why_not = out.split("why not %s (rank %d):" % (ranked[searched][0], searched + 1))
        assert searched == 0 or len(why_not) == 2, "no explanation of the fastest layout by search"
        section = why_not[-1]
        variables = re.findall(r"^    variable (\S+): (\[[^]]*\]) (\d+) B, ([0-9.]+) us(.*)$", section, re.M)
        assert len(variables) >= 10, section[:2000]
        # Each variable names its layout and prices every other layout it was offered, or says
        # why it was offered none.
        alone = [v for v in variables if not re.search(r"; \[[^]]*\] [+-][0-9.]+ us [+-]\d+ B", v[4])]
        assert all(re.search(r"; (no dim divides|decided before the search)", v[4]) for v in alone), alone[:3]
        assert len(alone) < len(variables) / 2, alone[:3]
        assert any(layout != "[-, -]" and layout.count("tp") for _, layout, *_ in variables), "nothing split"
        reshards = re.findall(r"^    reshard at \S+: .* (\d+) B, ([0-9.]+) us$", section, re.M)
        assert reshards and all(float(us) > 0 for _, us in reshards), section[:2000]
    results.check("cpc plan --explain says per variable the layout the search chose and what the others cost, "
                  "per resharding its bytes and time", explain)

    def wrong_uses():
        for args, expected in [(["plan", model], "'cpc plan' needs --devices N"),
                               (["plan", model, "--devices", "2", "--precisions", "fp8"], "--precisions expects"),
                               (["compile", model, "--auto", "-o", "x.plan"], "--auto and --devices N go together"),
                               (["compile", model, "--auto", "--devices", "2", "--dp", "2", "-o", "x.plan"],
                                "--auto chooses --dp"),
                               (["compile", model, "--auto", "--devices", "2", "--device-memory", "1000", *base, "-o",
                                 os.path.join(work, "x.plan")], "--auto: no layout of 2 devices fits")]:
            proc = run([tool("cpc"), *args], check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and expected in lines[0], (args, proc.stderr)
    results.check("wrong uses of cpc plan and --auto get one line", wrong_uses)

results.finish()
