"""SAC behaviour policies for the locomotion datasets: the shared :mod:`privsynth.rl.sac` with the SB3 / CORL defaults.

Used only to train the behaviour policies that stand in for D4RL's locomotion data-collection agents (D4RL trained
SAC to "medium" and "expert" levels). Defaults: two 256x256 ReLU MLPs per network, Adam lr 3e-4, batch 256, gamma
0.99, tau 0.005, one gradient step per environment step, target entropy -|A|.

The actor is what gets shipped (:class:`Actor`, ~73k parameters for HalfCheetah); ``act(obs, deterministic)`` gives
the tanh-squashed mean or a sample, both inside [-1, 1] (the action box of the gymnasium MuJoCo envs used here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from privsynth.rl import sac as shared

__all__ = ["SACConfig", "Actor", "SAC", "ReplayBuffer"]

Actor = shared.SquashedGaussianActor  # tanh-Gaussian policy in [-1, 1]; ``Actor.from_payload`` reads the snapshots


@dataclass
class SACConfig:
    hidden: int = 256
    lr: float = 3e-4
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    learning_starts: int = 5000  # uniform random actions before the first update
    buffer_size: int = 1_000_000


class ReplayBuffer:
    def __init__(self, obs_dim: int, act_dim: int, size: int) -> None:
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.next_obs = np.zeros((size, obs_dim), np.float32)
        self.act = np.zeros((size, act_dim), np.float32)
        self.rew = np.zeros(size, np.float32)
        self.done = np.zeros(size, np.float32)
        self.n, self.size = 0, size

    def add(self, o: np.ndarray, a: np.ndarray, r: float, o2: np.ndarray, terminal: bool) -> None:
        i = self.n % self.size
        self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.done[i] = o, a, r, o2, float(terminal)
        self.n += 1

    def sample(self, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        idx = rng.integers(0, min(self.n, self.size), size=batch)
        return tuple(torch.from_numpy(x[idx]) for x in (self.obs, self.act, self.rew, self.next_obs, self.done))


class SAC(shared.SAC):
    """The shared SAC configured by :class:`SACConfig` (actions in [-1, 1], target entropy -|A|)."""

    def __init__(self, obs_dim: int, act_dim: int, cfg: SACConfig | None = None) -> None:
        self.cfg = cfg = cfg or SACConfig()
        super().__init__(obs_dim, act_dim, hidden=(cfg.hidden, cfg.hidden), lr=cfg.lr, gamma=cfg.gamma, tau=cfg.tau)
