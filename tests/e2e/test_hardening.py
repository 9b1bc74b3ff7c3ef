#!/usr/bin/python3
"""End-to-end: the inputs of issue 9 that used to overflow, misparse or pass silently.

Each case must exit 1 within a timeout (never a signal), print exactly one 'cpc: error: ' or
'cpc-run: error: ' line on stderr naming the file / key / tensor, and write nothing it should
not. Models are focused onnx.helper graphs (sizes, ops and a scalar loss are all these cases
need); .npy and .pb files are written byte by byte so that their headers can be wrong.
"""
import json
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpctest import Results, run, tempdir, tool  # noqa: E402

TIMEOUT = 60


def invoke(args):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        raise AssertionError("%s: no result after %d s (hang?)" % (" ".join(args), TIMEOUT))


def expect_error(args, *names):
    """ARGS must exit 1 with one '<tool>: error: ' line on stderr containing each of `names`."""
    proc = invoke(args)
    prefix = os.path.basename(args[0]) + ": error: "
    where = " ".join(args) + ": "
    assert proc.returncode >= 0, where + "killed by signal %d\n%s" % (-proc.returncode, proc.stderr[-2000:])
    assert proc.returncode == 1, where + "exit %d (want 1)\nstdout: %s\nstderr: %s" % (
        proc.returncode, proc.stdout[-1000:], proc.stderr[-1000:])
    lines = [l for l in proc.stderr.splitlines() if l.strip()]
    assert len(lines) == 1, where + "want one line on stderr, got:\n" + proc.stderr[-2000:]
    assert lines[0].startswith(prefix), where + "%r does not start with %r" % (lines[0], prefix)
    for name in names:
        assert name in lines[0], where + "%r does not name %r" % (lines[0], name)
    return proc


def save_model(path, nodes, inputs, outputs, initializers=()):
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(initializers))
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def value(name, dims, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, dims)


def write_npy(path, header, data):
    """A version-1.0 .npy file with `header` (a dict literal) padded as numpy pads it."""
    raw = header.encode()
    raw += b" " * ((64 - (10 + len(raw) + 1) % 64) % 64) + b"\n"
    with open(path, "wb") as f:
        f.write(b"\x93NUMPY\x01\x00" + len(raw).to_bytes(2, "little") + raw + data)
    return path


def main():
    results = Results()
    cpc, cpc_run = tool("cpc"), tool("cpc-run")
    with tempdir() as work:
        def path(name):
            return os.path.join(work, name)

        relu = save_model(path("relu.onnx"), [helper.make_node("Relu", ["x"], ["y"], name="act")],
                          [value("x", [8, 4])], [value("y", [8, 4])])
        relu_plan = path("relu.plan")
        run([cpc, "compile", relu, "--mode", "infer", "-o", relu_plan])
        # A training graph: loss = mean(x @ w), w trainable.
        w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
        loss_model = save_model(path("loss.onnx"), [helper.make_node("MatMul", ["x", "w"], ["h"], name="mm"),
                                                    helper.make_node("ReduceMean", ["h"], ["loss"], keepdims=0)],
                                [value("x", [8, 4])], [value("loss", [])], [w])
        loss_plan = path("loss.plan")
        run([cpc, "compile", loss_model, "-o", loss_plan])

        # --- 1. sizes that used to overflow ------------------------------------------------
        def huge_inputs():
            for dims in ([2 ** 31, 2 ** 31], [2 ** 62, 4]):
                model = save_model(path("huge.onnx"), [helper.make_node("Relu", ["x"], ["y"])],
                                   [value("x", dims)], [value("y", dims)])
                expect_error([cpc, "compile", model, "--mode", "infer", "-o", path("huge.plan")],
                             model, "graph input 'x'", "larger than the largest tensor")
                expect_error([cpc, "import", model], model, "graph input 'x'")
                assert not os.path.exists(path("huge.plan")), "a plan was written"
        results.check("inputs of 2^62 elements and more are refused, naming the input", huge_inputs)

        def huge_expand():
            shape = numpy_helper.from_array(np.array([2 ** 31, 2 ** 31], np.int64), "s")
            model = save_model(path("expand.onnx"), [helper.make_node("Expand", ["x", "s"], ["y"], name="grow")],
                               [value("x", [1, 1])], [value("y", [2 ** 31, 2 ** 31])], [shape])
            expect_error([cpc, "compile", model, "--mode", "infer", "-o", path("e.plan")], model, "grow", "Expand",
                         "larger than the largest tensor")
        results.check("Expand to 2^31 x 2^31 is refused, naming the node", huge_expand)

        def overflowing_reshape_and_tile():
            target = numpy_helper.from_array(np.array([2 ** 32, 2 ** 32, -1], np.int64), "t")
            model = save_model(path("reshape.onnx"), [helper.make_node("Reshape", ["x", "t"], ["y"], name="rs")],
                               [value("x", [8, 4])], [value("y", ["a", "b", "c"])], [target])
            expect_error([cpc, "import", model], model, "rs", "64 bits")
            repeats = numpy_helper.from_array(np.array([2 ** 62, 2 ** 62], np.int64), "r")
            model = save_model(path("tile.onnx"), [helper.make_node("Tile", ["x", "r"], ["y"], name="tl")],
                               [value("x", [8, 4])], [value("y", ["a", "b"])], [repeats])
            expect_error([cpc, "import", model], model, "tl", "overflow")
        results.check("Reshape and Tile whose sizes overflow int64 are refused", overflowing_reshape_and_tile)

        def huge_input_shape_flag():
            dyn = save_model(path("dyn.onnx"), [helper.make_node("Relu", ["x"], ["y"])],
                             [value("x", ["N", 4])], [value("y", ["N", 4])])
            expect_error([cpc, "import", dyn, "--input-shape", "x=99999999999999999999999x4"],
                         "--input-shape", "99999999999999999999999", "too large")
            expect_error([cpc, "import", dyn, "--input-shape", "x=70368744177664x4"], dyn, "graph input 'x'",
                         "larger than the largest tensor")
        results.check("--input-shape dims that overflow are refused", huge_input_shape_flag)

        def initializer_claims_huge_dims():
            init = numpy_helper.from_array(np.arange(4, dtype=np.int64), "w")
            init.dims[:] = [2 ** 40]
            model = save_model(path("bigw.onnx"), [helper.make_node("Add", ["x", "w"], ["y"])],
                               [value("x", [4], TensorProto.INT64)], [value("y", [4], TensorProto.INT64)], [init])
            expect_error([cpc, "import", model], model, "initializer 'w'", "need 1099511627776 values")
            init = numpy_helper.from_array(np.arange(4, dtype=np.float32), "v")
            init.dims[:] = [2 ** 31, 2 ** 31]
            model = save_model(path("bigv.onnx"), [helper.make_node("Add", ["x", "v"], ["y"])],
                               [value("x", [4])], [value("y", [4])], [init])
            expect_error([cpc, "import", model], model, "initializer 'v'", "larger than the largest tensor")
        results.check("initializers whose dims exceed their data or the size limit are refused",
                      initializer_claims_huge_dims)

        def libonnx_failures_contained():
            # libonnx's shape inference crashes on this Conv (input rank 3, weight rank 4) and its
            # text parser throws from std::stol: both must end as one line, not a crash.
            w = numpy_helper.from_array(np.ones((6, 4, 3, 3), np.float32), "w")
            model = save_model(path("conv.onnx"), [helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")],
                               [value("x", [1, 4, 8])], [value("y", ["a", "b", "c"])], [w])
            expect_error([cpc, "import", model], model, "shape inference crashed")
            text = path("bad-number.onnxtext")
            with open(text, "w") as f:
                f.write('<ir_version: 8, opset_import: ["" : 17]>\ng (float[2] x) => (float[2] y) {\n'
                        '  y = Relu <alpha = 99999999999999999999999999999> (x)\n}\n')
            expect_error([cpc, "import", text], text, "cannot parse ONNX text")
        results.check("libonnx crashes and parser exceptions become one error line", libonnx_failures_contained)

        # --- 2. .npy and .pb headers ----------------------------------------------------
        good = np.zeros((8, 4), np.float32).tobytes()
        npy_cases = {
            "negative.npy": ("{'descr': '<f4', 'fortran_order': False, 'shape': (-8, 4), }", good,
                             "non-negative"),
            "huge.npy": ("{'descr': '<f4', 'fortran_order': False, 'shape': (%d, 4), }" % 2 ** 62, good,
                         "larger than the largest tensor"),
            "overflow.npy": ("{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999, 4), }",
                             good, "overflows 64 bits"),
            "malformed.npy": ("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 4)x, }", good, "malformed"),
            "nokey.npy": ("{'descr': '<f4', 'shape': (8, 4), }", good, "no 'fortran_order' key"),
            "extrakey.npy": ("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), 'x': 1}", good,
                             "unexpected or repeated key 'x'"),
            "short.npy": ("{'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), }", good[:-4], "needs 128"),
        }

        def npy_headers():
            for name, (header, data, phrase) in npy_cases.items():
                f = write_npy(path(name), header, data)
                expect_error([cpc_run, relu_plan, "--input", "x=" + f], f, phrase)
            ok = write_npy(path("ok.npy"), "{'descr': '<f4', 'fortran_order': False, 'shape': (8, 4), }", good)
            with open(ok, "rb") as src:
                truncated = src.read()[:30]
            with open(path("truncated.npy"), "wb") as dst:
                dst.write(truncated)
            expect_error([cpc_run, relu_plan, "--input", "x=" + path("truncated.npy")], "truncated.npy",
                         "truncated .npy header")
            run([cpc_run, relu_plan, "--input", "x=" + ok])  # the strict parser still reads numpy's files
            np.save(path("numpy.npy"), np.ones((8, 4), np.float32))
            run([cpc_run, relu_plan, "--input", "x=" + path("numpy.npy")])
        results.check(".npy headers: negative, overflowing, malformed, truncated, short data", npy_headers)

        def pb_dims():
            t = numpy_helper.from_array(np.zeros((8, 4), np.float32), "x")
            t.dims[:] = [2 ** 62, 4]
            with open(path("huge.pb"), "wb") as f:
                f.write(t.SerializeToString())
            expect_error([cpc_run, relu_plan, "--input", "x=" + path("huge.pb")], "huge.pb",
                         "larger than the largest tensor")
        results.check(".pb tensors with overflowing dims are refused", pb_dims)

        # --- 3. config values -------------------------------------------------------------
        def config(name, text):
            with open(path(name), "w") as f:
                f.write(text)
            return path(name)

        def config_ranges():
            cases = [('{"TOTAL_BATCH_SIZE": 1e30}', "TOTAL_BATCH_SIZE", "1e+30"),
                     ('{"TOTAL_BATCH_SIZE": 18446744073709551615}', "TOTAL_BATCH_SIZE", "between"),
                     ('{"gradient_accumulation": 1e19}', "gradient_accumulation", "between"),
                     ('{"LR": 1e400}', "LR", "number overflow"),
                     ('{"parallel": {"tensor": {"size": 1e400}}}', "size", "number overflow"),
                     ('{"MIN_LR": 5, "LR": 0.001}', "MIN_LR", "exceeds the peak learning rate")]
            for text, key, phrase in cases:
                f = config("c.json", text)
                expect_error([cpc, "compile", loss_model, "--config", f, "-o", path("c.plan")], f, key, phrase)
            expect_error([cpc, "compile", loss_model, "--config", work, "-o", path("c.plan")], work, "directory")
            expect_error([cpc, "compile", loss_model, "--set", "LR=1e400", "-o", path("c.plan")], "LR",
                         "out of range")
        results.check("config numbers are range-checked, errors name the file and key", config_ranges)

        # --- 4. accepted silently before ------------------------------------------------
        def zero_in_inference():
            expect_error([cpc, "compile", relu, "--mode", "infer", "--zero", "1", "-o", path("z.plan")], "--zero")
            expect_error([cpc, "compile", relu, "--zero", "2", "-o", path("z.plan")], "--zero")
        results.check("--zero in inference mode is refused", zero_in_inference)

        def duplicate_input():
            np.save(path("a.npy"), np.ones((8, 4), np.float32))
            expect_error([cpc_run, relu_plan, "--input", "x=" + path("a.npy"), "--input", "x=" + path("a.npy")],
                         "--input x", "twice")
        results.check("the same --input name twice is refused", duplicate_input)

        def synthetic_note():
            proc = run([cpc_run, loss_plan, "--steps", "1", "--quiet"])
            assert "synthetic" in proc.stderr and "'x'" in proc.stderr, "no note on stderr: %r" % proc.stderr
            np.save(path("x.npy"), np.ones((8, 4), np.float32))
            proc = run([cpc_run, loss_plan, "--steps", "1", "--quiet", "--input", "x=" + path("x.npy")])
            assert "synthetic" not in proc.stderr, "note despite --input: %r" % proc.stderr
        results.check("training without --input says that synthetic data is used", synthetic_note)

        def unwritable_output_dir():
            # /proc/self is a directory nobody, root included, can create files in.
            proc = expect_error([cpc_run, loss_plan, "--steps", "3", "--output-dir", "/proc/self"], "/proc/self",
                                "cannot write")
            assert "step" not in proc.stdout, "steps ran before the output directory was checked:\n" + proc.stdout
            blocker = path("a-file")
            open(blocker, "w").close()
            expect_error([cpc_run, loss_plan, "--steps", "3", "--output-dir", blocker], blocker)
        results.check("an unwritable --output-dir fails before the first step", unwritable_output_dir)
    results.finish()


if __name__ == "__main__":
    main()
