#!/usr/bin/python3
"""PyTorch reference training loop for the examples' MAE, with the recipe of a cpc JSON config.

Same initial weights as export.py (build_model(size, seed)), same data (the .npy files cpc-run is
given), AdamW with two groups (no weight decay on 1-D parameters and names ending in .bias, or
the config's no_weight_decay regexes), the config's `frozen` regexes, LR = LR * TOTAL/256 with
warmup + half-cycle cosine per iteration (or constant), gradient accumulation over equal slices
of the batch (loss / k per microbatch), clip_grad_norm_. Writes one JSON line per step:

    train_reference.py --size tiny --config cfg.json --imgs I.npy --noise N.npy --steps 50 \\
        [--seed 0] [--metrics out.jsonl] [--threads 1] [--save-params DIR] [--autocast bf16]

With --autocast bf16 the forward runs under torch.autocast("cpu", dtype=torch.bfloat16): torch's
own mixed precision (f32 parameters and optimizer; bf16 matmuls), the peer of cpc --precision bf16.
"""
import argparse
import json
import math
import os
import re
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from mae_model import build_model  # noqa: E402

DEFAULTS = {"LR": 1.5e-4, "MIN_LR": 0.0, "WEIGHT_DECAY": 0.05, "NUM_EPOCHS": 1, "WARMUP_EPOCHS": 0,
            "STEPS_PER_EPOCH": 1, "lr_schedule": "constant", "gradient_accumulation": 1, "clip_grad_norm": 0.0,
            "BETAS": [0.9, 0.95], "EPS": 1e-8, "frozen": [], "no_weight_decay": []}


def lr_at(cfg, step, total_batch):
    lr = cfg["LR"] * total_batch / 256.0
    if cfg["lr_schedule"] == "constant":
        return lr
    epoch = step / cfg["STEPS_PER_EPOCH"]
    warmup = cfg["WARMUP_EPOCHS"]
    if epoch < warmup:
        return lr * epoch / warmup
    span = cfg["NUM_EPOCHS"] - warmup
    progress = (epoch - warmup) / span if span > 0 else 1.0
    return cfg["MIN_LR"] + (lr - cfg["MIN_LR"]) * 0.5 * (1.0 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", default="tiny")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--config", required=True)
    ap.add_argument("--imgs", required=True)
    ap.add_argument("--noise", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--metrics")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save-params", help="write each parameter's final value as DIR/NAME.npy")
    ap.add_argument("--autocast", choices=["bf16"], help="the forward under CPU autocast in this type")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    cfg = dict(DEFAULTS)
    with open(args.config) as f:
        cfg.update(json.load(f))
    imgs = torch.from_numpy(np.load(args.imgs))
    noise = torch.from_numpy(np.load(args.noise))
    batch = imgs.shape[0]
    k = cfg["gradient_accumulation"]
    total = cfg.get("TOTAL_BATCH_SIZE", batch)
    assert total == batch and batch % k == 0, "the data must hold TOTAL_BATCH_SIZE samples"
    micro = batch // k

    model = build_model(args.size, seed=args.seed)
    model.train()
    for name, p in model.named_parameters():
        if any(re.search(r, name) for r in cfg["frozen"]):
            p.requires_grad_(False)
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        if p.ndim <= 1 or name.endswith(".bias") or any(re.search(r, name) for r in cfg["no_weight_decay"]):
            no_decay.append(p)
        else:
            decay.append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg["WEIGHT_DECAY"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=0.0, betas=tuple(cfg["BETAS"]), eps=cfg["EPS"])
    trainable = [p for p in model.parameters() if p.requires_grad]
    out = open(args.metrics, "w") if args.metrics else None
    for step in range(args.steps):
        t0 = time.perf_counter()
        lr = lr_at(cfg, step, total)
        for group in opt.param_groups:
            group["lr"] = lr
        opt.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for m in range(k):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.autocast == "bf16"):
                loss = model(imgs[m * micro:(m + 1) * micro], noise[m * micro:(m + 1) * micro])
            (loss / k).backward()
            loss_sum += loss.item()
        if cfg["clip_grad_norm"] > 0:
            norm = torch.nn.utils.clip_grad_norm_(trainable, cfg["clip_grad_norm"]).item()
        else:
            norm = torch.norm(torch.stack([torch.norm(p.grad.detach()) for p in trainable])).item()
        opt.step()
        record = {"step": step + 1, "loss": loss_sum / k, "lr": lr, "grad_norm": norm,
                  "step_s": time.perf_counter() - t0}
        if out:
            out.write(json.dumps(record) + "\n")
        print("step %4d  loss %.6f  lr %.4g  grad_norm %.4g" % (record["step"], record["loss"], lr, norm), flush=True)
    if args.save_params:
        os.makedirs(args.save_params, exist_ok=True)
        for name, p in model.named_parameters():
            np.save(os.path.join(args.save_params, name + ".npy"), p.detach().numpy())


if __name__ == "__main__":
    main()
