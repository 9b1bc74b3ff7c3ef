"""Model-local functions: the project's GPT exported with each transformer block as an ONNX
function (torch.onnx.export's export_modules_as_functions, as module-preserving exports write
them) imports with the calls inlined and trains exactly as the plain export (loss and grad_norm
per step, bit for bit: the same ops in the same order)."""
import json
import os

from cpctest import PYTHON, Results, run, tempdir, tool

EXPORT = r'''
import sys, torch
sys.path.insert(0, sys.argv[1])
from gpt_model import build_model, Block
model = build_model("tiny")
idx = torch.zeros(4, 8, dtype=torch.int64)
for path, functions in ((sys.argv[2], {Block}), (sys.argv[3], False)):
    torch.onnx.export(model, (idx, idx), path, input_names=["idx", "targets"], output_names=["loss"],
                      opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING,
                      export_modules_as_functions=functions)
'''

results = Results()
with tempdir() as work:
    source = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "gpt")
    with_functions, plain = os.path.join(work, "functions.onnx"), os.path.join(work, "plain.onnx")
    run([PYTHON, "-c", EXPORT, source, with_functions, plain])

    def same_training():
        import onnx
        functions = [f.name for f in onnx.load(with_functions).functions]
        assert functions, "the export wrote no local function"
        curves = []
        for path in (with_functions, plain):
            plan, metrics = path + ".plan", path + ".jsonl"
            run([tool("cpc"), "compile", path, "--set", "clip_grad_norm=1", "-o", plan])
            run([tool("cpc-run"), plan, "--steps", "3", "--metrics", metrics])
            with open(metrics) as f:
                curves.append([(m["loss"], m["grad_norm"]) for m in map(json.loads, f)])
        assert curves[0] == curves[1], "inlined %s trains otherwise: %s vs %s" % (functions, curves[0], curves[1])
        print("   functions %s inlined; loss %.6f -> %.6f as the plain export" % (functions, curves[0][0][0], curves[0][-1][0]))

    results.check("a GPT exported with its blocks as functions trains as the plain export", same_training)
results.finish()
