"""Bad plans and bad cpc-run/cpc compile command lines: one clear line, exit code 1, no crash."""
import os
import shutil
import struct

import numpy as np

from cpctest import Results, export_mae, run, tempdir, tool

results = Results()


def expect_error(args, *needles):
    proc = run(args, check=False, timeout=60)
    assert proc.returncode == 1, "exit %d (want 1): %s\n%s" % (proc.returncode, " ".join(args), proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, "want one error line, got:\n" + proc.stderr
    for needle in needles:
        assert needle in lines[0], "%r not in %r" % (needle, lines[0])


with tempdir() as work:
    model = export_mae("tiny", 17, work, extra=["--save-inputs"])
    stem = model[:-len(".onnx")]
    plan = os.path.join(work, "good.plan")
    run([tool("cpc"), "compile", model, "--mode", "infer", "-o", plan])
    data = open(plan, "rb").read()

    def variant(name, content):
        path = os.path.join(work, name)
        with open(path, "wb") as f:
            f.write(content)
        return path

    def flipped_middle():
        mid = len(data) // 2
        bad = data[:mid] + bytes(b ^ 0xFF for b in data[mid:mid + 16]) + data[mid + 16:]
        p = variant("flipped.plan", bad)
        expect_error([tool("cpc-run"), p], p, "corrupted plan (checksum mismatch)")
        expect_error([tool("cpc"), "inspect", p], p, "checksum")

    def flipped_metadata():
        bad = bytearray(data)
        bad[80] ^= 0x55
        p = variant("meta.plan", bytes(bad))
        expect_error([tool("cpc-run"), p], p, "corrupted")

    def truncated():
        p = variant("truncated.plan", data[:len(data) // 3])
        expect_error([tool("cpc-run"), p], p, "truncated")
        p = variant("tiny.plan", data[:20])
        expect_error([tool("cpc-run"), p], p, "truncated")

    def other_version():
        bad = bytearray(data)
        struct.pack_into("<I", bad, 8, 99)
        p = variant("v99.plan", bytes(bad))
        expect_error([tool("cpc-run"), p], p, "version 99", "recompile")

    def not_a_plan():
        expect_error([tool("cpc-run"), model], "not a cpc plan")
        expect_error([tool("cpc-run"), os.path.join(work, "missing.plan")], "missing.plan", "cannot open")
        expect_error([tool("cpc-run"), work], "directory")

    def bad_inputs():
        wrong = os.path.join(work, "wrong.npy")
        np.save(wrong, np.zeros((3, 3), dtype=np.float32))
        expect_error([tool("cpc-run"), plan, "--input", "imgs=" + wrong], "imgs", "expects the global batch f32[2x3x32x32]", "[3x3]")
        expect_error([tool("cpc-run"), plan, "--input", "nosuch=" + wrong], "no input 'nosuch'", "imgs")
        expect_error([tool("cpc-run"), plan, "--input", "imgs=" + os.path.join(work, "none.npy")], "none.npy")
        text = variant("text.npy", b"hello")
        expect_error([tool("cpc-run"), plan, "--input", "imgs=" + text], "text.npy", "not a .npy")
        expect_error([tool("cpc-run"), plan, "--input", "imgs"], "NAME=FILE")

    def bad_flags():
        expect_error([tool("cpc-run"), plan, "--threads", "0"], "--threads")
        expect_error([tool("cpc-run"), plan, "--bogus"], "unknown option")
        expect_error([tool("cpc-run"), plan, "--data-decode", "draft"], "--data-decode", "'draft'")
        expect_error([tool("cpc-run")], "plan")
        expect_error([tool("cpc"), "compile", model], "-o")
        expect_error([tool("cpc"), "compile", model, "-o", plan, "--mode", "warp"], "--mode", "'warp'")
        expect_error([tool("cpc"), "inspect"], "plan")

    def good_plan_still_runs():
        out = run([tool("cpc-run"), plan, "--input", "imgs=%s.imgs.npy" % stem, "--input",
                   "noise=%s.noise.npy" % stem]).stdout
        assert "loss: f32[] = [" in out, out
        insp = run([tool("cpc"), "inspect", plan]).stdout
        assert "predicted peak memory per rank" in insp and "imgs: f32[2x3x32x32]" in insp, insp

    for name, fn in [("flipped bytes in the middle", flipped_middle), ("flipped metadata byte", flipped_metadata),
                     ("truncated plans", truncated), ("plan from another format version", other_version),
                     ("files that are not plans", not_a_plan), ("wrong inputs", bad_inputs),
                     ("bad flags", bad_flags), ("the good plan runs", good_plan_still_runs)]:
        results.check(name, fn)
results.finish()
