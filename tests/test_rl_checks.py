"""RL-aware checks: real PointMaze transitions pass, shuffled ones fail; coverage and adapters."""
from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from pointmaze_util import pointmaze_rollouts
from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.evaluation.rl_checks import (
    GridAdapter,
    PointMazeAdapter,
    RLCheckConfig,
    adapter_for,
    rl_checks,
    state_coverage,
)


@pytest.fixture(scope="module")
def real():
    return pointmaze_rollouts(steps=300, episode_len=100, seed=0, dense=True)


def _shuffle(ds: OfflineDataset, field: str, seed: int = 0) -> OfflineDataset:
    perm = np.random.default_rng(seed).permutation(ds.n_transitions)
    return dataclasses.replace(ds, **{field: getattr(ds, field)[perm]})


def test_real_transitions_are_consistent(real):
    out = rl_checks(real, real)
    assert out["adapter"] == "pointmaze"
    dyn, rew = out["real"]["dynamics"], out["real"]["reward"]
    assert dyn["n"] == 300
    assert dyn["within_tol"] == 1.0 and dyn["mean_error"] < 1e-4 and dyn["relative_error"] < 1e-3
    assert rew["within_tol"] == 1.0 and rew["mean_abs_error"] < 1e-5
    assert out["real"]["terminal_rate"] == 0.0 and out["real"]["terminal_agreement"] == 1.0
    cov = out["coverage"]
    assert cov["overlap_jaccard"] == 1.0 and cov["synthetic_invalid_rate"] == 0.0
    assert 0 < cov["real_coverage"] <= 1


def test_shuffled_next_states_fail_dynamics(real):
    out = rl_checks(_shuffle(real, "next_observations"), real)
    dyn = out["synthetic"]["dynamics"]
    assert dyn["within_tol"] < 0.05
    assert dyn["relative_error"] > 0.5
    assert out["real"]["dynamics"]["within_tol"] == 1.0  # the reference column is untouched


def test_shuffled_rewards_fail_reward_check(real):
    out = rl_checks(_shuffle(real, "rewards"), real)
    assert out["synthetic"]["reward"]["within_tol"] < 0.3
    assert out["synthetic"]["dynamics"]["within_tol"] == 1.0


def test_sparse_reward_recomputed():
    ds = pointmaze_rollouts(steps=200, episode_len=100, seed=1, dense=False)
    flipped = dataclasses.replace(ds, rewards=1.0 - ds.rewards)
    out = rl_checks(flipped, ds)
    assert out["real"]["reward"]["within_tol"] == 1.0
    assert out["synthetic"]["reward"]["within_tol"] == 0.0


def test_states_in_walls_are_invalid(real):
    adapter = adapter_for(real.info, real.observations)
    try:
        assert isinstance(adapter, PointMazeAdapter)
        # UMaze: the middle row (row 2) is wall except its last free cell; (x=-1, y=0) is the centre of cell (2, 1)
        wall_state = np.array([[-1.0, 0.0, 0, 0, 0, 0]])
        free_state = np.array([[-1.0, 1.0, 0, 0, 0, 0]])  # cell (1, 1), free
        far_away = np.array([[50.0, 50.0, 0, 0, 0, 0]])
        assert adapter.bins(wall_state)[0] == -1
        assert adapter.bins(free_state)[0] >= 0
        assert adapter.bins(far_away)[0] == -1
        cov = state_coverage(adapter, real.observations, np.concatenate([wall_state, free_state]))
        assert cov["synthetic_invalid_rate"] == 0.5
        # the goal columns (4:6) are judged alike: a goal in a wall or off the map cannot occur
        goals = np.array([[-1.0, 1.0, 0, 0, -1.0, 0.0], [-1.0, 1.0, 0, 0, -1.0, 1.0], [-1.0, 1.0, 0, 0, 50, 50]])
        np.testing.assert_array_equal(adapter.goal_in_wall(goals), [True, False, True])
        cov = state_coverage(adapter, real.observations, goals)
        assert cov["synthetic_invalid_rate"] == 0.0 and cov["synthetic_goal_invalid_rate"] == pytest.approx(2 / 3)
        assert cov["real_goal_invalid_rate"] == 0.0
        # 7 free cells in UMaze, 4 x 4 bins each
        assert adapter.n_bins == 7 * 16
    finally:
        adapter.close()


def test_grid_adapter_without_env(toy_dataset):
    out = rl_checks(toy_dataset, toy_dataset, RLCheckConfig(grid_bins=5))
    assert out["adapter"] == "grid"
    assert out["synthetic"]["dynamics"] is None and out["synthetic"]["reward"] is None
    assert out["coverage"]["overlap_jaccard"] == 1.0
    g = GridAdapter(np.array([[0.0, 0.0], [1.0, 1.0]]), bins=2)
    np.testing.assert_array_equal(g.bins(np.array([[0.1, 0.1], [0.9, 0.1], [1.0, 1.0], [2.0, 0.0]])), [0, 2, 3, -1])


def test_mujoco_locomotion_adapter(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes compiler warnings to MUJOCO_LOG.TXT in the working directory
    env = gym.make("HalfCheetah-v5")
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    rows = []
    for _ in range(60):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        rows.append((obs, a, r, nxt, term))
        obs = nxt
    env.close()
    o, a, r, n, t = (np.array(x) for x in zip(*rows))
    ds = OfflineDataset(o, a, r, n, t, np.zeros(len(r), bool), np.zeros(len(r), int),
                        info=DatasetInfo(name="hc", env_id="HalfCheetah-v5"))
    out = rl_checks(_shuffle(ds, "next_observations"), ds)
    assert out["adapter"] == "mujoco"
    assert out["real"]["dynamics"]["within_tol"] == 1.0 and out["real"]["reward"]["within_tol"] == 1.0
    assert out["synthetic"]["dynamics"]["within_tol"] < 0.1


def test_walker_rows_with_clipped_velocities_are_left_out_and_counted(tmp_path, monkeypatch):
    """Walker2d (and Hopper) observe qvel clipped to ±10, so stepping from such a row starts from a wrong state: real
    Walker2d data scored 0.24 within tolerance against its own simulator before these rows were left out."""
    monkeypatch.chdir(tmp_path)
    env = gym.make("Walker2d-v5")
    env.action_space.seed(0)
    obs, _ = env.reset(seed=0)
    rows, eps, ep = [], [], 0
    for _ in range(150):
        a = env.action_space.sample()
        nxt, r, term, trunc, _ = env.step(a)
        rows.append((obs, a, r, nxt, term))
        eps.append(ep)
        obs = nxt
        if term or trunc:
            obs, _ = env.reset()
            ep += 1
    env.close()
    o, a, r, n, t = (np.array(x) for x in zip(*rows))
    clipped = int((np.abs(o[:, 8:]) >= 10 - 1e-6).any(1).sum())  # qpos[1:] is 8 wide, then the 9 velocities
    assert 0 < clipped < len(o)
    ds = OfflineDataset(o, a, r, n, t, np.zeros(len(r), bool), np.array(eps),
                        info=DatasetInfo(name="wk", env_id="Walker2d-v5"))
    real = rl_checks(ds, ds)["real"]
    assert real["undetermined_excluded"] == clipped and real["dynamics"]["n"] == len(o) - clipped
    assert real["dynamics"]["within_tol"] == 1.0 and real["reward"]["within_tol"] == 1.0
    assert real["terminal_agreement"] == 1.0
