"""Datasets: MAE-tiny (32x32 images, 4 encoder blocks, global batch 8 in 2 microbatches of 4)
trained from an ImageFolder tree of 24 PNG and JPEG images of assorted sizes in 3 classes with
`cpc-run --data` (decoded and augmented as MAE pretrains, the masking noise drawn per step):
without --steps it trains NUM_EPOCHS epochs of 24 / 8 = 3 steps; dp2, dp2 x tp2 ZeRO-1 and pp2
read only their rows of each global batch and equal one rank within 1e-5 on loss and grad_norm;
a GPT reads a 1-D token stream (tokens and next tokens) on one rank and dp2 alike;
1 and 3 decoding threads give bit-identical losses; a run checkpointed after epoch 1 and resumed
on dp2 reads what the uninterrupted run read. A .npy dataset works too. An empty folder, a
corrupt image and a folder for a plan without an image input are refused in one line.
"""
import base64
import json
import os
import shutil
import struct
import subprocess
import zlib

import numpy as np

from cpctest import (Results, SANITIZED, SOURCE, compile_plan, export_mae, load_jsonl, run, same_steps, tempdir, tool,
                     MAE_RECIPE, MPI_ENV)

results = Results()
RECIPE = dict(MAE_RECIPE, gradient_accumulation=2, NUM_EPOCHS=2, WARMUP_EPOCHS=1, seed=7)
TOL = 1e-5
# A 24x16 baseline JPEG (quality 90, 4:2:0), written once with libjpeg-turbo's jpeg_write_scanlines.
JPEG_24x16 = base64.b64decode(
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAMCAgMCAgMDAwMEAwMEBQgFBQQEBQoHBwYIDAoMDAsKCwsNDhIQDQ4RDgsLEBYQERMU"
    "FRUVDA8XGBYUGBIUFRT/2wBDAQMEBAUEBQkFBQkUDQsNFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQUFBQU"
    "FBQUFBQUFBT/wAARCAAQABgDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUF"
    "BAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVW"
    "V1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi"
    "4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAEC"
    "AxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVm"
    "Z2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq"
    "8vP09fb3+Pn6/9oADAMBAAIRAxEAPwD4/wBE+F/3f3X6V3+ifC/7v7n9K990T4X/AHf3P6V6Bonwv+7+5/Svpsfxbv7x8Vwjxz8P"
    "vngWifC/7v7n9KK+vNE+F/3f3X6UV8DX4t9/4j+t8q45/wBmXvn/2Q==")


def png_bytes(rgb):
    """A minimal RGB PNG (8-bit, no interlace) of an H x W x 3 uint8 array."""
    h, w, _ = rgb.shape
    raw = b"".join(b"\x00" + rgb[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)) +
            chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def make_folder(root, rng, per_class=8, classes=("cat", "dog", "fish")):
    for c, name in enumerate(classes):
        os.makedirs(os.path.join(root, name))
        for i in range(per_class):
            path = os.path.join(root, name, "img%02d" % i)
            if i == 0:  # one JPEG per class
                with open(path + ".jpg", "wb") as f:
                    f.write(JPEG_24x16)
                continue
            h, w = rng.integers(20, 70, size=2)
            base = rng.integers(0, 256, size=(h, w, 3))
            img = ((base + 80 * c) % 256).astype(np.uint8)
            with open(path + ".png", "wb") as f:
                f.write(png_bytes(img))


with tempdir() as work:
    os.environ.update(MPI_ENV)
    model = export_mae("tiny", 17, work, extra=["--batch", "4", "--depth", "4"])
    folder = os.path.join(work, "images")
    make_folder(folder, np.random.default_rng(0))
    plans = {}

    def plan(name, flags):
        if name not in plans:
            recipe = dict(RECIPE, gradient_accumulation=None) if "--microbatches" in flags else RECIPE
            recipe = {k: v for k, v in recipe.items() if v is not None}
            plans[name], _ = compile_plan(work, model, name, flags, recipe)
        return plans[name]

    LAYOUTS = {"one": [], "dp2": ["--dp", "2"], "dp2tp2z1": ["--dp", "2", "--tp", "2", "--zero", "1"],
               "pp2": ["--pp", "2", "--microbatches", "2"]}

    def train(layout, tag, extra=(), data=folder, check=True):
        metrics = os.path.join(work, tag + ".jsonl")
        if os.path.exists(metrics):
            os.remove(metrics)
        proc = run([tool("cpc-run"), plan(layout, LAYOUTS[layout]), "--data", data, "--metrics", metrics, *extra],
                   check=check)
        return (load_jsonl(metrics) if os.path.exists(metrics) else []), proc

    base, base_proc = train("one", "one", ["--checkpoint-dir", os.path.join(work, "ckpt"), "--save-every", "3"])

    def epochs():
        assert [m["step"] for m in base] == list(range(1, 7)), "steps %s" % [m["step"] for m in base]
        assert [m["epoch"] for m in base] == [0, 0, 0, 1, 1, 1], [m["epoch"] for m in base]
        out = base_proc.stdout
        assert "24 images in 3 classes" in out and "3 steps per epoch" in out, out[:600]
        assert "img/s per decoding thread" in out, out[-600:]
        # The data pipeline's memory is measured apart and left out of the plan's measured peak.
        pipeline = [l for l in out.splitlines() if l.startswith("data pipeline: ")]
        assert pipeline and int(pipeline[0].split()[2]) > 0, out[-800:]
        assert "without the data pipeline's %s B" % pipeline[0].split()[2] in out, out[-800:]
        losses = [m["loss"] for m in base]
        assert len(set(losses)) == len(losses), "the data does not change between steps: %s" % losses
        print("   " + [l for l in out.splitlines() if l.startswith("data:")][0])
        print("   losses %s" % " ".join("%.5f" % l for l in losses))

    results.check("one rank: 2 epochs of 3 steps from the folder", epochs)

    def layout(name):
        def check():
            ours, _ = train(name, name)
            same_steps(ours, base, name + " against one rank", TOL)
        return check

    # Under the sanitizers every reader runs once (images on one rank, dp2 and pp2, a progress
    # bar, other decoding thread counts, a resumed position, reduced and exact JPEG decoding, a
    # .npy and a token stream, every refusal); dp2 x tp2 and the other datasets on dp2 repeat
    # the dp2 folder's split of the rows.
    for name in ("dp2", "dp2tp2z1", "pp2"):
        results.check("%s reads its rows and equals one rank" % name, layout(name), repetition=name == "dp2tp2z1")

    def progress_bar():
        # On a terminal (a pty by `script`): one line per epoch, redrawn with a bar and an ETA at
        # each step, also through the launcher's mpirun (its ranks write into a pipe); in a pipe:
        # a line per step.
        for name in ("one", "dp2"):
            command = " ".join([tool("cpc-run"), plan(name, LAYOUTS[name]), "--data", folder])
            proc = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, timeout=300)
            assert proc.returncode == 0, proc.stdout[-2000:]
            out = proc.stdout.decode()  # bytes: text mode would read each \r as a newline
            steps = [l for l in out.replace("\r\n", "\n").split("\n") if "\x1b[K[" in l]
            assert len(steps) == 2, "%s: %d lines with steps, expected one per epoch:\n%s" % (name, len(steps), out[-1500:])
            assert all(l.count("\x1b[K[") == 3 for l in steps) and "ETA" in out, out[-1500:]
        assert base and "\x1b[K" not in base_proc.stdout and base_proc.stdout.count("/6  loss") == 6, base_proc.stdout[-800:]

    results.check("a progress bar on a terminal, a line per step in a pipe", progress_bar)

    def threads():
        ours, _ = train("one", "threads3", ["--data-threads", "3"])
        same_steps(ours, base, "3 decoding threads against 2")
        ours, _ = train("one", "threads1", ["--data-threads", "1"])
        same_steps(ours, base, "1 decoding thread against 2")

    results.check("1, 2 and 3 decoding threads: bit-identical", threads)

    def resumed():
        ours, _ = train("dp2", "resumed", ["--resume", os.path.join(work, "ckpt", "step-00000003")])
        same_steps(ours, base[3:], "resumed on dp2 after epoch 0", TOL)

    results.check("checkpoint after epoch 0, resumed on dp2: the same data", resumed)

    def reduced_jpeg_decode():
        # Photo-sized JPEGs (Pillow writes them): most crops of 160x120 at S = 32 allow a decode at
        # 1/2 or 1/4. The fast decode (the default) reads the same on dp2 as on one rank; the
        # exact one (torchvision's pixels) gives another batch.
        from PIL import Image
        photos = os.path.join(work, "photos")
        rng = np.random.default_rng(5)
        y, x = np.mgrid[0:120, 0:160]
        for i in range(16):
            os.makedirs(os.path.join(photos, "c%d" % (i % 2)), exist_ok=True)
            phase = rng.random(3) * 6.28
            img = np.stack([127 + 100 * np.sin(x / (17 + 5 * c) + y / (23 + 3 * c) + phase[c]) for c in range(3)], -1)
            Image.fromarray(img.astype(np.uint8)).save(os.path.join(photos, "c%d" % (i % 2), "p%02d.jpg" % i),
                                                       quality=90)
        fast, proc = train("one", "photos-fast", ["--steps", "2"], data=photos)
        assert "JPEGs decoded reduced" in proc.stdout, proc.stdout[-800:]
        if not SANITIZED:  # a repetition of the folder's dp2 there
            fast_dp2, _ = train("dp2", "photos-fast-dp2", ["--steps", "2"], data=photos)
            same_steps(fast_dp2, fast, "fast decode, dp2 against one rank", TOL)
        exact, _ = train("one", "photos-exact", ["--steps", "2", "--data-decode", "exact"], data=photos)
        assert exact[0]["loss"] != fast[0]["loss"], "--data-decode exact read the same pixels as fast"
        print("   step 1 loss: fast %.6f, exact %.6f" % (fast[0]["loss"], exact[0]["loss"]))

    results.check("photo-sized JPEGs decoded reduced: dp2 equals one rank; exact differs", reduced_jpeg_decode)

    def npy_dataset():
        path = os.path.join(work, "images.npy")
        np.save(path, np.random.default_rng(1).standard_normal((16, 3, 32, 32)).astype(np.float32))
        one, out = train("one", "npy-one", ["--steps", "4"], data=path)
        assert "16 samples -> 'imgs'" in out.stdout, out.stdout[:600]
        if not SANITIZED:  # a repetition of the folder's dp2 there
            dp2, _ = train("dp2", "npy-dp2", ["--steps", "4"], data=path)
            same_steps(dp2, one, "a .npy dataset on dp2", TOL)

    results.check("a .npy dataset: dp2 equals one rank", npy_dataset)

    def gpt_tokens():
        # A 1-D token stream: windows of the GPT's 64 tokens, the targets the window shifted by one.
        run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "gpt", "export.py"), "--size", "small", "--batch",
             "4", "--out-dir", work])
        gpt = os.path.join(work, "gpt-small-opset17.onnx")
        tokens = os.path.join(work, "tokens.npy")
        stream = np.random.default_rng(3).permutation(512)  # a fixed successor per token: learnable
        np.save(tokens, np.resize(stream, 64 * 24 + 1).astype(np.int64))
        recipe = {"TOTAL_BATCH_SIZE": 8, "LR": 0.05, "gradient_accumulation": 2, "NUM_EPOCHS": 2, "seed": 5,
                  "clip_grad_norm": 1.0}
        out = {}
        for name, flags in (("gpt-one", []), ("gpt-dp2", ["--dp", "2"])):
            plan, _ = compile_plan(work, gpt, name, flags, recipe)
            metrics = os.path.join(work, name + ".jsonl")
            proc = run([tool("cpc-run"), plan, "--data", tokens, "--metrics", metrics])
            out[name] = load_jsonl(metrics)
        assert "24 samples -> 'idx' and, shifted by one token, 'targets'" in proc.stdout, proc.stdout[:800]
        same_steps(out["gpt-dp2"], out["gpt-one"], "GPT tokens on dp2", TOL)
        losses = [m["loss"] for m in out["gpt-one"]]
        assert len(losses) == 6 and losses[-1] < 0.95 * losses[0], "the loss did not fall: %s" % losses
        print("   GPT on a token stream, 2 epochs of 3 steps: loss %.4f -> %.4f" % (losses[0], losses[-1]))

    results.check("a token stream for the GPT: dp2 equals one rank", gpt_tokens)

    def refused(tag, make, *needles):
        def check():
            data = os.path.join(work, "bad-" + tag)
            make(data)
            _, proc = train("one", "bad-" + tag, data=data, check=False)
            assert proc.returncode == 1, "exit %d:\n%s" % (proc.returncode, proc.stderr)
            lines = [l for l in proc.stderr.splitlines() if "error" in l]
            assert len(lines) == 1 and all(n in lines[0] for n in needles), proc.stderr
            print("   " + lines[0])
        return check

    def corrupt(d):
        shutil.copytree(folder, d)
        with open(os.path.join(d, "dog", "img03.png"), "r+b") as f:
            f.truncate(60)

    results.check("an empty folder: refused", refused("empty", os.makedirs, "bad-empty"))
    results.check("a corrupt image: refused naming it", refused("corrupt", corrupt, "img03.png"))
    results.check("too few images for a global batch: refused",
                  refused("few", lambda d: make_folder(d, np.random.default_rng(2), per_class=2), "fewer than"))

results.finish()
