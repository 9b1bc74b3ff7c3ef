#!/usr/bin/python3
"""End-to-end: the passes `cpc compile` runs are one registered pipeline. For each layout, the IR a
plan is built from (`cpc compile --dump-ir`) equals what `cpc-opt --cpc-training-pipeline=...`
(as `cpc compile --print-pipeline` prints it) makes of `cpc import`'s output (with the import
flags it prints: the seed, BatchNorm's statistic groups), byte for byte; and
an inference plan's IR is `cpc-opt --cpc-inference-pipeline`'s, and `cpc import`'s clean-up is
`cpc-opt --cpc-import-pipeline`. Both tools refuse the same option combinations in the same words.
"""
import json
import os
import re
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpctest import Results, export_mae, run, tempdir, tool  # noqa: E402

RECIPE = {"TOTAL_BATCH_SIZE": 8, "LR": 0.05, "WEIGHT_DECAY": 0.05, "clip_grad_norm": 0.5,
          "BETAS": [0.9, 0.95], "no_weight_decay": ["cls_token"]}
# (name, flags); the model is exported with a batch of 4, the microbatch.
LAYOUTS = [("one rank", []), ("dp2 zero1", ["--dp", "2", "--zero", "1"]),
           ("dp2 zero3", ["--dp", "2", "--zero", "3"]),
           ("accumulation 2 dp2", ["--dp", "2", "--set", "gradient_accumulation=2", "--set", "TOTAL_BATCH_SIZE=8"]),
           ("dp2 tp2 with a --shard override", ["--dp", "2", "--tp", "2", "--shard", r"blocks\.0\.mlp\.fc2\.bias=tp"]),
           # enum options (tp-mode, precision) print as their names and parse back
           ("tp4 2d bf16", ["--tp", "4", "--tp-mode", "2d", "--precision", "bf16"]),
           # the sharding search's choice is a function of the IR alone: cpc-opt makes it again
           ("dp2 tp2 by search", ["--dp", "2", "--tp", "2", "--tp-search"]),
           ("infer", ["--mode", "infer"]),
           ("infer pp2 dp2 tp2", ["--mode", "infer", "--pp", "2", "--dp", "2", "--tp", "2", "--microbatches", "2"])]


def main():
    results = Results()
    with tempdir() as work:
        model = export_mae("tiny", 17, work, extra=["--batch", "4"])
        config = os.path.join(work, "recipe.json")
        with open(config, "w") as f:
            json.dump(RECIPE, f)
        imported = os.path.join(work, "imported.mlir")
        run([tool("cpc"), "import", model, "-o", imported])
        for name, flags in LAYOUTS:
            def check(flags=flags):
                dumped, reproduced = os.path.join(work, "dumped.mlir"), os.path.join(work, "reproduced.mlir")
                infer = "infer" in flags
                recipe = [] if infer else ["--config", config, "--set", "TOTAL_BATCH_SIZE=4"]
                proc = run([tool("cpc"), "compile", model, *recipe, *flags, "--print-pipeline", "--dump-ir", dumped,
                            "-o", os.path.join(work, "p.plan")])
                pipeline = "inference" if infer else "training"
                m = re.search(r"^pipeline: (--cpc-%s-pipeline(='[^']*')?)$" % pipeline, proc.stdout, re.M)
                assert m, "no pipeline line in:\n" + proc.stdout
                option = m.group(1).replace("'", "")
                m = re.search(r"^import: (.*)$", proc.stdout, re.M)
                assert m, "no import line in:\n" + proc.stdout
                layout_import = os.path.join(work, "layout-imported.mlir")
                # with locations: the pipeline's stage table names each chunk's first op
                debuginfo = ["--print-debuginfo"] if "--pp" in flags else []
                run([tool("cpc"), "import", model, *m.group(1).split(), *debuginfo, "-o", layout_import])
                run([tool("cpc-opt"), layout_import, option, "-o", reproduced])
                a, b = open(dumped).read(), open(reproduced).read()
                assert a == b, "cpc-opt %s differs from the plan's IR (%d vs %d bytes)" % (option, len(b), len(a))
                assert infer or "cpc.phase = #cpc.phase<" in a, "no training phase in the IR"
                assert not infer or "cpc.matmul_bias" in a, "the inference pipeline fused no epilogue"
            results.check("%s: cpc-opt reproduces the plan's IR" % name, check)

        def import_pipeline():
            raw, cleaned = os.path.join(work, "raw.mlir"), os.path.join(work, "cleaned.mlir")
            run([tool("cpc"), "import", model, "--no-cleanup", "-o", raw])
            run([tool("cpc-opt"), raw, "--cpc-import-pipeline", "-o", cleaned])
            a, b = open(imported).read(), open(cleaned).read()
            assert a == b, "cpc-opt --cpc-import-pipeline differs from cpc import (%d vs %d bytes)" % (len(b), len(a))
            assert a != open(raw).read(), "the clean-up changed nothing"
        results.check("cpc import's clean-up is cpc-opt --cpc-import-pipeline", import_pipeline)

        def same_refusals():
            # Each combination as cpc compile's flags and as the registered pipeline's options: one
            # check refuses both, in one sentence spelled as each tool takes its options.
            for flags, options in [(["--zero", "1"], "zero=1"), (["--tp", "6", "--tp-mode", "2d"], "tp=6 tp-mode=2d"),
                                   (["--tp", "4", "--tp-mode", "3d"], "tp=4 tp-mode=3d"),
                                   (["--tp", "4", "--tp-mode", "2d", "--tp-depth", "2"], "tp=4 tp-mode=2d tp-depth=2"),
                                   (["--tp", "4", "--tp-mode", "2d", "--sp"], "tp=4 tp-mode=2d sp=true"),
                                   (["--sp"], "sp=true")]:
                compiled = run([tool("cpc"), "compile", model, "--config", config, "--set", "TOTAL_BATCH_SIZE=4",
                                *flags, "-o", os.path.join(work, "refused.plan")], check=False)
                piped = run([tool("cpc-opt"), imported, "--cpc-training-pipeline=%s" % options], check=False)
                assert compiled.returncode == 1 and piped.returncode != 0, (flags, compiled.stderr, piped.stderr)
                ours = compiled.stderr.strip().splitlines()
                assert len(ours) == 1 and ours[0].startswith("cpc: error: "), compiled.stderr
                theirs = next(l for l in piped.stderr.splitlines() if "cpc-training-pipeline: " in l)
                theirs = theirs.split("cpc-training-pipeline: ", 1)[1].strip()
                # The pipeline's spelling (tp=6, tp) turned into the flags' (--tp 6, --tp).
                spelled = re.sub(r"\b(zero|tp-mode|tp-depth|tp|sp|dp)=(\S+)", r"--\1 \2", theirs)
                spelled = re.sub(r"(?<![-\w])(zero|tp-mode|tp-depth|tp|sp|dp)\b(?!-)", r"--\1", spelled)
                assert ours[0] == "cpc: error: " + spelled, "cpc compile: %r\ncpc-opt:     %r" % (ours[0], theirs)
        results.check("cpc compile and cpc-opt's pipeline refuse the same options in the same words", same_refusals)

        def timing():
            proc = run([tool("cpc"), "compile", model, "--config", config, "--set", "TOTAL_BATCH_SIZE=4", "--timing",
                        "-o", os.path.join(work, "p.plan")])
            line = next((l for l in proc.stderr.splitlines() if l.startswith("timing:")), None)
            assert line and all(" %s " % phase in line for phase in ("import", "pipeline", "plan", "write", "total")), \
                "no phase timing line in:\n" + proc.stderr
            assert "Execution time report" in proc.stderr and "CpcAutodiff" in proc.stderr, \
                "no per-pass timing in:\n" + proc.stderr
        results.check("--timing prints each phase and each pass of the pipeline", timing)
    results.finish()


if __name__ == "__main__":
    main()
