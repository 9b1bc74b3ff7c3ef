#!/usr/bin/python3
"""End-to-end: the GPU backend has a kernel for every step of every ONNX node test cpc passes.

Runs tests/conformance/run_node_tests.py --device cuda: every test pinned in
tests/conformance/passing.txt must pass there too. Without a GPU that means its cuda plan has a
CUDA kernel for every (op, element type) of its steps (the registry's dispatch, checked on the
host); on a GPU machine the plans run and their outputs are compared with ONNX's. A build
without the CUDA backend (build-asan/) has nothing to check and says so.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpctest import PYTHON, SOURCE, Results, run, tempdir, tool  # noqa: E402

RUNNER = os.path.join(SOURCE, "tests", "conformance", "run_node_tests.py")
PASSING = os.path.join(SOURCE, "tests", "conformance", "passing.txt")
DATA = "/usr/share/libonnx-testdata/data/node"


def cuda_built():
    with tempdir() as work:
        model = os.path.join(DATA, "test_relu", "model.onnx")
        plan = os.path.join(work, "relu.plan")
        run([tool("cpc"), "compile", model, "--mode", "infer", "--device", "cuda", "-o", plan])
        return json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)["summary"]["cuda_built"]


def main():
    results = Results()
    if not cuda_built():
        print("cpc was built without the CUDA backend: nothing to check")
        results.finish()
    proc = run([PYTHON, RUNNER, "--jobs", "2", "--device", "cuda"], check=False, timeout=900)
    print(proc.stdout, end="")
    outcomes = dict((m.group(2), m.group(1)) for m in
                    re.finditer(r"^(PASS|FAIL|UNSUPPORTED) +(test_[^\s:]+)", proc.stdout, re.M))

    def every_passing_test_has_cuda_kernels():
        with open(PASSING) as f:
            listed = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        lost = ["%s (%s)" % (t, outcomes.get(t, "not run")) for t in listed if outcomes.get(t) != "PASS"]
        assert not lost, "%d pinned tests fail with --device cuda: %s" % (len(lost), ", ".join(lost[:20]))
        assert proc.returncode == 0, "the runner exited %d" % proc.returncode

    results.check("every pinned node test passes with --device cuda", every_passing_test_has_cuda_kernels)
    results.finish()


if __name__ == "__main__":
    main()
