#!/usr/bin/python3
"""End-to-end: the ONNX backend node tests (tests/conformance/run_node_tests.py) with --jobs 2.

Every node test whose ops the importer handles must PASS or be UNSUPPORTED with a reason; any
FAIL fails this test. Also checks that the node tests of each op the examples' MAE needs are not
all unsupported (at least one PASS per op, none failing), so that a regression cannot hide by
turning a whole op into UNSUPPORTED. The tests that pass are pinned in
tests/conformance/passing.txt: a listed test that does not PASS (UNSUPPORTED, FAIL or no longer
run) fails this test, and so does a test that passes but is not listed (add it: run_node_tests.py
--update-passing rewrites the list).
"""
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpctest import PYTHON, SOURCE, Results, run  # noqa: E402

RUNNER = os.path.join(SOURCE, "tests", "conformance", "run_node_tests.py")
PASSING = os.path.join(SOURCE, "tests", "conformance", "passing.txt")
DATA = "/usr/share/libonnx-testdata/data/node"

# Op the MAE needs -> name pattern of its node tests (anchored after 'test_').
MAE_OPS = {
    "Add": r"add(_bcast)?$", "Sub": r"sub(_bcast|_example)?$", "Mul": r"mul(_bcast|_example)?$",
    "Div": r"div(_bcast|_example)?$", "Pow": r"pow(_bcast_\w+|_example)?$", "MatMul": r"matmul_",
    "Softmax": r"softmax_", "LayerNormalization": r"layer_normalization_", "Erf": r"erf$",
    "Conv": r"conv_", "Gather": r"gather_(\d|2d|negative)", "GatherElements": r"gather_elements_",
    "ScatterND": r"scatternd", "TopK": r"top_k", "Reshape": r"reshape_", "Transpose": r"transpose_",
    "Concat": r"concat_", "Slice": r"slice", "Expand": r"expand_", "Tile": r"tile",
    "Where": r"where_", "Equal": r"equal(_bcast)?$", "ReduceMean": r"reduce_mean_",
    "ReduceSum": r"reduce_sum_", "ReduceProd": r"reduce_prod_", "Cast": r"cast_",
    "Einsum": r"einsum_", "Unsqueeze": r"unsqueeze", "ConstantOfShape": r"constantofshape_",
    "Shape": r"shape", "Sqrt": r"sqrt",
}


def main():
    results = Results()
    if not os.path.isdir(DATA):
        print("no ONNX node test data in %s (install libonnx-testdata)" % DATA)
        results.failed += 1
        results.finish()
    proc = run([PYTHON, RUNNER, "--jobs", "2"], check=False, timeout=900)
    print(proc.stdout, end="")
    print(proc.stderr, end="", file=sys.stderr)
    outcomes = dict((m.group(2), m.group(1)) for m in
                    re.finditer(r"^(PASS|FAIL|UNSUPPORTED) +(test_[^\s:]+)", proc.stdout, re.M))

    def runner_ok():
        assert proc.returncode == 0, "the conformance runner exited %d" % proc.returncode
        assert re.search(r"^\d+ passed, 0 failed, \d+ unsupported$", proc.stdout, re.M), "no summary line"
        assert outcomes, "the runner reported no tests"
    results.check("conformance runner: no failures", runner_ok)

    def pinned_passing():
        with open(PASSING) as f:
            listed = [line.strip() for line in f if line.strip() and not line.startswith("#")]
        assert listed == sorted(set(listed)), "%s is not sorted or has duplicates" % PASSING
        lost = ["%s (%s)" % (t, outcomes.get(t, "not run")) for t in listed if outcomes.get(t) != "PASS"]
        new = sorted(t for t, s in outcomes.items() if s == "PASS" and t not in set(listed))
        problems = []
        if lost:
            problems.append("%d tests listed in tests/conformance/passing.txt no longer pass: %s" % (
                len(lost), ", ".join(lost)))
        if new:
            problems.append("%d tests pass but are not in tests/conformance/passing.txt: %s; add them "
                            "(tests/conformance/run_node_tests.py --update-passing rewrites the list)" % (
                                len(new), ", ".join(new)))
        assert not problems, "\n".join(problems)
        print("   all %d pinned passing node tests pass, no others" % len(listed))
    results.check("the pinned passing node tests (tests/conformance/passing.txt) pass, and no others",
                  pinned_passing)

    for op, pattern in MAE_OPS.items():
        def op_ok(pattern=pattern, op=op):
            mine = {t: s for t, s in outcomes.items() if re.match("test_" + pattern, t)}
            failed = sorted(t for t, s in mine.items() if s == "FAIL")
            assert not failed, "%s node tests fail: %s" % (op, ", ".join(failed))
            assert any(s == "PASS" for s in mine.values()), \
                "no %s node test passes (%s)" % (op, ", ".join("%s %s" % kv for kv in sorted(mine.items())) or "none run")
        results.check("MAE op %s" % op, op_ok)
    results.finish()


if __name__ == "__main__":
    main()
