"""Checkpoints: MAE-tiny (4 encoder blocks, global batch 8 in 2 microbatches of 4) trained 6 steps
with a checkpoint at step 3 (--save-every 3). Resumed on the same layout (one rank; pp2 1F1B)
its steps 4-6 are bit-identical to the uninterrupted run's; saved on one layout and resumed on
another (dp4 ZeRO-3 -> dp2 x tp2, dp4 ZeRO-3 on 4 ranks -> pp2 on 2, pp2 -> one rank, dp2 x tp2
-> one rank) the
checkpoint is resharded on load and steps 4-6 equal one rank's within 1e-5 (loss and grad_norm;
the lr moves the loss and the clip engages). SIGTERM to a 2-rank run and SIGINT to a one-rank
run save and stop at a step boundary (exit 128 + signal), and the run resumes from there. A
SIGKILL during saves, or a save cut short, leaves the previous checkpoint the one resumed. A
rank killed (-9) mid-run of 30 steps saving every 10: the job ends in one line naming the rank,
and resumed from the newest checkpoint its steps are bit-identical to an uninterrupted run's;
that run's step-20 checkpoint resumed on one rank is within 1e-5.
Corrupt, truncated or foreign checkpoints are refused with one line naming the file, exit 1.
`cpc export-weights` writes safetensors that PyTorch's MAE loads by its own parameter names,
and whose loss equals cpc's at the next step.
"""
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np

from cpctest import (Results, SANITIZED, SOURCE, compile_plan, export_mae, load_jsonl, read_safetensors, run, same_steps,
                     tempdir, tool, MAE_CLIP, MAE_RECIPE, MPI_ENV)

results = Results()
STEPS, SAVE_AT = 6, 3
RECIPE = dict(MAE_RECIPE, gradient_accumulation=2)
TOL = 1e-5


def one_line_error(proc, *needles):
    assert proc.returncode == 1, "exit %d, expected 1:\n%s%s" % (proc.returncode, proc.stdout[-2000:], proc.stderr)
    lines = [l for l in proc.stderr.splitlines() if "error" in l]
    assert len(lines) == 1, "expected one error line, got:\n%s" % proc.stderr
    for needle in needles:
        assert needle in lines[0], "'%s' not in: %s" % (needle, lines[0])
    return lines[0]


with tempdir() as work:
    os.environ.update(MPI_ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", "4", "--depth", "4"])
    rng = np.random.default_rng(0)
    imgs, noise = os.path.join(work, "imgs.npy"), os.path.join(work, "noise.npy")
    np.save(imgs, rng.standard_normal((8, 3, 32, 32)).astype(np.float32))
    np.save(noise, rng.random((8, 16)).astype(np.float32))
    data = ["--input", "imgs=" + imgs, "--input", "noise=" + noise]
    plans = {}

    def plan(name, flags):
        if name not in plans:  # --microbatches sets a pipeline's accumulation
            recipe = MAE_RECIPE if "--microbatches" in flags else RECIPE
            plans[name], _ = compile_plan(work, model, name, flags, recipe)
        return plans[name]

    def train(name, flags, tag, extra=(), check=True):
        """Runs plan `name` (compiled once with `flags`), metrics to WORK/TAG.jsonl."""
        metrics = os.path.join(work, tag + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        proc = run([tool("cpc-run"), plan(name, flags), "--metrics", metrics, *data, *extra], check=check)
        return (load_jsonl(metrics) if os.path.exists(metrics) else []), proc

    def ckpt(tag):
        return os.path.join(work, "ckpt-" + tag)

    LAYOUTS = {"one": [], "pp2": ["--pp", "2", "--microbatches", "2"], "dp4z3": ["--dp", "4", "--zero", "3"],
               "dp2tp2": ["--dp", "2", "--tp", "2"]}
    base, proc = train("one", LAYOUTS["one"], "one", ["--steps", str(STEPS), "--checkpoint-dir", ckpt("one"),
                                                      "--save-every", str(SAVE_AT)])

    def baseline():
        clipped = sum(1 for m in base if m["grad_norm"] > MAE_CLIP)
        assert len(base) == STEPS and base[-1]["loss"] < 0.95 * base[0]["loss"], "the loss did not fall: %s" % (
            [m["loss"] for m in base])
        assert 0 < clipped, "the clip never engaged"
        assert sorted(os.listdir(ckpt("one"))) == ["step-00000003", "step-00000006"], os.listdir(ckpt("one"))
        assert "saved checkpoint" in proc.stdout
        print("   one rank: loss %.5f -> %.5f, clip engaged on %d of %d steps" % (base[0]["loss"], base[-1]["loss"],
                                                                                clipped, STEPS))

    results.check("one rank: the loss falls, the clip engages, checkpoints at steps 3 and 6", baseline)

    def resume_same_one_rank():
        ours, _ = train("one", [], "one-resumed", ["--steps", str(STEPS), "--resume",
                                                   os.path.join(ckpt("one"), "step-00000003")])
        same_steps(ours, base[SAVE_AT:], "one rank resumed at step 3")

    results.check("one rank resumed from step 3: steps 4-6 bit-identical", resume_same_one_rank)

    pp2, _ = train("pp2", LAYOUTS["pp2"], "pp2", ["--steps", str(STEPS), "--checkpoint-dir", ckpt("pp2"),
                                                  "--save-every", str(SAVE_AT)])

    def resume_same_pp2():
        same_steps(pp2, base, "pp2 against one rank", TOL)
        ours, _ = train("pp2", LAYOUTS["pp2"], "pp2-resumed",
                        ["--steps", str(STEPS), "--resume", os.path.join(ckpt("pp2"), "step-00000003")])
        same_steps(ours, pp2[SAVE_AT:], "pp2 resumed at step 3")

    results.check("pp2 1F1B resumed on pp2: steps 4-6 bit-identical", resume_same_pp2)

    def fp16_same_layout():
        # The loss scale and its growth and overflow trackers are states too: resumed, the scaler
        # goes on where it was.
        fp16 = ["--precision", "fp16"]
        ours, _ = train("fp16", fp16, "fp16", ["--steps", str(STEPS), "--checkpoint-dir", ckpt("fp16"),
                                                "--save-every", str(SAVE_AT)])
        resumed, _ = train("fp16", fp16, "fp16-resumed",
                           ["--steps", str(STEPS), "--resume", os.path.join(ckpt("fp16"), "step-00000003")])
        same_steps(resumed, ours[SAVE_AT:], "fp16 resumed at step 3")
        assert [m["loss_scale"] for m in resumed] == [m["loss_scale"] for m in ours[SAVE_AT:]], "loss scales differ"
        meta = json.load(open(os.path.join(ckpt("fp16"), "step-00000003", "metadata.json")))
        roles = {v["role"] for v in meta["variables"]}
        assert {"loss_scale", "growth_tracker", "exp_avg", "exp_avg_sq"} <= roles, roles

    results.check("fp16 resumed on its layout: bit-identical, the loss scaler's state kept", fp16_same_layout)

    def reshard(saved, tag, resumed_on):
        def check():
            ours, _ = train(resumed_on, LAYOUTS[resumed_on], tag,
                            ["--steps", str(STEPS), "--resume", os.path.join(ckpt(saved), "step-00000003")])
            same_steps(ours, base[SAVE_AT:], "%s -> %s" % (saved, resumed_on), TOL)
            worst = max(abs(a["loss"] - b["loss"]) / b["loss"] for a, b in zip(ours, base[SAVE_AT:]))
            print("   %s -> %s: worst loss difference %.2e" % (saved, resumed_on, worst))
        return check

    results.check("pp2 -> one rank: resharded, equal to one rank", reshard("pp2", "pp2-to-one", "one"))
    dp4, _ = train("dp4z3", LAYOUTS["dp4z3"], "dp4z3", ["--steps", str(SAVE_AT), "--checkpoint-dir", ckpt("dp4z3")])

    def dp4_first_steps():
        same_steps(dp4, base[:SAVE_AT], "dp4 ZeRO-3 against one rank", TOL)
        meta = json.load(open(os.path.join(ckpt("dp4z3"), "step-00000003", "metadata.json")))
        files = sorted(os.path.basename(p) for p in glob.glob(os.path.join(ckpt("dp4z3"), "step-00000003", "rank-*")))
        assert files == ["rank-%05d.bin" % r for r in range(4)], "each rank writes its share: %s" % files
        assert meta["layout"]["world_size"] == 4 and meta["layout"]["zero"] == 3, meta["layout"]

    results.check("dp4 ZeRO-3: every rank writes its share of the checkpoint", dp4_first_steps)
    results.check("dp4 ZeRO-3 -> dp2 x tp2: resharded, equal to one rank", reshard("dp4z3", "dp4-to-dp2tp2", "dp2tp2"))
    results.check("dp4 ZeRO-3 (4 ranks) -> pp2 (2 ranks): equal to one rank", reshard("dp4z3", "dp4-to-pp2", "pp2"))
    train("dp2tp2", LAYOUTS["dp2tp2"], "dp2tp2", ["--steps", str(SAVE_AT), "--checkpoint-dir", ckpt("dp2tp2")])
    # Its qkv weights, their moments and accumulators are kept head-major: written in the model's order.
    results.check("dp2 x tp2 -> one rank: equal to one rank", reshard("dp2tp2", "dp2tp2-to-one", "one"))

    def stop_by_signal(name, sig, ranks):
        def check():
            metrics = os.path.join(work, name + "-signal.jsonl")
            directory = ckpt(name + "-signal")
            args = [tool("cpc-run"), plan(name, LAYOUTS[name]), "--steps", "100000", "--metrics", metrics,
                    "--checkpoint-dir", directory, *data]
            proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            deadline = time.time() + 120
            while time.time() < deadline and (not os.path.exists(metrics) or len(load_jsonl(metrics)) < 2):
                time.sleep(0.05)
            proc.send_signal(sig)
            out, err = proc.communicate(timeout=120)
            assert proc.returncode == 128 + sig, "exit %d after signal %d:\n%s\n%s" % (proc.returncode, sig, out[-2000:],
                                                                                   err[-2000:])
            done = len(load_jsonl(metrics))
            assert os.listdir(directory) == ["step-%08d" % done], "checkpoints %s after %d steps" % (
                os.listdir(directory), done)
            assert "stopped by signal" in out, out[-1000:]
            ours, _ = train("one", [], name + "-signal-resumed", ["--steps", str(done + 1), "--resume", directory])
            reference = base if done + 1 <= STEPS else train("one", [], "one-long", ["--steps", str(done + 1)])[0]
            same_steps(ours, reference[done:done + 1], "resumed after the signal", TOL)
            print("   stopped after step %d, resumed on one rank" % done)
        return check

    results.check("SIGTERM to a 2-rank run (pp2): saves, exits 143, resumes",
                  stop_by_signal("pp2", signal.SIGTERM, 2))
    results.check("SIGINT to a one-rank run: saves, exits 130, resumes", stop_by_signal("one", signal.SIGINT, 1))

    def killed_during_saves():
        directory = ckpt("killed")
        shutil.copytree(ckpt("one"), directory)
        args = [tool("cpc-run"), plan("pp2", LAYOUTS["pp2"]), "--steps", "100000", "--checkpoint-dir", directory,
                "--save-every", "1", "--keep-checkpoints", "100000", *data]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        deadline = time.time() + 120
        while time.time() < deadline and len(glob.glob(os.path.join(directory, "step-0000000[89]"))) == 0:
            time.sleep(0.01)
        time.sleep(0.13)
        os.killpg(proc.pid, signal.SIGKILL)  # the launcher, mpirun and the ranks, wherever the save is
        proc.wait()
        subprocess.run(["pkill", "-9", "-f", directory])  # ranks re-parented away from the group
        # A save cut short by hand too: a step directory without its metadata.
        os.makedirs(os.path.join(directory, "step-00099999"))
        newest = max(int(p.rsplit("-", 1)[1]) for p in glob.glob(os.path.join(directory, "step-*"))
                     if os.path.exists(os.path.join(p, "metadata.json")))
        out = run([tool("cpc-run"), plan("one", []), "--steps", str(newest + 1), "--resume", directory, *data]).stdout
        assert "resumed from %s at step %d" % (os.path.join(directory, "step-%08d" % newest), newest) in out, out[-800:]
        print("   killed with %d complete checkpoints; resumed from step %d" % (
            len([p for p in glob.glob(os.path.join(directory, "step-*"))
                 if os.path.exists(os.path.join(p, "metadata.json"))]), newest))

    results.check("SIGKILL during saves: the newest complete checkpoint resumes", killed_during_saves)

    def kill_one_rank():
        # As a user meets it: 30 steps, a checkpoint every 10, one rank killed (-9) mid-run (under
        # the sanitizers 15 steps and every 5: the same saves, kill and resumes, fewer steps).
        total, every = (15, 5) if SANITIZED else (30, 10)
        full, _ = train("pp2", LAYOUTS["pp2"], "pp2-30", ["--steps", str(total), "--checkpoint-dir", ckpt("pp2-30"),
                                                          "--save-every", str(every), "--keep-checkpoints", "3"])
        directory, metrics = ckpt("rank-killed"), os.path.join(work, "pp2-killed.jsonl")
        args = [tool("cpc-run"), plan("pp2", LAYOUTS["pp2"]), "--steps", str(total), "--metrics", metrics,
                "--checkpoint-dir", directory, "--save-every", str(every), *data]
        proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 120
        while time.time() < deadline and (not os.path.exists(metrics) or len(load_jsonl(metrics)) < every + 2):
            time.sleep(0.002)
        mpirun = subprocess.run(["pgrep", "-P", str(proc.pid)], capture_output=True, text=True).stdout.split()
        ranks = subprocess.run(["pgrep", "-P", mpirun[0]], capture_output=True, text=True).stdout.split()
        os.kill(int(ranks[-1]), signal.SIGKILL)
        out, err = proc.communicate(timeout=120)
        line = one_line_error(subprocess.CompletedProcess(args, proc.returncode, out, err), "rank")
        killed = len(load_jsonl(metrics))
        assert every + 2 <= killed < total, "killed after step %d" % killed
        newest = killed // every * every
        assert sorted(os.listdir(directory))[-1] == "step-%08d" % newest, os.listdir(directory)
        resumed, _ = train("pp2", LAYOUTS["pp2"], "pp2-after-kill", ["--steps", str(total), "--resume", directory])
        same_steps(resumed, full[newest:], "steps %d-%d after the kill" % (newest + 1, total))
        other, _ = train("one", [], "pp2-20-on-one", ["--steps", str(total), "--resume",
                                                      os.path.join(ckpt("pp2-30"), "step-%08d" % (2 * every))])
        same_steps(other, full[2 * every:], "pp2's step-%d checkpoint on one rank" % (2 * every), TOL)
        print("   " + line)
        print("   a rank killed after step %d: resumed from step %d, steps %d-%d bit-identical; pp2's step %d on "
              "one rank within %g (loss %.4f -> %.4f)" % (killed, newest, newest + 1, total, 2 * every, TOL,
                                                          full[0]["loss"], full[-1]["loss"]))

    results.check("kill -9 of a rank at step ~15: resumed bit-identical; step 20 on one rank", kill_one_rank)

    def refused(tag, damage, *needles):
        def check():
            directory = ckpt("bad-" + tag)
            shutil.copytree(os.path.join(ckpt("dp4z3"), "step-00000003"), directory)
            damage(directory)
            _, proc = train("one", [], "bad-" + tag, ["--steps", str(STEPS), "--resume", directory], check=False)
            print("   " + one_line_error(proc, *needles))
        return check

    def flip_byte(d):
        path = os.path.join(d, "rank-00001.bin")
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0x40]))

    def truncate(d):
        path = os.path.join(d, "rank-00002.bin")
        os.truncate(path, os.path.getsize(path) - 4)

    def garble(d):
        with open(os.path.join(d, "metadata.json"), "w") as f:
            f.write('{"format": "cpc-checkpoint", "version": 1, "step": ')

    def rename_variable(d):
        path = os.path.join(d, "metadata.json")
        meta = json.load(open(path))
        meta["variables"][0]["name"] = "renamed"
        json.dump(meta, open(path, "w"))

    results.check("a flipped byte: refused (checksum)", refused("flip", flip_byte, "rank-00001.bin", "checksum"))
    results.check("a truncated shard: refused", refused("short", truncate, "rank-00002.bin", "incomplete or corrupt"))
    results.check("cut-short metadata: refused", refused("json", garble, "metadata.json", "not a checkpoint"))
    results.check("a variable missing: refused", refused("missing", rename_variable, "has no"))
    results.check("no checkpoint at all: refused", refused("empty", lambda d: shutil.rmtree(d) or os.makedirs(d),
                                                           "no checkpoint here"))

    def export_weights():
        out = os.path.join(work, "mae.safetensors")
        run([tool("cpc"), "export-weights", os.path.join(ckpt("dp4z3"), "step-00000003"), "-o", out])
        import torch
        sys.path.insert(0, os.path.join(SOURCE, "examples", "mae"))
        from mae_model import build_model
        torch_model = build_model("tiny", seed=0, depth=4)
        state = {name: torch.from_numpy(value.copy()) for name, value in read_safetensors(out).items()}
        missing, unexpected = torch_model.load_state_dict(state, strict=False)
        assert not unexpected, "names PyTorch's MAE lacks: %s" % unexpected
        assert not [n for n in missing if n in dict(torch_model.named_parameters())], "missing: %s" % missing
        x, n = torch.from_numpy(np.load(imgs)), torch.from_numpy(np.load(noise))
        with torch.no_grad():
            loss = sum(float(torch_model(x[i:i + 4], n[i:i + 4])) for i in (0, 4)) / 2
        ours = base[SAVE_AT]["loss"]  # step 4: the weights after step 3
        assert abs(loss - ours) / ours < TOL, "PyTorch's loss %.8f, cpc's %.8f" % (loss, ours)
        print("   %d tensors; PyTorch's loss with them %.7f, cpc's step 4 %.7f" % (len(state), loss, ours))

    results.check("export-weights: PyTorch's MAE loads them and gives cpc's loss", export_weights)

results.finish()
