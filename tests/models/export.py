"""Exports the model-zoo fixtures (tests/models/zoo.py) to ONNX, with a PyTorch training reference.

For each model, into OUT_DIR/NAME/:
  default.onnx   torch.onnx.export(model, inputs, dynamo=True), the exporter's default opset
  dynamo.onnx    the same with optimize=False (the parameters stay parameters: trainable)
  ts17.onnx      torch.onnx.export(..., dynamo=False, opset_version=17, training=TRAINING,
                 do_constant_folding=False)
  weights.json   every float32 initializer the two files keep as external data (in
                 STEM.weights.bin), with the seed, mean and std that
                 weights.py regenerates it from; those .bin files are deleted once weights.py
                 has been checked to rewrite them bit for bit
  <input>.npy    the fixed batch, one file per graph input
  torch.json     10 AdamW steps in PyTorch from the same weights on that batch (loss and
                 grad_norm before clipping per step; and the same in float64, which shows how
                 far float32 rounding alone moves a model's curve), the default exporter's opset, versions
  export_errors.json   {exporter: one line}, only where there is a problem: without its .onnx
                 the exporter failed or wrote over MAX_ONNX_BYTES; with it, onnx.reference
                 computes another loss than PyTorch from it (torch.json: onnx_reference_loss)

Every floating parameter and buffer is first replaced by weights.make_tensor(crc32(name), shape,
mean, std) with the mean and population std of its initial value (std 0 for constant tensors).
A float initializer that is none of them (a constant the exporter folded) stays in the .onnx.
Per-node debug metadata (stack traces with this machine's paths) is dropped but for\npkg.torch.onnx.fx_node (what the node computed in torch), which cpc's export checks read.

Usage: /work/venv-export/bin/python tests/models/export.py --out-dir tests/models/fixtures [--only NAME,...]
"""
import argparse
import contextlib
import copy
import hashlib
import io
import json
import os
import sys
import warnings
import zlib

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "2")

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import timm  # noqa: E402
import torch  # noqa: E402
import torchvision  # noqa: E402
import transformers  # noqa: E402
from onnx import external_data_helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import weights  # noqa: E402
import zoo  # noqa: E402

STEPS = 10
OPTIMIZER = dict(lr=1e-3, betas=(0.9, 0.95), eps=1e-8, weight_decay=0.05)
CLIP_NORM = 1.0
SIZE_THRESHOLD = 256  # bytes: larger regenerated initializers go to the external file
MAX_ONNX_BYTES = 1 << 20  # a larger .onnx (inline constants the exporter folded) is not kept


# ---- weights -------------------------------------------------------------------------------

def named_tensors(model):
    """(name, tensor) for every parameter and buffer of `model`, shared ones once."""
    return list(model.named_parameters()) + list(model.named_buffers())


def init_stats(t):
    """(mean, std) of `t` rounded to float32: the population std, exactly 0 for a constant tensor."""
    flat = t.detach().flatten().double()
    if bool((flat == flat[0]).all()):
        return float(np.float32(flat[0].item())), 0.0
    return float(np.float32(flat.mean().item())), float(np.float32(flat.std(correction=0).item()))


def regenerate(model):
    """Replaces every floating parameter and buffer in place by weights.make_tensor; returns
    {name: {"seed", "mean", "std"}}."""
    specs = {}
    with torch.no_grad():
        for name, t in named_tensors(model):
            if not t.is_floating_point():
                continue
            mean, std = init_stats(t)
            seed = zlib.crc32(name.encode())
            t.copy_(torch.from_numpy(weights.make_tensor(seed, t.shape, mean, std)))
            specs[name] = dict(seed=seed, mean=mean, std=std)
    return specs


def snapshot(model):
    return {name: t.detach().clone() for name, t in named_tensors(model)}


def restore(model, saved):
    """Puts back the values of snapshot() (tracing in training mode moves BatchNorm's statistics)."""
    with torch.no_grad():
        for name, t in named_tensors(model):
            t.copy_(saved[name])


def content_key(shape, raw):
    return tuple(int(d) for d in shape), hashlib.sha256(raw).hexdigest()


def weight_keys(model, specs):
    """{torch name: content key} of the regenerated tensors, and {content key: first such name}."""
    keys = {}
    for name, t in named_tensors(model):
        if name in specs:
            keys[name] = content_key(t.shape, t.detach().numpy().astype("<f4").tobytes())
    by_content = {}
    for name, key in keys.items():
        by_content.setdefault(key, name)
    return keys, by_content


# ---- export --------------------------------------------------------------------------------

def export_default(model, inputs):
    program = torch.onnx.export(model, tuple(inputs.values()), dynamo=True, verbose=False,
                                input_names=list(inputs), output_names=["loss"])
    return program.model_proto


def export_dynamo(model, inputs):
    """The default exporter without its graph optimizer, which would fold transposes of Linear
    weights into new constants and merge equal initializers (cpc warns about such files)."""
    program = torch.onnx.export(model, tuple(inputs.values()), dynamo=True, optimize=False,
                                verbose=False, input_names=list(inputs), output_names=["loss"])
    return program.model_proto


def export_ts17(model, inputs):
    buffer = io.BytesIO()
    torch.onnx.export(model, tuple(inputs.values()), buffer, dynamo=False, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                      input_names=list(inputs), output_names=["loss"])
    return onnx.load_model_from_string(buffer.getvalue())


EXPORTERS = {"default": export_default, "dynamo": export_dynamo, "ts17": export_ts17}


@contextlib.contextmanager
def quiet_stdout():
    """Silences file descriptor 1 (the TorchScript exporter prints its whole graph there on errors)."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


def one_line(error):
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return "%s: %s" % (type(error).__name__, lines[0] if lines else "")


def raw_bytes(init):
    """The initializer's little-endian bytes, moved into raw_data if it held typed fields."""
    if not init.HasField("raw_data"):
        array = numpy_helper.to_array(init)
        init.CopyFrom(numpy_helper.from_array(array.astype(array.dtype.newbyteorder("<")), init.name))
    return init.raw_data


def save_fixture(proto, fixture_dir, stem, keys, by_content, specs):
    """Saves `proto` as STEM.onnx, the float initializers over SIZE_THRESHOLD bytes that equal a
    regenerated tensor in STEM.weights.bin; returns their weights.json entries."""
    location = stem + ".weights.bin"
    remove(os.path.join(fixture_dir, location))
    chosen = []
    for init in proto.graph.initializer:
        if init.data_type != onnx.TensorProto.FLOAT or init.data_location == onnx.TensorProto.EXTERNAL:
            continue
        raw = raw_bytes(init)
        if len(raw) <= SIZE_THRESHOLD:
            continue
        key = content_key(init.dims, raw)
        source = init.name if keys.get(init.name) == key else by_content.get(key)
        if source is not None:
            external_data_helper.set_external_data(init, location)
            chosen.append((init, source))
    onnx.save_model(proto, os.path.join(fixture_dir, stem + ".onnx"))
    entries = []
    for init, source in chosen:
        offset = external_data_helper.ExternalDataInfo(init).offset
        entries.append(dict(name=init.name, shape=[int(d) for d in init.dims], **specs[source],
                            file=location, offset=offset, param=source))
    return entries


def verify_weights(fixture_dir, entries):
    """Checks that weights.materialize rewrites the saved external data files bit for bit (it
    leaves them in place; returns their paths)."""
    saved = {}
    for name in sorted({e["file"] for e in entries}):
        path = os.path.join(fixture_dir, name)
        with open(path, "rb") as f:
            saved[path] = f.read()
        os.remove(path)
    written = weights.materialize(fixture_dir)
    assert sorted(written) == sorted(saved), (written, list(saved))
    for path, data in saved.items():
        with open(path, "rb") as f:
            assert f.read() == data, "weights.py does not reproduce " + path
    return sorted(saved)


def reference_loss(path, inputs):
    """The loss onnx.reference computes from the .onnx at `path` (weights materialized), or the
    one-line error of the evaluator."""
    try:
        evaluator = ReferenceEvaluator(onnx.load(path))
        return float(evaluator.run(["loss"], {k: v.numpy() for k, v in inputs.items()})[0])
    except Exception as error:  # noqa: BLE001 (recorded, not fatal)
        return one_line(error)


def remove(path):
    if os.path.exists(path):
        os.remove(path)


def write_json(path, value):
    with open(path, "w") as f:
        json.dump(value, f, indent=1)
        f.write("\n")


def opset_of(proto):
    return next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))


# ---- reference training --------------------------------------------------------------------

def train_reference(model, inputs):
    """STEPS AdamW steps with gradient clipping: [{"step", "loss", "grad_norm" (before clipping)}]."""
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, **OPTIMIZER)
    steps = []
    for step in range(STEPS):
        optimizer.zero_grad(set_to_none=True)
        loss = model(*inputs.values())
        loss.backward()
        norm = torch.nn.utils.clip_grad_norm_(params, CLIP_NORM)
        optimizer.step()
        steps.append(dict(step=step, loss=loss.item(), grad_norm=norm.item()))
    return steps


def versions():
    return {m.__name__: m.__version__ for m in (torch, transformers, timm, torchvision, onnx)}


KEPT_NODE_METADATA = ("pkg.torch.onnx.fx_node",)  # what the node computed in torch: cpc reads it


def strip_node_metadata(proto):
    """Drops the exporter's per-node debug metadata (stack traces with this machine's paths,
    module scopes) but the keys in KEPT_NODE_METADATA."""
    for graph in [proto.graph] + list(proto.functions):
        for node in graph.node:
            kept = [(p.key, p.value) for p in node.metadata_props if p.key in KEPT_NODE_METADATA]
            del node.metadata_props[:]
            for key, value in kept:
                node.metadata_props.add(key=key, value=value)
            node.doc_string = ""


def export_onnx(model, inputs, fixture_dir):
    """Writes STEM.onnx of each exporter, weights.json and the external data files; returns
    ({exporter: error}, the default exporter's opset, the .bin paths)."""
    specs = regenerate(model)
    saved = snapshot(model)
    keys, by_content = weight_keys(model, specs)
    entries, errors, opset = [], {}, None
    for stem, export in EXPORTERS.items():
        path = os.path.join(fixture_dir, stem + ".onnx")
        remove(path)
        restore(model, saved)
        try:
            with warnings.catch_warnings(), quiet_stdout():
                warnings.simplefilter("ignore")
                proto = export(model, inputs)
        except Exception as error:  # noqa: BLE001 (any exporter failure is recorded)
            errors[stem] = one_line(error)
            continue
        strip_node_metadata(proto)
        written = save_fixture(proto, fixture_dir, stem, keys, by_content, specs)
        size = os.path.getsize(path)
        if size > MAX_ONNX_BYTES:
            errors[stem] = "not kept: %s.onnx is %.1f MiB (constants the exporter folded, which " \
                "weights.py cannot regenerate, stay inline)" % (stem, size / 2**20)
            remove(path)
            remove(os.path.join(fixture_dir, stem + ".weights.bin"))
            continue
        opset = opset_of(proto) if stem == "default" else opset
        entries += written
    restore(model, saved)
    with open(os.path.join(fixture_dir, "weights.json"), "w") as f:  # one tensor a line
        f.write("[\n" + ",\n".join(json.dumps(e) for e in entries) + "\n]\n")
    return errors, opset, verify_weights(fixture_dir, entries)


def loss_problem(onnx_loss, torch_loss):
    """None if the exported graph's loss (onnx.reference, or its error) is PyTorch's, else why not."""
    if isinstance(onnx_loss, str):
        return "onnx.reference failed: " + onnx_loss
    if abs(onnx_loss - torch_loss) <= 1e-4 * max(1.0, abs(torch_loss)):
        return None
    return "loss mismatch: onnx.reference %.6f, torch %.6f (the .onnx is kept)" % (onnx_loss, torch_loss)


def export_model(name, out_dir):
    """Writes the fixture of model `name` into OUT_DIR/NAME; returns {exporter: problem}."""
    model, inputs = zoo.build(name)
    fixture_dir = os.path.join(out_dir, name)
    os.makedirs(fixture_dir, exist_ok=True)
    for input_name, value in inputs.items():
        np.save(os.path.join(fixture_dir, input_name + ".npy"), value.numpy())
    errors, opset, bins = export_onnx(model, inputs, fixture_dir)
    onnx_losses = {stem: reference_loss(os.path.join(fixture_dir, stem + ".onnx"), inputs)
                   for stem in EXPORTERS if stem not in errors}
    for path in bins:
        os.remove(path)
    steps_float64 = train_reference(copy.deepcopy(model).double(), {
        k: v.double() if v.is_floating_point() else v for k, v in inputs.items()})
    steps = train_reference(model, inputs)
    for stem, loss in onnx_losses.items():
        problem = loss_problem(loss, steps[0]["loss"])
        if problem:
            errors[stem] = problem
    remove(os.path.join(fixture_dir, "export_errors.json"))
    if errors:
        write_json(os.path.join(fixture_dir, "export_errors.json"), errors)
    write_json(os.path.join(fixture_dir, "torch.json"), dict(
        default_opset=opset, versions=versions(), inputs=list(inputs), optimizer=dict(
            OPTIMIZER, name="AdamW", clip_grad_norm=CLIP_NORM),
        parameters=[n for n, p in model.named_parameters() if p.requires_grad],
        frozen_parameters=[n for n, p in model.named_parameters() if not p.requires_grad],
        steps=steps, steps_float64=steps_float64, onnx_reference_loss=onnx_losses))
    return errors


# ---- report --------------------------------------------------------------------------------

def op_types(graph):
    """Op types used in `graph` and its subgraphs; 'domain::Op' outside the default domain."""
    found = set()
    for node in graph.node:
        default = node.domain in ("", "ai.onnx")
        found.add(node.op_type if default else node.domain + "::" + node.op_type)
        for attr in node.attribute:
            for sub in ([attr.g] if attr.HasField("g") else []) + list(attr.graphs):
                found |= op_types(sub)
    return found


def describe(path, params):
    """What the report says of one .onnx file; `params` are the trainable parameter names."""
    model = onnx.load(path, load_external_data=False)
    inits = model.graph.initializer
    external = [i for i in inits if i.data_location == onnx.TensorProto.EXTERNAL]
    inline = [i for i in inits if i.data_location != onnx.TensorProto.EXTERNAL
              and i.data_type == onnx.TensorProto.FLOAT and len(i.raw_data) > SIZE_THRESHOLD]
    names = {i.name for i in inits}
    return dict(
        size=os.path.getsize(path), opset=opset_of(model), ops=sorted(op_types(model.graph)),
        domains=sorted("%s:%d" % (o.domain, o.version) for o in model.opset_import
                       if o.domain not in ("", "ai.onnx")),
        functions=sorted("%s::%s" % (f.domain, f.name) for f in model.functions),
        function_ops=sorted(set().union(*[op_types(f) for f in model.functions])),
        outputs=[o.name for o in model.graph.output], external=len(external),
        inline=len(inline), inline_bytes=sum(len(i.raw_data) for i in inline),
        named_params=sum(1 for p in params if p in names))


def load_json(path, default=None):
    if not os.path.exists(path):
        return default
    with open(path) as f:
        return json.load(f)


def fixture_rows(out_dir, name):
    """[(table row, op-types line or None)] of fixture `name`, one per exporter."""
    fixture_dir = os.path.join(out_dir, name)
    reference = load_json(os.path.join(fixture_dir, "torch.json"))
    errors = load_json(os.path.join(fixture_dir, "export_errors.json"), {})
    steps, params = reference["steps"], reference["parameters"]
    losses = "%.4f -> %.4f" % (steps[0]["loss"], steps[-1]["loss"])
    rows = []
    for stem in EXPORTERS:
        path = os.path.join(fixture_dir, stem + ".onnx")
        if not os.path.exists(path):
            rows.append(("| %s | %s | FAILED: %s | | | | | %s |" % (
                name, stem, errors.get(stem, "no file"), losses), None))
            continue
        info = describe(path, params)
        row = "| %s | %s | %s | %d | %.1f | %d / %d | %d/%d | %s |" % (
            name, stem, errors.get(stem, "ok"), info["opset"], info["size"] / 1024, info["external"],
            info["inline"], info["named_params"], len(params), losses)
        ops = "- %s %s (%d): %s" % (name, stem, len(info["ops"]), " ".join(info["ops"]))
        if info["domains"] or info["functions"]:
            ops += "; domains: %s; local functions: %s (ops: %s)" % (
                ", ".join(info["domains"]) or "none", ", ".join(info["functions"]) or "none",
                " ".join(info["function_ops"]) or "none")
        rows.append((row, ops))
    return rows


def report(out_dir, names):
    """A markdown summary of the fixtures found in OUT_DIR."""
    rows = []
    for name in names:
        if os.path.exists(os.path.join(out_dir, name, "torch.json")):
            rows += fixture_rows(out_dir, name)
    lines = [
        "| model | exporter | result | opset | .onnx KiB | external / inline float tensors "
        "(> %d B) | trainable params present by name | torch loss step 0 -> 9 |" % SIZE_THRESHOLD,
        "|---|---|---|---|---|---|---|---|"]
    lines += [row for row, _ in rows]
    lines += ["", "ONNX op types (sorted; non-default domains and local functions listed where present):", ""]
    lines += [ops for _, ops in rows if ops]
    if not any("; domains:" in ops for _, ops in rows if ops):
        lines += ["", "No file imports a non-default domain or holds a local function."]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--only", help="comma-separated model names (default: all): " + ",".join(zoo.MODELS))
    parser.add_argument("--report", help="also write the markdown report to this file")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(zoo.MODELS)
    unknown = [n for n in names if n not in zoo.MODELS]
    if unknown:
        parser.error("unknown models: " + ", ".join(unknown))
    torch.set_num_threads(2)
    transformers.logging.set_verbosity_error()
    for name in names:
        errors = export_model(name, args.out_dir)
        print("%s: %s" % (name, "; ".join("%s: %s" % kv for kv in errors.items()) or "ok"), flush=True)
    text = report(args.out_dir, list(zoo.MODELS))
    print(text)
    if args.report:
        with open(args.report, "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()
