"""EDM diffusion over trajectory fragments, conditioned on the linking transition (PrivORL section VI-B, eq. 6).

Reuses the transition synthesizer's EDM formulas (:func:`privsynth.synth.edm.precondition`, ``loss_weight``) and
DPM-Solver++ scheduler (:func:`privsynth.synth.sampling.make_dpm_scheduler`); the wrapper is separate because the
network takes a condition and a fragment has one noise level σ for all its steps. EDM replaces the paper's 200-step
DDPM for consistency with PrivORL-n (issue PrivORL-j; the PrivORL-J DDPM sampler also had a variance/std bug).
"""
from __future__ import annotations

import torch
from torch import nn

from privsynth.synth.config import EDMConfig
from privsynth.synth.edm import loss_weight, precondition

__all__ = ["FragmentEDM"]


class FragmentEDM(nn.Module):
    """D(x; σ, c) = c_skip x + c_out F(c_in x, c_noise, c) on fragments x [B, H, D] with link condition c [B, D + 1]."""

    def __init__(self, net: nn.Module, cfg: EDMConfig) -> None:
        super().__init__()
        self.net = net
        self.cfg = cfg

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """x [..., H, D], σ broadcastable to [...], cond [..., D + 1]."""
        sigma = torch.as_tensor(sigma, dtype=x.dtype).expand(x.shape[:-2])
        c_skip, c_out, c_in, c_noise = precondition(sigma, self.cfg.sigma_data)
        f = self.net(x * c_in[..., None, None], c_noise, cond)
        return c_skip[..., None, None] * x + c_out[..., None, None] * f

    def loss(
        self, x0: torch.Tensor, cond: torch.Tensor, mask: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor
    ) -> torch.Tensor:
        """Per-fragment loss [...]: λ(σ) · mean over valid steps and columns of (D(x0 + σn; σ, c) − x0)²."""
        den = self.denoise(x0 + sigma[..., None, None] * noise, sigma, cond)
        err = (den - x0).pow(2).mean(-1)  # [B, H]
        m = mask.to(err.dtype)
        per = (err * m).sum(-1) / m.sum(-1).clamp_min(1.0)
        return loss_weight(sigma, self.cfg.sigma_data) * per

    def random_loss(self, x0: torch.Tensor, cond: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """:meth:`loss` with ln σ ~ N(P_mean, P_std²) and noise drawn here, one draw per fragment."""
        z = torch.randn(x0.shape[:-2])
        sigma = (self.cfg.p_mean + self.cfg.p_std * z).exp().to(x0)
        return self.loss(x0, cond, mask, sigma, torch.randn_like(x0))

    @torch.no_grad()
    def sample(self, cond: torch.Tensor, horizon: int, dim: int, steps: int = 20,
               generator: torch.Generator | None = None) -> torch.Tensor:
        """Fragments [n, H, D] for conditions [n, D + 1] with DPM-Solver++(2M) (``steps`` network evaluations)."""
        from privsynth.synth.sampling import make_dpm_scheduler

        n = cond.shape[0]
        sched = make_dpm_scheduler(self, steps)  # reads self.cfg (σ range, σ_data, ρ) like the transition model
        x = torch.randn(n, horizon, dim, generator=generator) * sched.sigmas[0]
        for t in sched.timesteps:
            f = self.net(sched.scale_model_input(x, t), t.expand(n), cond)
            x = sched.step(f, t, x).prev_sample
        return x
