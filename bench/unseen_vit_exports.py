#!/usr/bin/python3
"""Import check for MAE-like / ViT torch exports that the test-suite has never seen.

Defines several small PyTorch models written differently from examples/mae/mae_model.py, exports
each one with torch.onnx.export at opsets 13 and 17 in two flavours

  eval  : do_constant_folding=True,  training=TrainingMode.EVAL   (torch defaults)
  train : do_constant_folding=False, training=TrainingMode.TRAINING (what examples/mae uses)

then runs `cpc import MODEL --summary` (and `cpc import -o X.mlir` + `cpc-opt X.mlir`) on every
export and prints one line per export:

  NAME  OPSET  MODE  OK|FAIL|EXPORT-FAIL  detail

For OK imports the summary is checked against what the model should give (graph input types,
output type, trainable parameter count) and anything odd is printed as "SUSPICIOUS: ...".
For FAILs the error line of cpc is printed together with the ONNX ops of the graph that have no
cpc handler for that opset (parsed from frontends/onnx/handlers/*.cpp).

Variants:
  a_ce          ViT classifier: nn.TransformerEncoderLayer(norm_first, gelu, dropout 0, batch_first)
                + nn.MultiheadAttention(batch_first) pooling, F.cross_entropy vs int64 labels
  a_nll         same, loss F.nll_loss(F.log_softmax(...)) (torch fuses it back into
                SoftmaxCrossEntropyLoss)
  a_logsoftmax  -F.log_softmax(...).gather(labels).mean()  (standalone LogSoftmax)
  a_nll_sep     F.nll_loss(torch.log(softmax(...)))  (standalone NegativeLogLikelihoodLoss)
  a_manual      loss spelled with max/exp/sum/log/gather (a workaround probe)
  b             MAE: F.gelu(approximate='tanh'), qkv.unbind(0), cls via expand+cat, F.layer_norm,
                F.mse_loss(reduction='none')  (torch 1.13 cannot export aten::mse_loss)
  b_sq          b with the squared error spelled (pred - target).pow(2)
  c             b_sq with dynamic batch (dynamic_axes imgs/noise dim 0 = 'N'); imported with
                --input-shape imgs=2x3x32x32 --input-shape noise=2x16, and also with N=4 (the IR
                must then hold no 2x... tensor) and with no --input-shape
  d             MAE: patch embedding by Tensor.unfold + reshape + nn.Linear, masking noise from
                torch.rand(N, L) inside the graph (RandomUniformLike), argsort via torch.sort
  d_rand_static d with torch.rand(2, 16) (RandomUniform with a shape attribute)
  d_rand_like   d with torch.rand_like (RandomUniformLike on a float tensor)
  d_F_unfold    d with the patches from F.unfold (im2col: Pad + Gather + ...)
  d_scatter     d with the mask built by Tensor.scatter (ScatterElements) instead of gather
  e             MAE: norm_pix with unbiased var as ((t-m)**2).sum(-1)/(n-1), torch.where for the
                mask tokens, masked_fill in the loss
  e_clamp       e with the denominator mask.sum().clamp(min=1) (Clip)

Usage:  /usr/bin/python3 bench/unseen_vit_exports.py [--only a_ce,b] [--keep DIR] [-v]
"""

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import warnings

import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CPC = os.path.join(ROOT, "build", "bin", "cpc")
CPC_OPT = os.path.join(ROOT, "build", "bin", "cpc-opt")

IMG, PATCH, CH = 32, 8, 3
GRID = IMG // PATCH
L = GRID * GRID  # 16 patches
ENC_D, ENC_DEPTH, ENC_HEADS = 64, 2, 4
DEC_D, DEC_DEPTH, DEC_HEADS = 32, 1, 4
MASK_RATIO = 0.75
LEN_KEEP = int(L * (1 - MASK_RATIO))
BATCH = 2
NUM_CLASSES = 10


# --------------------------------------------------------------------------------------------------
# a) ViT classifier built from torch.nn transformer modules
# --------------------------------------------------------------------------------------------------

class ViTClassifier(nn.Module):
    def __init__(self, loss="ce"):
        super().__init__()
        self.loss_kind = loss
        self.patch = nn.Conv2d(CH, ENC_D, PATCH, PATCH)
        self.cls = nn.Parameter(torch.randn(1, 1, ENC_D) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, L + 1, ENC_D) * 0.02)
        layer = nn.TransformerEncoderLayer(ENC_D, ENC_HEADS, dim_feedforward=2 * ENC_D, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, ENC_DEPTH, enable_nested_tensor=False)
        self.pool_query = nn.Parameter(torch.randn(1, 1, ENC_D) * 0.02)
        self.pool = nn.MultiheadAttention(ENC_D, ENC_HEADS, batch_first=True)
        self.norm = nn.LayerNorm(ENC_D)
        self.head = nn.Linear(ENC_D, NUM_CLASSES)

    def forward(self, imgs, labels):
        x = self.patch(imgs).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.encoder(x)
        q = self.pool_query.expand(x.shape[0], -1, -1)
        pooled, _ = self.pool(q, x, x, need_weights=False)
        logits = self.head(self.norm(pooled[:, 0] + x[:, 0]))
        if self.loss_kind == "ce":
            return F.cross_entropy(logits, labels)
        if self.loss_kind == "nll":  # torch's exporter fuses this pair into SoftmaxCrossEntropyLoss
            return F.nll_loss(F.log_softmax(logits, dim=-1), labels)
        if self.loss_kind == "logsoftmax":  # standalone LogSoftmax (+ GatherElements)
            return -F.log_softmax(logits, dim=-1).gather(1, labels.unsqueeze(1)).mean()
        if self.loss_kind == "nll_sep":  # standalone NegativeLogLikelihoodLoss (not after LogSoftmax)
            return F.nll_loss(torch.log(logits.softmax(dim=-1)), labels)
        # manual: logsumexp - logit[label], spelled with basic ops
        m = logits.max(dim=-1, keepdim=True).values
        lse = m + torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True))
        picked = logits.gather(1, labels.unsqueeze(1))
        return (lse - picked).mean()


# --------------------------------------------------------------------------------------------------
# Shared pieces for the MAE variants (each variant picks its own spelling)
# --------------------------------------------------------------------------------------------------

class UnbindAttention(nn.Module):
    """qkv projection split with unbind(0), scale by division."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        q, k, v = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(C // self.heads), dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, C))


class SplitQKVAttention(nn.Module):
    """Separate q/k/v linears, view + transpose, scale folded into q."""

    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.v = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        hd = C // self.heads
        q = self.q(x).view(B, N, self.heads, hd).transpose(1, 2) * hd ** -0.5
        k = self.k(x).view(B, N, self.heads, hd).transpose(1, 2)
        v = self.v(x).view(B, N, self.heads, hd).transpose(1, 2)
        a = (q @ k.transpose(2, 3)).softmax(-1)
        return self.out((a @ v).transpose(1, 2).contiguous().view(B, N, C))


class FunctionalLNBlock(nn.Module):
    """Pre-norm block with F.layer_norm on raw parameters and tanh-GELU (variant b / c)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.w1 = nn.Parameter(torch.ones(dim))
        self.b1 = nn.Parameter(torch.zeros(dim))
        self.w2 = nn.Parameter(torch.ones(dim))
        self.b2 = nn.Parameter(torch.zeros(dim))
        self.attn = UnbindAttention(dim, heads)
        self.fc1 = nn.Linear(dim, 2 * dim)
        self.fc2 = nn.Linear(2 * dim, dim)
        self.dim = dim

    def forward(self, x):
        x = x + self.attn(F.layer_norm(x, (self.dim,), self.w1, self.b1, 1e-6))
        h = F.layer_norm(x, (self.dim,), self.w2, self.b2, 1e-6)
        return x + self.fc2(F.gelu(self.fc1(h), approximate="tanh"))


class ModuleBlock(nn.Module):
    """Pre-norm block with nn.LayerNorm, separate q/k/v, exact GELU (variants d / e)."""

    def __init__(self, dim, heads):
        super().__init__()
        self.n1 = nn.LayerNorm(dim)
        self.attn = SplitQKVAttention(dim, heads)
        self.n2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.n1(x))
        return x + self.mlp(self.n2(x))


def patchify_reshape(imgs):
    """(N, C, H, W) -> (N, L, C*p*p) by reshape/permute (channel-major, like F.unfold)."""
    N = imgs.shape[0]
    x = imgs.reshape(N, CH, GRID, PATCH, GRID, PATCH).permute(0, 2, 4, 1, 3, 5)
    return x.reshape(N, L, CH * PATCH * PATCH)


# --------------------------------------------------------------------------------------------------
# b) / c) MAE with functional LayerNorm, tanh GELU, unbind, mse_loss(reduction='none')
# --------------------------------------------------------------------------------------------------

class MAEFunctional(nn.Module):
    def __init__(self, mse="functional"):
        super().__init__()
        self.mse = mse
        self.patch = nn.Conv2d(CH, ENC_D, PATCH, PATCH)
        self.cls = nn.Parameter(torch.randn(1, 1, ENC_D) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, L + 1, ENC_D) * 0.02)
        self.blocks = nn.ModuleList([FunctionalLNBlock(ENC_D, ENC_HEADS) for _ in range(ENC_DEPTH)])
        self.nw = nn.Parameter(torch.ones(ENC_D))
        self.nb = nn.Parameter(torch.zeros(ENC_D))
        self.dec_embed = nn.Linear(ENC_D, DEC_D)
        self.mask_token = nn.Parameter(torch.randn(1, 1, DEC_D) * 0.02)
        self.dec_pos = nn.Parameter(torch.randn(1, L + 1, DEC_D) * 0.02)
        self.dec_blocks = nn.ModuleList([FunctionalLNBlock(DEC_D, DEC_HEADS) for _ in range(DEC_DEPTH)])
        self.dnw = nn.Parameter(torch.ones(DEC_D))
        self.dnb = nn.Parameter(torch.zeros(DEC_D))
        self.pred = nn.Linear(DEC_D, CH * PATCH * PATCH)

    def forward(self, imgs, noise):
        N = imgs.shape[0]
        x = self.patch(imgs).flatten(2).transpose(1, 2) + self.pos[:, 1:]
        ids_shuffle = torch.argsort(noise, dim=1)
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :LEN_KEEP]
        x = torch.gather(x, 1, ids_keep.unsqueeze(-1).expand(-1, -1, ENC_D))
        mask = torch.cat([torch.zeros(N, LEN_KEEP), torch.ones(N, L - LEN_KEEP)], dim=1)
        mask = torch.gather(mask, 1, ids_restore)
        cls = (self.cls + self.pos[:, :1]).expand(N, -1, -1)
        x = torch.cat([cls, x], dim=1)
        for b in self.blocks:
            x = b(x)
        x = F.layer_norm(x, (ENC_D,), self.nw, self.nb, 1e-6)
        x = self.dec_embed(x)
        toks = self.mask_token.expand(N, L - LEN_KEEP, -1)
        x_ = torch.cat([x[:, 1:], toks], dim=1)
        x_ = torch.gather(x_, 1, ids_restore.unsqueeze(-1).expand(-1, -1, DEC_D))
        x = torch.cat([x[:, :1], x_], dim=1) + self.dec_pos
        for b in self.dec_blocks:
            x = b(x)
        x = F.layer_norm(x, (DEC_D,), self.dnw, self.dnb, 1e-6)
        pred = self.pred(x)[:, 1:]
        target = patchify_reshape(imgs)
        mean = target.mean(dim=-1, keepdim=True)
        var = target.var(dim=-1, keepdim=True)
        target = (target - mean) / (var + 1e-6).sqrt()
        if self.mse == "functional":
            loss = F.mse_loss(pred, target, reduction="none").mean(dim=-1)
        else:  # torch 1.13 has no ONNX symbolic for aten::mse_loss: same thing spelled out
            loss = (pred - target).pow(2).mean(dim=-1)
        return (loss * mask).sum() / mask.sum()


# --------------------------------------------------------------------------------------------------
# d) MAE: F.unfold + Linear patch embedding, in-graph torch.rand masking, torch.sort
# --------------------------------------------------------------------------------------------------

class MAEUnfold(nn.Module):
    def __init__(self, patch="tensor", rand="traced", scatter_mask=False):
        super().__init__()
        self.patch_kind = patch
        self.rand_kind = rand
        self.scatter_mask = scatter_mask
        self.embed = nn.Linear(CH * PATCH * PATCH, ENC_D)
        self.cls = nn.Parameter(torch.randn(1, 1, ENC_D) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, L + 1, ENC_D) * 0.02)
        self.blocks = nn.Sequential(*[ModuleBlock(ENC_D, ENC_HEADS) for _ in range(ENC_DEPTH)])
        self.norm = nn.LayerNorm(ENC_D)
        self.dec_embed = nn.Linear(ENC_D, DEC_D)
        self.mask_token = nn.Parameter(torch.randn(1, 1, DEC_D) * 0.02)
        self.dec_pos = nn.Parameter(torch.randn(1, L + 1, DEC_D) * 0.02)
        self.dec_blocks = nn.Sequential(*[ModuleBlock(DEC_D, DEC_HEADS) for _ in range(DEC_DEPTH)])
        self.dec_norm = nn.LayerNorm(DEC_D)
        self.pred = nn.Linear(DEC_D, CH * PATCH * PATCH)

    def forward(self, imgs):
        N = imgs.shape[0]
        # Both spellings give (N, L, C*p*p), channel-major inside the patch.
        t = imgs.unfold(2, PATCH, PATCH).unfold(3, PATCH, PATCH)  # (N, C, g, g, p, p)
        target = t.permute(0, 2, 3, 1, 4, 5).reshape(N, L, CH * PATCH * PATCH)
        if self.patch_kind == "F":
            patches = F.unfold(imgs, kernel_size=PATCH, stride=PATCH).transpose(1, 2)  # im2col
        else:
            patches = target
        x = self.embed(patches) + self.pos[:, 1:]
        if self.rand_kind == "traced":  # N is traced -> RandomUniformLike(ConstantOfShape(shape))
            noise = torch.rand(N, L, device=imgs.device)
        elif self.rand_kind == "like":  # RandomUniformLike on a float tensor
            noise = torch.rand_like(x[:, :, 0])
        else:  # python ints -> RandomUniform(shape=[2, 16])
            noise = torch.rand(BATCH, L)
        ids_shuffle = torch.sort(noise, dim=1).indices
        ids_restore = torch.sort(ids_shuffle, dim=1).indices
        ids_keep = ids_shuffle[:, :LEN_KEEP]
        x = torch.gather(x, 1, ids_keep.unsqueeze(-1).repeat(1, 1, ENC_D))
        if self.scatter_mask:
            mask = torch.ones(N, L).scatter(1, ids_keep, 0.0)
        else:
            mask = torch.ones(N, L)
            mask[:, :LEN_KEEP] = 0
            mask = torch.gather(mask, 1, ids_restore)
        x = torch.cat([(self.cls + self.pos[:, :1]).repeat(N, 1, 1), x], dim=1)
        x = self.norm(self.blocks(x))
        x = self.dec_embed(x)
        x_ = torch.cat([x[:, 1:], self.mask_token.repeat(N, L - LEN_KEEP, 1)], dim=1)
        x_ = torch.gather(x_, 1, ids_restore.unsqueeze(-1).repeat(1, 1, DEC_D))
        x = torch.cat([x[:, :1], x_], dim=1) + self.dec_pos
        pred = self.pred(self.dec_norm(self.dec_blocks(x)))[:, 1:]
        loss = ((pred - target) ** 2).mean(dim=-1)
        return (loss * mask).sum() / mask.sum()


# --------------------------------------------------------------------------------------------------
# e) MAE: manual unbiased variance, torch.where mask tokens, masked_fill in the loss
# --------------------------------------------------------------------------------------------------

class MAEWhere(nn.Module):
    def __init__(self, clamp=False):
        super().__init__()
        self.clamp = clamp
        self.patch = nn.Conv2d(CH, ENC_D, PATCH, PATCH)
        self.cls = nn.Parameter(torch.randn(1, 1, ENC_D) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, L + 1, ENC_D) * 0.02)
        self.blocks = nn.ModuleList([ModuleBlock(ENC_D, ENC_HEADS) for _ in range(ENC_DEPTH)])
        self.norm = nn.LayerNorm(ENC_D, eps=1e-6)
        self.dec_embed = nn.Linear(ENC_D, DEC_D)
        self.mask_token = nn.Parameter(torch.randn(1, 1, DEC_D) * 0.02)
        self.dec_pos = nn.Parameter(torch.randn(1, L + 1, DEC_D) * 0.02)
        self.dec_blocks = nn.ModuleList([ModuleBlock(DEC_D, DEC_HEADS) for _ in range(DEC_DEPTH)])
        self.dec_norm = nn.LayerNorm(DEC_D, eps=1e-6)
        self.pred = nn.Linear(DEC_D, CH * PATCH * PATCH)

    def forward(self, imgs, noise):
        N = imgs.shape[0]
        x = self.patch(imgs).flatten(2).permute(0, 2, 1) + self.pos[:, 1:]
        ids_shuffle = noise.argsort(dim=1)
        ids_restore = ids_shuffle.argsort(dim=1)
        masked = ids_restore >= LEN_KEEP  # (N, L) bool, True = removed
        x = x.gather(1, ids_shuffle[:, :LEN_KEEP, None].expand(-1, -1, ENC_D))
        x = torch.cat([(self.cls + self.pos[:, :1]).expand(N, -1, -1), x], dim=1)
        for b in self.blocks:
            x = b(x)
        x = self.dec_embed(self.norm(x))
        # unshuffle with zero padding, then put the mask token where masked (torch.where)
        pad = torch.zeros(N, L - LEN_KEEP, DEC_D, dtype=x.dtype)
        x_ = torch.cat([x[:, 1:], pad], dim=1).gather(1, ids_restore[..., None].expand(-1, -1, DEC_D))
        x_ = torch.where(masked.unsqueeze(-1), self.mask_token, x_)
        x = torch.cat([x[:, :1], x_], dim=1) + self.dec_pos
        for b in self.dec_blocks:
            x = b(x)
        pred = self.pred(self.dec_norm(x))[:, 1:]
        t = patchify_reshape(imgs)
        n = t.shape[-1]
        m = t.mean(-1, keepdim=True)
        var = ((t - m) ** 2).sum(-1, keepdim=True) / (n - 1)
        t = (t - m) / torch.sqrt(var + 1e-6)
        per_patch = ((pred - t) ** 2).mean(-1)
        per_patch = per_patch.masked_fill(~masked, 0.0)
        denom = masked.sum()
        if self.clamp:
            denom = denom.clamp(min=1)
        return per_patch.sum() / denom


# --------------------------------------------------------------------------------------------------
# Cases
# --------------------------------------------------------------------------------------------------

def _imgs(b=BATCH):
    return torch.randn(b, CH, IMG, IMG)


def _noise(b=BATCH):
    return torch.rand(b, L)


MAE_IN = {"imgs": [BATCH, CH, IMG, IMG], "noise": [BATCH, L]}
CLS_IN = {"imgs": [BATCH, CH, IMG, IMG], "labels": [BATCH]}
IMG_IN = {"imgs": [BATCH, CH, IMG, IMG]}
# cpc ops the clean-up passes should leave: one layer_norm per LayerNorm, one gelu per GELU
CLS_OPS = {"cpc.layer_norm": 5, "cpc.gelu": 2}
MAE_OPS = {"cpc.layer_norm": 8, "cpc.gelu": 3}


def _cls_case(loss):
    return dict(make=lambda: ViTClassifier(loss), args=lambda: (_imgs(), torch.tensor([3, 7])),
                input_names=["imgs", "labels"], expect=CLS_IN, expect_ops=CLS_OPS)


def _mae_case(make, **extra):
    return dict(make=make, args=lambda: (_imgs(), _noise()), input_names=["imgs", "noise"],
                expect=MAE_IN, expect_ops=MAE_OPS, **extra)


def _img_case(make):
    return dict(make=make, args=lambda: (_imgs(),), input_names=["imgs"], expect=IMG_IN,
                expect_ops=MAE_OPS)


# name -> dict(make, args, input_names, expect (input shapes), expect_ops, [dynamic_axes],
#              [imports: [(tag, extra cpc args, expected input shapes, [regex the IR must not hold])]])
CASES = {
    "a_ce": _cls_case("ce"),
    "a_nll": _cls_case("nll"),
    "a_logsoftmax": _cls_case("logsoftmax"),
    "a_nll_sep": _cls_case("nll_sep"),
    "a_manual": _cls_case("manual"),
    "b": _mae_case(MAEFunctional),
    "b_sq": _mae_case(lambda: MAEFunctional("manual")),
    "c": _mae_case(lambda: MAEFunctional("manual"),
                   dynamic_axes={"imgs": {0: "N"}, "noise": {0: "N"}},
                   imports=[("N=2", ["--input-shape", "imgs=2x3x32x32", "--input-shape", "noise=2x16"],
                             MAE_IN),
                            ("N=4", ["--input-shape", "imgs=4x3x32x32", "--input-shape", "noise=4x16"],
                             {"imgs": [4, CH, IMG, IMG], "noise": [4, L]}, r"tensor<2x"),
                            ("no-shape", [], None)]),
    "d": _img_case(MAEUnfold),
    "d_rand_static": _img_case(lambda: MAEUnfold(rand="static")),
    "d_rand_like": _img_case(lambda: MAEUnfold(rand="like")),
    "d_F_unfold": _img_case(lambda: MAEUnfold(patch="F")),
    "d_scatter": _img_case(lambda: MAEUnfold(scatter_mask=True)),
    "e": _mae_case(lambda: MAEWhere(False)),
    "e_clamp": _mae_case(lambda: MAEWhere(True)),
}

MODES = {
    "eval": dict(do_constant_folding=True, training=torch.onnx.TrainingMode.EVAL),
    "train": dict(do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING),
}


# --------------------------------------------------------------------------------------------------
# cpc's handler table (read from the sources) to name unsupported ops
# --------------------------------------------------------------------------------------------------

def load_handler_table():
    table = {}
    hdir = os.path.join(ROOT, "frontends", "onnx", "handlers")
    pat = re.compile(r'r\.add\("(\w+)",\s*(.*?)\);\s*$')
    for f in sorted(os.listdir(hdir)):
        if not f.endswith(".cpp"):
            continue
        for line in open(os.path.join(hdir, f)):
            m = pat.search(line.strip())
            if not m:
                continue
            # trailing integer args are the opset range (lambdas may hold other numbers: take the
            # numbers after the last ')' of the handler expression)
            rest = m.group(2)
            if ")" in rest:
                tail = rest[rest.rfind(")") + 1:]
            else:
                tail = rest[rest.find(",") + 1:] if "," in rest else ""
            nums = [int(x) for x in re.findall(r"\b\d+\b", tail)]
            lo = nums[0] if len(nums) >= 1 else 1
            hi = nums[1] if len(nums) >= 2 else 1000
            table.setdefault(m.group(1), []).append((lo, hi))
    return table


def unsupported_ops(model, table):
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    missing = {}
    for node in model.graph.node:
        ok = any(lo <= opset <= hi for lo, hi in table.get(node.op_type, []))
        if not ok:
            missing[node.op_type] = missing.get(node.op_type, 0) + 1
    return missing


def op_counts(model):
    c = {}
    for node in model.graph.node:
        c[node.op_type] = c.get(node.op_type, 0) + 1
    return c


# --------------------------------------------------------------------------------------------------
# Running cpc
# --------------------------------------------------------------------------------------------------

def parse_summary(text):
    """-> dict(inputs={name: [dims] or str}, outputs=..., trainable=int|None, ops={op: n})."""
    res = {"inputs": {}, "outputs": {}, "trainable": None, "frozen": None, "ops": {}}
    section = None
    for line in text.splitlines():
        s = line.strip()
        if s in ("inputs:", "outputs:", "ops:"):
            section = s[:-1]
            continue
        if s.startswith("parameters:"):
            m = re.search(r"(\d+) trainable \+ (\d+) frozen", s)
            if m:
                res["trainable"], res["frozen"] = int(m.group(1)), int(m.group(2))
            section = None
            continue
        if section in ("inputs", "outputs") and ":" in s:
            name, ty = [x.strip() for x in s.split(":", 1)]
            m = re.match(r"tensor<(.*)>", ty)
            dims = ty
            if m:
                parts = m.group(1).split("x")
                dims = [int(p) if p.isdigit() else p for p in parts[:-1]]
                dims = (dims, parts[-1])
            res[section][name] = dims
        elif section == "ops" and ":" in s:
            k, v = s.rsplit(":", 1)
            if v.strip().isdigit():
                res["ops"][k.strip()] = int(v)
    return res


def error_line(stderr, stdout):
    lines = [l.strip() for l in (stderr + "\n" + stdout).splitlines() if l.strip()]
    for l in lines:
        if "error" in l.lower():
            return l
    return lines[-1] if lines else "(no output)"


def run_cpc(path, extra, workdir):
    cmd = [CPC, "import", path] + extra + ["--summary"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0:
        return False, error_line(p.stderr, p.stdout), None
    summ = parse_summary(p.stdout)
    # Round trip through the printed IR: cpc import -o X.mlir, cpc-opt X.mlir.
    mlir = os.path.join(workdir, os.path.basename(path) + ".mlir")
    q = subprocess.run([CPC, "import", path] + extra + ["-o", mlir], capture_output=True, text=True,
                       timeout=120)
    if q.returncode != 0:
        return False, "import -o failed: " + error_line(q.stderr, q.stdout), summ
    r = subprocess.run([CPC_OPT, mlir, "-o", os.devnull], capture_output=True, text=True, timeout=120)
    if r.returncode != 0:
        return False, "cpc-opt re-parse failed: " + error_line(r.stderr, r.stdout), summ
    summ["ir"] = open(mlir).read()
    return True, "", summ


def check_summary(summ, expect, n_trainable, onnx_model, case, forbid=None):
    """-> (suspicious notes, informational notes)."""
    notes, info = [], []
    if expect is not None:
        for name, dims in expect.items():
            got = summ["inputs"].get(name)
            if got is None:
                notes.append(f"input {name} missing")
            elif got[0] != dims:
                notes.append(f"input {name} is {got[0]}x{got[1]}, expected {dims}")
        extra = set(summ["inputs"]) - set(expect)
        if extra:
            notes.append(f"unexpected inputs {sorted(extra)}")
    outs = list(summ["outputs"].items())
    if len(outs) != 1:
        notes.append(f"{len(outs)} outputs")
    elif not (isinstance(outs[0][1], tuple) and outs[0][1][0] == [] and outs[0][1][1] == "f32"):
        o = outs[0][1]
        shown = "x".join(map(str, o[0] + [o[1]])) if isinstance(o, tuple) else o
        notes.append(f"output {outs[0][0]} is {shown}, expected tensor<f32>")
    # parameters: every trainable torch parameter should show up once (EVAL export folds
    # transposes/slices into anonymous initializers and de-duplicates equal ones, so only note it)
    if summ["trainable"] is not None and summ["trainable"] != n_trainable:
        info.append(f"trainable elements {summ['trainable']} != torch {n_trainable}")
    # fused ops: cpc.layer_norm must match the model's LayerNorms exactly (an extra one would mean
    # the norm_pix target normalisation was folded); cpc.gelu below the GELU count = missed fusion
    for op, want in case.get("expect_ops", {}).items():
        got = summ["ops"].get(op, 0)
        if got != want:
            msg = f"{op} x{got}, model has {want}"
            if op == "cpc.gelu" and got < want:
                left = ", ".join(f"{k} x{v}" for k, v in summ["ops"].items()
                                 if k in ("cpc.tanh", "cpc.erf"))
                info.append(f"{msg} (GELU left unfused: {left})")
            else:
                notes.append(msg)
    if forbid and re.search(forbid, summ.get("ir", "")):
        notes.append(f"IR still contains {forbid!r} (batch size baked in?)")
    # random ops present in ONNX must survive into cpc
    oc = op_counts(onnx_model)
    if any(k.startswith("RandomUniform") for k in oc) and not any("random" in k for k in summ["ops"]):
        notes.append("ONNX has RandomUniform* but cpc has no random op")
    return notes, info


# --------------------------------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default="", help="comma-separated case names")
    ap.add_argument("--opsets", default="13,17")
    ap.add_argument("--keep", default="", help="keep the .onnx/.mlir files in this directory")
    ap.add_argument("-v", "--verbose", action="store_true", help="print ONNX op counts per export")
    a = ap.parse_args()

    warnings.filterwarnings("ignore")
    torch.manual_seed(0)
    table = load_handler_table()
    names = [n for n in CASES if not a.only or n in a.only.split(",")]
    opsets = [int(x) for x in a.opsets.split(",")]
    workdir = a.keep or tempfile.mkdtemp(prefix="cpc-unseen-")
    os.makedirs(workdir, exist_ok=True)

    n_ok = n_fail = n_sus = 0
    print(f"{'case':<20} {'opset':>5} {'mode':<6} {'result':<11} detail")
    for name in names:
        case = CASES[name]
        torch.manual_seed(0)
        model = case["make"]()
        n_trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
        for opset in opsets:
            for mode, kw in MODES.items():
                path = os.path.join(workdir, f"{name}-opset{opset}-{mode}.onnx")
                torch.manual_seed(1)
                args = case["args"]()
                try:
                    torch.onnx.export(model, args, path, input_names=case["input_names"],
                                      output_names=["loss"], opset_version=opset,
                                      dynamic_axes=case.get("dynamic_axes"), **kw)
                    om = onnx.load(path)
                except Exception as e:  # noqa: BLE001
                    msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
                    print(f"{name:<20} {opset:>5} {mode:<6} {'EXPORT-FAIL':<11} {type(e).__name__}: {msg}")
                    n_fail += 1
                    continue
                missing = unsupported_ops(om, table)
                if a.verbose:
                    print(f"  onnx ops: {dict(sorted(op_counts(om).items()))}")
                imports = case.get("imports") or [("", [], case.get("expect"))]
                for imp in imports:
                    tag, extra, expect = imp[:3]
                    forbid = imp[3] if len(imp) > 3 else None
                    label = name + (f"[{tag}]" if tag else "")
                    ok, err, summ = run_cpc(path, extra, workdir)
                    if ok:
                        notes, info = check_summary(summ, expect, n_trainable, om, case, forbid)
                        if mode == "train" and any(i.startswith("trainable") for i in info):
                            # TRAINING export keeps every parameter: a mismatch is suspicious there
                            notes += [i for i in info if i.startswith("trainable")]
                            info = [i for i in info if not i.startswith("trainable")]
                        line = f"{label:<20} {opset:>5} {mode:<6} {'OK':<11}"
                        if notes:
                            line += " SUSPICIOUS: " + "; ".join(notes)
                            n_sus += 1
                        if info:
                            line += " (note: " + "; ".join(info) + ")"
                        print(line)
                        n_ok += 1
                    else:
                        extra_info = f"  [ops without cpc handler: {missing}]" if missing else ""
                        print(f"{label:<20} {opset:>5} {mode:<6} {'FAIL':<11} {err}{extra_info}")
                        n_fail += 1
    print(f"\n{n_ok} OK ({n_sus} suspicious), {n_fail} FAIL; files in {workdir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
