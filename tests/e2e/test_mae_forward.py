"""MAE forward: the loss cpc-run computes from a compiled MAE-tiny export equals PyTorch's (1e-5 rel).

Also checks --output-dir, inputs as .npy and as ONNX .pb, and that in-place reuse does not change
the result.
"""
import os

import numpy as np
import onnx
from onnx import numpy_helper

from cpctest import Results, export_mae, run, tempdir, tool

results = Results()


def check_opset(opset, work):
    model = export_mae("tiny", opset, work, extra=["--save-inputs", "--seed", str(opset)])
    stem = model[:-len(".onnx")]
    expected = float(np.load(stem + ".loss.npy"))
    for inplace in (True, False):
        plan = os.path.join(work, "tiny-%d-%s.plan" % (opset, inplace))
        run([tool("cpc"), "compile", model, "--mode", "infer", "-o", plan] + ([] if inplace else ["--no-inplace"]))
        out = os.path.join(work, "out-%d-%s" % (opset, inplace))
        run([tool("cpc-run"), plan, "--input", "imgs=" + stem + ".imgs.npy", "--input",
             "noise=" + stem + ".noise.npy", "--output-dir", out])
        got = float(np.load(os.path.join(out, "loss.npy")))
        rel = abs(got - expected) / abs(expected)
        assert rel < 1e-5, "opset %d inplace=%s: cpc loss %.8f vs torch %.8f (rel %.2e)" % (
            opset, inplace, got, expected, rel)


def check_pb_inputs(work):
    model = export_mae("tiny", 17, work, extra=["--save-inputs", "--seed", "17"])
    stem = model[:-len(".onnx")]
    pbs = []
    for name in ("imgs", "noise"):
        pb = os.path.join(work, name + ".pb")
        with open(pb, "wb") as f:
            f.write(numpy_helper.from_array(np.load(stem + ".%s.npy" % name), name).SerializeToString())
        pbs += ["--input", "%s=%s" % (name, pb)]
    plan = os.path.join(work, "pb.plan")
    run([tool("cpc"), "compile", model, "--mode", "infer", "-o", plan])
    out = os.path.join(work, "out-pb")
    run([tool("cpc-run"), plan, *pbs, "--output-dir", out])
    got, expected = float(np.load(os.path.join(out, "loss.npy"))), float(np.load(stem + ".loss.npy"))
    assert abs(got - expected) <= 1e-5 * abs(expected), (got, expected)


with tempdir() as work:
    results.check("tiny opset 13 loss equals torch", lambda: check_opset(13, work))
    results.check("tiny opset 17 loss equals torch", lambda: check_opset(17, work))
    results.check("inputs as ONNX TensorProto .pb", lambda: check_pb_inputs(work))
results.finish()
