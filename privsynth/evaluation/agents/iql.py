"""Implicit Q-Learning (Kostrikov et al. 2021) with CORL's hyperparameters (``algorithms/offline/iql.py``).

One update, as in CORL: with the pre-update networks compute ``next_v = V(s')`` and ``min Q_target(s, a)``; fit V by
expectile regression (tau 0.7) toward ``min Q_target``; fit both Q heads by MSE toward ``r + γ(1 − d)·next_v``; fit the
Gaussian actor by advantage-weighted regression, weight ``exp(β·(min Q_target − V))`` clipped at 100; Polyak-update
the target Q. The three losses only read each other's *pre-update* values (detached), so we sum them and take one
backward pass and one Adam step over three parameter groups, which gives exactly CORL's three separate updates at a
third of the optimiser and autograd overhead. The twin Q is one vectorised 2-member ensemble
(:class:`~privsynth.evaluation.agents.nets.EnsembleMLP`). The actor's learning rate follows CORL's cosine schedule over
``num_updates``; evaluation uses the Gaussian's mean times ``max_action``. The Gaussian is fitted to the data's action
divided by ``max_action`` (CORL fits the raw action, the same at max_action 1; see :meth:`GaussianActor.log_prob`).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import nn

from privsynth.evaluation.agents.common import Batch, make_adam, soft_update
from privsynth.evaluation.agents.nets import EnsembleMLP, mlp

__all__ = ["IQLConfig", "IQL"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class IQLConfig:
    """CORL defaults (``iql.py`` TrainConfig and ``configs/offline/iql/maze2d/umaze_dense_v1.yaml``)."""

    num_updates: int = 1_000_000  # CORL max_timesteps 1M (PrivORL 500k); lower it on a CPU
    batch_size: int = 256  # CORL 256
    discount: float = 0.99  # CORL 0.99
    tau: float = 0.005  # CORL 0.005, target-Q Polyak rate
    beta: float = 3.0  # CORL 3.0, AWR inverse temperature
    iql_tau: float = 0.7  # CORL 0.7, expectile of the value regression
    hidden: tuple[int, ...] = (256, 256)  # CORL 256x2 for V, both Q heads and the actor
    actor_lr: float = 3e-4  # CORL 3e-4, cosine-annealed to 0 over num_updates
    qf_lr: float = 3e-4  # CORL 3e-4
    vf_lr: float = 3e-4  # CORL 3e-4
    actor_cosine: bool = True  # CORL CosineAnnealingLR(actor_optimizer, max_timesteps)
    exp_adv_max: float = 100.0  # CORL EXP_ADV_MAX
    log_std_min: float = -20.0  # CORL LOG_STD_MIN (PrivORL: -5)
    log_std_max: float = 2.0  # CORL LOG_STD_MAX
    normalize_states: bool = True  # CORL normalize=True (statistics of the training data)
    eval_every: int = 5000  # CORL eval_freq 5000 (PrivORL 25000)
    eval_episodes: int = 100  # CORL maze2d configs n_episodes 100 (10 elsewhere)


class GaussianActor(nn.Module):
    """Tanh-squashed mean MLP with a state-independent log standard deviation (CORL ``GaussianPolicy``)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], max_action: float) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim, out_act=nn.Tanh())
        self.log_std = nn.Parameter(torch.zeros(act_dim))
        self.max_action = max_action

    def log_prob(self, obs: torch.Tensor, act: torch.Tensor, lo: float, hi: float) -> torch.Tensor:
        """Sum over action dims of log N(act / max_action; mean(obs), std).

        The mean is the pre-scaling tanh output (as CORL), so the action is divided by ``max_action`` before it is
        compared with it: the deterministic action ``max_action · mean`` then imitates the data's action. CORL compares
        the unscaled action, which is the same for its D4RL tasks (max_action 1) but, e.g. on Pendulum (max_action 2),
        fits ``mean ≈ a`` and acts ``2a``. The constant ``−A·log max_action`` of the density is left out (it has no
        gradient).
        """
        mean = self.net(obs)
        log_std = self.log_std.clamp(lo, hi)
        z = (act / self.max_action - mean) * torch.exp(-log_std)
        return (-0.5 * z.square() - log_std - _HALF_LOG_2PI).sum(-1)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action: the mean, scaled to the action range."""
        return (self.net(obs) * self.max_action).clamp(-self.max_action, self.max_action)


class IQL(nn.Module):
    """The IQL learner; ``update(batch)`` is one gradient step, ``act(obs)`` the deterministic policy."""

    name = "iql"

    def __init__(self, obs_dim: int, act_dim: int, *, max_action: float = 1.0, config: IQLConfig | None = None,
                 num_updates: int | None = None) -> None:
        super().__init__()
        self.config = cfg = config or IQLConfig()
        self.num_updates = int(num_updates or cfg.num_updates)
        self.v = mlp(obs_dim, cfg.hidden, 1)
        self.q = EnsembleMLP(obs_dim + act_dim, cfg.hidden, 1, ensemble_size=2)
        self.q_target = EnsembleMLP(obs_dim + act_dim, cfg.hidden, 1, ensemble_size=2).requires_grad_(False)
        self.q_target.load_state_dict(self.q.state_dict())
        self.actor = GaussianActor(obs_dim, act_dim, cfg.hidden, max_action)
        self.optimizer = make_adam(
            [
                {"params": list(self.v.parameters()), "lr": cfg.vf_lr},
                {"params": list(self.q.parameters()), "lr": cfg.qf_lr},
                {"params": list(self.actor.parameters()), "lr": cfg.actor_lr},
            ],
            lr=cfg.actor_lr,
        )
        self._actor_group = self.optimizer.param_groups[2]
        self._q_params = list(self.q.parameters())
        self._q_target_params = list(self.q_target.parameters())
        self.steps = 0

    def update(self, b: Batch) -> dict[str, torch.Tensor]:
        cfg = self.config
        sa = torch.cat([b.obs, b.act], dim=-1)
        with torch.no_grad():
            target_q = self.q_target(sa).amin(0).squeeze(-1)  # [B]
            next_v = self.v(b.next_obs).squeeze(-1)
            q_target_value = b.rew + (1.0 - b.done) * cfg.discount * next_v
        v = self.v(b.obs).squeeze(-1)
        adv = target_q - v
        weight = torch.abs(cfg.iql_tau - (adv < 0).float())
        v_loss = (weight * adv.square()).mean()
        qs = self.q(sa).squeeze(-1)  # [2, B]
        q_loss = (qs - q_target_value).square().mean()  # CORL: mean of the two heads' MSEs
        exp_adv = torch.exp(cfg.beta * adv.detach()).clamp(max=cfg.exp_adv_max)
        log_prob = self.actor.log_prob(b.obs, b.act, cfg.log_std_min, cfg.log_std_max)
        actor_loss = (exp_adv * -log_prob).mean()

        self.optimizer.zero_grad(set_to_none=True)
        (v_loss + q_loss + actor_loss).backward()
        self.optimizer.step()
        self.steps += 1
        if cfg.actor_cosine:  # CosineAnnealingLR(T_max=num_updates, eta_min=0), set directly (no scheduler object)
            self._actor_group["lr"] = cfg.actor_lr * 0.5 * (1.0 + math.cos(math.pi * min(self.steps, self.num_updates)
                                                                            / self.num_updates))
        soft_update(self._q_target_params, self._q_params, cfg.tau)
        return {"value_loss": v_loss.detach(), "q_loss": q_loss.detach(), "actor_loss": actor_loss.detach()}

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action for normalised observations."""
        return self.actor(obs)
