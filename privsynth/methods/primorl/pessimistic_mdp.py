"""The pessimistic private MDP M̃ = (S, A, P̂, r̂ − λu, γ, ρ0) of PriMORL (section 4.3, Algorithm 4).

Built from the private ensemble only: a step picks one member uniformly per sample and draws (Δs, r̂) from its
Gaussian; the reward is penalised by λ·u(s, a) with u computed from all members (Theorem 4.5: a data-independent
function of the private model, so post-processing):

* ``mpd`` (MOReL): u = max over member pairs i, j of ‖μ_i − μ_j‖₂ (the true pairwise maximum, not the distance to the ensemble mean);
* ``ma`` (MOPO): u = max over members of ‖σ_i‖₂ (the norm of the predicted std, not the variance).

Rollouts never start from sensitive states (which would escape Theorem 4.5's post-processing): start states come from ρ0, sampled with the
environment's own ``reset()`` (the initial-state distribution is public: it is part of the environment, not of the
data), and from states the model itself produced in earlier rollouts (post-processing). Observations are clipped to
the environment's public observation bounds.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from privsynth.data.dataset import DatasetInfo
from privsynth.data.envs import make_env
from privsynth.errors import InvalidData
from privsynth.methods.primorl.dynamics import GaussianEnsemble

__all__ = ["PessimismConfig", "PessimisticMDP", "initial_state_sampler", "uncertainty"]


@dataclass
class PessimismConfig:
    penalty: str = "mpd"  # u_MPD for Pendulum and Balance, u_MA for Swingup / HalfCheetah (Table 8)
    lam: float = 2.0  # λ (Table 8: 2.0 CartPole / Pendulum, 1.0 HalfCheetah)


def uncertainty(means: torch.Tensor, stds: torch.Tensor, penalty: str) -> torch.Tensor:
    """u(s, a) for a batch, from member means/stds [N, B, D] in raw units; returns [B]."""
    if penalty == "mpd":
        diff = means[:, None] - means[None, :]  # [N, N, B, D]
        return diff.norm(dim=-1).amax(dim=(0, 1))
    if penalty == "ma":
        return stds.norm(dim=-1).amax(dim=0)
    raise InvalidData(f"unknown uncertainty penalty '{penalty}': choose mpd or ma")


def initial_state_sampler(info: DatasetInfo, *, pool: int = 4096, seed: int = 0) -> Callable[[int, np.random.Generator], np.ndarray]:
    """Draws from ρ0 by resetting the (public) environment ``pool`` times; returns ``sample(n, rng)``."""
    env = make_env(info)
    states = np.stack([np.asarray(env.reset(seed=seed + i)[0], dtype=np.float32) for i in range(pool)])
    env.close()

    def sample(n: int, rng: np.random.Generator) -> np.ndarray:
        return states[rng.integers(0, len(states), n)]

    return sample


class PessimisticMDP:
    """Batched model environment. Holds the private ensemble, the penalty, a ρ0 sampler and public bounds —
    nothing derived from the sensitive dataset except through the private model."""

    def __init__(self, model: GaussianEnsemble, start_sampler: Callable[[int, np.random.Generator], np.ndarray], *,
                 obs_low: np.ndarray, obs_high: np.ndarray, act_low: np.ndarray, act_high: np.ndarray,
                 pessimism: PessimismConfig = PessimismConfig(),
                 termination_fn: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor] | None = None) -> None:
        self.model = model.eval()
        self.start_sampler = start_sampler
        self.obs_low = torch.as_tensor(obs_low, dtype=torch.float32)
        self.obs_high = torch.as_tensor(obs_high, dtype=torch.float32)
        self.act_low = torch.as_tensor(act_low, dtype=torch.float32)
        self.act_high = torch.as_tensor(act_high, dtype=torch.float32)
        self.pessimism = pessimism
        self.termination_fn = termination_fn  # None: never terminates (Pendulum, DMC cartpole: SAC bootstraps through truncation)
        uncertainty(torch.zeros(2, 1, 1), torch.zeros(2, 1, 1), pessimism.penalty)  # validate the name early

    @classmethod
    def for_env(cls, model: GaussianEnsemble, info: DatasetInfo, pessimism: PessimismConfig = PessimismConfig(), *,
                seed: int = 0) -> "PessimisticMDP":
        env = make_env(info)
        ob, ac = env.observation_space, env.action_space
        env.close()
        return cls(model, initial_state_sampler(info, seed=seed), obs_low=ob.low, obs_high=ob.high,
                   act_low=ac.low, act_high=ac.high, pessimism=pessimism)

    @property
    def obs_dim(self) -> int:
        return self.model.obs_dim

    @property
    def act_dim(self) -> int:
        return self.model.act_dim

    def reset(self, n: int, rng: np.random.Generator) -> torch.Tensor:
        return torch.as_tensor(self.start_sampler(n, rng))

    @torch.no_grad()
    def step(self, obs: torch.Tensor, act: torch.Tensor, generator: torch.Generator) -> dict[str, torch.Tensor]:
        """One model step for a batch: next_obs, penalised reward, raw model reward, u, done."""
        act = torch.maximum(torch.minimum(act, self.act_high), self.act_low)
        means, stds = self.model.predict(obs, act)  # [N, B, D]
        n, b, _ = means.shape
        pick = torch.randint(0, n, (b,), generator=generator)
        mu, sd = means[pick, torch.arange(b)], stds[pick, torch.arange(b)]
        sample = mu + sd * torch.randn(mu.shape, generator=generator)
        nxt = torch.maximum(torch.minimum(obs + sample[:, :-1], self.obs_high), self.obs_low)
        reward = sample[:, -1]
        u = uncertainty(means, stds, self.pessimism.penalty)
        done = (self.termination_fn(obs, act, nxt) if self.termination_fn is not None
                else torch.zeros(b, dtype=torch.bool))
        return {"next_obs": nxt, "reward": reward - self.pessimism.lam * u, "model_reward": reward, "u": u,
                "done": done, "action": act}
