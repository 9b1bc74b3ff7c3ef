"""Pipeline parallelism on MAE-tiny with 4 encoder blocks (examples/mae, exported by
torch.onnx.export) and on the GPT-style model with its head tied to the token embedding: the
model is cut into stages by cost, each stage its own forward and backward programs joined by
send/recv, run under GPipe, 1F1B and interleaved schedules with 4 microbatches (global batch 8).
Every layout trains equal to the single-rank run with 4-step gradient accumulation over 20
steps: loss and grad_norm per step within 1e-5 relative (the learning rate moves the loss, the
clip engages), final parameters within 1e-5: pp=2 and pp=4 under each schedule, tp2 x pp4,
dp2 x tp2 x pp2 (with ZeRO-1), dp2 x pp2 with ZeRO-3, GPT pp=2. Also: the config's
parallel.pipeline and NUM_MICRO_BATCHES give the plan the flags give; a broken schedule is
refused before a plan is written; `cpc inspect --schedule` lists each rank's actions; the
trace has one track per rank with the microbatches named and prints the idle shares; a rank
killed mid-pipeline ends the job within 30 s naming it.
"""
import json
import os
import signal
import subprocess
import time

import numpy as np

from cpctest import (compare_training, compile_plan, peak_error, train_plan, Results, export_mae, run, tempdir,
                     tool, MAE_CLIP, MAE_RECIPE, MPI_ENV, PYTHON, SANITIZED, SOURCE)

results = Results()
STEPS = 20
MICRO = 4


with tempdir() as work:
    os.environ.update(MPI_ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", "2", "--depth", "4"])
    rng = np.random.default_rng(0)
    imgs, noise = os.path.join(work, "imgs.npy"), os.path.join(work, "noise.npy")
    np.save(imgs, rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    np.save(noise, rng.random((8, 16)).astype(np.float32))
    data = {"imgs": imgs, "noise": noise}

    def train(name, flags, recipe=MAE_RECIPE):
        plan, _ = compile_plan(work, model, name, flags, recipe)
        return train_plan(plan, STEPS, data, os.path.join(work, name))

    single, single_params, _ = train("one", [], dict(MAE_RECIPE, gradient_accumulation=MICRO))

    def one_rank():
        clipped = sum(1 for m in single if m["grad_norm"] > MAE_CLIP)
        assert single[-1]["loss"] < 0.9 * single[0]["loss"], "the loss did not fall"
        assert 0 < clipped < STEPS, "the clip engaged on %d of %d steps" % (clipped, STEPS)
        print("   one rank (4 microbatches of 2): loss %.4f -> %.4f, clip engaged on %d of %d steps" % (
            single[0]["loss"], single[-1]["loss"], clipped, STEPS))

    results.check("one rank: the loss falls and the clip engages", one_rank)

    def layout(name, flags):
        def check():
            ours, params, summary = train(name, flags + ["--microbatches", str(MICRO)])
            worst, worst_norm = compare_training(ours, single, params, single_params, STEPS)
            sends = sum(1 for p in summary["programs"] for s in p["steps"] if s["op"] == "cpc.send")
            assert sends > 0, "no cpc.send in the plan"
            print("   %s: worst per-step difference loss %.2e grad_norm %.2e; %d ranks, %d sends in the plan, "
                  "rank 0 sends %d B per step" % (name, worst, worst_norm, summary["world_size"], sends,
                                                  ours[-1]["comm"].get("send", {}).get("bytes", 0)))
        return check

    # Under the sanitizers each schedule trains once (1F1B on 2 and 4 stages: the listing, the
    # trace and the kill below use those plans) and dp with ZeRO inside stages once (dp2 x pp2
    # ZeRO-3, GPipe); the other layouts repeat them on more ranks (8-rank runs take minutes
    # there; tp inside stages trains in test_tensor_parallel_2d.py and _search.py).
    for name, flags, repetition in [
            ("pp2 gpipe", "--pp 2 --schedule gpipe", True), ("pp2 1f1b", "--pp 2 --schedule 1f1b", False),
            ("pp2 interleaved", "--pp 2 --schedule interleaved --virtual-stages 2", False),
            ("pp4 gpipe", "--pp 4 --schedule gpipe", True), ("pp4 1f1b", "--pp 4", False),
            ("pp4 interleaved", "--pp 4 --schedule interleaved --virtual-stages 2", True),
            ("tp2 x pp4", "--tp 2 --pp 4", True), ("dp2 x tp2 x pp2", "--dp 2 --tp 2 --pp 2", True),
            ("dp2 x tp2 x pp2 ZeRO-1", "--dp 2 --tp 2 --pp 2 --zero 1", True),
            ("dp2 x pp2 ZeRO-3 gpipe", "--dp 2 --pp 2 --zero 3 --schedule gpipe", False)]:
        results.check("%s equals one rank" % name, layout(name.replace(" ", "-"), flags.split()), repetition)

    def config_keys():
        by_flags, _ = compile_plan(work, model, "flags", ["--pp", "2", "--microbatches", "4"], MAE_RECIPE)
        recipe = dict(MAE_RECIPE, parallel={"pipeline": 2, "tensor": {"mode": None, "size": 1}}, NUM_MICRO_BATCHES=4)
        by_config, out = compile_plan(work, model, "config", [], recipe)
        assert "pipeline: 2 stages x 1 chunks, 4 microbatches, 1f1b" in out.stdout, out.stdout
        assert open(by_flags, "rb").read() == open(by_config, "rb").read(), "the plans differ"
        table = out.stdout.splitlines()
        assert any(line.split()[:2] == ["1", "1"] for line in table), "no stage table:\n" + out.stdout

    results.check("parallel.pipeline and NUM_MICRO_BATCHES give the plan of --pp and --microbatches", config_keys)

    def broken_schedule():
        plan = os.path.join(work, "broken.plan")
        # Rank 0 waits for microbatch 0's gradient while rank 1 waits for microbatch 1's activation.
        proc = run([tool("cpc"), "compile", model, "--config", os.path.join(work, "flags.json"), "-o", plan,
                    "--pp", "2", "--microbatches", "4", "--debug-schedule",
                    "0=F0.0,B0.0,F0.1,B0.1,F0.2,B0.2,F0.3,B0.3;1=F1.1,B1.1,F1.0,B1.0,F1.2,B1.2,F1.3,B1.3"],
                   check=False)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, (proc.returncode, proc.stderr)
        for part in ("would hang", "would wait forever", "rank 0 waits to receive from rank 1",
                     "rank 1 waits to receive from rank 0", "B0.0", "F1.1"):
            assert part in lines[0], "'%s' not in: %s" % (part, lines[0])
        assert not os.path.exists(plan), "a plan that would hang was written"
        # Written anyway (a debug option), cpc-run refuses it before any rank starts.
        run([tool("cpc"), "compile", model, "--config", os.path.join(work, "flags.json"), "-o", plan,
             "--pp", "2", "--microbatches", "4", "--debug-unchecked", "--debug-schedule",
             "0=F0.0,B0.0,F0.1,B0.1,F0.2,B0.2,F0.3,B0.3;1=F1.1,B1.1,F1.0,B1.0,F1.2,B1.2,F1.3,B1.3"])
        proc = run([tool("cpc-run"), plan, "--steps", "1"], check=False, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1 and "the plan would hang" in lines[0], proc.stderr
        proc = run([tool("cpc"), "compile", model, "-o", plan, "--pp", "2", "--debug-schedule", "0=F0.0"], check=False)
        assert proc.returncode == 1 and "without a backward" in proc.stderr, proc.stderr

    results.check("a schedule that would hang is refused before a plan is written", broken_schedule)

    def bad_flags():
        plan = os.path.join(work, "bad.plan")
        config = os.path.join(work, "flags.json")
        bad_config = os.path.join(work, "bad-pipeline.json")
        with open(bad_config, "w") as f:
            json.dump(dict(MAE_RECIPE, parallel={"pipeline": 0}), f)
        for flags, expected in [(["--pp", "0"], "for the --pp option: expects a positive number"),
                                (["--pp", "2", "--schedule", "zigzag"], "for the --schedule option: expects gpipe, 1f1b or interleaved"),
                                (["--pp", "3", "--schedule", "interleaved", "--microbatches", "4"],
                                 "multiple of --pp 3"),
                                (["--pp", "2", "--virtual-stages", "2", "--microbatches", "4"],
                                 "--virtual-stages 2 needs --schedule interleaved"),
                                (["--pp", "2", "--mode", "infer"], "they do not apply to --mode infer"),
                                (["--pp", "1000", "--microbatches", "4"], "pipeline chunks"),
                                (["--pp", "2", "--pp-split", "nowhere", "--microbatches", "4"],
                                 "no op named like 'nowhere'"),
                                (["--tp", "2", "--sp", "--pp", "2", "--microbatches", "4"], "--sp with gradient"),
                                (["--virtual-stages", "2", "--microbatches", "4"], "need --pp N")]:
            proc = run([tool("cpc"), "compile", model, "--config", config, "-o", plan, *flags], check=False)
            lines = proc.stderr.strip().splitlines()
            assert proc.returncode == 1 and len(lines) == 1 and expected in lines[0], (flags, proc.stderr)
        proc = run([tool("cpc"), "compile", model, "--config", bad_config, "-o", plan], check=False)
        assert proc.returncode == 1 and "parallel.pipeline" in proc.stderr, proc.stderr
        assert not os.path.exists(plan)

    results.check("bad pipeline flags and config get one line naming the flag or key", bad_flags)

    def schedule_listing():
        out = run([tool("cpc"), "inspect", os.path.join(work, "pp2-1f1b.plan"), "--schedule"]).stdout
        assert "pipeline rank 0: F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 B0.3" in out, out[:2000]
        assert "pipeline rank 1: F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F1.3 B1.3" in out, out[:2000]
        assert "(P-1)/(M+P-1) = 0.2" in out, out[:2000]
        assert "no rank can wait forever" in out, out[-500:]

    results.check("cpc inspect --schedule lists each pipeline rank's actions", schedule_listing)

    def memory():
        def summary(name):
            return json.loads(run([tool("cpc"), "inspect", os.path.join(work, name + ".plan"), "--json"]).stdout)
        if not os.path.exists(os.path.join(work, "pp4-gpipe.plan")):  # not trained under the sanitizers
            compile_plan(work, model, "pp4-gpipe", ["--pp", "4", "--schedule", "gpipe", "--microbatches", str(MICRO)],
                         MAE_RECIPE)
        gpipe, f1b = (summary(n)["training"]["peak_bytes_per_rank"] for n in ("pp4-gpipe", "pp4-1f1b"))
        # GPipe keeps all 4 microbatches' activations on every stage, 1F1B at most P - r (as many
        # on rank 0 with M = P = 4, one on rank 3).
        assert gpipe[3] > f1b[3] and sum(gpipe) > sum(f1b), (gpipe, f1b)
        one = summary("one")
        params = lambda s, r: sum(4 * np.prod(b["shape"]) for i, b in enumerate(s["buffers"])
                                  if b["kind"] == "parameter" and any(
                                      i in st["in"] for p in s["programs"] if p["where"].get("pp", r) == r
                                      for st in p["steps"]))
        whole = params(one, 0)
        stages = [params(summary("pp4-1f1b"), r) for r in range(4)]
        assert max(stages) < whole and sum(stages) >= whole, (stages, whole)
        print("   predicted peak per rank, GPipe %s, 1F1B %s B; parameter bytes per stage %s of %d" % (
            gpipe, f1b, stages, whole))

    results.check("each stage holds its own parameters; GPipe's predicted memory exceeds 1F1B's", memory)

    def measured_peaks():
        # MAE-small at batch 8, pp2 with 4 microbatches: the stages' peaks differ, and cpc-run
        # reports the largest rank's measured peak against the plan's (its largest rank's)
        # prediction, within 5%.
        if SANITIZED:  # the sanitizers' allocator and shadow are measured too
            print("   (the normal build's test)")
            return
        small = export_mae("small", 17, os.path.join(work, "small"), extra=["--batch", "8"])
        errors = []
        for schedule in ("gpipe", "1f1b"):
            plan = os.path.join(work, "small-pp2-%s.plan" % schedule)
            run([tool("cpc"), "compile", small, "--pp", "2", "--schedule", schedule, "--microbatches", "4", "-o", plan])
            metrics = os.path.join(work, "small-pp2-%s.jsonl" % schedule)
            error, measured = peak_error(plan, extra=["--metrics", metrics])
            errors.append(error)
            # The last stage is predicted the larger (GPipe: 93.6 against 90.5 MB): the peak
            # reported is its, above rank 0's own.
            per_rank = json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)["training"]["peak_bytes_per_rank"]
            rank0 = max(json.loads(line)["measured_peak_bytes"] for line in open(metrics))
            assert rank0 <= measured and (per_rank[1] <= per_rank[0] or rank0 < measured), (per_rank, rank0, measured)
        print("   measured over predicted, GPipe %+.1f%%, 1F1B %+.1f%%" % tuple(errors))

    results.check("MAE-small pp2: the largest rank's measured peak is within 5% of the predicted", measured_peaks)

    def trace():
        path = os.path.join(work, "trace.json")
        out = run([tool("cpc-run"), os.path.join(work, "pp4-1f1b.plan"), "--steps", "2", "--trace", path]).stdout
        events = json.load(open(path))["traceEvents"]
        tracks = sorted({e["pid"] for e in events})
        assert tracks == [0, 1, 2, 3], tracks
        names = {e["name"] for e in events if e.get("cat") == "program"}
        for name in ("forward_0 mb 0", "backward_3 mb 3", "apply_2 1"):
            assert name in names, sorted(names)[:20]
        assert any(e["name"] == "send" for e in events) and any(e["name"] == "recv" for e in events)
        line = [l for l in out.splitlines() if l.startswith("pipeline idle share")]
        assert line and "rank 3" in line[0] and "(P-1)/(M+P-1) = 42.9%" in line[0], out
        print("   " + line[0])

    results.check("the trace has a track per rank, microbatches named, idle shares printed", trace)

    def killed_stage():
        plan = os.path.join(work, "pp2-1f1b.plan")
        proc = subprocess.Popen([tool("cpc-run"), plan, "--steps", "100000"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().startswith("training"), "no first line"
            victim = None
            for _ in range(100):  # this job's rank 1: a cpc-run of this plan whose MPI rank is 1
                for pid in filter(str.isdigit, os.listdir("/proc")):
                    try:
                        cmd = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
                        env = open("/proc/%s/environ" % pid, "rb").read().split(b"\0")
                    except OSError:
                        continue
                    if (cmd and cmd[0].endswith(b"cpc-run") and plan.encode() in cmd and
                            b"OMPI_COMM_WORLD_RANK=1" in env):
                        victim = int(pid)
                if victim:
                    break
                time.sleep(0.1)
            assert victim, "found no rank 1"
            killed = time.time()
            os.kill(victim, signal.SIGKILL)
            out, err = proc.communicate(timeout=30)
            took = time.time() - killed
        finally:
            if proc.poll() is None:
                proc.kill()
        assert proc.returncode == 1, proc.returncode
        assert "rank 1" in err and "signal 9" in err, err
        print("   job ended %.2f s after rank 1 (pipeline stage 1) was killed: %s" % (took, err.strip()[-200:]))

    results.check("a pipeline stage killed mid-run ends the job naming its rank", killed_stage)

    # The GPT-style model: the output head is the token embedding (one parameter) used by the
    # first and the last stage; each keeps a copy and accumulates its part of the gradient, the
    # parts meet before the update.
    gpt = os.path.join(work, "gpt-tiny-opset17.onnx")
    run([PYTHON, os.path.join(SOURCE, "examples", "gpt", "export.py"), "--size", "tiny", "--batch", "2",
         "--out-dir", work])
    rng = np.random.default_rng(2)
    idx, targets = os.path.join(work, "idx.npy"), os.path.join(work, "targets.npy")
    np.save(idx, rng.integers(0, 64, (8, 8)).astype(np.int64))
    np.save(targets, rng.integers(0, 64, (8, 8)).astype(np.int64))
    gpt_recipe = {"TOTAL_BATCH_SIZE": 8, "LR": 0.1, "WARMUP_EPOCHS": 0, "lr_schedule": "constant",
                  "clip_grad_norm": 1.0}

    def gpt_tied_head():
        def go(name, flags):
            plan, out = compile_plan(work, gpt, name, flags, gpt_recipe)
            return train_plan(plan, STEPS, {"idx": idx, "targets": targets}, os.path.join(work, name)), out
        (one, one_params, _), _ = go("gpt-one", ["--set", "gradient_accumulation=4"])
        clipped = sum(1 for m in one if m["grad_norm"] > 1.0)
        assert 0 < clipped < STEPS and one[-1]["loss"] < one[0]["loss"], [m["grad_norm"] for m in one]
        (ours, params, summary), out = go("gpt-pp2", ["--pp", "2", "--microbatches", "4"])
        worst, worst_norm = compare_training(ours, one, params, one_params, STEPS)
        holders = {p["name"] for p in summary["programs"]
                   if any(summary["buffers"][i]["name"] == "tok.weight" for s in p["steps"] for i in s["in"])}
        assert "forward_0" in holders and "forward_1" in holders, holders
        # Each stage accumulates its own part of the tied gradient; the parts meet once per step
        # in the update (and the new value goes back), never per microbatch.
        table = [b for b in summary["buffers"] if b["name"] == "tok.weight"][0]["shape"]
        sends = [p["name"] for p in summary["programs"] for st in p["steps"]
                 if st["op"] == "cpc.send" and summary["buffers"][st["in"][0]]["shape"] == table]
        assert sorted(sends) == ["apply_0", "apply_1"], sends
        print("   GPT pp2 (tied head read by both stages): loss %.2e grad_norm %.2e; clip engaged on %d steps" % (
            worst, worst_norm, clipped))

    results.check("GPT with its tied head on pp=2 equals one rank", gpt_tied_head)

results.finish()
