"""EDM preconditioning, training loss and noise schedule (Karras et al. 2022, Table 1 and eq. 2, 5, 8).

The denoiser is ``D(x; σ) = c_skip(σ) x + c_out(σ) F(c_in(σ) x, c_noise(σ))`` with

* ``c_skip = σ_d² / (σ² + σ_d²)``, ``c_out = σ σ_d / sqrt(σ² + σ_d²)``, ``c_in = 1 / sqrt(σ² + σ_d²)``,
* ``c_noise = ln(σ) / 4``,

trained with ``ln σ ~ N(P_mean, P_std²)`` and the per-sample loss ``λ(σ) · mean_j (D(x + σn; σ) − x)_j²`` where
``λ(σ) = (σ² + σ_d²) / (σ σ_d)²``. These are the same formulas diffusers' EDM schedulers use for
``prediction_type="epsilon"`` (checked in tests/test_edm.py), so one network serves both our Heun sampler and
diffusers' DPM-Solver++. Written here (not imported) because the loss must return one value per sample and work on
``[..., D]`` inputs for Opacus, which no library function does.
"""
from __future__ import annotations

import math

import torch
from torch import nn

from privsynth.synth.config import EDMConfig

__all__ = ["precondition", "EDM", "karras_sigmas", "loss_weight"]


def precondition(sigma: torch.Tensor, sigma_data: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(c_skip, c_out, c_in, c_noise) of EDM Table 1, elementwise in ``sigma``."""
    s2 = sigma**2 + sigma_data**2
    c_skip = sigma_data**2 / s2
    c_out = sigma * sigma_data / s2.sqrt()
    c_in = 1.0 / s2.sqrt()
    c_noise = sigma.log() / 4.0
    return c_skip, c_out, c_in, c_noise


def loss_weight(sigma: torch.Tensor, sigma_data: float) -> torch.Tensor:
    """λ(σ) = (σ² + σ_d²) / (σ σ_d)², EDM eq. 8 / Table 1."""
    return (sigma**2 + sigma_data**2) / (sigma * sigma_data) ** 2


def karras_sigmas(n: int, sigma_min: float, sigma_max: float, rho: float) -> torch.Tensor:
    """σ_i = (σ_max^{1/ρ} + i/(n−1) (σ_min^{1/ρ} − σ_max^{1/ρ}))^ρ for i < n, then σ_n = 0 (EDM eq. 5)."""
    ramp = torch.linspace(0, 1, n, dtype=torch.float64)
    lo, hi = sigma_min ** (1 / rho), sigma_max ** (1 / rho)
    sig = (hi + ramp * (lo - hi)) ** rho
    return torch.cat([sig, sig.new_zeros(1)]).float()


class EDM(nn.Module):
    """Wraps a raw network ``F(x_in [..., D], c_noise [...]) -> [..., D]`` into the EDM denoiser D(x; σ)."""

    def __init__(self, net: nn.Module, cfg: EDMConfig) -> None:
        super().__init__()
        self.net = net
        self.cfg = cfg

    @property
    def sigma_data(self) -> float:
        return self.cfg.sigma_data

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """D(x; σ): ``x`` [..., D], ``sigma`` broadcastable to ``x.shape[:-1]``."""
        sigma = torch.as_tensor(sigma, dtype=x.dtype, device=x.device).expand(x.shape[:-1])
        c_skip, c_out, c_in, c_noise = precondition(sigma, self.cfg.sigma_data)
        f = self.net(x * c_in[..., None], c_noise)
        return c_skip[..., None] * x + c_out[..., None] * f

    forward = denoise

    def sample_sigma(self, shape: tuple[int, ...], generator: torch.Generator | None = None) -> torch.Tensor:
        """Training noise levels: ln σ ~ N(P_mean, P_std²) (EDM Table 1)."""
        z = torch.randn(shape, generator=generator)
        return (self.cfg.p_mean + self.cfg.p_std * z).exp()

    def loss(self, x0: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor,
             columns: torch.Tensor | None = None) -> torch.Tensor:
        """Per-sample weighted loss λ(σ)·mean_j (D(x0 + σ n; σ) − x0)_j², shape ``x0.shape[:-1]``.

        ``columns`` [D] (0/1): the mean runs over the columns marked 1 only (every column still enters the network);
        None = every column, EDM's loss."""
        denoised = self.denoise(x0 + sigma[..., None] * noise, sigma)
        err = (denoised - x0).pow(2)
        per_row = err.mean(-1) if columns is None else (err * columns).sum(-1) / columns.sum()
        return loss_weight(sigma, self.cfg.sigma_data) * per_row

    def random_loss(self, x0: torch.Tensor, generator: torch.Generator | None = None,
                    columns: torch.Tensor | None = None) -> torch.Tensor:
        """:meth:`loss` with σ and noise drawn here, one independent draw per row of ``x0`` [..., D]."""
        sigma = self.sample_sigma(tuple(x0.shape[:-1]), generator).to(x0)
        noise = torch.randn(x0.shape, generator=generator).to(x0)
        return self.loss(x0, sigma, noise, columns)


def heun_gamma(sigma: float, steps: int, s_churn: float, s_tmin: float, s_tmax: float) -> float:
    """Churn factor γ_i = min(S_churn/N, √2 − 1) inside [S_tmin, S_tmax], else 0 (EDM Algorithm 2)."""
    return min(s_churn / steps, math.sqrt(2) - 1) if s_tmin <= sigma <= s_tmax else 0.0
