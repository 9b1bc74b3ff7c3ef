"""Masked autoencoder ViT (He et al., "Masked Autoencoders Are Scalable Vision Learners", 2021).

Self-contained re-implementation (torch + numpy only) written for exporting the *training* loss to
ONNX. Differences from the reference code are deliberate and export-oriented:
  * the masking noise is an input (not drawn inside forward), so the graph is deterministic and
    the importer can be fed the same noise as PyTorch;
  * forward() returns only the scalar loss;
  * attention is spelled out (matmul / softmax / matmul) so the exported graph contains plain ops;
  * modules carry timm-like names (blocks.{i}.attn.qkv, blocks.{i}.norm1, ...) so that ONNX
    initializers are recognisable.
"""

import math

import numpy as np
import torch
import torch.nn as nn


# --------------------------------------------------------------------------------------------------
# Fixed 2D sin-cos positional embeddings (same formulas as the MAE reference util/pos_embed.py).
# --------------------------------------------------------------------------------------------------

def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    """embed_dim: output dimension per position; pos: positions, any shape (M,) after flatten."""
    assert embed_dim % 2 == 0
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.0
    omega = 1.0 / 10000 ** omega  # (D/2,)
    pos = pos.reshape(-1)  # (M,)
    out = np.einsum("m,d->md", pos, omega)  # (M, D/2) outer product
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)  # (M, D)


def get_2d_sincos_pos_embed_from_grid(embed_dim, grid):
    assert embed_dim % 2 == 0
    # Half of the dimensions encode the grid height coordinate, half the width coordinate.
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])
    return np.concatenate([emb_h, emb_w], axis=1)


def get_2d_sincos_pos_embed(embed_dim, grid_size, cls_token=False):
    """Returns (grid_size*grid_size, D), or (1+grid_size*grid_size, D) with a zero cls row first."""
    grid_h = np.arange(grid_size, dtype=np.float32)
    grid_w = np.arange(grid_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # w goes first, as in the reference
    grid = np.stack(grid, axis=0).reshape([2, 1, grid_size, grid_size])
    pos_embed = get_2d_sincos_pos_embed_from_grid(embed_dim, grid)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


# --------------------------------------------------------------------------------------------------
# Transformer building blocks (timm-like names).
# --------------------------------------------------------------------------------------------------

class PatchEmbed(nn.Module):
    """Image -> sequence of patch embeddings via a strided conv (kernel = stride = patch)."""

    def __init__(self, img_size, patch_size, in_chans, embed_dim):
        super().__init__()
        assert img_size % patch_size == 0
        self.img_size = img_size
        self.patch_size = patch_size
        self.grid_size = img_size // patch_size
        self.num_patches = self.grid_size ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        x = self.proj(x)  # (N, D, H/p, W/p)
        return x.flatten(2).transpose(1, 2)  # (N, L, D)


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        assert dim % num_heads == 0
        self.num_heads = num_heads
        self.head_dim = dim // num_heads
        self.scale = self.head_dim ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        # (B, N, 3C) -> (3, B, heads, N, head_dim)
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * self.scale
        attn = attn.softmax(dim=-1)
        x = (attn @ v).transpose(1, 2).reshape(B, N, C)
        return self.proj(x)


class Mlp(nn.Module):
    def __init__(self, dim, hidden_dim):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden_dim)
        self.act = nn.GELU()  # exact (erf) GELU, as in timm / MAE
        self.fc2 = nn.Linear(hidden_dim, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    """Pre-norm transformer block: x + attn(norm1(x)); x + mlp(norm2(x))."""

    def __init__(self, dim, num_heads, mlp_ratio=4.0):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        x = x + self.mlp(self.norm2(x))
        return x


# --------------------------------------------------------------------------------------------------
# MAE
# --------------------------------------------------------------------------------------------------

class MaskedAutoencoderViT(nn.Module):
    DEFAULT_MASK_RATIO = 0.75  # the paper's setting

    def __init__(self, img_size, patch_size, in_chans, embed_dim, depth, num_heads,
                 decoder_embed_dim, decoder_depth, decoder_num_heads, mlp_ratio=4.0,
                 norm_pix_loss=True):
        super().__init__()
        self.patch_size = patch_size
        self.in_chans = in_chans
        self.norm_pix_loss = norm_pix_loss

        # ---- encoder ----
        self.patch_embed = PatchEmbed(img_size, patch_size, in_chans, embed_dim)
        num_patches = self.patch_embed.num_patches
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        # Fixed (non-learned) sin-cos embedding; a frozen Parameter like the reference, so it is
        # still exported as a named initializer.
        self.pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, embed_dim),
                                      requires_grad=False)
        self.blocks = nn.ModuleList([Block(embed_dim, num_heads, mlp_ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)

        # ---- decoder ----
        self.decoder_embed = nn.Linear(embed_dim, decoder_embed_dim, bias=True)
        self.mask_token = nn.Parameter(torch.zeros(1, 1, decoder_embed_dim))
        self.decoder_pos_embed = nn.Parameter(torch.zeros(1, num_patches + 1, decoder_embed_dim),
                                              requires_grad=False)
        self.decoder_blocks = nn.ModuleList(
            [Block(decoder_embed_dim, decoder_num_heads, mlp_ratio) for _ in range(decoder_depth)])
        self.decoder_norm = nn.LayerNorm(decoder_embed_dim, eps=1e-6)
        self.decoder_pred = nn.Linear(decoder_embed_dim, patch_size ** 2 * in_chans, bias=True)

        self.initialize_weights()

    # ---- init (matches the MAE reference scheme) ----
    def initialize_weights(self):
        g = self.patch_embed.grid_size
        pe = get_2d_sincos_pos_embed(self.pos_embed.shape[-1], g, cls_token=True)
        self.pos_embed.data.copy_(torch.from_numpy(pe).float().unsqueeze(0))
        dpe = get_2d_sincos_pos_embed(self.decoder_pos_embed.shape[-1], g, cls_token=True)
        self.decoder_pos_embed.data.copy_(torch.from_numpy(dpe).float().unsqueeze(0))

        # Patch embed conv initialised like a Linear on the flattened (C*p*p) patch.
        w = self.patch_embed.proj.weight.data
        nn.init.xavier_uniform_(w.view([w.shape[0], -1]))
        nn.init.zeros_(self.patch_embed.proj.bias)

        nn.init.normal_(self.cls_token, std=0.02)
        nn.init.normal_(self.mask_token, std=0.02)
        self.apply(self._init_weights)

    @staticmethod
    def _init_weights(m):
        if isinstance(m, nn.Linear):
            nn.init.xavier_uniform_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    # ---- helpers ----
    def patchify(self, imgs):
        """(N, C, H, W) -> (N, L, p*p*C), channel-last within each patch."""
        p = self.patch_size
        h = w = imgs.shape[2] // p
        x = imgs.reshape(imgs.shape[0], self.in_chans, h, p, w, p)
        x = torch.einsum("nchpwq->nhwpqc", x)
        return x.reshape(imgs.shape[0], h * w, p * p * self.in_chans)

    def unpatchify(self, x):
        """(N, L, p*p*C) -> (N, C, H, W); debugging only."""
        p = self.patch_size
        h = w = int(math.isqrt(x.shape[1]))
        x = x.reshape(x.shape[0], h, w, p, p, self.in_chans)
        x = torch.einsum("nhwpqc->nchpwq", x)
        return x.reshape(x.shape[0], self.in_chans, h * p, w * p)

    def random_masking(self, x, noise, mask_ratio):
        """Per-sample shuffle driven by the given noise (N, L): keep the len_keep lowest-noise
        patches. Returns the kept tokens, the binary mask (1 = removed) and the inverse shuffle."""
        N, _, D = x.shape
        # L from the config, not x.shape (a traced value under export): len_keep must be a plain
        # Python int so it is a constant in the exported graph.
        L = self.patch_embed.num_patches
        len_keep = int(L * (1 - mask_ratio))
        ids_shuffle = torch.argsort(noise, dim=1)  # ascending: small noise is kept
        ids_restore = torch.argsort(ids_shuffle, dim=1)
        ids_keep = ids_shuffle[:, :len_keep]
        x_masked = torch.gather(x, dim=1, index=ids_keep.unsqueeze(-1).repeat(1, 1, D))
        mask = torch.ones([N, L], device=x.device, dtype=x.dtype)
        mask[:, :len_keep] = 0
        mask = torch.gather(mask, dim=1, index=ids_restore)  # back to the original patch order
        return x_masked, mask, ids_restore

    # ---- encoder / decoder / loss ----
    def forward_encoder(self, imgs, noise, mask_ratio):
        x = self.patch_embed(imgs)
        x = x + self.pos_embed[:, 1:, :]
        x, mask, ids_restore = self.random_masking(x, noise, mask_ratio)
        cls_token = self.cls_token + self.pos_embed[:, :1, :]
        cls_tokens = cls_token.expand(x.shape[0], -1, -1)
        x = torch.cat((cls_tokens, x), dim=1)
        for blk in self.blocks:
            x = blk(x)
        x = self.norm(x)
        return x, mask, ids_restore

    def forward_decoder(self, x, ids_restore):
        x = self.decoder_embed(x)
        # Append a mask token for every removed patch, then unshuffle (cls token excluded).
        n_mask = ids_restore.shape[1] + 1 - x.shape[1]
        mask_tokens = self.mask_token.repeat(x.shape[0], n_mask, 1)
        x_ = torch.cat([x[:, 1:, :], mask_tokens], dim=1)
        x_ = torch.gather(x_, dim=1, index=ids_restore.unsqueeze(-1).repeat(1, 1, x.shape[2]))
        x = torch.cat([x[:, :1, :], x_], dim=1)
        x = x + self.decoder_pos_embed
        for blk in self.decoder_blocks:
            x = blk(x)
        x = self.decoder_norm(x)
        x = self.decoder_pred(x)
        return x[:, 1:, :]  # drop the cls token

    def forward_loss(self, imgs, pred, mask):
        """Mean squared error on the removed patches only (per-patch normalised targets)."""
        target = self.patchify(imgs)
        if self.norm_pix_loss:
            mean = target.mean(dim=-1, keepdim=True)
            var = target.var(dim=-1, keepdim=True)  # unbiased, as in the reference
            target = (target - mean) / (var + 1.0e-6) ** 0.5
        loss = (pred - target) ** 2
        loss = loss.mean(dim=-1)  # (N, L) mean loss per patch
        return (loss * mask).sum() / mask.sum()

    def forward_all(self, imgs, noise, mask_ratio=None):
        """Returns (loss, pred (N, L, p*p*C), mask (N, L)); for debugging."""
        # mask_ratio=None means DEFAULT_MASK_RATIO. Not a float default on purpose: torch.onnx.export
        # appends forward()'s defaults to the traced args and turns a float into a traced tensor,
        # so int(L * (1 - mask_ratio)) would raise a TracerWarning (None is left alone).
        if mask_ratio is None:
            mask_ratio = self.DEFAULT_MASK_RATIO
        latent, mask, ids_restore = self.forward_encoder(imgs, noise, mask_ratio)
        pred = self.forward_decoder(latent, ids_restore)
        loss = self.forward_loss(imgs, pred, mask)
        return loss, pred, mask

    # Set by export.py --all-outputs: the graph returns (loss, pred, mask), an inference graph.
    all_outputs = False

    def forward(self, imgs, noise, mask_ratio=None):
        # Only the scalar loss, so that the exported graph has a single output to differentiate.
        outputs = self.forward_all(imgs, noise, mask_ratio)
        return outputs if self.all_outputs else outputs[0]


# --------------------------------------------------------------------------------------------------
# Configurations
# --------------------------------------------------------------------------------------------------

CONFIGS = {
    # Toy size: 16 patches, export/import in well under a second.
    "tiny": dict(img_size=32, patch_size=8, in_chans=3, embed_dim=64, depth=2, num_heads=4,
                 decoder_embed_dim=32, decoder_depth=1, decoder_num_heads=4),
    "small": dict(img_size=64, patch_size=8, in_chans=3, embed_dim=192, depth=6, num_heads=3,
                  decoder_embed_dim=128, decoder_depth=2, decoder_num_heads=4),
    # Paper configurations (ViT-B/16, ViT-L/16, ViT-H/14 with the 512-d, 8-block decoder).
    "base": dict(img_size=224, patch_size=16, in_chans=3, embed_dim=768, depth=12, num_heads=12,
                 decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16),
    "large": dict(img_size=224, patch_size=16, in_chans=3, embed_dim=1024, depth=24, num_heads=16,
                  decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16),
    "huge": dict(img_size=224, patch_size=14, in_chans=3, embed_dim=1280, depth=32, num_heads=16,
                 decoder_embed_dim=512, decoder_depth=8, decoder_num_heads=16),
}


def build_model(name, seed=0, **overrides):
    """Builds CONFIGS[name] with deterministic weights (init runs under torch.manual_seed(seed))."""
    cfg = dict(CONFIGS[name])
    cfg.update(overrides)
    # fork_rng: seed the init without disturbing the caller's global RNG stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return MaskedAutoencoderViT(**cfg)
