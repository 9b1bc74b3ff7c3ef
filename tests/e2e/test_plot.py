#!/usr/bin/python3
"""End-to-end: `cpc plot` draws cpc-run --metrics files as a PNG of four panels.

Two runs' metric files (one without "lr", one with an fp16-skipped step whose loss is null, one
with Python's bare NaN) give a PNG of the asked size whose panels hold each run's colour where it
has data (decoded here with zlib: IDAT inflated and unfiltered); a run with only a loss leaves the
other three panels "no data" grey; bad input (missing file, a line that is not JSON, a loss that is
not a number, an empty file, no -o, an unwritable output, a bad --width) fails with exit 1 and one
'cpc: error: ' line naming the file and line.
"""
import json
import os
import struct
import subprocess
import sys
import zlib

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpctest import Results, run, tempdir, tool  # noqa: E402

CPC = tool("cpc")
# runtime/plot/Chart.cpp's palette (first two runs) and its "no data" grey.
RUN_A, RUN_B, NO_DATA = (31, 100, 180), (222, 90, 40), (150, 150, 150)
results = Results()


def write_metrics(path, lines):
    with open(path, "w") as f:
        for line in lines:
            f.write((line if isinstance(line, str) else json.dumps(line)) + "\n")
    return path


def run_a_lines():
    """20 steps as cpc-run writes them; step 7 skipped on fp16 overflow (loss NaN, as Python writes it)."""
    lines = []
    for step in range(20):
        lines.append({"step": step, "loss": 1.3 - 0.3 * step / 19, "lr": 1e-4 * min(step + 1, 5), "grad_norm": 0.6 - 0.02 * step,
                      "loss_scale": 65536.0, "skipped": step == 7, "step_s": 0.2, "samples_per_s": 40 + step % 3,
                      "peak_bytes": 123456789})
    lines[7]["loss"] = float("nan")
    return lines


def run_b_lines():
    """15 steps without lr; step 3's loss null (how nlohmann writes a NaN)."""
    lines = [{"step": s, "loss": 1.4 - 0.02 * s, "grad_norm": 0.8 - 0.03 * s, "samples_per_s": 55 - s} for s in range(15)]
    lines[3]["loss"] = None
    return lines


def read_png(path):
    """(width, height, rows of (r, g, b) tuples) of an 8-bit RGB non-interlaced PNG."""
    with open(path, "rb") as f:
        data = f.read()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG signature: %r" % data[:8]
    pos, idat, header = 8, b"", None
    while pos < len(data):
        length, kind = struct.unpack(">I4s", data[pos:pos + 8])
        body = data[pos + 8:pos + 8 + length]
        assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + length:pos + 12 + length])[0], kind
        if kind == b"IHDR":
            header = struct.unpack(">IIBBBBB", body)
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    width, height, depth, colour_type, _, _, interlace = header
    assert (depth, colour_type, interlace) == (8, 2, 0), "expected 8-bit RGB, got %r" % (header,)
    return width, height, unfilter(zlib.decompress(idat), width, height)


def unfilter(raw, width, height, bpp=3):
    stride = width * bpp
    rows, previous = [], bytearray(stride)
    for y in range(height):
        kind, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            left = line[i - bpp] if i >= bpp else 0
            up, up_left = previous[i], previous[i - bpp] if i >= bpp else 0
            if kind == 1:
                line[i] = (line[i] + left) & 255
            elif kind == 2:
                line[i] = (line[i] + up) & 255
            elif kind == 3:
                line[i] = (line[i] + (left + up) // 2) & 255
            elif kind == 4:
                p = left + up - up_left
                pa, pb, pc = abs(p - left), abs(p - up), abs(p - up_left)
                line[i] = (line[i] + (left if pa <= pb and pa <= pc else up if pb <= pc else up_left)) & 255
            else:
                assert kind == 0, "unknown PNG filter %d" % kind
        rows.append([tuple(line[x * 3:x * 3 + 3]) for x in range(width)])
        previous = line
    return rows


def quadrant_colours(width, height, rows):
    """The set of colours in each quarter of the image: loss, lr, grad norm, throughput panels."""
    quads = [set(), set(), set(), set()]
    for y, row in enumerate(rows):
        for x, colour in enumerate(row):
            quads[(2 if y >= height // 2 else 0) + (1 if x >= width // 2 else 0)].add(colour)
    return quads


def cpc_plot(*args):
    try:
        return subprocess.run([CPC, "plot", *args], capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        raise AssertionError("cpc plot %s: no result after 60 s" % " ".join(args))


def expect_error(args, *must_name):
    """cpc plot ARGS fails with exit 1, nothing on stdout and one 'cpc: error: ' line naming each of must_name."""
    proc = cpc_plot(*args)
    where = "cpc plot %s: " % " ".join(args)
    assert proc.returncode == 1, where + "expected exit 1, got %d (stderr %r)" % (proc.returncode, proc.stderr)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("cpc: error: "), where + "expected one error line: %r" % proc.stderr
    for name in must_name:
        assert name in lines[0], where + "the message does not name %r: %r" % (name, lines[0])
    assert proc.stdout == "", where + "printed on stdout: %r" % proc.stdout
    return lines[0]


def check_two_runs(work):
    a = write_metrics(os.path.join(work, "a.jsonl"), run_a_lines())
    b = write_metrics(os.path.join(work, "b.jsonl"), run_b_lines())
    out = os.path.join(work, "run.png")
    proc = run([CPC, "plot", a, b, "-o", out])
    assert "a.jsonl (20 steps)" in proc.stdout and "b.jsonl (15 steps)" in proc.stdout, proc.stdout
    width, height, rows = read_png(out)
    assert (width, height) == (1200, 800), (width, height)
    loss, lr, grad_norm, throughput = quadrant_colours(width, height, rows)
    for name, quad in (("loss", loss), ("grad norm", grad_norm), ("throughput", throughput)):
        assert RUN_A in quad and RUN_B in quad, "the %s panel lacks a run's colour" % name
    assert RUN_A in lr and RUN_B not in lr, "the lr panel: a's colour %s, b's (no lr) %s" % (RUN_A in lr, RUN_B in lr)
    assert NO_DATA not in loss | lr | grad_norm | throughput, "a panel says no data"


def check_no_data_and_size(work):
    only_loss = write_metrics(os.path.join(work, "loss-only.jsonl"),
                              [{"step": s, "loss": 2.0 / (s + 1)} for s in range(1, 40)])
    out = os.path.join(work, "small.png")
    run([CPC, "plot", only_loss, "-o", out, "--width", "640", "--height", "480"])
    width, height, rows = read_png(out)
    assert (width, height) == (640, 480), (width, height)
    loss, lr, grad_norm, throughput = quadrant_colours(width, height, rows)
    assert RUN_A in loss, "the loss panel lacks the run"
    for name, quad in (("lr", lr), ("grad norm", grad_norm), ("throughput", throughput)):
        assert RUN_A not in quad and NO_DATA in quad, "the %s panel: run colour %s, no data %s" % (
            name, RUN_A in quad, NO_DATA in quad)


def check_bad_inputs(work):
    good = write_metrics(os.path.join(work, "good.jsonl"), run_b_lines())
    out = os.path.join(work, "bad.png")
    missing = os.path.join(work, "missing.jsonl")
    expect_error([good, missing, "-o", out], missing + ": cannot read")
    not_json = write_metrics(os.path.join(work, "notjson.jsonl"), [{"step": 0, "loss": 1}, {"step": 1, "loss": 1},
                                                                    '{"step": 2, "loss": 0.9'])
    expect_error([not_json, "-o", out], not_json + ":3: not JSON")
    text_loss = write_metrics(os.path.join(work, "text.jsonl"), [{"step": 0, "loss": 1}, {"step": 1, "loss": "low"}])
    expect_error([text_loss, "-o", out], text_loss + ':2: "loss" is not a number')
    empty = write_metrics(os.path.join(work, "empty.jsonl"), [])
    expect_error([empty, "-o", out], empty + ": no steps")
    assert not os.path.exists(out), "a failed plot left %s" % out
    expect_error([good], "needs -o")
    expect_error(["-o", out], "needs at least one metrics file")
    unwritable = os.path.join(work, "no-such-dir", "run.png")
    expect_error([good, "-o", unwritable], unwritable + ": cannot write")
    expect_error([good, "-o", out, "--width", "wide"], "--width", "wide")
    expect_error([good, "-o", out, "--height", "10"], "--height")
    expect_error([good, "-o", out, "--colour", "red"], "unknown option '--colour'")


def check_help():
    proc = cpc_plot("--help")
    assert proc.returncode == 0 and "-o FILE" in proc.stdout and "--width" in proc.stdout, proc.stdout
    assert "plot METRICS.jsonl" in run([CPC, "--help"]).stdout, "cpc --help does not list plot"


with tempdir() as work:
    results.check("two runs: size, signature, each run's colour where it has data", lambda: check_two_runs(work))
    results.check("a run with only a loss: three panels say no data, --width/--height", lambda: check_no_data_and_size(work))
    results.check("bad input: one line naming the file and line, exit 1", lambda: check_bad_inputs(work))
    results.check("--help", check_help)
results.finish()
