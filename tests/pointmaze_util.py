"""Tiny PointMaze rollouts for evaluation tests (a noisy proportional controller, no planner)."""
from __future__ import annotations

import numpy as np

from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.data.envs import POINTMAZE_OBS_KEYS, make_env


def pointmaze_info(dense: bool = True, name: str = "pm-test") -> DatasetInfo:
    return DatasetInfo(
        name=name,
        env_id=f"PointMaze_UMaze{'Dense' if dense else ''}-v3",
        env_kwargs={"continuing_task": True, "reset_target": True},
        obs_keys=list(POINTMAZE_OBS_KEYS),
        ref_min_score=0.0,
        ref_max_score=100.0,
    )


def pointmaze_rollouts(steps: int = 400, episode_len: int = 100, seed: int = 0, dense: bool = True) -> OfflineDataset:
    """``steps`` real transitions from PointMaze UMaze, cut into episodes of ``episode_len`` (each from a reset)."""
    info = pointmaze_info(dense)
    env = make_env(info, max_episode_steps=episode_len + 1)
    rng = np.random.default_rng(seed)
    obs_l, act_l, rew_l, nxt_l, ids = [], [], [], [], []
    t, ep = 0, 0
    while t < steps:
        obs, _ = env.reset(seed=seed + ep)
        for _ in range(min(episode_len, steps - t)):
            pos, vel, goal = obs[:2], obs[2:4], obs[4:6]
            action = np.clip(2.0 * (goal - pos) - 0.5 * vel + rng.normal(0, 0.5, 2), -1, 1).astype(np.float32)
            nxt, r, _, _, _ = env.step(action)
            obs_l.append(obs), act_l.append(action), rew_l.append(r), nxt_l.append(nxt), ids.append(ep)
            obs = nxt
            t += 1
        ep += 1
    env.close()
    n = len(rew_l)
    timeouts = np.zeros(n, dtype=bool)
    ids_a = np.asarray(ids)
    timeouts[np.r_[ids_a[1:] != ids_a[:-1], True]] = True
    return OfflineDataset(
        observations=np.asarray(obs_l), actions=np.asarray(act_l), rewards=np.asarray(rew_l),
        next_observations=np.asarray(nxt_l), terminals=np.zeros(n, dtype=bool), timeouts=timeouts,
        episode_ids=ids_a, info=info,
    )
