#!/usr/bin/python3
"""How long the tensor-parallel search takes as models deepen (nothing runs: compile only).

    bench/tp_search_speed.py [--layers 2,4,8,16,24] [--width 64] [--tp 2,4]

Exports the examples' GPT at each depth (a narrow width: the search's size follows the ops, not
their sizes) and compiles it with --tp N --tp-search and with the Megatron patterns (--tp N),
printing per depth and tp: the compile times of both and their difference (the search), the
search's size (ops and variables, those tied to a repeated block, 0-1 program variables) and
what it predicts to send per step against what the patterns' plan would send by Megatron's
count. Repeated blocks are tied (RepeatedBlocks.h), so the program grows with the blocks that
border the embedding and the head, not with depth. Nothing here is asserted.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import time

SOURCE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPC = os.path.join(os.environ.get("CPC_BUILD_DIR", os.path.join(SOURCE, "build")), "bin", "cpc")

EXPORT = r"""
import sys, torch
sys.path.insert(0, %r)
from gpt_model import CONFIGS, build_model
CONFIGS["bench"] = dict(vocab=256, width=%d, heads=4, tokens=32, layers=%d)
model = build_model("bench")
idx = torch.randint(0, 256, (4, 32))
torch.onnx.export(model, (idx, idx), %r, input_names=["idx", "targets"], output_names=["loss"], opset_version=17,
                  do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
"""


def timed_compile(model, flags, plan):
    start = time.perf_counter()
    done = subprocess.run([CPC, "compile", model, "-o", plan, "--dump-sharding", *flags], capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode:
        sys.exit("cpc compile %s failed:\n%s" % (" ".join(flags), done.stderr))
    return seconds, done.stdout


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", default="2,4,8,16,24")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--tp", default="2,4")
    args = ap.parse_args()
    print("| layers | tp | compile, patterns | compile, search | search size | tied | program variables | predicted B/step |")
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory(prefix="cpc-bench-") as work:
        for layers in (int(n) for n in args.layers.split(",")):
            model = os.path.join(work, "gpt-%d.onnx" % layers)
            subprocess.run(["/usr/bin/python3", "-c", EXPORT % (os.path.join(SOURCE, "examples", "gpt"), args.width,
                                                               layers, model)], check=True, capture_output=True)
            for tp in (int(n) for n in args.tp.split(",")):
                patterns, _ = timed_compile(model, ["--tp", str(tp)], os.path.join(work, "p.plan"))
                searched, dump = timed_compile(model, ["--tp", str(tp), "--tp-search"], os.path.join(work, "s.plan"))
                found = re.search(r"by search: (\d+) ops and variables \((\d+) tied.*?, (\d+) program variables.*?"
                                  r"predicts \d+ collectives, (\d+) B", dump)
                nodes, tied, variables, predicted = found.groups() if found else ("?",) * 4
                print("| %d | %d | %.2f s | %.2f s | %s | %s | %s | %s |" % (layers, tp, patterns, searched, nodes, tied,
                                                                         variables, predicted), flush=True)


if __name__ == "__main__":
    main()
