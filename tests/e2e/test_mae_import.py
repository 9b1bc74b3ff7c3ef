#!/usr/bin/python3
"""End-to-end: export the examples' MAE with PyTorch, import it with `cpc import`, verify with cpc-opt.

MAE-tiny at opsets 13 and 17 (batch 2), then MAE-small at opset 17 with batch 3.
Checks the signature, the parameters (and --frozen), the clean-up (LayerNorm/GELU folding) and
that no dynamic shapes are left in the IR.
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpctest import Results, export_mae, run, tempdir, tool  # noqa: E402

CPC = tool("cpc")
CPC_OPT = tool("cpc-opt")
TIMEOUT = 120


def import_model(model, out, *extra):
    run([CPC, "import", model, "-o", out, *extra], timeout=TIMEOUT)
    with open(out) as f:
        ir = f.read()
    assert ir.strip(), "cpc import -o %s wrote an empty file" % out
    return ir


def verify(mlir_path):
    """Re-parses (and so verifies) the IR with cpc-opt; its output must be non-empty."""
    proc = run([CPC_OPT, mlir_path], timeout=TIMEOUT)
    assert proc.stdout.strip(), "cpc-opt printed nothing for %s" % mlir_path
    assert "func.func @main" in proc.stdout, "cpc-opt output has no @main:\n" + proc.stdout[:2000]


def summary(model, *extra):
    """Runs `cpc import --summary` and parses it into a dict."""
    out = run([CPC, "import", model, "--summary", *extra], timeout=TIMEOUT).stdout
    s = {"inputs": {}, "outputs": {}, "ops": {}, "text": out}
    section = None
    for line in out.splitlines():
        stripped = line.strip()
        if stripped in ("inputs:", "outputs:", "ops:"):
            section = stripped[:-1]
            continue
        m = re.match(r"parameters: (\d+) tensors, (\d+) trainable \+ (\d+) frozen elements", stripped)
        if m:
            s["num_params"], s["trainable"], s["frozen"] = map(int, m.groups())
            section = None
            continue
        if stripped.startswith("import time:") or stripped.startswith("function @"):
            section = None
            continue
        if section and ":" in stripped:
            key, value = stripped.split(":", 1)
            key, value = key.strip(), value.strip()
            s[section][key] = int(value) if section == "ops" else value
    for key in ("num_params", "trainable", "frozen"):
        assert key in s, "no parameters line in --summary:\n" + out
    return s


def expect_eq(what, got, want):
    assert got == want, "%s: got %r, expected %r" % (what, got, want)


def check_signature(s, batch, img, patches):
    expect_eq("input imgs", s["inputs"].get("imgs"), "tensor<%dx3x%dx%dxf32>" % (batch, img, img))
    expect_eq("input noise", s["inputs"].get("noise"), "tensor<%dx%dxf32>" % (batch, patches))
    expect_eq("inputs", sorted(s["inputs"]), ["imgs", "noise"])
    expect_eq("outputs", s["outputs"], {"loss": "tensor<f32>"})


def check_static_reshapes(ir):
    """No dynamic dims anywhere (shape arithmetic fully folded), in particular in cpc.reshape."""
    reshapes = [l for l in ir.splitlines() if "cpc.reshape" in l]
    assert reshapes, "no cpc.reshape in the IR"
    bad = [l.strip() for l in reshapes if "?" in l]
    assert not bad, "cpc.reshape with a dynamic type:\n" + "\n".join(bad[:5])
    dyn = [l.strip() for l in ir.splitlines() if re.search(r"tensor<[^>]*\?", l)]
    assert not dyn, "dynamic tensor types in the IR:\n" + "\n".join(dyn[:5])


SHAPE_OPS = ("shape", "constant_of_shape", "expand", "unsqueeze", "squeeze", "range", "size", "cast",
             "equal", "where", "tile", "reduce_prod")


def check_cleanup(s, ir):
    ops = s["ops"]
    expect_eq("cpc.layer_norm count", ops.get("cpc.layer_norm", 0), 8)
    expect_eq("cpc.gelu count", ops.get("cpc.gelu", 0), 3)
    for gone in ("cpc.erf", "cpc.sqrt"):
        assert gone not in ops, "%s left after clean-up (%d)" % (gone, ops[gone])
        assert gone + " " not in ir, "%s left in the IR" % gone
    # Nothing that merely computes shapes survives: every op name must not be an ONNX shape op.
    leftovers = [op for op in ops if op.split(".", 1)[-1] in SHAPE_OPS]
    assert not leftovers, "shape ops left after import: %s" % leftovers
    # All in the cpc dialect (plus func).
    foreign = [op for op in ops if not op.startswith("cpc.")]
    assert not foreign, "non-cpc ops in the IR: %s" % foreign


def main():
    results = Results()
    with tempdir() as tmp:
        for opset in (13, 17):
            state = {}

            def export(opset=opset, state=state):
                state["model"] = export_mae("tiny", opset, tmp)
                assert os.path.isfile(state["model"]), "export wrote no " + state["model"]

            results.check("tiny opset %d: export" % opset, export)
            if "model" not in state:
                continue
            model = state["model"]
            mlir = os.path.join(tmp, "tiny-%d.mlir" % opset)

            def do_import(model=model, mlir=mlir, state=state):
                state["ir"] = import_model(model, mlir)
                assert "cpc.opset = %d" % opset in state["ir"], "IR does not record opset %d" % opset

            results.check("tiny opset %d: import -o" % opset, do_import)
            if "ir" not in state:
                continue
            ir = state["ir"]
            results.check("tiny opset %d: cpc-opt verifies" % opset, lambda: verify(mlir))

            def signature(model=model, state=state):
                state["summary"] = summary(model)
                check_signature(state["summary"], batch=2, img=32, patches=16)

            results.check("tiny opset %d: inputs/outputs" % opset, signature)

            def params_default(model=model, ir=ir, state=state):
                s = state.get("summary") or summary(model)
                expect_eq("parameter tensors", s["num_params"], 50)
                expect_eq("cpc.parameter ops", s["ops"].get("cpc.parameter"), 50)
                expect_eq("frozen elements", s["frozen"], 0)
                assert s["trainable"] > 0, "no trainable elements"
                params = [l for l in ir.splitlines() if "cpc.parameter" in l]
                expect_eq("cpc.parameter lines", len(params), 50)
                params = [l for l in ir.splitlines() if "cpc.variable" in l]
                expect_eq("cpc.variable lines", len(params), 50)
                not_trainable = [l.strip() for l in params if " trainable " not in l]
                assert not not_trainable, "parameters not trainable by default:\n" + "\n".join(not_trainable[:5])

            results.check("tiny opset %d: 50 parameters, all trainable" % opset, params_default)

            def params_frozen(model=model, state=state):
                s_all = state.get("summary") or summary(model)
                s = summary(model, "--frozen", "pos_embed")
                expect_eq("parameter tensors", s["num_params"], 50)
                assert s["frozen"] > 0, "--frozen pos_embed froze nothing"
                expect_eq("total elements", s["trainable"] + s["frozen"], s_all["trainable"])
                frozen_mlir = os.path.join(tmp, "tiny-%d-frozen.mlir" % opset)
                fir = import_model(model, frozen_mlir, "--frozen", "pos_embed")
                params = [l for l in fir.splitlines() if "cpc.variable" in l]
                frozen = [l.strip() for l in params if " trainable " not in l]
                expect_eq("frozen parameter tensors", len(frozen), 2)
                assert any('cpc.variable @pos_embed :' in l for l in frozen), \
                    "no frozen 'cpc.variable @pos_embed :' in:\n" + "\n".join(frozen)
                assert any('@decoder_pos_embed ' in l for l in frozen), \
                    "decoder_pos_embed not frozen:\n" + "\n".join(frozen)
                verify(frozen_mlir)

            results.check("tiny opset %d: --frozen pos_embed" % opset, params_frozen)

            def cleanup(model=model, ir=ir, state=state):
                s = state.get("summary") or summary(model)
                check_cleanup(s, ir)

            results.check("tiny opset %d: clean-up (8 layer_norm, 3 gelu, no erf/sqrt/shape ops)" % opset,
                          cleanup)
            results.check("tiny opset %d: static reshapes" % opset, lambda ir=ir: check_static_reshapes(ir))

        # MAE-small, opset 17, batch 3.
        small_dir = os.path.join(tmp, "small")
        state = {}

        def export_small():
            state["model"] = export_mae("small", 17, small_dir, extra=("--batch", "3"))

        results.check("small opset 17 batch 3: export", export_small)
        if "model" in state:
            mlir = os.path.join(tmp, "small-17.mlir")

            def small_import():
                ir = import_model(state["model"], mlir)
                verify(mlir)
                check_static_reshapes(ir)
                s = summary(state["model"])
                check_signature(s, batch=3, img=64, patches=64)
                # depth 6 + decoder depth 2: 16 per-block norms + norm + decoder_norm; one GELU per MLP.
                expect_eq("parameter tensors", s["num_params"], 110)
                expect_eq("frozen elements", s["frozen"], 0)
                expect_eq("cpc.layer_norm count", s["ops"].get("cpc.layer_norm", 0), 18)
                expect_eq("cpc.gelu count", s["ops"].get("cpc.gelu", 0), 8)
                for gone in ("cpc.erf", "cpc.sqrt"):
                    assert gone not in s["ops"], "%s left after clean-up" % gone

            results.check("small opset 17 batch 3: import + verify", small_import)
    results.finish()


if __name__ == "__main__":
    main()
