"""TD3+BC (Fujimoto & Gu 2021) with CORL's hyperparameters (``algorithms/offline/td3_bc.py``).

Every update fits both critics toward ``r + γ(1 − d)·min Q_target(s', clip(π_target(s') + clip(ε, ±0.5), ±1))`` with
``ε ~ N(0, 0.2²)`` (noise scaled by the action range). Every ``policy_freq`` = 2 updates the actor maximises
``λ·Q1(s, π(s)) − ‖π(s) − a‖²`` with ``λ = α / mean|Q1|`` (α = 2.5), using the critic *after* this step's update as in
the paper, and both target networks are Polyak-updated. The twin critic is one vectorised 2-member ensemble; during
the actor step its parameters are frozen so autograd computes no critic weight gradients it would throw away.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from torch import nn

from privsynth.evaluation.agents.common import Batch, make_adam, soft_update
from privsynth.evaluation.agents.nets import EnsembleMLP, mlp

__all__ = ["TD3BCConfig", "TD3BC"]


@dataclass
class TD3BCConfig:
    """CORL defaults (``td3_bc.py`` TrainConfig and ``configs/offline/td3_bc/maze2d/*.yaml``)."""

    num_updates: int = 1_000_000  # CORL max_timesteps 1M (PrivORL 500k); lower it on a CPU
    batch_size: int = 256  # CORL 256
    discount: float = 0.99  # CORL 0.99
    tau: float = 0.005  # CORL 0.005, Polyak rate of both target networks
    policy_noise: float = 0.2  # CORL 0.2 (times max_action), target-policy smoothing noise
    noise_clip: float = 0.5  # CORL 0.5 (times max_action)
    policy_freq: int = 2  # CORL 2, actor and target updates every policy_freq critic updates
    alpha: float = 2.5  # CORL 2.5, weight of the Q term relative to behaviour cloning
    hidden: tuple[int, ...] = (256, 256)  # CORL 256-256 ReLU for the actor and both critics
    actor_lr: float = 3e-4  # CORL 3e-4
    critic_lr: float = 3e-4  # CORL 3e-4
    normalize_states: bool = True  # CORL normalize=True (statistics of the training data)
    eval_every: int = 5000  # CORL eval_freq 5000
    eval_episodes: int = 100  # CORL maze2d configs n_episodes 100 (10 elsewhere)


class DeterministicActor(nn.Module):
    """``max_action · tanh(MLP(s))``."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], max_action: float) -> None:
        super().__init__()
        self.net = mlp(obs_dim, hidden, act_dim, out_act=nn.Tanh())
        self.max_action = max_action

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs) * self.max_action


class TD3BC(nn.Module):
    """The TD3+BC learner; ``update(batch)`` is one critic step (plus an actor step every ``policy_freq``)."""

    name = "td3bc"

    def __init__(self, obs_dim: int, act_dim: int, *, max_action: float = 1.0, config: TD3BCConfig | None = None,
                 num_updates: int | None = None) -> None:
        super().__init__()
        self.config = cfg = config or TD3BCConfig()
        self.num_updates = int(num_updates or cfg.num_updates)
        self.max_action = float(max_action)
        self.actor = DeterministicActor(obs_dim, act_dim, cfg.hidden, self.max_action)
        self.actor_target = copy.deepcopy(self.actor).requires_grad_(False)
        self.critic = EnsembleMLP(obs_dim + act_dim, cfg.hidden, 1, ensemble_size=2)
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.actor_opt = make_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.critic_lr)
        self._critic_params = list(self.critic.parameters())
        self._online = self._critic_params + list(self.actor.parameters())
        self._targets = list(self.critic_target.parameters()) + list(self.actor_target.parameters())
        self.steps = 0
        self._last_actor_loss = torch.zeros(())
        self.generator: torch.Generator | None = None  # source of the smoothing noise (None: torch's global RNG)

    def update(self, b: Batch) -> dict[str, torch.Tensor]:
        cfg = self.config
        with torch.no_grad():
            noise = (torch.randn(b.act.shape, generator=self.generator) * (cfg.policy_noise * self.max_action)).clamp(
                -cfg.noise_clip * self.max_action, cfg.noise_clip * self.max_action)
            next_act = (self.actor_target(b.next_obs) + noise).clamp(-self.max_action, self.max_action)
            target_q = self.critic_target(torch.cat([b.next_obs, next_act], dim=-1)).amin(0).squeeze(-1)
            target = b.rew + (1.0 - b.done) * cfg.discount * target_q
        qs = self.critic(torch.cat([b.obs, b.act], dim=-1)).squeeze(-1)  # [2, B]
        critic_loss = (qs - target).square().mean(1).sum()  # CORL: mse(Q1) + mse(Q2)
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        self.steps += 1

        if self.steps % cfg.policy_freq == 0:
            for p in self._critic_params:
                p.requires_grad_(False)
            pi = self.actor(b.obs)
            q = self.critic.member_forward(torch.cat([b.obs, pi], dim=-1), 0).squeeze(-1)
            lmbda = cfg.alpha / q.abs().mean().detach()
            actor_loss = -lmbda * q.mean() + (pi - b.act).square().mean()
            self.actor_opt.zero_grad(set_to_none=True)
            actor_loss.backward()
            self.actor_opt.step()
            for p in self._critic_params:
                p.requires_grad_(True)
            soft_update(self._targets, self._online, cfg.tau)
            self._last_actor_loss = actor_loss.detach()
        return {"critic_loss": critic_loss.detach(), "actor_loss": self._last_actor_loss}

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action for normalised observations."""
        return self.actor(obs)
