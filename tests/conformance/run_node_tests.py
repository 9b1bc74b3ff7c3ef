#!/usr/bin/python3
"""Runs the ONNX backend node tests against cpc: import -> compile -> cpc-run -> compare.

Considers every node test (a directory with model.onnx and test_data_set_*/) whose graph uses
only op types that cpc's ONNX importer has handlers for (derived from the `r.add("Op"` calls in
frontends/onnx/handlers/*.cpp). Each considered test ends in exactly one of:

  PASS         every output of every test_data_set matches (rtol 1e-4, atol 1e-5 for floats;
               f16 results rtol 2e-3, atol 1e-3; bf16 results, which the data stores as uint16
               bit patterns made by truncation, within one unit in the last place, since cpc
               rounds to nearest even; exact for integers and bools, NaN equal to NaN)
  FAIL         wrong numbers, a crash or signal, or a cpc error that is not a deliberate limitation
  UNSUPPORTED  something cpc deliberately does not support, with the reason: a cpc error that says
               "not supported"/"unsupported", an element type cpc has no kernels for (string,
               complex, unsigned wider than 8 bits), a model opset below 13, sequence/optional/map
               values, or test data whose shape is not the one the model declares

Node tests feed shape-like arguments (Reshape's shape, Slice's starts, TopK's K, ...) as graph
inputs, but cpc wants them to be compile-time constants: when `cpc compile` says an input "must be
a constant", the runner turns those integer graph inputs into initializers holding the test's data
and compiles again ("shape inputs folded"). Inputs with symbolic dims get --input-shape from the
test data.

With `--device cuda` the plans are compiled for the GPU backend: on a machine with a GPU they run
and are compared as above (the CUDA kernels against the reference outputs); without one, a test
passes when every step of its plan has a CUDA kernel (`cpc inspect`), noted "kernels only: no GPU".

Prints one line per considered test, then `N passed, M failed, K unsupported` and a histogram of
the unsupported reasons. Exits 1 when any test fails.

The tests that pass are pinned in tests/conformance/passing.txt (one name per line, sorted):
tests/e2e/test_onnx_conformance.py fails when a listed test does not pass, or when a test passes
that is not listed. `--update-passing` rewrites the list from this run (with --filter, only the
entries the filter matches are replaced).
"""
import argparse
import collections
import concurrent.futures
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import numpy_helper

SOURCE = os.environ.get("CPC_SOURCE", os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..")))
BIN = os.environ.get("CPC_BIN", os.path.join(SOURCE, "build", "bin"))
DATA = os.environ.get("CPC_ONNX_NODE_TESTS", "/usr/share/libonnx-testdata/data/node")
MIN_OPSET = 13
RTOL, ATOL = 1e-4, 1e-5
# 16-bit results: a few units in their last place (f16 keeps 11 significant bits, bf16 8).
TOLERANCES = {np.dtype(np.float16): (2e-3, 1e-3)}
PASSING = os.path.join(os.path.dirname(os.path.abspath(__file__)), "passing.txt")
PASSING_HEADER = ("# ONNX node tests that pass (tests/conformance/run_node_tests.py), one per line, sorted.\n"
                  "# tests/e2e/test_onnx_conformance.py fails when one of them stops passing or another starts.\n"
                  "# Rewrite with: tests/conformance/run_node_tests.py --update-passing\n")
TIMEOUT = 120  # seconds per tool invocation
MAX_FOLD_ROUNDS = 8

TP = onnx.TensorProto
# Element types cpc has no kernels for; tests using them are UNSUPPORTED up front.
UNSUPPORTED_TYPES = {
    TP.STRING: "string", TP.COMPLEX64: "complex64",
    TP.COMPLEX128: "complex128", TP.UINT16: "uint16", TP.UINT32: "uint32", TP.UINT64: "uint64",
}
INTEGER_TYPES = {TP.INT8, TP.INT16, TP.INT32, TP.INT64, TP.UINT8, TP.UINT16, TP.UINT32, TP.UINT64}

PASS, FAIL, UNSUPPORTED = "PASS", "FAIL", "UNSUPPORTED"


class Outcome(Exception):
    def __init__(self, status, reason, detail=""):
        super().__init__(reason)
        self.status, self.reason, self.detail = status, reason, detail


def supported_ops(source=SOURCE):
    """Op types the importer has handlers for: every r.add("Op" in frontends/onnx/handlers."""
    ops = set()
    for path in glob.glob(os.path.join(source, "frontends", "onnx", "handlers", "*.cpp")):
        with open(path) as f:
            ops.update(re.findall(r'\br\.add\(\s*"([A-Za-z0-9_]+)"', f.read()))
    return ops


def model_opset(model):
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return imp.version
    return None


def walk_nodes(graph):
    for node in graph.node:
        yield node
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.GRAPH:
                yield from walk_nodes(attr.g)
            for g in attr.graphs:
                yield from walk_nodes(g)


def op_types(model):
    return {(n.domain if n.domain not in ("", "ai.onnx") else "") + ("::" if n.domain not in ("", "ai.onnx") else "")
            + n.op_type for n in walk_nodes(model.graph)}


def value_kind(type_proto):
    """'tensor' or the name of the non-tensor kind (sequence, optional, map, sparse tensor)."""
    kind = type_proto.WhichOneof("value")
    return {"tensor_type": "tensor", "sequence_type": "sequence", "optional_type": "optional",
            "map_type": "map", "sparse_tensor_type": "sparse tensor"}.get(kind, str(kind))


def lift_opset(model):
    """For a model below opset 13: when no op it uses changed between its opset and 13 (same
    schema version at both), a copy that imports opset 13, which is then the same computation.
    Returns (model, note); raises UNSUPPORTED when some op changed."""
    opset = model_opset(model)
    if opset is None or opset >= MIN_OPSET:
        return model, None
    for node in walk_nodes(model.graph):
        if node.domain not in ("", "ai.onnx"):
            continue
        try:
            old = onnx.defs.get_schema(node.op_type, opset).since_version
            new = onnx.defs.get_schema(node.op_type, MIN_OPSET).since_version
        except Exception:  # op unknown at that opset
            old, new = None, -1
        if old != new:
            raise Outcome(UNSUPPORTED, "model opset %d < %d (%s changed at opset %s)" %
                          (opset, MIN_OPSET, node.op_type, new))
    lifted = onnx.ModelProto()
    lifted.CopyFrom(model)
    for imp in lifted.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = MIN_OPSET
    return lifted, "opset %d -> %d, ops unchanged" % (opset, MIN_OPSET)


def precheck(model):
    """Raises UNSUPPORTED for what cpc deliberately does not handle, before running anything."""
    graph = model.graph
    for vi in list(graph.input) + list(graph.output):
        kind = value_kind(vi.type)
        if kind != "tensor":
            raise Outcome(UNSUPPORTED, "%s-typed graph values" % kind)
    types = [vi.type.tensor_type.elem_type for vi in list(graph.input) + list(graph.output)]
    types += [t.data_type for t in graph.initializer]
    for node in walk_nodes(graph):
        for attr in node.attribute:
            if attr.type == onnx.AttributeProto.TENSOR:
                types.append(attr.t.data_type)
            # Cast/CastLike/EyeLike/... name their result type with an int attribute.
            if node.op_type == "Cast" and attr.name == "to":
                types.append(attr.i)
    for t in types:
        if t in UNSUPPORTED_TYPES:
            raise Outcome(UNSUPPORTED, "element type %s" % UNSUPPORTED_TYPES[t])


def graph_inputs(model):
    inits = {t.name for t in model.graph.initializer}
    return [vi for vi in model.graph.input if vi.name not in inits]


def load_tensor(path):
    t = onnx.TensorProto()
    with open(path, "rb") as f:
        t.ParseFromString(f.read())
    return t


def data_sets(test_dir):
    sets = []
    for d in sorted(glob.glob(os.path.join(test_dir, "test_data_set_*"))):
        def numbered(prefix):
            files = glob.glob(os.path.join(d, prefix + "_*.pb"))
            return sorted(files, key=lambda p: int(re.search(r"_(\d+)\.pb$", p).group(1)))
        sets.append((d, numbered("input"), numbered("output")))
    return sets


def run_tool(args, cwd=None):
    try:
        return subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT, cwd=cwd)
    except subprocess.TimeoutExpired:
        raise Outcome(FAIL, "timeout after %ds: %s" % (TIMEOUT, os.path.basename(args[0])))


def one_line(text, limit=400):
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "..."


def tool_error(proc):
    """The most telling line of a failed tool's output."""
    lines = [l for l in (proc.stderr + "\n" + proc.stdout).splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l.strip()
    return lines[-1].strip() if lines else "(no output)"


UNSUPPORTED_RE = re.compile(r"not supported|unsupported|does not support", re.I)
# Ops whose results come from a random generator: cpc's stream is not numpy's, so only the
# shape and dtype of the outputs can be checked.
RANDOM_OPS = {"RandomUniform", "RandomUniformLike", "RandomNormal", "RandomNormalLike", "Bernoulli",
              "Multinomial"}


def drops_at_random(model, feeds):
    """Whether a Dropout node of `model` runs in training mode with a ratio above 0 (its mask is
    random), its ratio and training_mode read from the test's inputs or the graph's constants."""
    constants = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for node in model.graph.node:
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value":
            constants[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
    value = lambda name: numpy_helper.to_array(feeds[name]) if name in feeds else constants.get(name)
    for node in model.graph.node:
        if node.op_type != "Dropout" or len(node.input) < 3 or not node.input[2]:
            continue
        training = value(node.input[2])
        ratio = value(node.input[1]) if len(node.input) > 1 and node.input[1] else 0.5
        if training is None or bool(np.asarray(training).reshape(-1)[0]):
            if ratio is None or float(np.asarray(ratio).reshape(-1)[0]) > 0:
                return True
    return False


def unsupported_reason(message):
    """Normalized cpc 'not supported' message (no paths, node names) for the histogram."""
    m = message
    m = re.sub(r"^.*?\.onnx:\s*", "", m)
    m = re.sub(r"^(error:\s*)", "", m)
    m = re.sub(r"node '[^']*' \(([^)]*)\):\s*", r"\1: ", m)
    m = re.sub(r"graph input '[^']*'", "graph input", m)
    m = re.sub(r"initializer '[^']*'", "initializer", m)
    m = re.sub(r"\(ratio [0-9.]+\)", "(ratio > 0)", m)
    return one_line(m, 160)


def classify_tool_failure(proc, what):
    """Turns a failed cpc/cpc-run run into an Outcome (raised)."""
    if proc.returncode < 0:
        raise Outcome(FAIL, "%s killed by signal %d" % (what, -proc.returncode), proc.stderr[-2000:])
    msg = tool_error(proc)
    if UNSUPPORTED_RE.search(msg):
        raise Outcome(UNSUPPORTED, unsupported_reason(msg), msg)
    raise Outcome(FAIL, "%s exited %d: %s" % (what, proc.returncode, one_line(msg)),
                  (proc.stdout + proc.stderr)[-3000:])


CONST_RE = re.compile(r"node '([^']*)' \(([^)]*)\): input (\d+) \(([^)]*)\) must be a constant")


def find_node(model, label):
    nodes = list(model.graph.node)
    for node in nodes:
        if node.name and node.name == label:
            return node
    if label.startswith("#") and label[1:].isdigit() and int(label[1:]) < len(nodes):
        return nodes[int(label[1:])]
    return None


def fold_inputs(model, names, feeds):
    """A copy of `model` where graph inputs `names` hold the test data as constants: integer ones
    become initializers; float and bool ones Constant nodes (cpc takes float initializers for
    trainable parameters, not constants)."""
    folded = onnx.ModelProto()
    folded.CopyFrom(model)
    keep = [vi for vi in folded.graph.input if vi.name not in names]
    del folded.graph.input[:]
    folded.graph.input.extend(keep)
    constants = []
    for name in names:
        t = onnx.TensorProto()
        t.CopyFrom(feeds[name])
        t.name = name
        if t.data_type in INTEGER_TYPES:
            folded.graph.initializer.append(t)
        else:
            constants.append(onnx.helper.make_node("Constant", [], [name], value=t))
    if constants:
        nodes = constants + list(folded.graph.node)
        del folded.graph.node[:]
        folded.graph.node.extend(nodes)
    return folded


def compare(name, got, want):
    """Raises FAIL when `got` (numpy) does not match `want` (numpy)."""
    if got.shape != want.shape:
        raise Outcome(FAIL, "output '%s': shape %s, expected %s" % (name, got.shape, want.shape))
    if want.dtype == np.bool_ or np.issubdtype(want.dtype, np.integer):
        if got.dtype != want.dtype:
            raise Outcome(FAIL, "output '%s': dtype %s, expected %s" % (name, got.dtype, want.dtype))
        bad = got != want
    else:
        if got.dtype != want.dtype:
            raise Outcome(FAIL, "output '%s': dtype %s, expected %s" % (name, got.dtype, want.dtype))
        g, w = got.astype(np.float64), want.astype(np.float64)
        rtol, atol = TOLERANCES.get(want.dtype, (RTOL, ATOL))
        with np.errstate(invalid="ignore"):
            close = np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True)
        bad = ~close
    if bad.any():
        idx = np.argwhere(bad)
        first = tuple(idx[0]) if got.ndim else ()
        raise Outcome(FAIL, "output '%s': %d of %d elements differ; first at %s: got %r, expected %r" %
                      (name, int(bad.sum()), bad.size, list(first), got[first].item(), want[first].item()))


def has_gpu():
    return os.path.exists("/dev/nvidiactl")


def cuda_kernels_only(plan, notes):
    """Without a GPU, a cuda plan passes when every step has a CUDA kernel."""
    proc = run_tool([os.path.join(BIN, "cpc"), "inspect", plan, "--json"])
    if proc.returncode != 0:
        classify_tool_failure(proc, "cpc inspect")
    summary = json.loads(proc.stdout)["summary"]
    if not summary.get("cuda_built"):
        raise Outcome(UNSUPPORTED, "cpc was built without CUDA")
    if summary["missing_kernels"]:
        raise Outcome(FAIL, "no CUDA kernel for " + "; ".join(summary["missing_kernels"]))
    notes.append("kernels only: no GPU")


def run_test(test_dir, work_root, verbose=False, device="cpu"):
    """Runs one node test; returns (name, status, reason, notes, detail)."""
    name = os.path.basename(test_dir)
    work = os.path.join(work_root, name)
    os.makedirs(work, exist_ok=True)
    notes = []
    try:
        model = onnx.load(os.path.join(test_dir, "model.onnx"))
        precheck(model)
        model_path = os.path.join(test_dir, "model.onnx")
        model, lifted = lift_opset(model)
        if lifted:
            notes.append(lifted)
            model_path = os.path.join(work, "lifted.onnx")
            onnx.save(model, model_path)
        random = sorted(op_types(model) & RANDOM_OPS)
        sets = data_sets(test_dir)
        if not sets:
            raise Outcome(FAIL, "no test_data_set_* directories")
        inputs = graph_inputs(model)
        outputs = list(model.graph.output)
        cpc, cpc_run = os.path.join(BIN, "cpc"), os.path.join(BIN, "cpc-run")
        plans = {}  # (folded names, shape flags, folded data) -> plan path
        for si, (set_dir, in_files, out_files) in enumerate(sets):
            if len(in_files) != len(inputs):
                raise Outcome(FAIL, "%s has %d inputs, the model %d" %
                              (os.path.basename(set_dir), len(in_files), len(inputs)))
            if len(out_files) != len(outputs):
                raise Outcome(FAIL, "%s has %d outputs, the model %d" %
                              (os.path.basename(set_dir), len(out_files), len(outputs)))
            feeds = {vi.name: load_tensor(f) for vi, f in zip(inputs, in_files)}
            if drops_at_random(model, feeds) and "Dropout" not in random:
                random.append("Dropout")
            files = {vi.name: f for vi, f in zip(inputs, in_files)}
            for vi in inputs:  # the bf16 tests store their values as uint16 bit patterns
                if vi.type.tensor_type.elem_type == TP.BFLOAT16 and feeds[vi.name].data_type == TP.UINT16:
                    bits = numpy_helper.to_array(feeds[vi.name])
                    feeds[vi.name] = onnx.helper.make_tensor(vi.name, TP.BFLOAT16, bits.shape, bits.tobytes(), raw=True)
                    files[vi.name] = os.path.join(work, "%s.bf16.%d.pb" % (vi.name, si))
                    with open(files[vi.name], "wb") as f:
                        f.write(feeds[vi.name].SerializeToString())
            # --input-shape for inputs with symbolic or missing dims.
            shape_flags = []
            folded = []
            for vi in inputs:
                data_shape = list(feeds[vi.name].dims)
                if any(d == 0 for d in data_shape):
                    # An empty integer input can only be a shape-like argument (e.g. no axes):
                    # fold it now, cpc has no way to take an empty tensor as input.
                    if feeds[vi.name].data_type in INTEGER_TYPES:
                        folded.append(vi.name)
                        continue
                    raise Outcome(UNSUPPORTED, "empty tensors (zero-sized dims)")
                tt = vi.type.tensor_type
                dims = list(tt.shape.dim) if tt.HasField("shape") else None
                if dims is not None and all(d.HasField("dim_value") and d.dim_value > 0 for d in dims):
                    if [d.dim_value for d in dims] != data_shape:
                        raise Outcome(UNSUPPORTED, "test data of another shape than the model declares (%s: %s vs %s)"
                                      % (vi.name, data_shape, [d.dim_value for d in dims]))
                    continue
                if not data_shape:
                    if dims is not None and not dims:
                        continue  # rank 0 and declared as such
                    raise Outcome(UNSUPPORTED, "scalar input without a declared shape")
                shape_flags += ["--input-shape", "%s=%s" % (vi.name, "x".join(map(str, data_shape)))]
            # Compile, folding shape inputs into initializers when cpc asks for constants.
            key = None
            current = model
            base_path = model_path
            if folded:
                current = fold_inputs(model, folded, feeds)
                base_path = os.path.join(work, "folded%d_0.onnx" % si)
                onnx.save(current, base_path)
            set_model_path = base_path
            for _ in range(MAX_FOLD_ROUNDS):
                key = (tuple(folded), tuple(shape_flags),
                       tuple(feeds[n].SerializeToString() for n in folded))
                if key in plans:
                    break
                plan = os.path.join(work, "model%d.plan" % len(plans))
                # Drop --input-shape flags of folded inputs.
                flags = []
                for i in range(0, len(shape_flags), 2):
                    if shape_flags[i + 1].split("=", 1)[0] not in folded:
                        flags += shape_flags[i:i + 2]
                proc = run_tool([cpc, "compile", set_model_path, "--mode", "infer", "--device", device, "-o", plan] +
                                flags)
                if proc.returncode == 0:
                    plans[key] = plan
                    break
                msg = proc.stderr + proc.stdout
                m = CONST_RE.search(msg)
                if proc.returncode > 0 and m:
                    node = find_node(current, m.group(1))
                    idx = int(m.group(3))
                    input_names = {vi.name: vi for vi in inputs}
                    if node is None or idx >= len(node.input) or node.input[idx] not in input_names:
                        raise Outcome(UNSUPPORTED, "%s: input %d (%s) is computed at run time, cpc needs a constant"
                                      % (m.group(2), idx, m.group(4)), one_line(msg))
                    arg = node.input[idx]
                    if arg in folded:
                        raise Outcome(FAIL, "cpc still asks for input '%s' to be constant after folding" % arg,
                                      one_line(msg))
                    folded.append(arg)
                    current = fold_inputs(model, folded, feeds)
                    set_model_path = os.path.join(work, "folded%d_%d.onnx" % (si, len(folded)))
                    onnx.save(current, set_model_path)
                    continue
                classify_tool_failure(proc, "cpc compile")
            else:
                raise Outcome(FAIL, "too many shape inputs to fold")
            if folded and "shape inputs folded" not in notes:
                notes.append("shape inputs folded")
            plan = plans[key]
            if device == "cuda" and not has_gpu():
                cuda_kernels_only(plan, notes)
                break
            out_dir = os.path.join(work, "out%d" % si)
            shutil.rmtree(out_dir, ignore_errors=True)
            os.makedirs(out_dir)
            args = [cpc_run, plan, "--output-dir", out_dir, "--quiet"]
            for vi in inputs:
                if vi.name not in folded:
                    args += ["--input", "%s=%s" % (vi.name, files[vi.name])]
            proc = run_tool(args)
            if proc.returncode != 0:
                classify_tool_failure(proc, "cpc-run")
            for vi, f in zip(outputs, out_files):
                want = numpy_helper.to_array(load_tensor(f))
                got_path = os.path.join(out_dir, vi.name + ".npy")
                if not os.path.exists(got_path):
                    raise Outcome(FAIL, "cpc-run wrote no %s.npy" % vi.name)
                got = np.load(got_path)
                if vi.type.tensor_type.elem_type == TP.BFLOAT16 and want.dtype == np.uint16:
                    # Expected as bf16 bit patterns; cpc writes bf16 as its exact f32 values.
                    # The reference truncated f32 to bf16; cpc rounds to nearest even (as torch
                    # does): one unit in the last place apart at most.
                    got = (np.ascontiguousarray(got, dtype=np.float32).view(np.uint32) >> 16).astype(np.uint16)
                    near = np.abs(got.astype(np.int32) - want.astype(np.int32)) <= 1
                    got = np.where(near, want, got)
                try:
                    if random:
                        if got.shape != want.shape or got.dtype != want.dtype:
                            raise Outcome(FAIL, "output '%s': %s %s, expected %s %s" %
                                          (vi.name, got.dtype, got.shape, want.dtype, want.shape))
                        continue
                    compare(vi.name, got, want)
                except Outcome as e:
                    if len(sets) > 1:
                        e.reason = "%s: %s" % (os.path.basename(set_dir), e.reason)
                    raise
        if random and "kernels only: no GPU" not in notes:
            raise Outcome(UNSUPPORTED, "values come from a random generator (%s); cpc's stream differs from "
                          "the reference's, only shapes and dtypes checked" % ", ".join(random))
        return (name, PASS, "", notes, "")
    except Outcome as e:
        return (name, e.status, e.reason, notes, e.detail)
    except Exception as e:  # a runner bug must not hide a test
        return (name, FAIL, "runner error: %s: %s" % (type(e).__name__, one_line(str(e))), notes, "")


def read_passing(path=PASSING):
    """The pinned passing test names, in file order (comments and blank lines skipped)."""
    with open(path) as f:
        return [line.strip() for line in f if line.strip() and not line.startswith("#")]


def write_passing(passed, pattern, path=PASSING):
    """Rewrites the list: the tests that passed now, plus (with a --filter pattern) the listed
    tests the pattern does not match, which this run did not look at. Returns (added, removed)."""
    old = set(read_passing(path)) if os.path.exists(path) else set()
    kept = {t for t in old if pattern and not re.search(pattern, t)}
    new = kept | set(passed)
    with open(path, "w") as f:
        f.write(PASSING_HEADER + "".join(t + "\n" for t in sorted(new)))
    return sorted(new - old), sorted(old - new)


def select_tests(data_dir, pattern):
    """(considered test dirs, number not considered)."""
    ops = supported_ops()
    if not ops:
        sys.exit("found no r.add(\"Op\" handlers under %s/frontends/onnx/handlers" % SOURCE)
    considered, skipped = [], []
    for d in sorted(glob.glob(os.path.join(data_dir, "*"))):
        name = os.path.basename(d)
        if not os.path.isfile(os.path.join(d, "model.onnx")):
            continue
        if pattern and not re.search(pattern, name):
            continue
        model = onnx.load(os.path.join(d, "model.onnx"), load_external_data=False)
        missing = sorted(op_types(model) - ops)
        (skipped.append((name, missing)) if missing else considered.append(d))
    return considered, skipped


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--filter", metavar="REGEX", help="only tests whose directory name matches (re.search)")
    ap.add_argument("--jobs", "-j", type=int, default=2, help="tests run in parallel (default 2)")
    ap.add_argument("--keep", metavar="DIR", help="keep plans, folded models and outputs under DIR")
    ap.add_argument("--data", default=DATA, help="node test directory (default %(default)s)")
    ap.add_argument("-v", "--verbose", action="store_true", help="details of failures and unconsidered tests")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu",
                    help="compile for this device (cuda without a GPU: check that every step has a kernel)")
    ap.add_argument("--update-passing", action="store_true",
                    help="rewrite %s with the tests that pass in this run" % os.path.relpath(PASSING, SOURCE))
    args = ap.parse_args()

    for tool in ("cpc", "cpc-run"):
        if not os.access(os.path.join(BIN, tool), os.X_OK):
            sys.exit("no %s in %s (set CPC_BIN)" % (tool, BIN))
    start = time.time()
    considered, skipped = select_tests(args.data, args.filter)
    print("%d node tests considered (ops with importer handlers), %d not considered (other ops)" %
          (len(considered), len(skipped)), flush=True)
    if args.verbose:
        for name, missing in skipped:
            print("  not considered: %s (%s)" % (name, ", ".join(missing)))

    if args.keep:
        os.makedirs(args.keep, exist_ok=True)
        work_root, tmp = os.path.abspath(args.keep), None
    else:
        tmp = tempfile.TemporaryDirectory(prefix="cpc-conformance-")
        work_root = tmp.name

    results = []
    with concurrent.futures.ProcessPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_test, d, work_root, args.verbose, args.device) for d in considered]
        for fut in concurrent.futures.as_completed(futures):
            name, status, reason, notes, detail = fut.result()
            results.append((name, status, reason))
            line = "%-11s %s" % (status, name)
            if notes:
                line += " [%s]" % ", ".join(notes)
            if reason:
                line += ": " + reason
            print(line, flush=True)
            if args.verbose and detail and status != PASS:
                print("    " + detail.strip().replace("\n", "\n    "), flush=True)
            if not args.keep:
                shutil.rmtree(os.path.join(work_root, name), ignore_errors=True)
    if tmp:
        tmp.cleanup()

    counts = collections.Counter(status for _, status, _ in results)
    failed = sorted((n, r) for n, s, r in results if s == FAIL)
    if failed:
        print("\nfailures:")
        for n, r in failed:
            print("  %s: %s" % (n, r))
    hist = collections.Counter(r for _, s, r in results if s == UNSUPPORTED)
    if hist:
        print("\nunsupported reasons:")
        for reason, n in sorted(hist.items(), key=lambda kv: (-kv[1], kv[0])):
            print("  %4d  %s" % (n, reason))
    print("\n%d tests considered, %.0fs" % (len(results), time.time() - start))
    print("%d passed, %d failed, %d unsupported" % (counts[PASS], counts[FAIL], counts[UNSUPPORTED]))
    if args.update_passing:
        added, removed = write_passing([n for n, st, _ in results if st == PASS], args.filter)
        def names(tests):
            return " (%s%s)" % (", ".join(tests[:20]), ", ..." if len(tests) > 20 else "") if tests else ""
        print("%s: %d added%s, %d removed%s" % (os.path.relpath(PASSING, SOURCE), len(added), names(added),
                                                len(removed), names(removed)))
    sys.exit(1 if counts[FAIL] or len(results) != len(considered) else 0)


if __name__ == "__main__":
    main()
