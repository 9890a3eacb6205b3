"""Recreate a dataset's environment with flat observations in the dataset's key order.

Library code never hard-codes ``gym.make`` calls: the environment comes from a dataset's
:class:`~privsynth.data.dataset.DatasetInfo` (``env_id``, ``env_kwargs``, ``obs_keys``), so an agent trained on a
synthetic copy is evaluated in exactly the environment the real data came from.

Dict observations (PointMaze: ``observation``, ``desired_goal``) are flattened by concatenating the keys in
``obs_keys`` order; this is the documented order the Minari loader uses too.
"""
from __future__ import annotations

import contextlib
import io
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import DatasetInfo
from privsynth.errors import PrivsynthError

__all__ = [
    "FlattenDictObs",
    "make_env",
    "flatten_obs",
    "register_robotics_envs",
    "derived_obs_keys",
    "never_terminates",
    "reward_bounds",
    "observation_bounds",
    "POINTMAZE_OBS_KEYS",
]

POINTMAZE_OBS_KEYS: tuple[str, ...] = ("observation", "desired_goal")

# Dict-observation keys an environment computes from other keys, so flat data need not store them:
# env id prefix -> {key: (source key, first column, end column)}. PointMaze's achieved_goal is the ball's (x, y),
# the first two entries of its observation (gymnasium-robotics point_maze.py).
DERIVED_OBS_KEYS: dict[str, dict[str, tuple[str, int, int]]] = {
    "PointMaze_": {"achieved_goal": ("observation", 0, 2)},
}

# Environments whose episodes never terminate (only time limits end them): env id prefix -> the kwarg that, when
# set to False, makes them terminate (None: never). Public facts of the environments' code.
NEVER_TERMINATE: dict[str, str | None] = {
    "Pendulum-": None,
    "HalfCheetah-": None,
    "Swimmer-": None,
    "Reacher-": None,
    "Pusher-": None,
    "PointMaze_": "continuing_task",  # gymnasium-robotics: terminates at the goal only with continuing_task=False
}

# Per-step reward bounds that follow from an environment's code (env id prefix -> (low, high)): public facts, used
# when a release without public data takes its bounds from the environment (no spec states reward bounds).
# Pendulum: r = -(θ² + 0.1 θ̇² + 0.001 u²) with |θ| <= π, |θ̇| <= 8, |u| <= 2 (gymnasium pendulum.py).
REWARD_BOUNDS: dict[str, tuple[float, float]] = {
    "Pendulum-": (-(np.pi ** 2 + 0.1 * 8.0 ** 2 + 0.001 * 2.0 ** 2), 0.0),
}

_registered = False


def reward_bounds(env_id: str | None) -> tuple[float, float] | None:
    """The per-step reward bounds of ``env_id`` known from its code (:data:`REWARD_BOUNDS`), else None."""
    for prefix, bounds in REWARD_BOUNDS.items():
        if env_id and env_id.startswith(prefix):
            return bounds
    return None


def never_terminates(env_id: str | None, env_kwargs: dict[str, Any] | None = None) -> bool:
    """True when ``env_id`` (with ``env_kwargs``) can never return ``terminated=True`` (see :data:`NEVER_TERMINATE`)."""
    if not env_id:
        return False
    for prefix, flag in NEVER_TERMINATE.items():
        if env_id.startswith(prefix):
            return flag is None or bool((env_kwargs or {}).get(flag, True))
    return False


def observation_bounds(space: gym.Space, keys: Sequence[str] | None) -> tuple[np.ndarray, np.ndarray]:
    """Flat float32 (low, high) of an observation space, Dict keys concatenated in ``keys`` order."""
    if isinstance(space, gym.spaces.Dict):
        parts = [space.spaces[k] for k in (keys or sorted(space.spaces))]
    else:
        parts = [space]
    low = np.concatenate([np.asarray(p.low, dtype=np.float32).reshape(-1) for p in parts])
    high = np.concatenate([np.asarray(p.high, dtype=np.float32).reshape(-1) for p in parts])
    return low, high


def derived_obs_keys(env_id: str) -> dict[str, tuple[str, int, int]]:
    """Keys that ``env_id``'s Dict observations derive from other keys (see :data:`DERIVED_OBS_KEYS`)."""
    for prefix, keys in DERIVED_OBS_KEYS.items():
        if env_id.startswith(prefix):
            return keys
    return {}


def register_robotics_envs() -> None:
    """Register gymnasium-robotics environments once, without the notice about Adroit envs it prints on import."""
    global _registered
    if not _registered:
        with contextlib.redirect_stderr(io.StringIO()):
            import gymnasium_robotics

        gym.register_envs(gymnasium_robotics)
        _registered = True


_register = register_robotics_envs


def flatten_obs(obs: Any, keys: Sequence[str] | None) -> np.ndarray:
    """Concatenate a dict observation's ``keys`` in order (float32); Box observations pass through."""
    if keys is None:
        return np.asarray(obs, dtype=np.float32).reshape(-1)
    return np.concatenate([np.asarray(obs[k], dtype=np.float32).reshape(-1) for k in keys])


class FlattenDictObs(gym.ObservationWrapper):
    """Observation wrapper: dict -> flat float32 vector of the given keys, in order."""

    def __init__(self, env: gym.Env, keys: Sequence[str]) -> None:
        super().__init__(env)
        self.keys = list(keys)
        spaces = env.observation_space
        lows = [np.asarray(spaces[k].low, dtype=np.float32).reshape(-1) for k in self.keys]
        highs = [np.asarray(spaces[k].high, dtype=np.float32).reshape(-1) for k in self.keys]
        self.observation_space = gym.spaces.Box(np.concatenate(lows), np.concatenate(highs), dtype=np.float32)

    def observation(self, observation: Any) -> np.ndarray:
        return flatten_obs(observation, self.keys)


def make_env(info: DatasetInfo | str, **overrides: Any) -> gym.Env:
    """The environment of a dataset, with flat observations; ``overrides`` update the stored ``env_kwargs``.

    A plain gymnasium id (``"Acrobot-v1"``) stands for a dataset of that environment with no stored kwargs.
    """
    if isinstance(info, str):
        info = DatasetInfo(name=info, env_id=info)
    if not info.env_id:
        raise PrivsynthError(f"dataset '{info.name}' records no environment id; cannot recreate its environment")
    if ":" in info.env_id:  # gymnasium imports the module named before ':'; a dataset's metadata must not choose it
        raise PrivsynthError(f"cannot create environment '{info.env_id}': an id of the form 'module:name' would "
                             "import that module; privsynth only makes environments already registered")
    if info.env_id not in gym.registry:
        _register()
    kwargs = {**info.env_kwargs, **overrides}
    try:
        env = gym.make(info.env_id, **kwargs)
    except (gym.error.Error, TypeError, ValueError) as exc:  # unknown id, or kwargs the environment does not take
        raise PrivsynthError(f"cannot create environment '{info.env_id}': {exc}") from None
    if info.obs_keys:
        env = FlattenDictObs(env, info.obs_keys)
    return env
