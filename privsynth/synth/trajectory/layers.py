"""Transformer building blocks made only of ``nn.Linear`` and ``nn.LayerNorm``, so DP-SGD can clip them.

Why our own attention instead of ``nn.MultiheadAttention``/``nn.TransformerEncoder``: Opacus' validator rejects the
former, ghost clipping fails on the latter (measured), and the privacy core's single-backward
book-keeping clipper (:mod:`privsynth.privacy.fastclip`) supports Linear and LayerNorm layers only. Attention here is
q/k/v/out projections plus a softmax; positions are a learned ``nn.Linear`` over one-hot position codes (the same
function as an ``nn.Embedding`` table, but a Linear layer, so it is clippable in every mode and needs no per-sample
index tensor). A pre-LayerNorm GPT-2 block (Radford et al. 2019), as the paper's "GPT-style" backbone.
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from privsynth.nn import mlp

__all__ = ["SelfAttention", "Block", "PositionEmbedding", "FourierEmbedding", "mlp2", "per_token"]


def per_token(module: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Apply a per-token module to ``x`` [B, ..., d] through a 3-D view [B, n, d], then restore the leading shape.

    Opacus' ghost norms of a Linear layer take 2-D or 3-D activations only; one privacy unit here may hold several
    sequences ([B, K, T, d]), so every parametrised layer sees [B, K·T, d] (dim 0 stays the privacy unit).
    """
    y = module(x.reshape(x.shape[0], -1, x.shape[-1]))
    return y.reshape(*x.shape[:-1], y.shape[-1])


class SelfAttention(nn.Module):
    """Multi-head scaled dot-product self-attention with plain Linear projections; optional causal mask."""

    def __init__(self, width: int, heads: int, *, causal: bool = False) -> None:
        super().__init__()
        if width % heads:
            raise ValueError(f"width {width} is not divisible by heads {heads}")
        self.heads, self.causal = heads, causal
        self.q = nn.Linear(width, width)
        self.k = nn.Linear(width, width)
        self.v = nn.Linear(width, width)
        self.out = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., T, W] -> [..., T, W] (any leading batch dims, so one privacy unit may hold several sequences)."""
        q, k, v = (rearrange(per_token(f, x), "... t (h d) -> ... h t d", h=self.heads) for f in (self.q, self.k, self.v))
        att = torch.einsum("...htd,...hsd->...hts", q, k) / math.sqrt(q.shape[-1])
        if self.causal:
            t = x.shape[-2]
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).triu(1)
            att = att.masked_fill(mask, float("-inf"))
        y = torch.einsum("...hts,...hsd->...htd", att.softmax(-1), v)
        return per_token(self.out, rearrange(y, "... h t d -> ... t (h d)"))


class Block(nn.Module):
    """Pre-LN transformer block: x + Attn(LN(x)), then x + MLP(LN(x)) with GELU."""

    def __init__(self, width: int, heads: int, ff_mult: int = 4, *, causal: bool = False) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = SelfAttention(width, heads, causal=causal)
        self.ln2 = nn.LayerNorm(width)
        self.fc1 = nn.Linear(width, ff_mult * width)
        self.fc2 = nn.Linear(ff_mult * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(per_token(self.ln1, x))
        return x + per_token(self.fc2, F.gelu(per_token(self.fc1, per_token(self.ln2, x))))


class PositionEmbedding(nn.Module):
    """Learned absolute position embeddings as a bias-free Linear over one-hot codes: ``E[t]`` for position ``t``."""

    def __init__(self, n_positions: int, width: int) -> None:
        super().__init__()
        self.n_positions = n_positions
        self.table = nn.Linear(n_positions, width, bias=False)
        nn.init.normal_(self.table.weight, std=0.02)
        self.register_buffer("eye", torch.eye(n_positions), persistent=False)

    def forward(self, lead: tuple[int, ...], length: int) -> torch.Tensor:
        """[*lead, length, width] embeddings of positions 0..length-1 (one copy per sample, so per-sample clipping
        sees it)."""
        if length > self.n_positions:
            raise ValueError(f"sequence of {length} tokens exceeds the {self.n_positions} position embeddings")
        onehot = self.eye[:length].expand(*lead, length, self.n_positions).contiguous()
        return per_token(self.table, onehot)


class FourierEmbedding(nn.Module):
    """Frozen random Fourier features of the EDM noise level c_noise = ln(σ)/4, then a 2-layer SiLU MLP."""

    def __init__(self, fourier_dim: int, width: int, scale: float = 6.283) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.randn(fourier_dim // 2) * scale)
        self.fc1 = nn.Linear(fourier_dim // 2 * 2 + 1, width)
        self.fc2 = nn.Linear(width, width)

    def forward(self, c_noise: torch.Tensor) -> torch.Tensor:
        """c_noise [...] -> [..., width]."""
        c = c_noise[..., None]
        ang = c * self.freqs
        feats = torch.cat([c, ang.sin(), ang.cos()], dim=-1)
        return per_token(self.fc2, F.silu(per_token(self.fc1, feats)))


def mlp2(d_in: int, hidden: int, d_out: int) -> nn.Sequential:
    """Two Linear layers with GELU (PrivORL-J's per-modality embedding and output MLPs)."""
    return mlp(d_in, (hidden,), d_out, act=nn.GELU)
