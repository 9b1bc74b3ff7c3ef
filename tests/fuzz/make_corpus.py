#!/usr/bin/python3
"""Seed corpora of the libFuzzer targets (tests/fuzz).

    make_corpus.py                       rewrite the checked-in seeds under tests/fuzz/corpus/
                                         (needs numpy, onnx and torch; small files only)
    make_corpus.py --build-seeds DIR --cpc BIN
                                         compile plans with this build's cpc into DIR/plan_reader/
                                         (ctest's fuzz.seeds fixture: plans follow the plan format
                                         of the build, so they are not checked in), and write the
                                         model-zoo fixtures' graphs into DIR/onnx_import_zoo/ (made
                                         from the committed tests/models/fixtures, not copied)

Seed files carry no .onnx/.npy extension (those are ignored by git here); the targets choose the
extension of the file they write themselves (tensor_reader: the first byte, even .npy, odd .pb).
"""
import argparse
import glob
import io
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CORPUS = os.path.join(HERE, "corpus")


def write(target, name, data):
    os.makedirs(os.path.join(CORPUS, target), exist_ok=True)
    with open(os.path.join(CORPUS, target, name), "wb") as f:
        f.write(data)


def tiny_torch_models():
    """A small training graph (linear, GELU, LayerNorm, softmax, MSE loss) and an inference one."""
    import torch

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = torch.nn.Linear(4, 8)
            self.norm = torch.nn.LayerNorm(8, eps=1e-6)
            self.fc2 = torch.nn.Linear(8, 4)

        def forward(self, x, target):
            h = self.norm(torch.nn.functional.gelu(self.fc1(x)))
            y = torch.softmax(self.fc2(h), dim=-1)
            return ((y - target) ** 2).mean()

    class Infer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return torch.relu(self.fc(x)).sum(dim=1, keepdim=True)

    torch.manual_seed(0)
    out = {}
    for name, model, args, names in [
        ("torch_mlp_train", Net(), (torch.randn(2, 4), torch.randn(2, 4)), ["x", "target"]),
        ("torch_linear_infer", Infer(), (torch.randn(2, 4),), ["x"]),
    ]:
        buf = io.BytesIO()
        torch.onnx.export(model, args, buf, input_names=names, opset_version=17)
        out[name] = buf.getvalue()
    return out


def source_seeds():
    import numpy as np
    import onnx
    from onnx import numpy_helper, parser

    for d in ("onnx_import", "onnx_text_import", "tensor_reader", "train_config"):
        shutil.rmtree(os.path.join(CORPUS, d), ignore_errors=True)

    # ONNX text (the importer's lit tests, good and bad), and the same models in binary form.
    for path in sorted(glob.glob(os.path.join(ROOT, "tests/lit/import/**/*.onnxtext"), recursive=True)):
        name = os.path.relpath(path, os.path.join(ROOT, "tests/lit/import")).replace("/", "_")
        name = name[: -len(".onnxtext")]
        text = open(path, "rb").read()
        write("onnx_text_import", name, text)
        try:
            model = parser.parse_model(text.decode())
        except Exception:
            continue  # some error cases do not even parse
        write("onnx_import", name, model.SerializeToString())
    for name, data in tiny_torch_models().items():
        write("onnx_import", name, data)
        printer = getattr(onnx, "printer", None)  # onnx >= 1.14 (Debian 12 has 1.13)
        if printer:
            write("onnx_text_import", name, printer.to_text(onnx.load_from_string(data)).encode())

    # Tensors: .npy (first byte 0) and ONNX TensorProto .pb (first byte 1) of each dtype.
    rng = np.random.default_rng(0)
    arrays = {
        "f32_2x3": rng.standard_normal((2, 3)).astype(np.float32),
        "f64_4": rng.standard_normal(4),
        "f16_3x1": rng.standard_normal((3, 1)).astype(np.float16),
        "i64_5": np.arange(5, dtype=np.int64),
        "i32_2x2": np.arange(4, dtype=np.int32).reshape(2, 2),
        "i16_3": np.arange(3, dtype=np.int16),
        "i8_2": np.array([-1, 2], dtype=np.int8),
        "u8_2x1x2": np.arange(4, dtype=np.uint8).reshape(2, 1, 2),
        "bool_3": np.array([True, False, True]),
        "f32_scalar": np.array(1.5, dtype=np.float32),
        "f32_empty": np.zeros((0, 3), dtype=np.float32),
    }
    for name, a in arrays.items():
        if a.dtype != np.bool_:
            buf = io.BytesIO()
            np.save(buf, a)
            write("tensor_reader", "npy_" + name, b"\0" + buf.getvalue())
        write("tensor_reader", "pb_" + name, b"\1" + numpy_helper.from_array(a, "t").SerializeToString())
    # A tensor stored in the typed fields rather than raw_data, as some ONNX test data has it.
    typed = onnx.helper.make_tensor("t", onnx.TensorProto.FLOAT, [2, 2], [1.0, 2.0, 3.0, 4.0])
    write("tensor_reader", "pb_typed_f32", b"\1" + typed.SerializeToString())
    typed = onnx.helper.make_tensor("t", onnx.TensorProto.BFLOAT16, [2], [1.0, 2.0])
    write("tensor_reader", "pb_typed_bf16", b"\1" + typed.SerializeToString())

    # Training configs: the examples, and small variants with every key.
    for path in sorted(glob.glob(os.path.join(ROOT, "examples/**/configs/*.json"), recursive=True)):
        write("train_config", os.path.basename(path)[: -len(".json")], open(path, "rb").read())
    write("train_config", "all_keys", b"""{"TOTAL_BATCH_SIZE": 16, "LR": 1.5e-4, "MIN_LR": 1e-6, "WEIGHT_DECAY": 0.05,
 "NUM_EPOCHS": 3, "WARMUP_EPOCHS": 0.5, "STEPS_PER_EPOCH": 2, "lr_schedule": "cosine",
 "gradient_accumulation": 4, "clip_grad_norm": 0.5, "BETAS": [0.9, 0.999], "EPS": 1e-6,
 "frozen": ["^pos", "cls_token"], "no_weight_decay": ["norm"],
 "parallel": {"pipeline": 1, "tensor": {"mode": null, "size": 1}}, "fp16": {"mode": null}}
""")
    write("train_config", "constant", b'{"lr_schedule": "constant", "LR": 0.1}\n')
    write("train_config", "fp16", b"""{"fp16": {"mode": "naive", "initial_scale": 1024, "growth_factor": 2,
 "backoff_factor": 0.5, "growth_interval": 10, "hysteresis": 3}, "precision": "fp16"}
""")
    write("train_config", "empty", b"{}\n")


def zoo_seeds(out):
    """The graphs of tests/models/fixtures (Hugging Face, timm and torchvision models from
    today's exporters, opsets 17-20) as importer seeds: each weight kept as external data (not
    committed) becomes a graph input of its type and shape, so the import runs every node's
    handler without the weights."""
    import onnx

    out = os.path.join(out, "onnx_import_zoo")
    os.makedirs(out, exist_ok=True)
    paths = sorted(glob.glob(os.path.join(ROOT, "tests", "models", "fixtures", "*", "*.onnx")))
    for path in paths:
        model = onnx.load(path, load_external_data=False)
        kept = []
        for init in model.graph.initializer:
            if init.data_location == onnx.TensorProto.EXTERNAL:
                model.graph.input.append(onnx.helper.make_tensor_value_info(init.name, init.data_type, list(init.dims)))
            else:
                kept.append(init)
        del model.graph.initializer[:]
        model.graph.initializer.extend(kept)
        name = "zoo_%s_%s" % (os.path.basename(os.path.dirname(path)), os.path.basename(path)[: -len(".onnx")])
        with open(os.path.join(out, name), "wb") as f:
            f.write(model.SerializeToString())
    print(f"make_corpus: {len(paths)} model-zoo graphs in {out}")


def build_seeds(out, cpc):
    """Plans compiled from the checked-in torch seeds: infer, train, train from a config, dp, ZeRO, pp;
    and the model-zoo graphs."""
    zoo_seeds(out)
    out = os.path.join(out, "plan_reader")
    os.makedirs(out, exist_ok=True)
    train = os.path.join(CORPUS, "onnx_import", "torch_mlp_train")
    infer = os.path.join(CORPUS, "onnx_import", "torch_linear_infer")
    config = os.path.join(CORPUS, "train_config", "all_keys")
    jobs = [
        ("infer", [infer, "--mode", "infer"]),
        ("train", [train]),
        ("train_config", [train, "--config", config, "--set", "TOTAL_BATCH_SIZE=8"]),
        ("dp2", [train, "--dp", "2"]),
        ("dp2_zero3", [train, "--dp", "2", "--zero", "3"]),
        ("pp2", [train, "--pp", "2", "--microbatches", "2"]),
        ("fp16", [train, "--precision", "fp16"]),
        ("bf16_dp2_zero3", [train, "--precision", "bf16", "--dp", "2", "--zero", "3"]),
    ]
    failed = 0
    for name, args in jobs:
        cmd = [cpc, "compile", *args, "-o", os.path.join(out, name)]
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            print("make_corpus: FAILED:", " ".join(cmd), "\n", r.stdout, r.stderr, file=sys.stderr)
            failed += 1
    print(f"make_corpus: {len(jobs) - failed} plans in {out}")
    return 1 if failed else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build-seeds", metavar="DIR")
    ap.add_argument("--cpc", metavar="BIN")
    a = ap.parse_args()
    if a.build_seeds:
        if not a.cpc:
            ap.error("--build-seeds needs --cpc")
        return build_seeds(a.build_seeds, a.cpc)
    source_seeds()
    return 0


if __name__ == "__main__":
    sys.exit(main())
