"""Post-processing of synthetic rows before release: the sensitive dataset's environment facts and support.

Everything here is free under DP (a function of DP outputs and public facts, docs/DESIGN.md invariants 1 and 8).
"""
from __future__ import annotations

import dataclasses
from typing import Any

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import ENV_FACT_FIELDS, DatasetInfo, OfflineDataset, environment_facts

__all__ = ["ENV_FACT_FIELDS", "environment_facts", "prepare_release", "normaliser_bounds", "environment_schema"]

def prepare_release(dataset: OfflineDataset, environment: DatasetInfo | None) -> OfflineDataset:
    """Post-processing of synthetic rows before release (free under DP): the environment's facts and support.

    With ``environment`` (the sensitive dataset's info): the release carries its :func:`environment_facts` (checked
    against the environment's spaces). Then rows are clipped to the support: actions to the action box (discrete
    actions rounded to a valid index), observations
    and next observations to the finite bounds of the observation space, and terminals cleared in an environment
    that never terminates (:func:`privsynth.data.envs.never_terminates`). Returns a new dataset.
    """
    from privsynth.data.envs import never_terminates, observation_bounds
    from privsynth.data.minari_io import check_env_spaces, env_spaces

    info = dataset.info
    if environment is not None:
        info = dataclasses.replace(info, **environment_facts(environment))
    check_env_spaces(info, dataset.obs_dim, dataset.act_dim)
    actions, obs, nxt, terminals = dataset.actions, dataset.observations, dataset.next_observations, dataset.terminals
    spaces = env_spaces(info)
    low = high = None
    if spaces is not None and isinstance(spaces[1], gym.spaces.Discrete):  # indices: round, then clip
        act_space = spaces[1]
        actions = np.rint(actions)
        low, high = np.array([act_space.start]), np.array([act_space.start + act_space.n - 1])
    elif spaces is not None:
        low, high = spaces[1].low, spaces[1].high
    elif info.action_low is not None and info.action_high is not None:
        low, high = np.asarray(info.action_low), np.asarray(info.action_high)
    if low is not None and high is not None:
        actions = np.clip(actions, low.astype(np.float32), high.astype(np.float32))
    if spaces is not None and isinstance(spaces[0], (gym.spaces.Box, gym.spaces.Dict)):
        olow, ohigh = observation_bounds(spaces[0], info.obs_keys)
        obs, nxt = np.clip(obs, olow, ohigh), np.clip(nxt, olow, ohigh)
    if never_terminates(info.env_id, info.env_kwargs):
        terminals = np.zeros_like(terminals)
    return dataclasses.replace(
        dataset, observations=obs, actions=actions, next_observations=nxt, terminals=terminals, info=info
    )


def normaliser_bounds(
    info: DatasetInfo,
    obs_dim: int,
    act_dim: int,
    *,
    obs_bounds: tuple[float, float] | None = None,
    reward_bounds: tuple[float, float] | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Public clipping box of every transition column (state | action | reward | next state | terminal) for a DP
    normaliser: the environment spec's finite bounds, ``obs_bounds`` where the spec has none, the action box, and
    ``reward_bounds`` (the spec never says). Raises naming the first column left without a finite bound."""
    from privsynth.data.envs import observation_bounds
    from privsynth.data.minari_io import env_spaces
    from privsynth.errors import InvalidData

    olow, ohigh = np.full(obs_dim, -np.inf), np.full(obs_dim, np.inf)
    alow, ahigh = np.full(act_dim, -np.inf), np.full(act_dim, np.inf)
    spaces = env_spaces(info)
    if spaces is not None:
        if isinstance(spaces[0], (gym.spaces.Box, gym.spaces.Dict)):
            lo, hi = observation_bounds(spaces[0], info.obs_keys)
            if lo.shape == (obs_dim,):
                olow, ohigh = lo.astype(np.float64), hi.astype(np.float64)
        if isinstance(spaces[1], gym.spaces.Discrete):
            alow, ahigh = np.array([float(spaces[1].start)]), np.array([float(spaces[1].start + spaces[1].n - 1)])
        elif isinstance(spaces[1], gym.spaces.Box):
            alow, ahigh = spaces[1].low.reshape(-1).astype(np.float64), spaces[1].high.reshape(-1).astype(np.float64)
    elif info.action_low is not None and info.action_high is not None:
        alow, ahigh = np.asarray(info.action_low, dtype=np.float64), np.asarray(info.action_high, dtype=np.float64)
    if obs_bounds is not None:
        fill = ~(np.isfinite(olow) & np.isfinite(ohigh))
        olow[fill], ohigh[fill] = float(obs_bounds[0]), float(obs_bounds[1])
    if reward_bounds is None:
        raise InvalidData("a DP normaliser needs public reward bounds: pass --reward-bounds LOW,HIGH")
    low = np.concatenate([olow, alow, [float(reward_bounds[0])], olow, [0.0]])
    high = np.concatenate([ohigh, ahigh, [float(reward_bounds[1])], ohigh, [1.0]])
    names = ([f"observation {i}" for i in range(obs_dim)] + [f"action {i}" for i in range(act_dim)] + ["reward"]
             + [f"next observation {i}" for i in range(obs_dim)] + ["terminal"])
    for j, name in enumerate(names):
        if not (np.isfinite(low[j]) and np.isfinite(high[j]) and high[j] > low[j]):
            if name.startswith("action"):
                raise InvalidData(f"{name} has no finite public bound: the environment's action space is unbounded "
                                  "(declare the columns' bounds in a schema: datasets import --schema)")
            raise InvalidData(f"{name} has no finite public bound in the environment spec: pass --obs-bounds LOW,HIGH")
    return low, high


def environment_schema(
    info: DatasetInfo,
    obs_dim: int,
    act_dim: int,
    *,
    obs_bounds: tuple[float, float] | None = None,
    reward_bounds: tuple[float, float] | None = None,
) -> dict[str, Any] | None:
    """A schema (privsynth.data.schema) made of public facts only, for simulator data imported without one: the
    environment's observation and action spaces (``obs_bounds`` where the observation space has no finite bound; a
    ``Discrete`` action is categorical), and the reward bounds ``reward_bounds``, else those known from the
    environment's code (:func:`privsynth.data.envs.reward_bounds`). Columns are named ``obs_i`` / ``act_i`` /
    ``reward``, as an export without a schema. None when ``info`` names no environment; one-line errors naming the
    column (or the reward) left without a finite bound."""
    from privsynth.data.envs import reward_bounds as known_reward_bounds
    from privsynth.data.minari_io import env_spaces
    from privsynth.errors import InvalidData

    spaces = env_spaces(info)
    if spaces is None:
        return None
    given = reward_bounds is not None
    reward_bounds = reward_bounds or known_reward_bounds(info.env_id)
    if reward_bounds is None:
        raise InvalidData(f"{info.env_id}'s spec gives no reward bounds: pass --reward-bounds LOW,HIGH (public "
                          "bounds of one step's reward)")
    low, high = normaliser_bounds(info, obs_dim, act_dim, obs_bounds=obs_bounds, reward_bounds=reward_bounds)
    obs = [{"name": f"obs_{i}", "kind": "continuous", "low": float(low[i]), "high": float(high[i])}
           for i in range(obs_dim)]
    act_space = spaces[1]
    if isinstance(act_space, gym.spaces.Discrete) and int(act_space.start) == 0:
        acts = [{"name": "act_0", "kind": "categorical", "values": list(range(int(act_space.n)))}]
    elif isinstance(act_space, gym.spaces.Discrete):
        acts = [{"name": "act_0", "kind": "integer", "low": float(low[obs_dim]), "high": float(high[obs_dim])}]
    else:
        acts = [{"name": f"act_{i}", "kind": "continuous", "low": float(low[obs_dim + i]),
                 "high": float(high[obs_dim + i])} for i in range(act_dim)]
    rlow, rhigh = (float(v) for v in reward_bounds)
    source = "--reward-bounds" if given else "its code"
    return {"episode_id": "episode_id", "observations": obs, "actions": acts,
            "reward": {"name": "reward", "low": rlow, "high": rhigh},
            "description": f"no schema declared: the spaces of {info.env_id} and reward bounds [{rlow:.6g}, "
                           f"{rhigh:.6g}] ({source}); public facts only"}
