"""RL-aware checks of a transition dataset against the simulator it claims to come from.

Tabular scores (:mod:`privsynth.evaluation.fidelity`) cannot tell a transition that obeys the physics from one that
merely has the right marginals. These checks can, because the environment is known (``DatasetInfo.env_id``):

* **Dynamics consistency.** Put the simulator in the transition's state, apply its action for one environment step,
  and compare the simulated next state with the recorded next state: per-transition L2 error on the simulated state
  dimensions, reported as mean and median, the fraction of transitions within ``dynamics_tol``, and the mean error
  relative to the mean step length ``mean ||s' − s||`` of the same transitions (dimensionless; 0 is perfect, about 1 or
  more means the next states are unrelated to the states).
* **Reward consistency.** Recompute the reward with the environment's own reward function from the recorded next
  state (and goal) and compare with the recorded reward: mean absolute error, fraction within ``reward_tol``.
* **Terminal rate.** Fraction of transitions flagged terminal, and (where the environment defines termination from
  the state) the fraction whose flag agrees with the recomputed one.
* **State coverage.** States are mapped to bins (PointMaze: a grid of ``bins_per_cell``² sub-cells per free maze
  cell; otherwise a 2-D grid over the first two state dimensions spanning the real data's range). Reported: the
  fraction of bins visited by the real and by the synthetic data, their Jaccard overlap, the fraction of synthetic
  states in bins the real data visits, and the fraction of synthetic states in no valid bin (inside a wall).

Environment-specific code lives in the adapters of :mod:`privsynth.data.env_adapters` (re-exported here);
:func:`adapter_for` picks one from a dataset's info at the resolution of an :class:`RLCheckConfig`.
At most ``max_transitions`` transitions per dataset are checked (seeded subsample); stepping costs ~0.1 ms each.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.env_adapters import EnvAdapter, GridAdapter, MujocoLocomotionAdapter, PointMazeAdapter
from privsynth.data.env_adapters import adapter_for as _adapter_for

__all__ = [
    "RLCheckConfig",
    "EnvAdapter",
    "PointMazeAdapter",
    "MujocoLocomotionAdapter",
    "GridAdapter",
    "adapter_for",
    "dynamics_consistency",
    "reward_consistency",
    "terminal_stats",
    "state_coverage",
    "rl_checks",
]


@dataclass
class RLCheckConfig:
    max_transitions: int = 5000  # per dataset, seeded uniform subsample
    dynamics_tol: float = 0.05  # L2 error on the simulated state dims counted as "consistent"
    reward_tol: float = 0.01  # absolute reward error counted as "consistent"
    bins_per_cell: int = 4  # PointMaze coverage resolution: bins_per_cell x bins_per_cell sub-cells per maze cell
    grid_bins: int = 20  # GridAdapter resolution per axis
    seed: int = 0


# ------------------------------------------------------------------------------------------------------ adapters
def adapter_for(info: DatasetInfo, reference_obs: np.ndarray, config: RLCheckConfig | None = None) -> EnvAdapter:
    """:func:`privsynth.data.env_adapters.adapter_for` at the resolution of ``config``."""
    cfg = config or RLCheckConfig()
    return _adapter_for(info, reference_obs, bins_per_cell=cfg.bins_per_cell, grid_bins=cfg.grid_bins, seed=cfg.seed)


# ------------------------------------------------------------------------------------------------------- checks
def _subsample(dataset: OfflineDataset, max_n: int, seed: int) -> np.ndarray:
    n = dataset.n_transitions
    if n <= max_n:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=max_n, replace=False))


def dynamics_consistency(
    adapter: EnvAdapter, obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray, *, tol: float = 0.05
) -> dict[str, Any] | None:
    """Simulate every (state, action) and compare with the recorded next state (see module docstring)."""
    pred = []
    for o, a in zip(obs, actions):
        p = adapter.simulate(o, a)
        if p is None:
            return None
        pred.append(p)
    pred_a = np.asarray(pred, dtype=np.float64)
    recorded = np.asarray(next_obs, dtype=np.float64)[:, adapter.state_dims]
    err = np.linalg.norm(pred_a - recorded, axis=1)
    step = np.linalg.norm(recorded - np.asarray(obs, dtype=np.float64)[:, adapter.state_dims], axis=1)
    return {
        "n": int(len(err)),
        "mean_error": float(err.mean()),
        "median_error": float(np.median(err)),
        "within_tol": float((err <= tol).mean()),
        "tol": tol,
        "relative_error": float(err.mean() / max(step.mean(), 1e-12)),
    }


def reward_consistency(
    adapter: EnvAdapter, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
    *, tol: float = 0.01,
) -> dict[str, Any] | None:
    """Recompute rewards with the environment's reward function and compare with the recorded ones."""
    r_hat = adapter.reward(np.asarray(obs, np.float64), actions, np.asarray(next_obs, np.float64))
    if r_hat is None:
        return None
    diff = np.abs(np.asarray(r_hat, np.float64) - np.asarray(rewards, np.float64))
    return {"n": int(len(diff)), "mean_abs_error": float(diff.mean()), "within_tol": float((diff <= tol).mean()),
            "tol": tol}


def terminal_stats(adapter: EnvAdapter, dataset: OfflineDataset, idx: np.ndarray) -> dict[str, Any]:
    """Terminal rate over the whole dataset, and agreement with recomputed termination on the checked subsample."""
    out: dict[str, Any] = {"terminal_rate": float(dataset.terminals.mean())}
    t_hat = adapter.terminal(
        dataset.observations[idx].astype(np.float64), dataset.actions[idx], dataset.next_observations[idx].astype(np.float64)
    )
    out["terminal_agreement"] = None if t_hat is None else float((np.asarray(t_hat) == dataset.terminals[idx]).mean())
    return out


def state_coverage(adapter: EnvAdapter, real_obs: np.ndarray, synth_obs: np.ndarray) -> dict[str, Any]:
    """Fraction of bins visited by real and synthetic states, their overlap, and invalid synthetic states."""
    br, bs = adapter.bins(real_obs), adapter.bins(synth_obs)
    vr, vs = set(np.unique(br[br >= 0]).tolist()), set(np.unique(bs[bs >= 0]).tolist())
    union = vr | vs
    return {
        "n_bins": int(adapter.n_bins),
        "real_coverage": len(vr) / adapter.n_bins,
        "synthetic_coverage": len(vs) / adapter.n_bins,
        "overlap_jaccard": len(vr & vs) / len(union) if union else float("nan"),
        "synthetic_in_real_bins": float(np.isin(bs, list(vr)).mean()) if len(bs) else float("nan"),
        "synthetic_invalid_rate": float((bs < 0).mean()) if len(bs) else float("nan"),
        "real_invalid_rate": float((br < 0).mean()) if len(br) else float("nan"),
        **_goal_invalid(adapter, real_obs, synth_obs),
    }


def _goal_invalid(adapter: EnvAdapter, real_obs: np.ndarray, synth_obs: np.ndarray) -> dict[str, float]:
    """Share of rows whose desired goal lies in a wall or off the map (PointMaze draws goals in free cells only);
    empty when the observation has no goal. Utility study round 10 (docs/synthesizers.md)."""
    gs = adapter.goal_in_wall(synth_obs) if len(synth_obs) else None
    if gs is None:
        return {}
    gr = adapter.goal_in_wall(real_obs) if len(real_obs) else np.zeros(0, bool)
    return {"synthetic_goal_invalid_rate": float(np.mean(gs)),
            "real_goal_invalid_rate": float(np.mean(gr)) if len(gr) else float("nan")}


def _checks_on(adapter: EnvAdapter, ds: OfflineDataset, idx: np.ndarray, cfg: RLCheckConfig) -> dict[str, Any]:
    """The simulator checks on the rows ``idx`` whose observation fixes the simulator state (Hopper and Walker2d
    clip observed velocities at ±10: such rows are left out and counted in ``undetermined_excluded``)."""
    keep = adapter.determined(ds.observations[idx])
    excluded = 0 if keep is None else int((~keep).sum())
    if keep is not None:
        idx = idx[keep]
    if len(idx) == 0:
        return {"dynamics": None, "reward": None, "terminal_rate": float(ds.terminals.mean()),
                "terminal_agreement": None, "undetermined_excluded": excluded}
    obs, act, rew, nxt = ds.observations[idx], ds.actions[idx], ds.rewards[idx], ds.next_observations[idx]
    return {
        "dynamics": dynamics_consistency(adapter, obs, act, nxt, tol=cfg.dynamics_tol),
        "reward": reward_consistency(adapter, obs, act, rew, nxt, tol=cfg.reward_tol),
        **terminal_stats(adapter, ds, idx),
        "undetermined_excluded": excluded,
    }


def rl_checks(
    synthetic: OfflineDataset, real: OfflineDataset, config: RLCheckConfig | None = None
) -> dict[str, Any]:
    """All RL-aware checks on ``synthetic``, with the same checks on ``real`` as the reference column.

    The environment comes from the real dataset's info. Returns ``{"adapter", "synthetic", "real", "coverage"}``;
    entries that an adapter cannot compute are None.
    """
    cfg = config or RLCheckConfig()
    real.check_compatible(synthetic)
    adapter = adapter_for(real.info, real.observations, cfg)
    try:
        idx_r = _subsample(real, cfg.max_transitions, cfg.seed)
        idx_s = _subsample(synthetic, cfg.max_transitions, cfg.seed + 1)
        return {
            "adapter": adapter.name,
            "config": {k: getattr(cfg, k) for k in cfg.__dataclass_fields__},
            "synthetic": _checks_on(adapter, synthetic, idx_s, cfg),
            "real": _checks_on(adapter, real, idx_r, cfg),
            "coverage": state_coverage(adapter, real.observations, synthetic.observations),
        }
    finally:
        adapter.close()
