"""Colossal-AI's `config.py`, read as is: examples/mae/configs/mae_pretrain.py (Colossal's MAE
example: `from colossalai.amp import AMP_TYPE`, fp16 = dict(mode=AMP_TYPE.TORCH), parallel =
dict(...), MODEL, NORM_PIX_LOSS, MASK_RATIO, an f-string) compiles MAE-tiny into the same
recipe as the equivalent JSON config, and the keys cpc does not use are listed in one line. A
config.py with a statement outside the subset (a function call, a loop) is refused in one line
naming the file and line, exit 1.
"""
import json
import os

from cpctest import Results, SOURCE, export_mae, run, tempdir, tool

results = Results()
CONFIG = os.path.join(SOURCE, "examples", "mae", "configs", "mae_pretrain.py")
# What mae_pretrain.py says, as cpc's JSON config.
EQUIVALENT = {"TOTAL_BATCH_SIZE": 4096, "LR": 1.5e-4, "WEIGHT_DECAY": 0.05, "NUM_EPOCHS": 800, "WARMUP_EPOCHS": 40,
              "fp16": {"mode": "torch"}, "gradient_accumulation": 2, "clip_grad_norm": 1.0,
              "parallel": {"pipeline": 1, "tensor": {"mode": None, "size": 1}}}

with tempdir() as work:
    model = export_mae("tiny", 17, work, extra=["--batch", "4"])
    # The example's global batch is 4096 (2 x 2048); the tiny export's microbatch is 4.
    batch = ["--set", "TOTAL_BATCH_SIZE=8"]

    def recipe_of(plan):
        return json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)["training"]["recipe"]

    def same_recipe():
        py_plan, json_plan = os.path.join(work, "py.plan"), os.path.join(work, "json.plan")
        out = run([tool("cpc"), "compile", model, "--config", CONFIG, *batch, "-o", py_plan])
        equivalent = os.path.join(work, "equivalent.json")
        with open(equivalent, "w") as f:
            json.dump(EQUIVALENT, f)
        run([tool("cpc"), "compile", model, "--config", equivalent, *batch, "-o", json_plan])
        ours, theirs = recipe_of(py_plan), recipe_of(json_plan)
        assert ours == theirs, "config.py gives %s\nJSON gives %s" % (ours, theirs)
        assert ours.get("precision") == "fp16", ours
        notes = [l for l in out.stderr.splitlines() if "keys cpc does not use" in l]
        assert len(notes) == 1, out.stderr
        for key in ("BATCH_SIZE", "MODEL", "NORM_PIX_LOSS", "MASK_RATIO", "LOG_PATH"):
            assert key in notes[0], notes[0]
        assert "AMP_TYPE" not in notes[0], notes[0]
        print("   " + notes[0])

    results.check("Colossal's MAE config.py: the recipe of its JSON twin, unused keys in one line", same_recipe)

    def refused(text, *needles):
        def check():
            path = os.path.join(work, "bad.py")
            with open(path, "w") as f:
                f.write(text)
            proc = run([tool("cpc"), "compile", model, "--config", path, *batch, "-o", os.path.join(work, "bad.plan")],
                       check=False)
            assert proc.returncode == 1, "exit %d: %s" % (proc.returncode, proc.stderr)
            lines = [l for l in proc.stderr.splitlines() if "error" in l]
            assert len(lines) == 1 and all(n in lines[0] for n in needles), proc.stderr
            print("   " + lines[0])
        return check

    results.check("a call is refused naming the line",
                  refused("LR = 1e-4\nimport os\nNUM_EPOCHS = int(os.environ['E'])\n", "bad.py:3", "not supported"))
    results.check("a loop is refused naming the line", refused("LR = 1e-4\nfor i in range(3):\n    LR = LR * 2\n",
                                                                "bad.py:2"))
    results.check("a bad value of a known key is refused as in JSON", refused("LR = -1.0\n", "LR", "must be > 0"))

results.finish()
