"""Finite-horizon tabular MDPs, exact evaluation, and trajectory data (DP-APVI paper section 2.1).

The MDP is episodic and non-stationary: ``P[h, s, a, s']``, expected reward ``R[h, s, a]`` in [0, 1], initial
distribution ``d1[s]``; every episode has exactly H steps (the "one visit per step" argument behind the count
sensitivities needs this). Steps are 0-indexed here (h = 0..H-1), so the paper's clip range H−h+1 is ``H - h``.

Data sources:
* :func:`random_tabular_mdp`: a random MDP (Dirichlet transitions, uniform rewards), our tabular test bed (the paper has no tabular experiment).
* :func:`gridworld_mdp`: a small slippery gridworld (a discretised maze): reach the goal cell, reward 1 per step there.

:class:`Trajectories` holds ``states[K, H+1]``, ``actions[K, H]``, ``rewards[K, H]``; one row is one trajectory, the
privacy unit. :meth:`Trajectories.to_offline_dataset` converts to the package's dataset model with integer
observations and actions (documented in ``docs/dp_vapvi.md``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData

__all__ = ["TabularMDP", "Trajectories", "random_tabular_mdp", "gridworld_mdp", "greedy", "uniform_policy"]


def greedy(Q: np.ndarray, rng: np.random.Generator | None = None, tol: float = 1e-9) -> np.ndarray:
    """Deterministic greedy policy ``argmax_a Q[..., a]``; ties are broken uniformly at random with ``rng``
    (a seeded stream separate from data and privacy noise), or by the lowest index if ``rng`` is None."""
    if rng is None:
        return np.argmax(Q, axis=-1)
    is_max = Q >= Q.max(axis=-1, keepdims=True) - tol
    return np.argmax(rng.random(Q.shape) * is_max, axis=-1)


def uniform_policy(H: int, S: int, A: int) -> np.ndarray:
    """Behaviour policy μ[h, s, a] that picks every action with probability 1/A."""
    return np.full((H, S, A), 1.0 / A)


@dataclass
class Trajectories:
    """K trajectories of a finite-horizon MDP with integer states and actions (one row = one privacy unit)."""

    states: np.ndarray  # [K, H+1] int
    actions: np.ndarray  # [K, H] int
    rewards: np.ndarray  # [K, H] float

    def __post_init__(self) -> None:
        self.states = np.asarray(self.states, dtype=np.int64)
        self.actions = np.asarray(self.actions, dtype=np.int64)
        self.rewards = np.asarray(self.rewards, dtype=np.float64)
        K, H = self.actions.shape
        if self.states.shape != (K, H + 1) or self.rewards.shape != (K, H):
            raise InvalidData(
                f"trajectory arrays disagree: states {self.states.shape}, actions {self.actions.shape}, rewards {self.rewards.shape}"
            )

    @property
    def n_episodes(self) -> int:
        return int(self.actions.shape[0])

    @property
    def horizon(self) -> int:
        return int(self.actions.shape[1])

    def select(self, index: np.ndarray) -> "Trajectories":
        return Trajectories(self.states[index], self.actions[index], self.rewards[index])

    def to_offline_dataset(self, *, name: str = "tabular", sensitive: bool = False, extra: dict[str, Any] | None = None,
                           privacy_card: dict[str, Any] | None = None) -> OfflineDataset:
        """Flatten to :class:`OfflineDataset`: observation = [state index, step h], action = [action index] (float32);
        the last step of every episode is a timeout (fixed horizon, no terminal)."""
        K, H = self.actions.shape
        steps = np.broadcast_to(np.arange(H), (K, H))
        obs = np.stack([self.states[:, :-1], steps], axis=-1).reshape(K * H, 2)
        nxt = np.stack([self.states[:, 1:], np.minimum(steps + 1, H)], axis=-1).reshape(K * H, 2)
        timeouts = np.zeros((K, H), dtype=bool)
        timeouts[:, -1] = True
        info = DatasetInfo(name=name, env_id=None, obs_keys=None, sensitive=sensitive, privacy_card=privacy_card,
                           extra={"observation": "[state index, step h]", "action": "[action index]", **(extra or {})})
        return OfflineDataset(observations=obs, actions=self.actions.reshape(K * H, 1), rewards=self.rewards.reshape(-1),
                              next_observations=nxt, terminals=np.zeros(K * H, dtype=bool), timeouts=timeouts.reshape(-1),
                              episode_ids=np.repeat(np.arange(K), H), info=info)

    @classmethod
    def from_offline_dataset(cls, ds: OfflineDataset) -> "Trajectories":
        """Inverse of :meth:`to_offline_dataset`; every episode must have the same length H."""
        starts = np.concatenate([[0], np.flatnonzero(ds.episode_ids[1:] != ds.episode_ids[:-1]) + 1])
        lengths = np.diff(np.concatenate([starts, [len(ds)]]))
        if len(np.unique(lengths)) != 1:
            raise InvalidData(f"dataset '{ds.info.name}' has episodes of different lengths; DP-APVI needs a fixed horizon")
        K, H = len(starts), int(lengths[0])
        s = ds.observations[:, 0].astype(np.int64).reshape(K, H)
        last = ds.next_observations[:, 0].astype(np.int64).reshape(K, H)[:, -1:]
        return cls(np.concatenate([s, last], axis=1), ds.actions[:, 0].astype(np.int64).reshape(K, H),
                   ds.rewards.astype(np.float64).reshape(K, H))


@dataclass
class TabularMDP:
    """Non-stationary finite-horizon MDP ``(P[H,S,A,S], R[H,S,A], d1[S])`` with exact evaluation."""

    P: np.ndarray
    R: np.ndarray
    d1: np.ndarray
    name: str = "tabular"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.P = np.asarray(self.P, dtype=np.float64)
        self.R = np.asarray(self.R, dtype=np.float64)
        self.d1 = np.asarray(self.d1, dtype=np.float64)
        H, S, A, S2 = self.P.shape
        if S2 != S or self.R.shape != (H, S, A) or self.d1.shape != (S,):
            raise InvalidData(f"MDP shapes disagree: P {self.P.shape}, R {self.R.shape}, d1 {self.d1.shape}")
        if (self.P < -1e-12).any() or not np.allclose(self.P.sum(-1), 1.0, atol=1e-9):
            raise InvalidData("MDP transition rows must be non-negative and sum to 1")
        if not np.isclose(self.d1.sum(), 1.0) or (self.d1 < 0).any():
            raise InvalidData("MDP initial distribution must be a probability vector")

    @property
    def shape(self) -> tuple[int, int, int]:
        """(H, S, A)."""
        H, S, A, _ = self.P.shape
        return H, S, A

    def policy_value(self, pi: np.ndarray) -> float:
        """v^π = E_{d1}[V_1^π] for a deterministic ``pi[h, s]`` (action index) or stochastic ``pi[h, s, a]``."""
        H, S, A = self.shape
        probs = pi if pi.ndim == 3 else np.eye(A)[pi]
        V = np.zeros(S)
        for h in range(H - 1, -1, -1):
            Q = self.R[h] + self.P[h] @ V
            V = (probs[h] * Q).sum(-1)
        return float(self.d1 @ V)

    def optimal(self) -> tuple[float, np.ndarray]:
        """(v*, an optimal deterministic policy π*[h, s]) by backward induction."""
        H, S, A = self.shape
        V = np.zeros(S)
        pi = np.zeros((H, S), dtype=np.int64)
        for h in range(H - 1, -1, -1):
            Q = self.R[h] + self.P[h] @ V
            pi[h] = Q.argmax(-1)
            V = Q.max(-1)
        return float(self.d1 @ V), pi

    def gap(self, pi: np.ndarray) -> float:
        """Suboptimality gap v* − v^π (the papers' only metric), exact."""
        return self.optimal()[0] - self.policy_value(pi)

    def sample(self, mu: np.ndarray, n_episodes: int, rng: np.random.Generator) -> Trajectories:
        """Roll out ``n_episodes`` trajectories of behaviour policy ``mu[h, s, a]`` (vectorised over episodes);
        rewards are the expected rewards R (the paper treats tabular rewards as known)."""
        H, S, A = self.shape
        K = int(n_episodes)
        states = np.zeros((K, H + 1), dtype=np.int64)
        actions = np.zeros((K, H), dtype=np.int64)
        states[:, 0] = _categorical(np.broadcast_to(self.d1, (K, S)), rng)
        for h in range(H):
            s = states[:, h]
            for si in np.unique(s):  # group by state: one draw per group instead of a [K, A] cumulative sum
                rows = np.flatnonzero(s == si)
                actions[rows, h] = rng.choice(A, size=len(rows), p=mu[h, si] / mu[h, si].sum())
            states[:, h + 1] = _categorical(self.P[h, s, actions[:, h]], rng)
        rewards = self.R[np.arange(H)[None, :], states[:, :-1], actions]
        return Trajectories(states, actions, rewards)


def _categorical(probs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One draw per row of ``probs[K, n]`` by inverse CDF."""
    cdf = np.cumsum(probs, axis=-1)
    u = rng.random(probs.shape[0])[:, None] * cdf[:, -1:]
    return np.minimum((u >= cdf).sum(-1), probs.shape[-1] - 1)


def random_tabular_mdp(S: int = 5, A: int = 3, H: int = 10, seed: int = 0, dirichlet: float = 1.0) -> TabularMDP:
    """Random non-stationary MDP: P_h(·|s,a) ~ Dirichlet(α·1), rewards R_h(s,a) = U³ with U ~ U[0,1] (a few good
    actions), d1 uniform."""
    rng = np.random.default_rng(seed)
    P = rng.dirichlet(np.full(S, dirichlet), size=(H, S, A))
    R = rng.random((H, S, A)) ** 3
    return TabularMDP(P, R, np.full(S, 1.0 / S), name=f"random-S{S}-A{A}-H{H}-seed{seed}",
                      meta={"kind": "random", "S": S, "A": A, "H": H, "seed": seed, "dirichlet": dirichlet})


_MOVES = np.array([[-1, 0], [0, 1], [1, 0], [0, -1]])  # up, right, down, left


def gridworld_mdp(size: int = 4, H: int = 12, slip: float = 0.2, walls: tuple[tuple[int, int], ...] = ((1, 1), (2, 2)),
                  goal: tuple[int, int] | None = None) -> TabularMDP:
    """A discretised maze: ``size × size`` cells minus ``walls``, 4 moves; with probability ``slip`` the agent moves in a
    uniformly random direction instead. Start in the top-left cell; reward 1 for every step taken in the goal cell
    (bottom-right by default); stationary dynamics replicated over H steps."""
    goal = goal or (size - 1, size - 1)
    cells = [(i, j) for i in range(size) for j in range(size) if (i, j) not in set(walls)]
    index = {c: k for k, c in enumerate(cells)}
    S, A = len(cells), 4
    P1 = np.zeros((S, A, S))
    for (i, j), s in index.items():
        for a in range(A):
            for m in range(4):
                p = (1.0 - slip) * (m == a) + slip / 4.0
                ni, nj = i + _MOVES[m, 0], j + _MOVES[m, 1]
                P1[s, a, index.get((ni, nj), s)] += p
    R1 = np.zeros((S, A))
    R1[index[goal], :] = 1.0
    d1 = np.zeros(S)
    d1[index[cells[0]]] = 1.0
    return TabularMDP(np.broadcast_to(P1, (H, S, A, S)).copy(), np.broadcast_to(R1, (H, S, A)).copy(), d1,
                      name=f"gridworld-{size}x{size}-H{H}",
                      meta={"kind": "gridworld", "size": size, "H": H, "slip": slip, "walls": [list(w) for w in walls],
                            "goal": list(goal), "cells": [list(c) for c in cells]})
