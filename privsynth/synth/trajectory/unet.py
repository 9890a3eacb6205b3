"""Temporal U-Net denoiser: the PrivORL-j-U ablation (PrivORL section VIII-B; Janner et al. 2022, Diffuser).

Same inputs, outputs and fragment synthesis as the diffusion transformer, but the network is a 1-D U-Net of temporal
convolutions over the horizon: residual blocks (LayerNorm, Mish, conv, time + link embedding added, conv) at each
level, stride-2 downsampling, nearest upsampling with skip connections.

Why the convolution is our own: a temporal conv of kernel k equals a Linear layer applied to the unfolded windows of
k steps, so :class:`TemporalConv` writes it that way. The whole network is then Linear + LayerNorm, which the privacy
core's book-keeping clipper handles in one backward pass; every layer sees a 3-D view (``per_token``), so Opacus
ghost clipping works too.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from privsynth.synth.trajectory.config import UNetConfig
from privsynth.synth.trajectory.layers import FourierEmbedding, mlp2, per_token

__all__ = ["TemporalUNet", "TemporalConv"]


class TemporalConv(nn.Module):
    """Conv1d over time on channels-last input [..., T, C_in] -> [..., T / stride, C_out], 'same' zero padding."""

    def __init__(self, c_in: int, c_out: int, kernel: int, stride: int = 1) -> None:
        super().__init__()
        self.kernel, self.stride = kernel, stride
        self.proj = nn.Linear(c_in * kernel, c_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.kernel // 2
        x = F.pad(x, (0, 0, p, p))  # pad the time axis
        win = x.unfold(-2, self.kernel, self.stride)  # [..., T', C, k]
        return per_token(self.proj, win.reshape(*win.shape[:-2], -1))


class ResBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int, emb: int, kernel: int) -> None:
        super().__init__()
        self.ln1 = nn.LayerNorm(c_in)
        self.conv1 = TemporalConv(c_in, c_out, kernel)
        self.emb = nn.Linear(emb, c_out)
        self.ln2 = nn.LayerNorm(c_out)
        self.conv2 = TemporalConv(c_out, c_out, kernel)
        self.skip = nn.Linear(c_in, c_out) if c_in != c_out else None

    def forward(self, x: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        h = self.conv1(F.mish(per_token(self.ln1, x))) + per_token(self.emb, e)[..., None, :]
        h = self.conv2(F.mish(per_token(self.ln2, h)))
        return h + (per_token(self.skip, x) if self.skip is not None else x)


class TemporalUNet(nn.Module):
    """F(x_in [B, H, D], c_noise [B] or [B, H], cond [B, D + 1]) -> [B, H, D]; H divisible by 2^(levels-1)."""

    def __init__(self, data_dim: int, horizon: int, cfg: UNetConfig) -> None:
        super().__init__()
        levels = len(cfg.mults)
        if horizon % (2 ** (levels - 1)):
            raise ValueError(f"horizon {horizon} must be divisible by {2 ** (levels - 1)} for a {levels}-level U-Net")
        self.data_dim, self.horizon = data_dim, horizon
        chans = [cfg.base * m for m in cfg.mults]
        e = cfg.base * 2
        self.time = FourierEmbedding(cfg.fourier_dim, e, cfg.fourier_scale)
        self.cond = mlp2(data_dim + 1, e, e)
        self.inp = TemporalConv(data_dim, chans[0], cfg.kernel)
        self.down = nn.ModuleList()
        c_prev = chans[0]
        for i, c in enumerate(chans):
            self.down.append(nn.ModuleList([
                ResBlock(c_prev, c, e, cfg.kernel),
                ResBlock(c, c, e, cfg.kernel),
                TemporalConv(c, c, 3, stride=2) if i < levels - 1 else nn.Identity(),
            ]))
            c_prev = c
        self.mid = ResBlock(c_prev, c_prev, e, cfg.kernel)
        self.up = nn.ModuleList()
        for i in reversed(range(levels)):
            c = chans[i]
            c_out = chans[i - 1] if i > 0 else chans[0]
            self.up.append(nn.ModuleList([
                ResBlock(c_prev + c, c_out, e, cfg.kernel),
                ResBlock(c_out, c_out, e, cfg.kernel),
            ]))
            c_prev = c_out
        self.ln_out = nn.LayerNorm(c_prev)
        self.out = TemporalConv(c_prev, data_dim, cfg.kernel)

    def forward(self, x: torch.Tensor, c_noise: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        if c_noise.ndim == x.ndim - 1:
            c_noise = c_noise[..., 0]
        e = self.time(c_noise) + per_token(self.cond, cond)
        h = self.inp(x)
        skips = []
        for res1, res2, down in self.down:
            h = res2(res1(h, e), e)
            skips.append(h)
            h = down(h)
        h = self.mid(h, e)
        for res1, res2 in self.up:
            skip = skips.pop()
            if h.shape[-2] != skip.shape[-2]:
                h = h.repeat_interleave(skip.shape[-2] // h.shape[-2], dim=-2)
            h = res2(res1(torch.cat([h, skip], -1), e), e)
        return self.out(F.mish(per_token(self.ln_out, h)))
