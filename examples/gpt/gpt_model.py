"""A GPT-style causal language model: token embedding tied to the output head, learned
positions, pre-norm blocks of causal multi-head attention (one fused qkv Linear) and a GELU MLP,
cross-entropy over the vocabulary. Small configs for tests; the structure is GPT-2's, dropout
included (on the embeddings, the attention probabilities and each residual branch) when its
probability is above 0."""
import torch
from torch import nn
import torch.nn.functional as F

CONFIGS = {
    # name: vocab, width, heads, tokens, layers
    "tiny": dict(vocab=64, width=32, heads=4, tokens=8, layers=2),
    "small": dict(vocab=512, width=128, heads=4, tokens=64, layers=4),
}


def dropout(x, p, training):
    """GPT-2's dropout; none at all (not even an identity node in the export) at p = 0."""
    return F.dropout(x, p, training) if p > 0 else x


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, tokens, p=0.0):
        super().__init__()
        self.heads, self.p = heads, p
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.register_buffer("causal", torch.tril(torch.ones(tokens, tokens, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        b, n, d = x.shape
        q, k, v = self.qkv(x).reshape(b, n, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4).unbind(0)
        att = (q @ k.transpose(-2, -1)) * (d // self.heads) ** -0.5
        att = att.masked_fill(~self.causal[:n, :n], float("-inf")).softmax(dim=-1)
        att = dropout(att, self.p, self.training)
        return self.proj((att @ v).transpose(1, 2).reshape(b, n, d))


class Block(nn.Module):
    def __init__(self, width, heads, tokens, p=0.0):
        super().__init__()
        self.p = p
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, tokens, p)
        self.fc1, self.fc2 = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        x = x + dropout(self.attn(self.ln1(x)), self.p, self.training)
        return x + dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)))), self.p, self.training)


class GPT(nn.Module):
    def __init__(self, vocab, width, heads, tokens, layers, dropout=0.0):
        super().__init__()
        self.p = dropout
        self.tok = nn.Embedding(vocab, width)
        self.pos = nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        self.blocks = nn.ModuleList([Block(width, heads, tokens, dropout) for _ in range(layers)])
        self.ln = nn.LayerNorm(width)
        self.head = nn.Linear(width, vocab, bias=False)
        self.head.weight = self.tok.weight  # tied, as GPT-2
        nn.init.normal_(self.tok.weight, std=0.02)

    def forward(self, idx, targets=None):
        """The mean cross-entropy against `targets`; without them, the logits (inference)."""
        x = dropout(self.tok(idx) + self.pos[:, : idx.shape[1]], self.p, self.training)
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def build_model(size, seed=0, dropout=0.0):
    torch.manual_seed(seed)
    return GPT(**CONFIGS[size], dropout=dropout)
