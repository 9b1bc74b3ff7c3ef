"""The README's main command as a new user runs it (`scripts/demo`, after `scripts/setup`): MAE-tiny
trained on 8 ranks (dp2 x tp2 x pp2) from the photos of Debian's scikit-image package cut into
crops, a checkpoint every 20 steps, the run plotted. Checks: the loss falls, the data is read in
epochs of 20 steps, the checkpoints are there and resume, and run.png is a PNG of the run.
"""
import os
import struct
import subprocess

from cpctest import MPI_ENV, SOURCE, Results, load_jsonl, run, tempdir, tool

STEPS = 21  # one epoch of 160 crops in batches of 8, and a step of the next

results = Results()
with tempdir() as work:
    out = os.path.join(work, "demo")
    env = dict(os.environ, CPC_DEMO_DIR=out, CPC_DEMO_STEPS=str(STEPS), **MPI_ENV)
    demo = subprocess.run([os.path.join(SOURCE, "scripts", "demo")], cwd=SOURCE, env=env, capture_output=True,
                          text=True, timeout=900)

    def demo_trains_on_the_photos():
        assert demo.returncode == 0, "scripts/demo exit %d:\n%s%s" % (demo.returncode, demo.stdout[-3000:],
                                                                      demo.stderr[-3000:])
        assert "wrote 160 crops" in demo.stdout, demo.stdout[-2000:]
        assert "160 images in 10 classes" in demo.stdout, demo.stdout[-2000:]
        metrics = load_jsonl(os.path.join(out, "metrics.jsonl"))
        assert [m["step"] for m in metrics] == list(range(1, STEPS + 1))
        assert [m["epoch"] for m in metrics] == [0] * 20 + [1], [m["epoch"] for m in metrics]
        first, last = metrics[0]["loss"], min(m["loss"] for m in metrics[-5:])
        assert last < 0.9 * first, "the loss did not fall: %s" % [round(m["loss"], 4) for m in metrics]
        print("   8 ranks, loss %.4f -> %.4f over %d steps" % (first, metrics[-1]["loss"], STEPS))

    results.check("scripts/demo: MAE-tiny on 8 ranks learns from the photos", demo_trains_on_the_photos)

    def checkpoints_resume():
        ckpt = os.path.join(out, "checkpoints")
        assert sorted(os.listdir(ckpt)) == ["step-00000020", "step-00000021"], os.listdir(ckpt)
        again = os.path.join(work, "again.jsonl")
        run([tool("cpc-run"), os.path.join(out, "mae-tiny.plan"), "--data", os.path.join(out, "photos"),
             "--data-threads", "1", "--resume", os.path.join(ckpt, "step-00000020"), "--steps", str(STEPS),
             "--metrics", again], env=MPI_ENV)
        resumed, original = load_jsonl(again), load_jsonl(os.path.join(out, "metrics.jsonl"))[-1]
        assert len(resumed) == 1 and resumed[0]["loss"] == original["loss"], (resumed, original)

    results.check("its checkpoint resumes: step 21 again, bit-identical", checkpoints_resume)

    def plotted():
        with open(os.path.join(out, "run.png"), "rb") as f:
            head = f.read(24)
        assert head[:8] == b"\x89PNG\r\n\x1a\n", head
        width, height = struct.unpack(">II", head[16:24])
        assert (width, height) == (1200, 800), (width, height)

    results.check("the run is plotted into run.png", plotted)

results.finish()
