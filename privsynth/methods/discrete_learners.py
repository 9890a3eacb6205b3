"""Discrete-action offline RL learners with per-example losses: discrete CQL and discrete BCQ (seed paper Sec. 6).

Written as **functional per-example losses** so :mod:`privsynth.methods.expert_dpsgd` can take per-expert gradients
with ``torch.func.vmap(grad(...))`` and clip each one jointly over all parameters (paper Algorithm 3). TD targets need the
target network (and, for BCQ, the online net's argmax at s'); both carry no gradient, so they are computed batched
outside the vmapped function (:meth:`targets`) and passed in. Actions enter as a one-hot mask built outside too
(indexing under vmap fails on torch 2.13).

* **CQL** (Kumar et al. 2020, "DQN version"): ½·Huber(Q(s,a) − y) + α·(logsumexp_a' Q(s,a') − Q(s,a)),
  y = r + γ(1−d)·max_a' Q̄(s',a'). α = 1 (d3rlpy default).
* **BCQ** (Fujimoto et al. 2019, discrete): one module with a Q head and an imitation head G (separate towers);
  y = r + γ(1−d)·Q̄(s', argmax_{a: G(a|s')/max G ≥ τ} Q(s',a)); loss = Huber(Q(s,a) − y) + NLL(G(·|s), a)
  + 1e-2·mean(logits_G²); τ = 0.3 (reference default). The imitation head learns private actions, so its gradient is
  clipped with the Q head's.

Both use Polyak target updates (τ = 0.005) and Adam; MLPs 2×64 by default (paper: 2×256; a CPU deviation).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from privsynth.errors import InvalidData
from privsynth.nn import mlp

__all__ = ["LearnerConfig", "DiscreteLearner", "DiscreteCQL", "DiscreteBCQ", "make_learner"]


@dataclass
class LearnerConfig:
    algo: str = "cql"  # "cql" | "bcq"
    hidden: int = 64  # paper: 256 (2 layers); CPU deviation
    gamma: float = 0.99
    lr: float = 1e-3  # paper Table 3 (Acrobot CQL ε=5/7.5): 1e-3
    cql_alpha: float = 1.0
    bcq_threshold: float = 0.3
    polyak: float = 0.005


class DiscreteLearner(nn.Module):
    """Shared parts: online net, target net, per-example loss, greedy action."""

    def __init__(self, obs_dim: int, n_actions: int, cfg: LearnerConfig) -> None:
        super().__init__()
        self.cfg, self.n_actions = cfg, n_actions
        self.q = mlp(obs_dim, (cfg.hidden, cfg.hidden), n_actions)

    def build_target(self) -> None:
        self.target = copy.deepcopy(self)
        for p in self.target.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def update_target(self) -> None:
        for p, t in zip(self.trainable().values(), self.target.parameters()):
            t.mul_(1 - self.cfg.polyak).add_(p, alpha=self.cfg.polyak)

    def trainable(self) -> dict[str, torch.Tensor]:
        return {k: v for k, v in self.named_parameters() if not k.startswith("target.")}

    def forward(self, s: torch.Tensor, onehot: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """One example's loss (what ``functional_call`` + ``vmap(grad)`` differentiate)."""
        return self.example_loss(s, onehot, y)

    def example_loss(self, s: torch.Tensor, onehot: torch.Tensor, y: torch.Tensor) -> torch.Tensor:  # noqa: D102
        raise NotImplementedError

    @torch.no_grad()
    def targets(self, r: torch.Tensor, s2: torch.Tensor, d: torch.Tensor) -> torch.Tensor:  # noqa: D102
        raise NotImplementedError

    def loss(self, s, a, r, s2, d) -> torch.Tensor:
        """Per-example losses [B] (non-functional path for plain SGD steps)."""
        y = self.targets(r, s2, d)
        oh = F.one_hot(a, self.n_actions).to(s.dtype)
        return self._batched_loss(s, oh, y)

    def _batched_loss(self, s, oh, y) -> torch.Tensor:
        raise NotImplementedError

    @torch.no_grad()
    def act(self, obs) -> torch.Tensor:  # noqa: D102
        raise NotImplementedError


class DiscreteCQL(DiscreteLearner):
    def example_loss(self, s, onehot, y):
        return self._batched_loss(s[None], onehot[None], y[None])[0]

    def _batched_loss(self, s, oh, y):
        qs = self.q(s)
        qa = (qs * oh).sum(-1)
        td = F.smooth_l1_loss(qa, y, reduction="none")
        return 0.5 * td + self.cfg.cql_alpha * (torch.logsumexp(qs, -1) - qa)

    @torch.no_grad()
    def targets(self, r, s2, d):
        return r + self.cfg.gamma * (1 - d) * self.target.q(s2).max(-1).values

    @torch.no_grad()
    def act(self, obs):
        return self.q(obs).argmax(-1)


class DiscreteBCQ(DiscreteLearner):
    def __init__(self, obs_dim: int, n_actions: int, cfg: LearnerConfig) -> None:
        super().__init__(obs_dim, n_actions, cfg)
        self.g = mlp(obs_dim, (cfg.hidden, cfg.hidden), n_actions)

    def example_loss(self, s, onehot, y):
        return self._batched_loss(s[None], onehot[None], y[None])[0]

    def _batched_loss(self, s, oh, y):
        qa = (self.q(s) * oh).sum(-1)
        logits = self.g(s)
        nll = -(F.log_softmax(logits, -1) * oh).sum(-1)
        return F.smooth_l1_loss(qa, y, reduction="none") + nll + 1e-2 * logits.pow(2).mean(-1)

    @torch.no_grad()
    def _masked_argmax(self, s):
        prob = F.softmax(self.g(s), -1)
        ok = prob / prob.max(-1, keepdim=True).values >= self.cfg.bcq_threshold
        return self.q(s).masked_fill(~ok, -1e8).argmax(-1)

    @torch.no_grad()
    def targets(self, r, s2, d):
        a2 = self._masked_argmax(s2)
        q2 = self.target.q(s2).gather(-1, a2[:, None])[:, 0]
        return r + self.cfg.gamma * (1 - d) * q2

    @torch.no_grad()
    def act(self, obs):
        return self._masked_argmax(obs)


def make_learner(obs_dim: int, n_actions: int, cfg: LearnerConfig) -> DiscreteLearner:
    cls = {"cql": DiscreteCQL, "bcq": DiscreteBCQ}.get(cfg.algo)
    if cls is None:
        raise InvalidData(f"unknown learner '{cfg.algo}': choose cql or bcq")
    net = cls(obs_dim, n_actions, cfg)
    net.build_target()
    return net
