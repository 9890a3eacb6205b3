"""Residual-MLP denoiser network F for vector data (PrivORL appendix F-A, SynthER ``ResidualMLPDenoiser``).

Layout: the noise level ``c_noise`` goes through frozen random Fourier features (16 dims, plus ``c_noise`` itself),
then ``Linear -> SiLU -> Linear`` to ``cond_dim``; the input goes through ``Linear(D -> cond_dim)``; their sum enters a
trunk ``Linear(cond_dim -> W)``, ``depth`` blocks ``h + Linear(SiLU(LayerNorm(h)))``, ``LayerNorm -> SiLU ->
Linear(W -> D)``. Only ``Linear`` and ``LayerNorm`` carry parameters (the Fourier frequencies are a buffer), which is
what Opacus ghost clipping needs. Inputs may have any leading shape ``[..., D]`` so that one privacy unit can carry
several rows (noise multiplicity, trajectory units).
"""
from __future__ import annotations

import math

import torch
from torch import nn

from privsynth.nn import mlp
from privsynth.synth.config import DenoiserConfig

__all__ = ["FourierEmbedding", "ResidualBlock", "ResidualMLPDenoiser"]


class FourierEmbedding(nn.Module):
    """Random (frozen) Fourier features ``[c, sin(2π w c), cos(2π w c)]`` of a scalar (``1 + dim`` outputs)."""

    def __init__(self, dim: int = 16, scale: float = 2 * math.pi, seed: int = 0) -> None:
        super().__init__()
        if dim % 2:
            raise ValueError(f"Fourier embedding dim must be even, got {dim}")
        gen = torch.Generator().manual_seed(seed)
        self.register_buffer("freqs", torch.randn(dim // 2, generator=gen) * scale)

    def forward(self, c: torch.Tensor) -> torch.Tensor:
        arg = c[..., None] * self.freqs
        return torch.cat([c[..., None], arg.sin(), arg.cos()], dim=-1)


class ResidualBlock(nn.Module):
    """``h + Linear(SiLU(LayerNorm(h)))`` (pre-norm residual MLP block)."""

    def __init__(self, width: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.act = nn.SiLU()
        self.linear = nn.Linear(width, width)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.linear(self.act(self.norm(h)))


class ResidualMLPDenoiser(nn.Module):
    """F(x_in, c_noise): ``x_in`` [..., D], ``c_noise`` [...] -> [..., D]."""

    def __init__(self, data_dim: int, cfg: DenoiserConfig) -> None:
        super().__init__()
        self.data_dim = data_dim
        self.fourier = FourierEmbedding(cfg.fourier_dim, cfg.fourier_scale)
        self.noise_mlp = mlp(cfg.fourier_dim + 1, (cfg.cond_dim,), cfg.cond_dim, act=nn.SiLU)
        self.proj = nn.Linear(data_dim, cfg.cond_dim)
        self.inp = nn.Linear(cfg.cond_dim, cfg.width)
        self.blocks = nn.Sequential(*[ResidualBlock(cfg.width) for _ in range(cfg.depth)])
        self.out_norm = nn.LayerNorm(cfg.width)
        self.out_act = nn.SiLU()
        self.out = nn.Linear(cfg.width, data_dim)

    def forward(self, x: torch.Tensor, c_noise: torch.Tensor) -> torch.Tensor:
        c_noise = c_noise.expand(x.shape[:-1])
        h = self.proj(x) + self.noise_mlp(self.fourier(c_noise))
        h = self.blocks(self.inp(h))
        return self.out(self.out_act(self.out_norm(h)))

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())
