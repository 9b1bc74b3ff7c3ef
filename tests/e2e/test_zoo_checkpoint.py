"""Checkpoints of models this project did not write (Hugging Face ViT-MAE and GPT-2 from the zoo
fixtures, the TorchScript exports that keep PyTorch's parameter names): trained 3 steps with
--tp 2 --tp-search (the layout by search) and a checkpoint, then resumed on one rank for steps
4-6: equal to one rank's uninterrupted run within 1e-5 (loss and grad_norm). `cpc export-weights`
of that checkpoint writes every parameter PyTorch trains under its state-dict key, with PyTorch's
shape; put back into the ONNX model in place of its initializers, the weights give the loss one
rank's uninterrupted run has at step 4 (the model loads them by its own names). With
CPC_ZOO_PYTHON set to a python that has the zoo's packages (tests/models/README.md's export
venv), they are also loaded into the transformers model itself by `load_state_dict` and give
that loss.
"""
import json
import os
import shutil

import numpy as np
import onnx
from onnx import numpy_helper

from cpctest import MPI_ENV, PYTHON, SOURCE, Results, load_jsonl, read_safetensors, run, tempdir, tool
from test_model_zoo import fixture_inputs, frozen_patterns, load_json, recipe, worst_relative

MODELS = ["hf_vitmae", "hf_gpt2"]
STEPS, SAVE_AT, TOL = 6, 3, 1e-5


def check_model(work, fixture, results):
    model = os.path.join(fixture, "ts17.onnx")
    reference = load_json(os.path.join(fixture, "torch.json"))
    name = os.path.basename(fixture)
    config = os.path.join(work, name + ".json")
    with open(config, "w") as f:
        json.dump(recipe(reference, frozen_patterns(model, set(reference["parameters"]))), f)
    data = []
    for input_name, path in fixture_inputs(fixture, reference).items():
        data += ["--input", "%s=%s" % (input_name, path)]

    def compile_and_train(tag, onnx_path, flags, steps, extra=()):
        plan = os.path.join(work, "%s-%s.plan" % (name, tag))
        if not os.path.exists(plan):
            run([tool("cpc"), "compile", onnx_path, "--config", config, "-o", plan, *flags])
        metrics = os.path.join(work, "%s-%s.jsonl" % (name, tag))
        if os.path.exists(metrics):
            os.remove(metrics)
        run([tool("cpc-run"), plan, "--steps", str(steps), "--metrics", metrics, *data, *extra], env=MPI_ENV)
        return load_jsonl(metrics)

    ckpt = os.path.join(work, name + "-ckpt")
    one = compile_and_train("one", model, [], STEPS)
    compile_and_train("tp2", model, ["--tp", "2", "--tp-search"], SAVE_AT, ["--checkpoint-dir", ckpt])

    def resumed_on_one_rank():
        resumed = compile_and_train("one", model, [], STEPS, ["--resume", ckpt])
        assert [m["step"] for m in resumed] == list(range(SAVE_AT + 1, STEPS + 1)), [m["step"] for m in resumed]
        assert one[-1]["loss"] < one[0]["loss"], "the loss did not move: %s" % [m["loss"] for m in one]
        worst = {k: worst_relative(resumed, one[SAVE_AT:], k) for k in ("loss", "grad_norm")}
        assert max(worst.values()) < TOL, worst
        print("   loss %.5f -> %.5f; steps 4-6 resumed on one rank: worst relative loss %.1e, grad_norm %.1e"
              % (one[0]["loss"], one[-1]["loss"], worst["loss"], worst["grad_norm"]))

    results.check("%s: tp2 (search) checkpoint resumed on one rank equals one rank" % name, resumed_on_one_rank)

    def exported_weights_load_by_name():
        out = os.path.join(work, name + ".safetensors")
        run([tool("cpc"), "export-weights", ckpt, "-o", out])
        weights = read_safetensors(out)
        graph = onnx.load(model)  # its external data materialized by weights.py
        shapes = {init.name: list(init.dims) for init in graph.graph.initializer}
        missing = [p for p in reference["parameters"] if p not in weights]
        assert not missing, "PyTorch's parameters not exported: %s" % missing[:5]
        for p in reference["parameters"]:
            assert list(weights[p].shape) == shapes[p], (p, weights[p].shape, shapes[p])
        for init in graph.graph.initializer:
            if init.name in weights:
                init.CopyFrom(numpy_helper.from_array(np.ascontiguousarray(weights[init.name]), init.name))
        loaded = os.path.join(work, name + "-loaded.onnx")
        onnx.save(graph, loaded)
        loss = compile_and_train("loaded", loaded, [], 1)[0]["loss"]
        ours = one[SAVE_AT]["loss"]  # step 4: the weights after step 3
        assert abs(loss - ours) / ours < TOL, "loaded weights' loss %.8f, one rank's step 4 %.8f" % (loss, ours)
        print("   %d tensors (%d PyTorch parameters); loss with them %.7f, one rank's step 4 %.7f"
              % (len(weights), len(reference["parameters"]), loss, ours))
        torch_python = os.environ.get("CPC_ZOO_PYTHON")  # a python with the zoo's packages (transformers)
        if not torch_python:
            print("   (CPC_ZOO_PYTHON unset: not loaded into the transformers model itself)")
            return
        out_json = run([torch_python, os.path.join(SOURCE, "tests", "models", "load_check.py"), name, out,
                        fixture]).stdout
        theirs = json.loads(out_json.strip().splitlines()[-1])["loss"]
        assert abs(theirs - ours) / ours < TOL, "PyTorch's loss %.8f, one rank's step 4 %.8f" % (theirs, ours)
        print("   loaded into PyTorch's %s by load_state_dict: loss %.7f" % (name, theirs))

    results.check("%s: export-weights by PyTorch's names, loaded back give step 4's loss" % name,
                  exported_weights_load_by_name)


def main():
    results = Results()
    with tempdir() as work:
        fixtures = []
        for name in MODELS:  # the weights are regenerated, not committed
            copy = os.path.join(work, name)
            shutil.copytree(os.path.join(SOURCE, "tests", "models", "fixtures", name), copy)
            fixtures.append(copy)
        run([PYTHON, os.path.join(SOURCE, "tests", "models", "weights.py"), *fixtures])
        for fixture in fixtures:
            check_model(work, fixture, results)
    results.finish()


if __name__ == "__main__":
    main()
