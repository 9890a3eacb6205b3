"""DP-Transformer baseline (PrivORL appendix E; Yue et al. 2023 "Synthetic text generation with differential privacy").

An autoregressive transformer over transitions: one token per transition (its five components embedded by one MLP
each and summed), a causal GPT-style stack, and a diagonal-Gaussian head that predicts the next transition row. It is
trained with DP-SGD at unit = trajectory exactly like PrivORL-j (the same per-trajectory items: fragments with their
linking transition; the loss of one fragment is the Gaussian negative log-likelihood of its rows given the link and
the rows before them), and it generates trajectories autoregressively from an empty link, fragment by fragment, with
the same stitching code, so the two differ only in the generative model.

Why our own: no DP-trainable autoregressive model for continuous transition vectors exists in a library; the layers
are Linear/LayerNorm only (:mod:`privsynth.synth.trajectory.layers`) so the privacy core can clip them.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from privsynth.synth.trajectory.config import ARTransformerConfig
from privsynth.synth.trajectory.layers import Block, PositionEmbedding, mlp2, per_token
from privsynth.synth.trajectory.transformer import component_slices

__all__ = ["ARTransformer"]


class ARTransformer(nn.Module):
    """p(x_t | link, x_<t) = N(μ_t, diag σ_t²) for the rows of a fragment; same item format as the diffusion models."""

    def __init__(self, obs_dim: int, act_dim: int, horizon: int, cfg: ARTransformerConfig) -> None:
        super().__init__()
        self.cfg, self.horizon = cfg, horizon
        self.slices = component_slices(obs_dim, act_dim)
        self.data_dim = self.slices[-1].stop
        w = cfg.width
        self.embed = nn.ModuleList([mlp2(s.stop - s.start, w, w) for s in self.slices])
        self.embed_cond = mlp2(self.data_dim + 1, w, w)
        self.pos = PositionEmbedding(horizon, w)
        self.blocks = nn.ModuleList([Block(w, cfg.heads, cfg.ff_mult, causal=True) for _ in range(cfg.depth)])
        self.ln_f = nn.LayerNorm(w)
        self.head = nn.Linear(w, 2 * self.data_dim)

    def forward(self, x: torch.Tensor, cond: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [..., H, D] (rows), cond [..., D + 1] -> mean, log-std [..., H, D] of each row given the ones before."""
        lead, h = x.shape[:-2], x.shape[-2]
        prev = torch.stack([per_token(emb, x[..., : h - 1, s]) for emb, s in zip(self.embed, self.slices)], 0).sum(0)
        tok = torch.cat([per_token(self.embed_cond, cond)[..., None, :], prev], dim=-2)  # token t predicts row t
        z = tok + self.pos(tuple(lead), h)
        for blk in self.blocks:
            z = blk(z)
        out = per_token(self.head, per_token(self.ln_f, z))
        mean, log_std = out.split(self.data_dim, dim=-1)
        return mean, log_std.clamp(self.cfg.min_log_std, self.cfg.max_log_std)

    def random_loss(self, x0: torch.Tensor, cond: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """Per-fragment Gaussian NLL [...] averaged over valid rows and columns (no randomness needed)."""
        mean, log_std = self(x0, cond)
        nll = 0.5 * ((x0 - mean) / log_std.exp()).pow(2) + log_std + 0.5 * math.log(2 * math.pi)
        m = mask.to(nll.dtype)
        return (nll.mean(-1) * m).sum(-1) / m.sum(-1).clamp_min(1.0)

    @torch.no_grad()
    def sample(self, cond: torch.Tensor, horizon: int, dim: int, steps: int = 0,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Fragments [n, H, D] row by row (``steps`` is unused; the signature matches the diffusion models)."""
        n = cond.shape[0]
        x = torch.zeros(n, horizon, dim)
        for t in range(horizon):
            mean, log_std = self(x, cond)
            x[:, t] = mean[:, t] + log_std[:, t].exp() * torch.randn(n, dim, generator=generator)
        return x
