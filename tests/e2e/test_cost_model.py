#!/usr/bin/python3
"""The cost model end to end: `cpc calibrate` writes a cost profile of this machine (collectives
over 2 MPI ranks, GEMMs on a grid of shapes, attention, AdamW, memory-bound work, and each op of a
one-rank sample plan by its size); `cpc compile
--profile` prices the plan's step with it (compute, communication and pipeline idle on the slowest
rank), `cpc inspect` prints that prediction (or re-prices with --profile), and `cpc-run` prints
the measured step time next to it and records it in --metrics. A bad profile is refused in one
line naming the file and the key. How close the prediction comes is bench/cost_model.py's
business (timings differ between machines: no timed assertion here).
"""
import json
import os
import re

from cpctest import MAE_RECIPE, MPI_ENV, Results, export_mae, run, tempdir, tool

results = Results()

with tempdir() as work:
    profile = os.path.join(work, "profile.json")
    model = export_mae("tiny", 17, work, extra=["--batch", "4"])
    config = os.path.join(work, "recipe.json")
    with open(config, "w") as f:
        json.dump(dict(MAE_RECIPE, TOTAL_BATCH_SIZE=4), f)

    sample = os.path.join(work, "sample.plan")  # a one-rank training step: its ops' own rates
    run([tool("cpc"), "compile", model, "--config", config, "-o", sample])

    def calibrate():
        out = run([tool("cpc"), "calibrate", "-o", profile, "--quick", "--plan", sample], env=MPI_ENV).stdout
        assert "wrote " + profile in out, out
        p = json.load(open(profile))
        assert p["format"] == "cpc-cost-profile-1", p.keys()
        grid = p["compute"]["gemm_grid"]
        assert len(grid["flops_per_s"]) == len(grid["sizes"]) ** 3 and min(grid["flops_per_s"]) > 0, grid
        for kind in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast_from", "send"):
            link = p["collectives"][kind]["2"]
            assert link["latency_s"] > 0 and link["bytes_per_s"] > 0, (kind, link)
        for cls in ("gemm", "attention", "optimizer", "memory"):
            assert all(rate > 0 for _, rate in p["compute"][cls]), cls
        for op in ("cpc.gelu_grad", "cpc.layer_norm_grad", "cpc.multi_tensor_adamw", "cpc.matmul[batched]"):
            assert op in p["ops"] and all(rate > 0 for _, rate in p["ops"][op]), (op, sorted(p["ops"]))
        assert p["step_s"] > 0, p["step_s"]
        print("   " + out.strip().splitlines()[-1])
    results.check("cpc calibrate writes this machine's cost profile", calibrate)

    def compile_with(name, flags):
        plan = os.path.join(work, name + ".plan")
        out = run([tool("cpc"), "compile", model, "--config", config, "--profile", profile, "-o", plan, *flags]).stdout
        m = re.search(r"^predicted step time ([0-9.e+-]+) ms \(compute ([0-9.e+-]+), communication ([0-9.e+-]+), "
                      r"pipeline idle ([0-9.e+-]+) ms; profile (.*)\)$", out, re.M)
        assert m and m.group(5) == profile, out
        return plan, [float(m.group(i)) for i in range(1, 5)]

    def layouts():
        _, one = compile_with("one", [])
        _, dp2 = compile_with("dp2", ["--dp", "2"])
        _, pp2 = compile_with("pp2", ["--pp", "2", "--microbatches", "4", "--set", "TOTAL_BATCH_SIZE=16"])
        assert one[2] == 0 and one[3] == 0, one
        assert dp2[2] > 0 and dp2[1] < one[1], "dp2 must halve the compute and add communication: %s vs %s" % (dp2, one)
        assert pp2[3] > 0 and pp2[2] > 0, "a pipeline idles and sends: %s" % pp2
        for t in (one, dp2, pp2):
            assert abs(t[0] - (t[1] + t[2] + t[3])) <= 1e-3 * t[0], t
        print("   predicted ms (total, compute, comm, idle): one %s, dp2 %s, pp2 x4 %s" % (one, dp2, pp2))
    results.check("cpc compile --profile predicts each layout's step: compute, communication, pipeline idle", layouts)

    def inspect_and_run():
        plan, predicted = compile_with("dp2-run", ["--dp", "2"])
        out = run([tool("cpc"), "inspect", plan]).stdout
        assert re.search(r"predicted step time: [0-9.]+ ms \(compute .* profile %s\)" % re.escape(profile), out), out
        j = json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)
        step = j["training"]["predicted_step"]
        assert len(step["per_rank_s"]) == 2 and abs(step["total_s"] * 1e3 - predicted[0]) < 1e-3 * predicted[0], step
        metrics = os.path.join(work, "m.jsonl")
        out = run([tool("cpc-run"), plan, "--steps", "3", "--metrics", metrics], env=MPI_ENV).stdout
        m = re.search(r"^step time: measured ([0-9.]+) ms \(median of 3\), predicted ([0-9.]+) ms", out, re.M)
        assert m and abs(float(m.group(2)) - predicted[0]) <= 1e-3 * predicted[0] + 1e-3, out
        lines = [json.loads(line) for line in open(metrics)]
        assert all(abs(line["predicted_step_s"] - step["total_s"]) < 1e-12 for line in lines), lines[0]
        print("   " + m.group(0))
        # Priced again with the built-in rates: another prediction, the plan unchanged.
        builtin = os.path.join(work, "builtin.json")
        with open(builtin, "w") as f:
            json.dump({"format": "cpc-cost-profile-1"}, f)
        out = run([tool("cpc"), "inspect", plan, "--profile", builtin]).stdout
        assert "profile " + builtin + ")" in out, out
    results.check("cpc inspect prints the prediction and cpc-run the measured step next to it", inspect_and_run)

    def inference():
        plan = os.path.join(work, "infer.plan")
        run([tool("cpc"), "compile", model, "--mode", "infer", "--pp", "2", "--microbatches", "2", "--profile", profile,
             "-o", plan])
        out = run([tool("cpc-run"), plan, "--steps", "2"], env=MPI_ENV).stdout
        assert re.search(r"^run time: measured [0-9.]+ ms \(median of 2\), predicted [0-9.]+ ms", out, re.M), out
    results.check("an inference run prints its measured and predicted time", inference)

    def bad_profiles():
        cases = [("{", "not JSON"),
                 (json.dumps({"format": "cpc-cost-profile-1", "compute": {"gemm": [[1e6, -1]]}}),
                  "key 'compute.gemm': every point must be [work > 0, per second > 0]"),
                 (json.dumps({"format": "cpc-cost-profile-1", "collectives": {"send": {"2": {"latency_s": 1}}}}),
                  "key 'collectives.send.2': key 'bytes_per_s' must be a positive number"),
                 (json.dumps({"machine": "x"}), "not a cpc cost profile")]
        for text, expected in cases:
            bad = os.path.join(work, "bad.json")
            with open(bad, "w") as f:
                f.write(text)
            for args in ([tool("cpc"), "compile", model, "--config", config, "--profile", bad, "-o",
                          os.path.join(work, "bad.plan")],
                         [tool("cpc"), "inspect", os.path.join(work, "one.plan"), "--profile", bad]):
                proc = run(args, check=False)
                lines = proc.stderr.strip().splitlines()
                assert proc.returncode == 1 and len(lines) == 1 and bad in lines[0] and expected in lines[0], \
                    (args[1], proc.stderr)
        proc = run([tool("cpc"), "calibrate", "--ranks", "0", "-o", profile], check=False)
        assert proc.returncode == 1 and "--ranks expects a positive integer" in proc.stderr, proc.stderr
        dp2 = os.path.join(work, "dp2.plan")  # a sample plan must run on one rank
        proc = run([tool("cpc"), "calibrate", "-o", os.path.join(work, "x.json"), "--quick", "--plan", dp2], check=False,
                   env=MPI_ENV)
        assert proc.returncode == 1 and "a sample plan must run on one rank" in proc.stderr, proc.stderr
    results.check("a bad cost profile is refused in one line naming the file and the key", bad_profiles)

results.finish()
