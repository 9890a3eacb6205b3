"""Residual-MLP denoiser network F for vector data (PrivORL appendix F-A, SynthER ``ResidualMLPDenoiser``).

Layout: the noise level ``c_noise`` goes through frozen random Fourier features (16 dims, plus ``c_noise`` itself),
then ``Linear -> SiLU -> Linear`` to ``cond_dim``; the input goes through ``Linear(D -> cond_dim)``; their sum enters a
trunk ``Linear(cond_dim -> W)``, ``depth`` blocks ``h + Linear(SiLU(LayerNorm(h)))``, ``LayerNorm -> SiLU ->
Linear(W -> D)``. Only ``Linear`` and ``LayerNorm`` carry parameters (the Fourier frequencies are a buffer), which is
what Opacus ghost clipping needs. Inputs may have any leading shape ``[..., D]`` so that one privacy unit can carry
several rows (noise multiplicity, trajectory units).

:meth:`ResidualMLPDenoiser.folded` gives a sampling-only forward for one noise level shared by the whole batch (what
every ODE sampler step asks). It is our own code because no library folds a network for inference this way, and it
is what makes one million rows fit in 90 s (issue 17): ``proj`` and ``inp`` have no activation between them, so
``inp(proj(x) + e(σ))`` is one ``D -> W`` matrix plus a per-step bias computed on one row; the residual adds run in
place (``addmm_``) and SiLU in place. It takes 1/1.77 of the module's CPU time at 2048 rows on one thread
(``scripts/bench_synth.py --sampling``) and agrees with it to float rounding (tests/test_denoiser_fold.py).
"""
from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from privsynth.nn import mlp
from privsynth.synth.config import DenoiserConfig

__all__ = ["FoldedDenoiser", "FourierEmbedding", "ResidualBlock", "ResidualMLPDenoiser"]


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

    @property
    def foldable(self) -> bool:
        """False while low-rank adapters wrap its layers (a LoRA fine-tune drawing FineCur pools): sampled through
        the module itself then."""
        return all(type(m) is nn.Linear for m in (self.inp, self.proj, self.out, *(b.linear for b in self.blocks)))

    @torch.no_grad()
    def folded(self) -> "FoldedDenoiser":
        """The sampling forward for the current weights (see the module docstring)."""
        return FoldedDenoiser(self)


class FoldedDenoiser:
    """``F(x, c)`` of a :class:`ResidualMLPDenoiser` for ``x`` [n, D] and one noise level ``c`` for all rows.

    Fold again after the weights change: the combined input matrix is computed at fold time (the other tensors are
    shared with the module). No autograd (sampling only)."""

    @torch.no_grad()
    def __init__(self, net: ResidualMLPDenoiser) -> None:
        self._fourier, self._noise_mlp = net.fourier, net.noise_mlp
        self._w_inp, self._b_proj, self._b_inp = net.inp.weight.detach(), net.proj.bias.detach(), net.inp.bias.detach()
        self._w_in_t = (net.inp.weight @ net.proj.weight).t().contiguous()  # [D, W]: inp ∘ proj as one matrix
        self._blocks = [
            (b.norm.weight.detach(), b.norm.bias.detach(), b.norm.eps, b.linear.weight.detach().t().contiguous(),
             b.linear.bias.detach())
            for b in net.blocks
        ]
        self._out_norm = (net.out_norm.weight.detach(), net.out_norm.bias.detach(), net.out_norm.eps)
        self._w_out_t, self._b_out = net.out.weight.detach().t().contiguous(), net.out.bias.detach()
        self.width = net.inp.out_features

    @torch.no_grad()
    def input_bias(self, c_noise: torch.Tensor) -> torch.Tensor:
        """``inp(proj.bias + noise_mlp(fourier(c)))`` for the scalar noise level ``c``: [W]."""
        e = self._noise_mlp(self._fourier(c_noise.reshape(1).to(self._w_inp.dtype)))[0]
        return torch.addmv(self._b_inp, self._w_inp, self._b_proj + e)

    @torch.no_grad()
    def __call__(self, x: torch.Tensor, c_noise: torch.Tensor) -> torch.Tensor:
        c = c_noise.reshape(-1)[:1]
        h = torch.addmm(self.input_bias(c), x, self._w_in_t)
        shape = (self.width,)
        for g, b, eps, w_t, bias in self._blocks:
            a = F.layer_norm(h, shape, g, b, eps)
            F.silu(a, inplace=True)
            h.addmm_(a, w_t)
            h.add_(bias)
        a = F.layer_norm(h, shape, *self._out_norm)
        F.silu(a, inplace=True)
        return torch.addmm(self._b_out, a, self._w_out_t)
