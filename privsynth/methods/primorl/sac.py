"""Soft actor-critic trained only on rollouts of the pessimistic private model (PriMORL Algorithm 4).

:func:`train_sac_in_model` accepts a :class:`~privsynth.methods.primorl.pessimistic_mdp.PessimisticMDP` and nothing
else: it has no parameter through which a dataset could arrive (real-data ratio 0, no dataset start states,
pitfall P6), and it refuses any other object. The optional ``evaluate`` callback (true-environment return) is for
reporting only: its value never feeds back into training or checkpoint choice (pitfall P6e).

Own implementation (about 150 lines) rather than a library agent: the evaluation package's agents train on datasets,
and methods may not import evaluation; a model-rollout buffer with ρ0 / model-state branching is specific to here.
Defaults follow the paper (lr 3e-4, auto-α, target entropy −3, H = 30 for Pendulum) and the MOPO code it builds on
(γ 0.99, τ 0.005, batch 256); network width, epochs and rollout batch are scaled down for CPU (see docs/primorl.md).
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from tqdm.auto import tqdm

from privsynth.methods.primorl.pessimistic_mdp import PessimisticMDP

__all__ = ["SACConfig", "SACPolicy", "SACResult", "train_sac_in_model"]


@dataclass
class SACConfig:
    hidden: tuple[int, ...] = (128, 128)  # MOPO code: 256 x 256; halved for CPU
    lr: float = 3e-4  # Table 8
    gamma: float = 0.99
    tau: float = 0.005
    batch: int = 256
    target_entropy: float = -3.0  # Table 8 / MOPO default (pitfall P15: non-standard for 1-D actions, kept)
    epochs: int = 40  # MOPO code: 200 x 1000 updates; scaled down
    steps_per_epoch: int = 250
    horizon: int = 30  # H (Table 8: 30 for Pendulum)
    rollout_batch: int = 2000  # start states per epoch (MOPO: 50k)
    model_start_fraction: float = 0.5  # share of starts taken from earlier model states, rest from ρ0
    retain_epochs: int = 5  # FIFO buffer keeps this many epochs of rollouts
    seed: int = 0


def _mlp(i: int, o: int, hidden: tuple[int, ...]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for h in hidden:
        layers += [nn.Linear(i, h), nn.ReLU()]
        i = h
    return nn.Sequential(*layers, nn.Linear(i, o))


class SACPolicy(nn.Module):
    """Tanh-squashed Gaussian actor scaled to the action box."""

    def __init__(self, obs_dim: int, act_dim: int, act_low: torch.Tensor, act_high: torch.Tensor,
                 hidden: tuple[int, ...] = (128, 128)) -> None:
        super().__init__()
        self.net = _mlp(obs_dim, 2 * act_dim, hidden)
        self.register_buffer("act_mid", (act_high + act_low) / 2)
        self.register_buffer("act_half", (act_high - act_low) / 2)

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(obs).chunk(2, -1)
        std = log_std.clamp(-5, 2).exp()
        pre = mean + std * torch.randn(mean.shape, generator=generator)
        a = torch.tanh(pre)
        logp = (-0.5 * ((pre - mean) / std) ** 2 - std.log() - 0.5 * math.log(2 * math.pi)).sum(-1)
        logp = logp - (2 * (math.log(2) - pre - F.softplus(-2 * pre))).sum(-1)
        return self.act_mid + self.act_half * a, logp

    @torch.no_grad()
    def act(self, obs: np.ndarray | torch.Tensor, deterministic: bool = True) -> np.ndarray:
        o = torch.as_tensor(np.asarray(obs, dtype=np.float32))
        if deterministic:
            mean, _ = self.net(o).chunk(2, -1)
            return (self.act_mid + self.act_half * torch.tanh(mean)).numpy()
        return self.sample(o)[0].numpy()


class _Buffer:
    def __init__(self, capacity: int, obs_dim: int, act_dim: int) -> None:
        self.cap, self.n, self.i = capacity, 0, 0
        self.data = {k: torch.zeros(capacity, d) for k, d in
                     (("obs", obs_dim), ("act", act_dim), ("rew", 1), ("next", obs_dim), ("done", 1))}

    def add(self, **batch: torch.Tensor) -> None:
        b = len(batch["obs"])
        idx = (self.i + torch.arange(b)) % self.cap
        for k, v in batch.items():
            self.data[k][idx] = v.reshape(b, -1).float()
        self.i, self.n = (self.i + b) % self.cap, min(self.n + b, self.cap)

    def sample(self, b: int, g: torch.Generator) -> dict[str, torch.Tensor]:
        idx = torch.randint(0, self.n, (b,), generator=g)
        return {k: v[idx] for k, v in self.data.items()}


@dataclass
class SACResult:
    policy: SACPolicy
    history: list[dict[str, float]] = field(default_factory=list)

    def final_return(self, last: int = 5) -> float:
        vals = [h["eval_return"] for h in self.history if "eval_return" in h]
        return float(np.mean(vals[-last:])) if vals else float("nan")


def train_sac_in_model(mdp: PessimisticMDP, cfg: SACConfig = SACConfig(), *,
                       evaluate: Callable[[SACPolicy], float] | None = None, progress: bool = False) -> SACResult:
    """Algorithm 4: SAC on H-step rollouts of the pessimistic model; 100% model data."""
    if not isinstance(mdp, PessimisticMDP):
        raise TypeError(f"the PriMORL policy stage takes a PessimisticMDP, not {type(mdp).__name__}: "
                        "it must never see the dataset")
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    od, ad = mdp.obs_dim, mdp.act_dim
    actor = SACPolicy(od, ad, mdp.act_low, mdp.act_high, cfg.hidden)
    q1, q2 = _mlp(od + ad, 1, cfg.hidden), _mlp(od + ad, 1, cfg.hidden)
    q1_t, q2_t = copy.deepcopy(q1), copy.deepcopy(q2)
    log_alpha = torch.zeros(1, requires_grad=True)
    opt_a = torch.optim.Adam(actor.parameters(), lr=cfg.lr)
    opt_q = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=cfg.lr)
    opt_al = torch.optim.Adam([log_alpha], lr=cfg.lr)
    buf = _Buffer(cfg.retain_epochs * cfg.rollout_batch * cfg.horizon, od, ad)
    history: list[dict[str, float]] = []
    for epoch in tqdm(range(cfg.epochs), disable=not progress, desc="SAC in the private model"):
        # rollouts: starts from ρ0 and from earlier model states, never from the data
        n_model = int(cfg.model_start_fraction * cfg.rollout_batch) if buf.n else 0
        starts = [mdp.reset(cfg.rollout_batch - n_model, rng)]
        if n_model:
            starts.append(buf.data["next"][torch.randint(0, buf.n, (n_model,), generator=g)])
        obs = torch.cat(starts)
        pen, raw = [], []
        for _ in range(cfg.horizon):
            with torch.no_grad():
                act, _ = actor.sample(obs, g)
            out = mdp.step(obs, act, g)
            buf.add(obs=obs, act=out["action"], rew=out["reward"], next=out["next_obs"], done=out["done"])
            pen.append(float(out["reward"].mean())), raw.append(float(out["u"].mean()))
            keep = ~out["done"]
            obs = out["next_obs"][keep]
            if not len(obs):
                break
        # updates
        for _ in range(cfg.steps_per_epoch):
            b = buf.sample(cfg.batch, g)
            alpha = log_alpha.exp().detach()
            with torch.no_grad():
                a2, logp2 = actor.sample(b["next"], g)
                x2 = torch.cat([b["next"], a2], -1)
                target = b["rew"] + cfg.gamma * (1 - b["done"]) * (torch.min(q1_t(x2), q2_t(x2)) - alpha * logp2[:, None])
            x = torch.cat([b["obs"], b["act"]], -1)
            loss_q = F.mse_loss(q1(x), target) + F.mse_loss(q2(x), target)
            opt_q.zero_grad(), loss_q.backward(), opt_q.step()
            a, logp = actor.sample(b["obs"], g)
            xa = torch.cat([b["obs"], a], -1)
            loss_a = (alpha * logp - torch.min(q1(xa), q2(xa)).squeeze(-1)).mean()
            opt_a.zero_grad(), loss_a.backward(), opt_a.step()
            loss_al = -(log_alpha * (logp.detach() + cfg.target_entropy)).mean()
            opt_al.zero_grad(), loss_al.backward(), opt_al.step()
            with torch.no_grad():
                for net, tgt in ((q1, q1_t), (q2, q2_t)):
                    for p, pt in zip(net.parameters(), tgt.parameters()):
                        pt.mul_(1 - cfg.tau).add_(cfg.tau * p)
        rec = {"epoch": epoch + 1, "model_reward_penalised": float(np.mean(pen)), "mean_u": float(np.mean(raw)),
               "alpha": float(log_alpha.exp().item()), "q_loss": float(loss_q.item())}
        if evaluate is not None:
            rec["eval_return"] = float(evaluate(actor))  # reporting only
        history.append(rec)
    return SACResult(actor, history)
