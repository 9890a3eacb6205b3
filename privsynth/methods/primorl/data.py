"""Pendulum-v1 offline data for PriMORL, generated locally (a documented deviation: paper App. D used DDPG replay
data).

A vectorised NumPy copy of gymnasium's ``Pendulum-v1`` dynamics steps thousands of episodes at once (a Python loop
over gymnasium envs would take minutes); ``tests/test_primorl_data.py`` checks it against gymnasium step by step.
The behaviour policy is a scripted energy-pumping swing-up with a PD stabiliser near the top, mixed per episode with
Gaussian action noise and uniformly random episodes, which gives a random/medium/expert mixture like the paper's
replay-style datasets. Each episode (200 steps) is one trajectory = one privacy unit; the dataset is marked sensitive.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset

__all__ = ["PendulumDataConfig", "pendulum_step", "pendulum_obs", "energy_controller", "make_pendulum_dataset",
           "PENDULUM_INFO_KW"]

# Pendulum-v1 constants (gymnasium/envs/classic_control/pendulum.py)
G, M, L, DT, MAX_SPEED, MAX_TORQUE, HORIZON = 10.0, 1.0, 1.0, 0.05, 8.0, 2.0, 200
PENDULUM_INFO_KW = dict(env_id="Pendulum-v1", action_low=[-MAX_TORQUE], action_high=[MAX_TORQUE],
                        ref_min_score=-1200.0, ref_max_score=-150.0)


def _angle_normalize(x: np.ndarray) -> np.ndarray:
    return ((x + np.pi) % (2 * np.pi)) - np.pi


def pendulum_obs(th: np.ndarray, thdot: np.ndarray) -> np.ndarray:
    return np.stack([np.cos(th), np.sin(th), thdot], axis=-1).astype(np.float32)


def pendulum_step(th: np.ndarray, thdot: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Pendulum-v1 step for arrays of states; returns (new θ, new θ̇, reward)."""
    u = np.clip(u, -MAX_TORQUE, MAX_TORQUE)
    cost = _angle_normalize(th) ** 2 + 0.1 * thdot**2 + 0.001 * u**2
    newthdot = thdot + (3 * G / (2 * L) * np.sin(th) + 3.0 / (M * L**2) * u) * DT
    newthdot = np.clip(newthdot, -MAX_SPEED, MAX_SPEED)
    return th + newthdot * DT, newthdot, -cost


def energy_controller(th: np.ndarray, thdot: np.ndarray) -> np.ndarray:
    """Energy pumping (E = θ̇²/2 + 15 cos θ towards 15, the upright rest) plus a PD law within 0.5 rad of the top."""
    a = 3 * G / (2 * L)
    energy = 0.5 * thdot**2 + a * np.cos(th)
    pump = MAX_TORQUE * np.sign((a - energy) * thdot + 1e-6)
    ang = _angle_normalize(th)
    pd = -(12.0 * ang + 2.5 * thdot)
    return np.clip(np.where(np.abs(ang) < 0.5, pd, pump), -MAX_TORQUE, MAX_TORQUE)


@dataclass
class PendulumDataConfig:
    episodes: int = 3000  # K; the paper has ~30k (6 DDPG runs x 1M steps); scaled down for CPU
    random_fraction: float = 0.2  # episodes with uniformly random actions
    max_noise: float = 1.5  # other episodes: controller + N(0, s^2), s ~ U(0, max_noise) per episode
    seed: int = 0


def make_pendulum_dataset(cfg: PendulumDataConfig = PendulumDataConfig(), *, name: str = "pendulum-mixed") -> OfflineDataset:
    """K sensitive Pendulum-v1 episodes of 200 steps from the noisy scripted behaviour mixture."""
    rng = np.random.default_rng(cfg.seed)
    k = int(cfg.episodes)
    th = rng.uniform(-np.pi, np.pi, k)
    thdot = rng.uniform(-1.0, 1.0, k)
    rand = rng.random(k) < cfg.random_fraction
    noise = rng.uniform(0.0, cfg.max_noise, k)
    obs, act, rew, nxt = [], [], [], []
    for _ in range(HORIZON):
        o = pendulum_obs(th, thdot)
        u = energy_controller(th, thdot) + noise * rng.normal(size=k)
        u = np.where(rand, rng.uniform(-MAX_TORQUE, MAX_TORQUE, k), np.clip(u, -MAX_TORQUE, MAX_TORQUE))
        th, thdot, r = pendulum_step(th, thdot, u)
        obs.append(o), act.append(u), rew.append(r), nxt.append(pendulum_obs(th, thdot))
    # [H, K, ...] -> episode-major flat arrays
    def flat(x: list[np.ndarray]) -> np.ndarray:
        a = np.stack(x, axis=1)
        return a.reshape(k * HORIZON, *a.shape[2:])

    timeouts = np.zeros((k, HORIZON), dtype=bool)
    timeouts[:, -1] = True
    info = DatasetInfo(name=name, sensitive=True, extra=dict(
        behaviour="energy swing-up + PD, per-episode Gaussian action noise, random episodes",
        random_fraction=cfg.random_fraction, max_noise=cfg.max_noise, seed=cfg.seed), **PENDULUM_INFO_KW)
    return OfflineDataset(
        observations=flat(obs), actions=flat(act)[:, None], rewards=flat(rew), next_observations=flat(nxt),
        terminals=np.zeros(k * HORIZON, dtype=bool), timeouts=timeouts.reshape(-1),
        episode_ids=np.repeat(np.arange(k), HORIZON), info=info)
