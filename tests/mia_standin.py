"""A tiny EDM stand-in for the MIA tests: the three methods the synthesizer exposes to audits, nothing else.

Karras et al. 2022 preconditioning around a small MLP, trained full-batch on a handful of rows so that it memorises
them. Test-only on purpose: the library audits ``privsynth.synth`` models through the same surface.
"""
from __future__ import annotations


import numpy as np
import torch
from torch import nn

from privsynth.data.normalize import Normalizer


class TinyEDM(nn.Module):
    def __init__(self, dim: int, width: int = 128, sigma_data: float = 1.0, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.net = nn.Sequential(nn.Linear(dim + 1, width), nn.SiLU(), nn.Linear(width, width), nn.SiLU(), nn.Linear(width, dim))
        self.sigma_data = sigma_data
        self.normalizer = Normalizer(dim)  # identity: test rows are already standardised

        class _Cfg:
            pass

        self.config = _Cfg()
        self.config.sigma_data = sigma_data

    def _denoise(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        sd, s = self.sigma_data, sigma[:, None]
        c_skip = sd**2 / (s**2 + sd**2)
        c_out = s * sd / (s**2 + sd**2).sqrt()
        c_in = 1 / (s**2 + sd**2).sqrt()
        f = self.net(torch.cat([c_in * x, s.log() / 4], dim=1))
        return c_skip * x + c_out * f

    def _loss(self, x, sigma, noise):
        sd = self.sigma_data
        weight = (sigma**2 + sd**2) / (sigma * sd) ** 2
        return weight * ((self._denoise(x + sigma[:, None] * noise, sigma) - x) ** 2).mean(dim=1)

    @torch.no_grad()
    def denoise(self, x_norm, sigma):
        return self._denoise(x_norm, sigma)

    @torch.no_grad()
    def edm_loss(self, x_norm, sigma, noise):
        return self._loss(x_norm, sigma, noise)

    def fit(self, rows: np.ndarray, steps: int = 400, lr: float = 3e-3, seed: int = 0) -> "TinyEDM":
        x = torch.as_tensor(rows, dtype=torch.float32)
        opt = torch.optim.Adam(self.net.parameters(), lr=lr)
        gen = torch.Generator().manual_seed(seed)
        for _ in range(steps):
            sigma = torch.exp(-1.2 + 1.2 * torch.randn(x.shape[0], generator=gen))  # ln σ ~ N(P_mean, P_std)
            noise = torch.randn(x.shape, generator=gen)
            loss = self._loss(x, sigma, noise).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        return self


def gaussian_rows(n: int, dim: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)
