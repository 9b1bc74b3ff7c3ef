#!/usr/bin/python3
"""Train-step time (forward + backward + AdamW) of MAE through cpc-run vs PyTorch with the same
recipe, at 1 and 2 threads per process (cpc-run --threads T, torch.set_num_threads(T)), and the
compile time of the MAE ViT-L training plan, in one script (issue 15's figures).

    bench/train_step_vs_torch.py [--cases small:16,base:2] [--threads 1,2] [--steps 6]
                                 [--compile-large | --no-compile-large] [--peer-cpc-run PATH]

Prints per case and thread count: cpc and torch ms per step (median of the steps after the
first), the ratio cpc/torch (goal: <= 0.8 at every thread count), the share of cpc's kernel time
in GEMMs (matmul, matmul_bias, conv2d and its gradients) vs the other kernels (one extra
profiled run), and the first-step losses of both; then per case the 2-thread speedup of each
(goal for cpc: >= 1.6 on MAE-base batch 2, >= 1.0 on MAE-small); then `cpc compile --timing` of
MAE-large batch 2 (goal: < 5 s) with its peak memory against the model file's size.
With --peer-cpc-run (another build's cpc-run, e.g. of the commit before a change), each case and
thread count also times that binary on the same plan, alternating with this build's three times
each, and prints the ratio of the medians (this build / peer).
"""
import os
import sys

# The thread counts are set per run below; the environment only pins what loads first.
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
os.environ.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

import argparse  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402

SOURCE = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BIN = os.path.join(SOURCE, "build", "bin")
sys.path.insert(0, os.path.join(SOURCE, "examples", "mae"))
RECIPE = {"LR": 1.5e-4, "WEIGHT_DECAY": 0.05, "BETAS": [0.9, 0.95], "lr_schedule": "constant",
          "frozen": ["pos_embed$"]}
GEMM_OPS = ("cpc.matmul", "cpc.matmul_bias", "cpc.conv2d", "cpc.conv2d_grad_input", "cpc.conv2d_grad_weight",
            "cpc.attention", "cpc.attention_grad")  # attention: its two (four) GEMMs and the softmax rows


def export(size, batch, work):
    os.makedirs(work, exist_ok=True)
    subprocess.run(["/usr/bin/python3", os.path.join(SOURCE, "examples", "mae", "export.py"), "--size", size,
                    "--batch", str(batch), "--out-dir", work, "--save-inputs"], check=True, stdout=subprocess.DEVNULL)
    return os.path.join(work, "mae-%s-opset17" % size)


def train_metrics(cpc_run, plan, stem, steps, threads, work):
    """The metric lines of `steps` steps of `cpc_run` on `plan` at `threads` threads."""
    metrics = os.path.join(work, "cpc-t%d.jsonl" % threads)
    if os.path.exists(metrics):
        os.remove(metrics)
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    subprocess.run([cpc_run, plan, "--steps", str(steps), "--threads", str(threads), "--metrics", metrics, "--quiet",
                    "--input", "imgs=%s.imgs.npy" % stem, "--input", "noise=%s.noise.npy" % stem], check=True, env=env)
    return [json.loads(line) for line in open(metrics)]


def cpc_steps(plan, stem, steps, threads, work):
    """Median step seconds of `steps` steps at `threads` threads, the first-step loss, and the
    GEMM share of the kernel time from a profiled run."""
    data = ["--input", "imgs=%s.imgs.npy" % stem, "--input", "noise=%s.noise.npy" % stem]
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    ours = train_metrics(os.path.join(BIN, "cpc-run"), plan, stem, steps, threads, work)
    profile = subprocess.run([os.path.join(BIN, "cpc-run"), plan, "--steps", "2", "--threads", str(threads),
                              "--profile", "--quiet", *data], check=True, env=env, capture_output=True,
                             text=True).stdout
    times = {m.group(1): float(m.group(2)) for m in re.finditer(r"^\s+(cpc\.\S+)\s+([\d.]+) ms", profile, re.M)}
    gemm = sum(t for op, t in times.items() if op in GEMM_OPS)
    share = gemm / max(sum(times.values()), 1e-9)
    return statistics.median(m["step_s"] for m in ours[1:]), ours[0]["loss"], share


def step_seconds(cpc_run, plan, stem, steps, threads, work):
    """Median step seconds (after the first) of `cpc_run` on `plan` at `threads` threads."""
    return statistics.median(m["step_s"] for m in train_metrics(cpc_run, plan, stem, steps, threads, work)[1:])


def compare_with_peer(size, batch, plan, stem, threads, args, work):
    ours, peer = [], []
    for _ in range(3):  # alternating, so that a slow spell of the machine hits both
        ours.append(step_seconds(os.path.join(BIN, "cpc-run"), plan, stem, args.steps, threads, work))
        peer.append(step_seconds(args.peer_cpc_run, plan, stem, args.steps, threads, work))
    ours, peer = statistics.median(ours), statistics.median(peer)
    print("MAE-%s batch %d, %d thread%s: this build %.1f ms/step, peer %.1f ms/step, ratio %.3f" % (
        size, batch, threads, "s" if threads > 1 else "", ours * 1e3, peer * 1e3, ours / peer), flush=True)


def torch_steps(size, batch, steps, threads):
    """Median step seconds and first-step loss of PyTorch at `threads` threads, in a process of
    its own: its BLAS reads the thread count once, when it loads."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS=str(threads), OMP_NUM_THREADS=str(threads))
    out = subprocess.run(["/usr/bin/python3", os.path.abspath(__file__), "--torch-run", "%s:%d:%d:%d" % (
        size, batch, steps, threads)], check=True, env=env, capture_output=True, text=True).stdout
    result = json.loads(out.strip().splitlines()[-1])
    return result["step_s"], result["loss"]


def torch_run(spec):
    import torch
    from export import make_inputs
    from mae_model import build_model
    size, batch, steps, threads = spec.split(":")
    batch, steps, threads = int(batch), int(steps), int(threads)
    torch.set_num_threads(threads)
    model = build_model(size, seed=0)
    model.train()
    model.pos_embed.requires_grad_(False)
    model.decoder_pos_embed.requires_grad_(False)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim > 1 and not n.endswith(".bias")]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and (p.ndim <= 1 or n.endswith(".bias"))]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.05}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=1.5e-4 * batch / 256, betas=(0.9, 0.95))
    imgs, noise = make_inputs(model, batch, 0)
    times, losses = [], []
    for _ in range(steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(imgs, noise)
        loss.backward()
        opt.step()
        times.append(time.perf_counter() - t0)
        losses.append(loss.item())
    print(json.dumps({"step_s": statistics.median(times[1:]), "loss": losses[0]}))


def bench_case(size, batch, args):
    work = os.path.join(args.work_dir, "%s-b%d" % (size, batch))
    stem = export(size, batch, work)
    cfg = os.path.join(work, "recipe.json")
    with open(cfg, "w") as f:
        json.dump(dict(RECIPE, TOTAL_BATCH_SIZE=batch), f)
    plan = os.path.join(work, "train.plan")
    subprocess.run([os.path.join(BIN, "cpc"), "compile", stem + ".onnx", "--config", cfg, "-o", plan], check=True,
                   stdout=subprocess.DEVNULL)
    step = {}
    for threads in args.threads:
        ours, our_loss, share = cpc_steps(plan, stem, args.steps, threads, work)
        theirs, their_loss = torch_steps(size, batch, args.steps, threads)
        step[threads] = (ours, theirs)
        if args.peer_cpc_run:
            compare_with_peer(size, batch, plan, stem, threads, args, work)
        print("MAE-%s batch %d, %d thread%s: cpc %.1f ms/step, torch %.1f ms/step, ratio cpc/torch %.2f; cpc kernel "
              "time in GEMMs %.0f%%, other kernels %.0f%%; first-step loss cpc %.6f torch %.6f" % (
                  size, batch, threads, "s" if threads > 1 else "", ours * 1e3, theirs * 1e3, ours / theirs,
                  100 * share, 100 * (1 - share), our_loss, their_loss), flush=True)
    if 1 in step and len(step) > 1:
        for threads in sorted(t for t in step if t > 1):
            print("MAE-%s batch %d: %d-thread speedup over 1 thread: cpc %.2fx, torch %.2fx" % (
                size, batch, threads, step[1][0] / step[threads][0], step[1][1] / step[threads][1]), flush=True)


def bench_compile_large(args):
    work = os.path.join(args.work_dir, "large-b2")
    stem = export("large", 2, work)
    plan = os.path.join(work, "train.plan")
    if os.path.exists(plan):
        os.remove(plan)
    log = os.path.join(work, "compile.log")
    t0 = time.perf_counter()
    with open(log, "w") as err:
        subprocess.run([os.path.join(BIN, "cpc"), "compile", stem + ".onnx", "-o", plan, "--timing"], check=True,
                       stdout=subprocess.DEVNULL, stderr=err)
    seconds = time.perf_counter() - t0
    phases = next((line for line in open(log) if line.startswith("timing:")), "").strip()
    peak = int(re.search(r"peak memory (\d+) MB", phases).group(1)) * 1e6
    model_bytes = os.path.getsize(stem + ".onnx")
    print("MAE-large (ViT-L/16) batch 2 training plan: compiled in %.2f s (goal < 5 s); peak memory %.2f GB, "
          "%.2fx the model file (%.2f GB)" % (seconds, peak / 1e9, peak / model_bytes, model_bytes / 1e9))
    print("  " + phases)
    os.remove(plan)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cases", default="small:16,base:2")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", default="1,2", help="comma-separated thread counts")
    ap.add_argument("--compile-large", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--work-dir", default=os.path.join(SOURCE, "out", "bench-train"))
    ap.add_argument("--peer-cpc-run", help="another build's cpc-run to time on the same plans")
    ap.add_argument("--torch-run", help=argparse.SUPPRESS)  # SIZE:BATCH:STEPS:THREADS, one torch measurement
    args = ap.parse_args()
    if args.torch_run:
        return torch_run(args.torch_run)
    args.threads = [int(t) for t in args.threads.split(",")]
    for case in filter(None, args.cases.split(",")):
        size, batch = case.split(":")
        bench_case(size, int(batch), args)
    if args.compile_large:
        bench_compile_large(args)


if __name__ == "__main__":
    main()
