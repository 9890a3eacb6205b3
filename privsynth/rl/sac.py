"""One Soft Actor-Critic (Haarnoja et al. 2018, "Soft Actor-Critic Algorithms and Applications": twin Q, learned
temperature α), in plain torch.

Two users: the locomotion behaviour policies (:mod:`privsynth.data.locomotion.sac`, trained on environment steps) and
PriMORL's policy stage (:mod:`privsynth.methods.primorl.sac`, trained only on rollouts of the private model). Each
owns its replay buffer and loop; both call :meth:`SAC.update`. Written here rather than taken from a library because
the project has no RL training dependency and SAC needs about 150 lines.

:class:`SquashedGaussianActor` is the shipped part (``pretrained/locomotion/*/snapshots``): its ``net`` is
:func:`privsynth.nn.mlp` (keys ``net.0``, ``net.2``, ``net.4``); the action box (``act_mid``, ``act_half``) is a pair of
buffers, so a PriMORL ``policy.pt`` restores it, while :meth:`~SquashedGaussianActor.to_payload` stores only ``net``.
"""
from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from privsynth.nn import mlp

__all__ = ["SquashedGaussianActor", "SAC", "LOG_STD_MIN", "LOG_STD_MAX"]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def _hidden(hidden: int | Sequence[int]) -> tuple[int, ...]:
    """A width list; an int is the old locomotion payload's "two layers of this width"."""
    return (int(hidden),) * 2 if isinstance(hidden, (int, np.integer)) else tuple(int(h) for h in hidden)


class SquashedGaussianActor(nn.Module):
    """Tanh-squashed Gaussian policy scaled to the action box ``[act_low, act_high]`` (default ``[-1, 1]``)."""

    def __init__(self, obs_dim: int, act_dim: int, act_low: Any = None, act_high: Any = None,
                 hidden: int | Sequence[int] = (256, 256)) -> None:
        super().__init__()
        self.obs_dim, self.act_dim, self.hidden = int(obs_dim), int(act_dim), _hidden(hidden)
        self.net = mlp(self.obs_dim, self.hidden, 2 * self.act_dim)
        low = torch.as_tensor(-1.0 if act_low is None else act_low, dtype=torch.float32).expand(self.act_dim)
        high = torch.as_tensor(1.0 if act_high is None else act_high, dtype=torch.float32).expand(self.act_dim)
        self.register_buffer("act_mid", ((high + low) / 2).clone())
        self.register_buffer("act_half", ((high - low) / 2).clone())

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and clamped log standard deviation of the Gaussian before the tanh."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action in the box and its log-probability (tanh change of variables, SAC appendix C)."""
        mean, log_std = self(obs)
        u = mean + log_std.exp() * torch.randn(mean.shape, generator=generator)
        logp = (-0.5 * ((u - mean) / log_std.exp()) ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return self.act_mid + self.act_half * torch.tanh(u), logp

    @torch.no_grad()
    def act(self, obs: Any, deterministic: bool = True, rng: np.random.Generator | None = None) -> np.ndarray:
        """Action(s) for one observation ``[D]`` or a batch ``[B, D]``: the squashed mean, or a sample whose noise
        comes from ``rng`` (numpy, reproducible)."""
        o = torch.as_tensor(np.asarray(obs, dtype=np.float32))
        single = o.dim() == 1
        mean, log_std = self(o[None] if single else o)
        mean, log_std = mean.numpy(), log_std.numpy()
        if single:
            mean, log_std = mean[0], log_std[0]
        if not deterministic:
            rng = rng if rng is not None else np.random.default_rng()
            mean = mean + np.exp(log_std) * rng.standard_normal(mean.shape)
        return (self.act_mid.numpy() + self.act_half.numpy() * np.tanh(mean)).astype(np.float32)

    def to_payload(self, half: bool = True) -> dict:
        """A small dict of tensors and numbers (``net`` weights in float16 by default) for ``pretrained/``."""
        sd = {f"net.{k}": (v.half() if half else v.clone()) for k, v in self.net.state_dict().items()}
        return {"obs_dim": self.obs_dim, "act_dim": self.act_dim, "hidden": list(self.hidden), "state_dict": sd,
                "act_low": (self.act_mid - self.act_half).tolist(), "act_high": (self.act_mid + self.act_half).tolist()}

    @classmethod
    def from_payload(cls, payload: dict) -> "SquashedGaussianActor":
        """Inverse of :meth:`to_payload`; also reads the shipped snapshots (``hidden`` an int, no action box)."""
        actor = cls(payload["obs_dim"], payload["act_dim"], payload.get("act_low"), payload.get("act_high"),
                    payload["hidden"])
        actor.net.load_state_dict({k.removeprefix("net."): v.float() for k, v in payload["state_dict"].items()})
        actor.eval()
        return actor


class SAC:
    """Actor, twin critics with Polyak targets, learned temperature, and one gradient step (:meth:`update`)."""

    def __init__(self, obs_dim: int, act_dim: int, *, hidden: Sequence[int] = (256, 256), lr: float = 3e-4,
                 gamma: float = 0.99, tau: float = 0.005, target_entropy: float | None = None,
                 act_low: Any = None, act_high: Any = None) -> None:
        self.gamma, self.tau = gamma, tau
        self.actor = SquashedGaussianActor(obs_dim, act_dim, act_low, act_high, hidden)
        self.q1, self.q2 = mlp(obs_dim + act_dim, hidden, 1), mlp(obs_dim + act_dim, hidden, 1)
        self.q1_t, self.q2_t = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        for p in [*self.q1_t.parameters(), *self.q2_t.parameters()]:
            p.requires_grad_(False)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.target_entropy = -float(act_dim) if target_entropy is None else float(target_entropy)  # SAC: -|A|
        self.opt_actor = torch.optim.Adam(self.actor.parameters(), lr=lr)
        self.opt_q = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=lr)
        self.opt_alpha = torch.optim.Adam([self.log_alpha], lr=lr)

    def update(self, batch: Sequence[torch.Tensor], generator: torch.Generator | None = None) -> dict[str, float]:
        """One step on ``(obs, act, rew [B], next_obs, done [B])``: critics, then actor, then α, then targets."""
        o, a, r, o2, d = batch
        r, d = r.reshape(-1), d.reshape(-1)
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = self.actor.sample(o2, generator)
            oa2 = torch.cat([o2, a2], -1)
            q_t = torch.min(self.q1_t(oa2), self.q2_t(oa2)).squeeze(-1) - alpha * logp2
            y = r + self.gamma * (1 - d) * q_t
        oa = torch.cat([o, a], -1)
        q_loss = F.mse_loss(self.q1(oa).squeeze(-1), y) + F.mse_loss(self.q2(oa).squeeze(-1), y)
        self.opt_q.zero_grad()
        q_loss.backward()
        self.opt_q.step()

        pi, logp = self.actor.sample(o, generator)
        opi = torch.cat([o, pi], -1)
        actor_loss = (alpha * logp - torch.min(self.q1(opi), self.q2(opi)).squeeze(-1)).mean()
        self.opt_actor.zero_grad()
        actor_loss.backward()
        self.opt_actor.step()

        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.opt_alpha.zero_grad()
        alpha_loss.backward()
        self.opt_alpha.step()

        with torch.no_grad():
            for net, tgt in ((self.q1, self.q1_t), (self.q2, self.q2_t)):
                for p, pt in zip(net.parameters(), tgt.parameters()):
                    pt.mul_(1 - self.tau).add_(p, alpha=self.tau)
        return {"q_loss": q_loss.item(), "actor_loss": actor_loss.item(), "alpha": alpha.item()}
