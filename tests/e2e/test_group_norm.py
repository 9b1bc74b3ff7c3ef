"""GroupNormalization (opsets 18 and 21, which Debian's onnx test data predates): an inference plan
of one node equals numpy's group norm within 1e-5, per-group scale and bias at opset 18,
per-channel at 21; and num_groups that does not divide the channels is one line naming the node.
"""
import os

import numpy as np
from onnx import TensorProto, helper, save

from cpctest import Results, run, tempdir, tool

results = Results()
N, C, H, W, G, EPS = 2, 6, 3, 4, 3, 1e-3


def model(path, opset, groups, per_channel):
    params = C if per_channel else groups
    graph = helper.make_graph(
        [helper.make_node("GroupNormalization", ["x", "scale", "bias"], ["y"], num_groups=groups, epsilon=EPS)],
        "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
              for n, s in [("x", [N, C, H, W]), ("scale", [params]), ("bias", [params])]],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [N, C, H, W])])
    save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)]), path)


def expected(x, scale, bias, per_channel):
    g = x.reshape(N, G, -1).astype(np.float64)
    y = ((g - g.mean(axis=2, keepdims=True)) / np.sqrt(g.var(axis=2, keepdims=True) + EPS))
    if not per_channel:
        y = y * scale.reshape(1, G, 1) + bias.reshape(1, G, 1)
        return y.reshape(x.shape)
    return y.reshape(x.shape) * scale.reshape(1, C, 1, 1) + bias.reshape(1, C, 1, 1)


with tempdir() as work:
    rng = np.random.default_rng(4)
    x = (rng.standard_normal((N, C, H, W)) * 3 + 1).astype(np.float32)
    np.save(os.path.join(work, "x.npy"), x)

    def check(opset, per_channel):
        def body():
            params = C if per_channel else G
            scale, bias = rng.standard_normal(params).astype(np.float32), rng.standard_normal(params).astype(np.float32)
            np.save(os.path.join(work, "scale.npy"), scale)
            np.save(os.path.join(work, "bias.npy"), bias)
            path, plan, out = (os.path.join(work, "gn%d.%s" % (opset, e)) for e in ("onnx", "plan", "out"))
            model(path, opset, G, per_channel)
            run([tool("cpc"), "compile", path, "--mode", "infer", "-o", plan])
            inputs = [a for n in ("x", "scale", "bias") for a in ("--input", "%s=%s" % (n, os.path.join(work, n + ".npy")))]
            run([tool("cpc-run"), plan, "--output-dir", out, *inputs])
            got, want = np.load(os.path.join(out, "y.npy")), expected(x, scale, bias, per_channel)
            assert np.allclose(got, want, rtol=1e-5, atol=1e-5), "differs by %.2e" % np.abs(got - want).max()
            print("   opset %d: within %.1e of numpy" % (opset, np.abs(got - want).max()))
        results.check("GroupNormalization-%d (scale and bias per %s) equals numpy" % (
            opset, "channel" if per_channel else "group"), body)

    check(18, False)
    check(21, True)

    def bad_groups():
        path = os.path.join(work, "bad.onnx")
        model(path, 21, 4, True)
        r = run([tool("cpc"), "import", path], check=False)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 1 and len(lines) == 1, r.stderr
        assert "GroupNormalization" in lines[0] and "num_groups 4 does not divide the 6 channels" in lines[0], lines[0]

    results.check("num_groups that does not divide the channels: one line naming the node", bad_groups)

results.finish()
