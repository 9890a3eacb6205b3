"""The conditional diffusion transformer of PrivORL-j (PrivORL section VI-B, appendix F-A).

Input embeddings. A fragment of H transitions is split into its five components, state | action | reward | next state
| done, each embedded by its own 2-layer MLP; the linking transition it is conditioned on is embedded by five more
MLPs (plus a flag saying whether a link exists, i.e. whether this is not the trajectory's first fragment); the EDM noise
level gets a time token. With ``tokens="component"`` (the paper) that is 1 + 5 + 5H tokens; with ``tokens="step"``
(our CPU default, measured in ``scripts/bench_traj.py``) the five component embeddings of one step are summed into one
token, 2 + H tokens, which cuts attention and clipping cost ~25x at the same width.

Sequence processing. Learned absolute position embeddings are added, then a stack of pre-LN GPT-style blocks
(:mod:`privsynth.synth.trajectory.layers`, Linear/LayerNorm only so every DP clipping mode applies) and a final LayerNorm.

Output. One output head per component maps the component's tokens (or the step token) to that component's part of
the network output F, which the EDM preconditioning (:class:`~privsynth.synth.trajectory.diffusion.FragmentEDM`) turns
into the denoised fragment (the EDM counterpart of predicting the noise).

The "done" component has two columns: the MDP terminal flag and an end-of-trajectory flag (timeouts such as PointMaze
reaching its goal), so stitching can stop trajectories that end without a terminal state.
"""
from __future__ import annotations

import torch
from torch import nn

from privsynth.synth.trajectory.config import TransformerConfig
from privsynth.synth.trajectory.layers import Block, FourierEmbedding, PositionEmbedding, mlp2, per_token

__all__ = ["DiffusionTransformer", "component_slices"]


def component_slices(obs_dim: int, act_dim: int) -> list[slice]:
    """Column slices of state, action, reward, next state, done (terminal, end) in a model row of width 2o+a+3."""
    o, a = obs_dim, act_dim
    bounds = [0, o, o + a, o + a + 1, 2 * o + a + 1, 2 * o + a + 3]
    return [slice(bounds[i], bounds[i + 1]) for i in range(5)]


class DiffusionTransformer(nn.Module):
    """F(x_in [B, H, D], c_noise [B], cond [B, D + 1]) -> [B, H, D], or with more leading batch dims."""

    def __init__(self, obs_dim: int, act_dim: int, horizon: int, cfg: TransformerConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.horizon = horizon
        self.slices = component_slices(obs_dim, act_dim)
        self.data_dim = self.slices[-1].stop
        w = cfg.width
        hid = cfg.embed_hidden or w
        sizes = [s.stop - s.start for s in self.slices]
        self.embed = nn.ModuleList([mlp2(k, hid, w) for k in sizes])
        self.embed_cond = nn.ModuleList([mlp2(k + 1, hid, w) for k in sizes])  # +1: the has-link flag
        self.time = FourierEmbedding(cfg.fourier_dim, w, cfg.fourier_scale)
        per_step = 5 if cfg.tokens == "component" else 1
        self.n_cond_tokens = 5 if cfg.tokens == "component" else 1
        self.n_tokens = 1 + self.n_cond_tokens + per_step * horizon
        self.pos = PositionEmbedding(self.n_tokens, w)
        self.blocks = nn.ModuleList([Block(w, cfg.heads, cfg.ff_mult) for _ in range(cfg.depth)])
        self.ln_f = nn.LayerNorm(w)
        self.heads = nn.ModuleList([mlp2(w, hid, k) for k in sizes])

    def forward(self, x: torch.Tensor, c_noise: torch.Tensor, cond: torch.Tensor) -> torch.Tensor:
        """Any leading batch dims: x [..., H, D], c_noise [...] (or [..., H]), cond [..., D + 1]."""
        lead, h, d = x.shape[:-2], x.shape[-2], x.shape[-1]
        if h != self.horizon or d != self.data_dim:
            raise ValueError(f"expected fragments [..., {self.horizon}, {self.data_dim}], got {tuple(x.shape)}")
        if c_noise.ndim == x.ndim - 1:  # one σ per step was handed over; a fragment has one noise level
            c_noise = c_noise[..., 0]
        flag = cond[..., -1:]
        t_tok = self.time(c_noise)[..., None, :]  # [..., 1, W]
        comps = [per_token(emb, x[..., s]) for emb, s in zip(self.embed, self.slices)]  # 5 x [..., H, W]
        conds = [per_token(emb, torch.cat([cond[..., s], flag], -1)) for emb, s in zip(self.embed_cond, self.slices)]
        if self.cfg.tokens == "component":
            steps = torch.stack(comps, dim=-2).reshape(*lead, 5 * h, -1)  # step-major: s_1 a_1 r_1 s'_1 d_1 s_2 ...
            c_tok = torch.stack(conds, dim=-2)
        else:
            steps = torch.stack(comps, 0).sum(0)
            c_tok = torch.stack(conds, 0).sum(0)[..., None, :]
        z = torch.cat([t_tok, c_tok, steps], dim=-2)
        z = z + self.pos(tuple(lead), z.shape[-2])
        for blk in self.blocks:
            z = blk(z)
        z = per_token(self.ln_f, z)[..., 1 + self.n_cond_tokens :, :]
        if self.cfg.tokens == "component":
            z = z.reshape(*lead, h, 5, -1)
            outs = [per_token(head, z[..., i, :]) for i, head in enumerate(self.heads)]
        else:
            outs = [per_token(head, z) for head in self.heads]
        return torch.cat(outs, dim=-1)
