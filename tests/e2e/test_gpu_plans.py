"""GPU plans on any machine: `cpc compile --device cuda` writes a plan whose tensors all live in
GPU memory and whose programs are the CPU plan's step for step; cpc-run refuses it in one line
when the machine has no GPU (bench/gpu_check.sh runs it on one), and bad --device values are
one-line usage errors."""
import json
import os

from cpctest import MAE_RECIPE, Results, compile_plan, export_mae, run, tempdir, tool

results = Results()
HAS_GPU = os.path.exists("/dev/nvidiactl")


def expect_error(args, *needles):
    proc = run(args, check=False, timeout=120)
    assert proc.returncode == 1, "exit %d (want 1): %s\n%s" % (proc.returncode, " ".join(args), proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, "want one error line, got:\n" + proc.stderr
    for needle in needles:
        assert needle in lines[0], "%r not in %r" % (needle, lines[0])


def inspect(plan):
    return json.loads(run([tool("cpc"), "inspect", plan, "--json"]).stdout)


with tempdir() as work:
    model = export_mae("tiny", 17, work, extra=["--batch", "8"])
    cpu_plan, _ = compile_plan(work, model, "cpu", [], MAE_RECIPE)
    gpu_plan, _ = compile_plan(work, model, "gpu", ["--device", "cuda"], MAE_RECIPE)
    dp_plan, _ = compile_plan(work, model, "gpu-dp", ["--device", "cuda", "--dp", "2", "--zero", "1"], MAE_RECIPE)

    def same_programs():
        cpu, gpu = inspect(cpu_plan), inspect(gpu_plan)
        assert cpu["device"] == "cpu" and gpu["device"] == "cuda", (cpu["device"], gpu["device"])
        assert {b["space"] for b in cpu["buffers"]} == {"host"}
        assert {b["space"] for b in gpu["buffers"]} == {"device"}
        strip = lambda p: [[(s["op"], s["in"], s["out"]) for s in prog["steps"]] for prog in p["programs"]]
        assert strip(cpu) == strip(gpu), "the cuda plan's steps differ from the cpu plan's"
        text = run([tool("cpc"), "inspect", gpu_plan]).stdout
        assert "device: cuda" in text, text[:400]

    def no_gpu_is_one_line():
        if HAS_GPU:
            return  # bench/gpu_check.sh trains this plan on the GPU
        expect_error([tool("cpc-run"), gpu_plan, "--steps", "1"], gpu_plan, "runs on CUDA GPUs", "has none")
        expect_error([tool("cpc-run"), dp_plan, "--steps", "1"], dp_plan, "has none")

    def every_step_has_a_cuda_kernel():
        # The backend dispatch, checked without a GPU: every (op, element type) of MAE's training
        # step in each precision and layout resolves to a CUDA kernel.
        if not inspect(gpu_plan)["summary"]["cuda_built"]:
            text = run([tool("cpc"), "inspect", gpu_plan]).stdout
            assert "built without CUDA" in text, text
            return
        layouts = [("fp32", [], 8), ("bf16", ["--precision", "bf16"], 8), ("fp16", ["--precision", "fp16"], 8),
                   ("tp2", ["--tp", "2"], 8), ("pp2", ["--pp", "2", "--microbatches", "2"], 16),
                   ("2d", ["--tp", "4", "--tp-mode", "2d"], 8), ("zero3", ["--dp", "2", "--zero", "3"], 8)]
        for name, flags, batch in layouts:
            recipe = dict(MAE_RECIPE, TOTAL_BATCH_SIZE=batch)
            plan, _ = compile_plan(work, model, "k-" + name, ["--device", "cuda", *flags], recipe)
            missing = inspect(plan)["summary"]["missing_kernels"]
            assert not missing, "%s: no CUDA kernel for %s" % (name, "; ".join(missing))

    def bad_device_flag():
        expect_error([tool("cpc"), "compile", model, "--device", "tpu", "-o", os.path.join(work, "x.plan")],
                     "for the --device option: expects cpu or cuda", "tpu")

    results.check("the cuda plan is the cpu plan's programs with every tensor in GPU memory", same_programs)
    results.check("cpc-run refuses a cuda plan on a machine without GPUs in one line", no_gpu_is_one_line)
    results.check("every step of MAE's training plans has a CUDA kernel", every_step_has_a_cuda_kernel)
    results.check("a bad --device is a one-line usage error", bad_device_flag)
results.finish()
