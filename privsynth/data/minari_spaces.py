"""The environment's observation and action spaces for Minari datasets (used by :mod:`privsynth.data.minari_io`).

A dataset's flat columns are checked against, and stored in, the spaces of its registered environment
(docs/DESIGN.md invariant 8): Dict observations are un-flattened by ``DatasetInfo.obs_keys`` (keys the environment
derives from others, such as PointMaze's ``achieved_goal``, are rebuilt) and cast to the space's dtypes. Without a
registered environment both are flat float32 ``Box`` spaces.

An ``env_id`` gymnasium does not know is skipped here like a missing one (stored datasets may name environments
this machine lacks), so imports call :func:`check_env_id` first: a dataset written with an unknown id would carry no
environment spec (plain Minari's ``recover_environment()`` fails) and no check or clipping would apply.
"""
from __future__ import annotations

import difflib
import functools
import json
import warnings
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, SpaceMismatch

__all__ = ["env_spaces", "check_env_id", "check_env_spaces", "obs_writer", "action_space", "jsonable"]


def jsonable(obj: Any) -> Any:
    """Round-trip through JSON with numpy scalars/arrays converted, so the stored info equals what loads back."""

    def default(o: Any) -> Any:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, (set, tuple)):
            return list(o)
        if isinstance(o, Path):
            return str(o)
        raise TypeError(f"value of type {type(o).__name__} cannot be stored in dataset metadata")

    try:
        return json.loads(json.dumps(obj, default=default, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidData(f"dataset info is not JSON-serialisable: {exc}") from None


def check_env_id(env_id: str | None) -> None:
    """Raise :class:`InvalidData` unless ``env_id`` is empty or registered with gymnasium (gymnasium-robotics
    registered first), naming the closest registered ids."""
    from privsynth.data.envs import register_robotics_envs

    if not env_id:
        return
    register_robotics_envs()
    try:
        gym.spec(env_id)
        return
    except gym.error.Error:
        pass
    by_lower = {k.lower(): k for k in gym.registry}
    close = difflib.get_close_matches(str(env_id).lower(), list(by_lower), n=3, cutoff=0.6)
    hint = f"; did you mean {' or '.join(repr(by_lower[c]) for c in close)}?" if close else ""
    raise InvalidData(
        f"unknown environment id '{env_id}': not registered with gymnasium{hint} (omit --env-id, env_id=None in "
        "Python, to import the data without an environment; install the package that registers the environment)"
    )


@functools.lru_cache(maxsize=16)
def _env_spaces_cached(env_id: str, kwargs_json: str) -> tuple[gym.Space, gym.Space] | None:
    from privsynth.data.envs import register_robotics_envs

    register_robotics_envs()
    try:
        gym.spec(env_id)
    except gym.error.Error:
        return None
    kwargs = json.loads(kwargs_json)
    kwargs.pop("max_episode_steps", None)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            env = gym.make(env_id, **kwargs)
    except Exception as exc:  # noqa: BLE001 - any construction failure is the user's env spec
        raise InvalidData(f"cannot create environment '{env_id}' from the dataset's env spec: {exc}") from None
    spaces = (env.observation_space, env.action_space)
    env.close()
    return spaces


def env_spaces(info: DatasetInfo) -> tuple[gym.Space, gym.Space] | None:
    """(observation space, action space) of the dataset's environment, or None without a registered ``env_id``."""
    if not info.env_id:
        return None
    return _env_spaces_cached(info.env_id, json.dumps(jsonable(info.env_kwargs), sort_keys=True))


def _width(space: gym.Space) -> int:
    return int(np.prod(space.shape)) if space.shape else 1


def check_env_spaces(info: DatasetInfo, obs_dim: int, act_dim: int) -> None:
    """Raise :class:`SpaceMismatch` unless flat widths ``obs_dim``/``act_dim`` fit the environment's spaces.

    Dict observation spaces need ``info.obs_keys`` (the stored keys, in column order); keys the environment derives
    from others (PointMaze's ``achieved_goal``) may be absent. Without a registered environment nothing is checked
    (imports refuse unknown ids first with :func:`check_env_id`).
    """
    from privsynth.data.envs import derived_obs_keys

    spaces = env_spaces(info)
    if spaces is None:
        return
    obs_space, act_space = spaces
    env = info.env_id
    if isinstance(obs_space, gym.spaces.Dict):
        if not info.obs_keys:
            from privsynth.data.envs import POINTMAZE_OBS_KEYS

            stored = [k for k in obs_space.spaces if k not in derived_obs_keys(env or "")]
            if set(stored) == set(POINTMAZE_OBS_KEYS):
                stored = list(POINTMAZE_OBS_KEYS)  # the order privsynth's PointMaze data uses
            raise SpaceMismatch(
                f"{env} has Dict observations ({', '.join(obs_space.spaces)}) but the data names no obs_keys: pass "
                f"--obs-keys (obs_keys=[...] in Python) with the keys the observation columns hold, in column order, "
                f"e.g. --obs-keys {','.join(stored)}"
            )
        unknown = [k for k in info.obs_keys if k not in obs_space.spaces]
        if unknown:
            raise SpaceMismatch(f"{env} has no observation keys {unknown} (it has {list(obs_space.spaces)})")
        missing = [k for k in obs_space.spaces if k not in info.obs_keys and k not in derived_obs_keys(env)]
        if missing:
            raise SpaceMismatch(f"the data lacks the observation keys {missing} of {env}")
        want = sum(_width(obs_space.spaces[k]) for k in info.obs_keys)
    elif isinstance(obs_space, gym.spaces.Box):
        want = _width(obs_space)
    else:  # Discrete and other spaces: stored as flat columns, one per index
        want = obs_dim
    if want != obs_dim:
        keys = f" for the obs_keys {','.join(info.obs_keys or [])}" if isinstance(obs_space, gym.spaces.Dict) else ""
        raise SpaceMismatch(f"the data has {obs_dim} observation dims but {env} has {want}{keys}")
    act_width = 1 if isinstance(act_space, gym.spaces.Discrete) else _width(act_space)
    if not isinstance(act_space, (gym.spaces.Box, gym.spaces.Discrete)) or act_width != act_dim:
        raise SpaceMismatch(
            f"the data has {act_dim} action dims but {env}'s action space is {act_space} ({act_width} dims)"
        )


def obs_writer(info: DatasetInfo, obs_dim: int) -> tuple[gym.Space, Any]:
    """The observation space to store and a function flat [T+1, D] rows -> what Minari stores for them."""
    from privsynth.data.envs import derived_obs_keys

    spaces = env_spaces(info)
    if spaces is None:
        return gym.spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32), lambda x: x
    obs_space = spaces[0]
    if isinstance(obs_space, gym.spaces.Dict):
        cols, k = {}, 0
        for key in info.obs_keys or []:
            w = _width(obs_space.spaces[key])
            cols[key] = (k, k + w)
            k += w
        derived = derived_obs_keys(info.env_id or "")

        def to_dict(x: np.ndarray) -> dict[str, np.ndarray]:
            parts = {}
            for key, sub in obs_space.spaces.items():
                if key in cols:
                    a, b = cols[key]
                    v = x[:, a:b]
                else:
                    src, a, b = derived[key]
                    v = x[:, cols[src][0] + a : cols[src][0] + b]
                parts[key] = v.astype(sub.dtype).reshape((len(x), *sub.shape))
            return parts

        return obs_space, to_dict
    if isinstance(obs_space, gym.spaces.Box):
        return obs_space, lambda x: x.astype(obs_space.dtype).reshape((len(x), *obs_space.shape))
    return gym.spaces.Box(-np.inf, np.inf, shape=(obs_dim,), dtype=np.float32), lambda x: x


def action_space(ds: OfflineDataset) -> gym.Space:
    spaces = env_spaces(ds.info)
    if spaces is not None and isinstance(spaces[1], (gym.spaces.Box, gym.spaces.Discrete)):
        return spaces[1]
    info = ds.info
    if info.action_low is not None and info.action_high is not None:
        low = np.asarray(info.action_low, dtype=np.float32).reshape(-1)
        high = np.asarray(info.action_high, dtype=np.float32).reshape(-1)
        if low.shape == high.shape == (ds.act_dim,):
            return gym.spaces.Box(low, high, dtype=np.float32)
    return gym.spaces.Box(-np.inf, np.inf, shape=(ds.act_dim,), dtype=np.float32)
