#!/usr/bin/python3
"""End-to-end: `cpc` on bad input fails cleanly.

Every bad-input case must exit with status 1 (not 0, not a signal), within a timeout, print nothing
on stdout and exactly one line on stderr, starting with 'cpc: error: ' and naming the model file
(and the node and op where there is one). The models are tiny ones built with onnx.helper, plus one
real MAE-tiny export for the truncated-protobuf case.
"""
import os
import random
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpctest import Results, export_mae, run, tempdir, tool  # noqa: E402

CPC = tool("cpc")
TIMEOUT = 30  # seconds; any bad input must fail fast, never hang


def cpc(*args):
    try:
        return subprocess.run([CPC, *args], capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError("cpc %s: no result after %d s (hang?)" % (" ".join(args), TIMEOUT))


def describe(proc):
    return "exit %d\n  stdout: %r\n  stderr: %r" % (proc.returncode, proc.stdout[-1500:], proc.stderr[-1500:])


def expect_error(args, *must_name):
    """cpc ARGS must fail with exit 1 and one 'cpc: error: ' line on stderr containing each of must_name."""
    proc = cpc(*args)
    where = "cpc %s: " % " ".join(args)
    if proc.returncode < 0:
        raise AssertionError(where + "killed by signal %d (crash)\n  %s" % (-proc.returncode, describe(proc)))
    assert proc.returncode == 1, where + "expected exit 1, got " + describe(proc)
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, where + "expected exactly one line on stderr, got %d: %s" % (len(lines), describe(proc))
    line = lines[0]
    assert line.startswith("cpc: error: "), where + "stderr does not start with 'cpc: error: ': %r" % line
    for name in must_name:
        assert name in line, where + "error message does not name %r: %r" % (name, line)
    assert proc.stdout == "", where + "printed on stdout despite the error: %r" % proc.stdout[:500]
    return line


def expect_ok(args, *in_stdout):
    proc = cpc(*args)
    assert proc.returncode == 0, "cpc %s: expected success, got %s" % (" ".join(args), describe(proc))
    assert proc.stdout.strip(), "cpc %s: printed nothing" % " ".join(args)
    for s in in_stdout:
        assert s in proc.stdout, "cpc %s: output lacks %r:\n%s" % (" ".join(args), s, proc.stdout[:2000])
    return proc


def make_model(opset=17, op="MatMul", domain="", x_shape=(2, 4), extra_opsets=()):
    """Y = X @ W (node 'mm0') with W a 4x3 float initializer."""
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "W")
    node = helper.make_node(op, ["X", "W"], ["Y"], name="mm0", domain=domain)
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [x_shape[0], 3])], [w])
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, v) for d, v in extra_opsets]
    return helper.make_model(graph, opset_imports=opsets)


def write_bytes(path, data):
    with open(path, "wb") as f:
        f.write(data)
    return path


def main():
    results = Results()
    with tempdir() as tmp:
        def path(name):
            return os.path.join(tmp, name)

        good = path("good.onnx")
        onnx.save(make_model(), good)
        good_bytes = open(good, "rb").read()
        results.check("sanity: the helper model imports", lambda: expect_ok(["import", good], "cpc.matmul"))

        # --- files that are not (valid) ONNX models -------------------------------------------
        missing = path("does-not-exist.onnx")
        results.check("missing file", lambda: expect_error(["import", missing], missing))
        a_dir = path("a-directory.onnx")
        os.mkdir(a_dir)
        results.check("directory", lambda: expect_error(["import", a_dir], a_dir))
        empty = write_bytes(path("empty.onnx"), b"")
        results.check("empty file", lambda: expect_error(["import", empty], empty))

        half = write_bytes(path("half.onnx"), good_bytes[:len(good_bytes) // 2])
        results.check("truncated protobuf (helper model, first half)", lambda: expect_error(["import", half], half))

        def truncated_mae():
            mae = export_mae("tiny", 17, os.path.join(tmp, "mae"))
            data = open(mae, "rb").read()
            cut = write_bytes(path("mae-half.onnx"), data[:len(data) // 2])
            expect_error(["import", cut], cut)

        results.check("truncated protobuf (first half of MAE-tiny)", truncated_mae)

        # Overwrite 12 bytes from the start of the serialized node with 0xff: a tag that is an
        # over-long varint, so the protobuf itself is corrupt (flipping bytes in the weights'
        # raw_data would give a valid model with other weights, which nothing can detect).
        node_at = good_bytes.find(make_model().graph.node[0].SerializeToString())
        assert node_at > 0
        flipped = bytearray(good_bytes)
        flipped[node_at - 2:node_at + 10] = b"\xff" * 12
        corrupt = write_bytes(path("flipped.onnx"), bytes(flipped))
        results.check("corrupt protobuf (0xff bytes over the node)", lambda: expect_error(["import", corrupt], corrupt))

        xored = bytearray(good_bytes)
        for i in range(node_at - 2, node_at + 6):
            xored[i] ^= 0xff
        corrupt2 = write_bytes(path("xored.onnx"), bytes(xored))
        results.check("corrupt protobuf (bytes xor-ed in the graph)", lambda: expect_error(["import", corrupt2], corrupt2))

        rng = random.Random(1234)
        noise = write_bytes(path("random.onnx"), bytes(rng.randrange(256) for _ in range(4096)))
        results.check("random bytes", lambda: expect_error(["import", noise], noise))

        text = path("garbage.onnxtext")
        with open(text, "w") as f:
            f.write("garbage <<< not onnx text\n")
        results.check("malformed .onnxtext", lambda: expect_error(["import", text], text))

        # --- ops and opsets ------------------------------------------------------------------
        foo = path("foobar.onnx")
        onnx.save(make_model(op="FooBar"), foo)
        results.check("unknown op FooBar (names node and op)", lambda: expect_error(["import", foo], foo, "mm0", "FooBar"))

        custom = path("custom.onnx")
        onnx.save(make_model(op="Bar", domain="com.example", extra_opsets=[("com.example", 1)]), custom)
        results.check("custom-domain op (names node and op)",
                      lambda: expect_error(["import", custom], custom, "mm0", "com.example", "Bar"))

        custom2 = path("custom-no-opset.onnx")
        onnx.save(make_model(op="Bar", domain="com.example"), custom2)
        results.check("custom-domain op without its opset import (names node and op)",
                      lambda: expect_error(["import", custom2], custom2, "mm0", "com.example", "Bar"))

        for opset in (11, 12, 22):
            m = path("opset%d.onnx" % opset)
            onnx.save(make_model(opset=opset), m)
            results.check("opset %d (outside 13..21)" % opset,
                          lambda m=m, opset=opset: expect_error(["import", m], m, "opset %d" % opset, "13..21"))
        for opset in (18, 20, 21):  # above the ONNX library's ceiling (17): cpc's own tables
            m = path("opset%d.onnx" % opset)
            onnx.save(make_model(opset=opset), m)
            results.check("opset %d imports" % opset, lambda m=m: run([tool("cpc"), "import", m]))

        # --- dynamic input dims and --input-shape ----------------------------------------------
        dyn = path("dynamic.onnx")
        onnx.save(make_model(x_shape=("batch", 4)), dyn)
        results.check("dynamic dim without --input-shape", lambda: expect_error(["import", dyn], dyn, "X", "--input-shape"))
        results.check("dynamic dim with --input-shape X=3x4 imports",
                      lambda: expect_ok(["import", dyn, "--input-shape", "X=3x4"], "tensor<3x4xf32>", "tensor<3x3xf32>"))
        results.check("dynamic dim with --input-shape=X=5x4 imports",
                      lambda: expect_ok(["import", dyn, "--input-shape=X=5x4"], "tensor<5x4xf32>"))
        results.check("--input-shape with the wrong rank",
                      lambda: expect_error(["import", dyn, "--input-shape", "X=3x4x5"], dyn, "X", "rank"))
        results.check("--input-shape contradicting a static dim",
                      lambda: expect_error(["import", dyn, "--input-shape", "X=3x5"], dyn, "X"))
        results.check("--input-shape naming a non-input",
                      lambda: expect_error(["import", dyn, "--input-shape", "Z=3x4"], dyn, "'Z'"))
        results.check("--input-shape naming an initializer",
                      lambda: expect_error(["import", dyn, "--input-shape", "W=4x3"], dyn, "'W'"))
        # Old-style model (IR < 4) that also lists the initializer W among the graph inputs: a
        # shape given for W must not be silently ignored.
        listed = make_model(x_shape=("batch", 4))
        listed.graph.input.append(helper.make_tensor_value_info("W", TensorProto.FLOAT, [4, 3]))
        winput = path("initializer-as-input.onnx")
        onnx.save(listed, winput)
        results.check("--input-shape naming an initializer listed as a graph input",
                      lambda: expect_error(["import", winput, "--input-shape", "X=2x4", "--input-shape", "W=9x9"],
                                           winput, "'W'"))
        # A malformed flag value is a command-line error: it must name the flag value (the file
        # is not read yet).
        results.check("--input-shape malformed 'X=2xq'",
                      lambda: expect_error(["import", dyn, "--input-shape", "X=2xq"], "--input-shape", "X=2xq"))
        results.check("--input-shape malformed 'X=' (no dims)",
                      lambda: expect_error(["import", dyn, "--input-shape", "X="], "--input-shape"))
        results.check("--input-shape malformed 'X=0x4' (zero dim)",
                      lambda: expect_error(["import", dyn, "--input-shape", "X=0x4"], "--input-shape"))

        # --- external data ---------------------------------------------------------------------
        ext_dir = path("ext")
        os.mkdir(ext_dir)
        ext = os.path.join(ext_dir, "model.onnx")
        data = os.path.join(ext_dir, "w.data")
        onnx.save_model(make_model(), ext, save_as_external_data=True, all_tensors_to_one_file=True,
                        location="w.data", size_threshold=0)

        def ext_ok():
            assert os.path.isfile(data), "onnx wrote no external data file"
            expect_ok(["import", ext], "cpc.matmul")

        results.check("external data: imports", ext_ok)
        saved = open(data, "rb").read() if os.path.isfile(data) else b""

        def ext_missing():
            os.remove(data)
            try:
                expect_error(["import", ext], ext, "'W'", "w.data")
            finally:
                write_bytes(data, saved)

        results.check("external data: data file deleted (names initializer and file)", ext_missing)

        def ext_truncated():
            write_bytes(data, saved[:len(saved) // 2])
            try:
                expect_error(["import", ext], ext, "'W'", "w.data")
            finally:
                write_bytes(data, saved)

        results.check("external data: data file truncated", ext_truncated)
        results.check("external data: imports again once restored", ext_ok)

        # --- the command line ------------------------------------------------------------------
        results.check("unknown option to cpc import",
                      lambda: expect_error(["import", good, "--bogus"], "--bogus"))
        results.check("cpc import without a model", lambda: expect_error(["import"], "import"))
        results.check("cpc import -o without a value", lambda: expect_error(["import", good, "-o"], "-o"))
        results.check("cpc import with two models", lambda: expect_error(["import", good, good], good))
        results.check("cpc import --frozen with a bad regex",
                      lambda: expect_error(["import", good, "--frozen", "("], "--frozen"))
        unwritable = path("no-such-dir/out.mlir")
        results.check("cpc import -o into a missing directory",
                      lambda: expect_error(["import", good, "-o", unwritable], unwritable))
        results.check("unknown subcommand", lambda: expect_error(["frobnicate"], "frobnicate"))

        def no_args():
            proc = cpc()
            assert proc.returncode > 0, "cpc with no arguments: expected a non-zero exit, got " + describe(proc)
            assert "Usage:" in proc.stdout + proc.stderr, "cpc with no arguments prints no usage: " + describe(proc)

        results.check("cpc with no arguments: usage, non-zero exit", no_args)

        def help_lists_import_only():
            proc = cpc("--help")
            assert proc.returncode == 0, "cpc --help: " + describe(proc)
            lines = proc.stdout.splitlines()
            assert "Commands:" in [l.strip() for l in lines], "no 'Commands:' section:\n" + proc.stdout
            start = [l.strip() for l in lines].index("Commands:") + 1
            commands = []
            for l in lines[start:]:
                if not l.strip():
                    break
                if l.startswith("  ") and not l.startswith("    "):  # a command line, not a continuation
                    commands.append(l.split()[0])
            assert commands == ["import", "compile", "inspect", "plan", "calibrate", "export-weights", "plot"], \
                "cpc --help lists commands %s" % commands
            for command in commands:  # every listed command works: its own help at least
                expect_ok([command, "--help"], "Usage: cpc " + command)

        results.check("cpc --help: exit 0, lists the working commands", help_lists_import_only)
        results.check("cpc import --help: exit 0",
                      lambda: expect_ok(["import", "--help"], "--input-shape", "--frozen", "--summary"))
    results.finish()


if __name__ == "__main__":
    main()
