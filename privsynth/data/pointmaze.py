"""PointMaze datasets made the way D4RL maze2d (and Minari ``D4RL/pointmaze``) were made.

Collection: one long run of gymnasium-robotics ``PointMaze_<Map>[Dense]-v3`` with ``continuing_task=True`` and
``reset_target=True`` (a new goal is drawn each time the ball reaches the current one), started by
``reset(seed=cfg.seed)``. The behaviour policy is the waypoint controller of :mod:`privsynth.data.maze_planner` plus
Gaussian action noise N(0, 0.5²), clipped to the action box. The run is split into episodes where a goal is reached
(``timeouts`` True there, as Minari's ``StepDataCallback`` sets ``truncations`` on ``info['success']``) and at the end;
``terminals`` are all False (the task never terminates). Observations are flattened as
``observation`` (x, y, vx, vy) + ``desired_goal`` (2) = 6 dims (:data:`privsynth.data.envs.POINTMAZE_OBS_KEYS`).
The run is continuous, so ``next_observations[t] == observations[t+1]`` holds exactly everywhere. The environment
draws the new goal after building the observation of the goal-reaching step, so an episode's first observation still
shows the previous goal and the new one appears from its second observation on (as in Minari's datasets).

Evaluation environment (what :class:`~privsynth.data.dataset.DatasetInfo` records in ``env_id``/``env_kwargs`` and
:func:`privsynth.data.envs.make_env` recreates for agent evaluation), chosen as D4RL and Minari's
``EVAL_ENV_MAPS`` do: the same map with one fixed goal cell (:data:`EVAL_GOAL_CELLS`; the reset cell is drawn among the
other free cells), ``reset_target=False``, ``continuing_task=True`` (the episode does not end at the goal, so an agent
that reaches it early and stays keeps collecting reward) and the map's standard episode length
(:data:`EPISODE_STEPS`: open 300, umaze 300, medium 600, large 800). Reference scores on that environment:
``ref_min_score`` = mean return of a uniformly random policy, ``ref_max_score`` = mean return of the noiseless
waypoint controller, each over ``cfg.ref_episodes`` episodes (Minari uses 100), so the normalised score
100·(R − min)/(max − min) is 0 for random and 100 for the expert.

Everything is deterministic under ``cfg.seed``: the environment reset, the action noise and the waypoint jitter each
draw from their own stream of one :class:`numpy.random.SeedSequence`.
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.envs import POINTMAZE_OBS_KEYS, flatten_obs
from privsynth.data.maze_planner import MazePlanner, WaypointController
from privsynth.errors import InvalidData

__all__ = [
    "PointMazeConfig",
    "generate_pointmaze",
    "reference_scores",
    "reference_return",
    "REFERENCE_POLICIES",
    "reference_args",
    "collect_pointmaze",
    "with_reference_scores",
    "eval_env_spec",
    "MAZES",
    "EPISODE_STEPS",
    "EVAL_GOAL_CELLS",
    "CUSTOM_MAZES",
    "maze_map",
]

MAZES: dict[str, str] = {"open": "Open", "umaze": "UMaze", "medium": "Medium", "large": "Large",
                         "umaze_mirror": "UMaze"}
EPISODE_STEPS: dict[str, int] = {"open": 300, "umaze": 300, "medium": 600, "large": 800, "umaze_mirror": 300}
# Seed of the reference-score rollouts by default: public and the same for every dataset of an environment.
REFERENCE_SEED = 0
# The single goal cell of Minari's EVAL_ENV_MAPS (row, col), D4RL's fixed maze2d targets; umaze_mirror's is umaze's
# goal mirrored.
EVAL_GOAL_CELLS: dict[str, tuple[int, int]] = {"open": (2, 3), "umaze": (1, 1), "medium": (6, 6), "large": (7, 9),
                                               "umaze_mirror": (1, 3)}
# Maps that are not gymnasium-robotics' own: made from one of its maps and passed to the env as ``maze_map``.
# ``umaze_mirror`` is U-Maze flipped left-right (same size, corridor lengths and turns): a public stand-in of umaze's
# difficulty for choosing hyperparameters without looking at results on umaze data (docs/synthesizers.md, issue 20).
CUSTOM_MAZES: dict[str, tuple[str, str]] = {"umaze_mirror": ("umaze", "mirror")}


@dataclass
class PointMazeConfig:
    """Settings of a PointMaze collection run (defaults from D4RL maze2d / Minari pointmaze generation)."""

    maze: str = "umaze"  # open | umaze | medium | large | umaze_mirror (CUSTOM_MAZES)
    steps: int = 100_000  # Minari/D4RL use 1,000,000
    seed: int = 0
    dense: bool = False  # reward exp(-distance) instead of 1[distance <= 0.45]
    action_noise: float = 0.5  # std of the Gaussian noise added to the controller's action
    ref_episodes: int = 100  # episodes per reference policy on the evaluation env (Minari: 100)
    # Seed of the reference rollouts. None: REFERENCE_SEED, a public constant, so the reference scores (which every
    # release copies as environment facts) are a function of the environment alone and say nothing about the data's
    # own seed. Benchmark suites pin it to the data seed to keep their committed normalisers (bench/sources.py).
    ref_seed: int | None = None
    name: str | None = None  # dataset name in DatasetInfo; default "pointmaze-<maze>[-dense]"

    def __post_init__(self) -> None:
        self.maze = str(self.maze).lower()
        if self.maze not in MAZES:
            raise InvalidData(f"unknown maze '{self.maze}'; choose one of {', '.join(MAZES)}")
        if self.steps < 1:
            raise InvalidData(f"steps must be at least 1, got {self.steps}")
        if not 0 <= self.action_noise < float("inf"):  # NaN and inf too: refused before any data is collected
            raise InvalidData(f"action_noise must be a finite non-negative std, got {self.action_noise}")
        if self.ref_episodes < 1:
            raise InvalidData(f"ref_episodes must be at least 1, got {self.ref_episodes}")

    @property
    def env_id(self) -> str:
        return f"PointMaze_{MAZES[self.maze]}{'Dense' if self.dense else ''}-v3"

    @property
    def dataset_name(self) -> str:
        return self.name or f"pointmaze-{self.maze}{'-dense' if self.dense else ''}"


def _register() -> None:
    from privsynth.data.envs import register_robotics_envs

    register_robotics_envs()


def _base_map(maze: str) -> list[list[Any]]:
    from gymnasium_robotics.envs.maze import maps

    if maze in CUSTOM_MAZES:
        base, how = CUSTOM_MAZES[maze]
        assert how == "mirror", how
        return [list(reversed(row)) for row in _base_map(base)]
    table = {"open": maps.OPEN, "umaze": maps.U_MAZE, "medium": maps.MEDIUM_MAZE, "large": maps.LARGE_MAZE}
    return [list(row) for row in table[maze]]


def maze_map(maze: str) -> list[list[Any]]:
    """The grid of a map (1 = wall, 0 = free), a fresh copy; custom maps (:data:`CUSTOM_MAZES`) included."""
    if str(maze).lower() not in MAZES:
        raise InvalidData(f"unknown maze '{maze}'; choose one of {', '.join(MAZES)}")
    return _base_map(str(maze).lower())


def eval_env_spec(maze: str, dense: bool = False) -> tuple[str, dict[str, Any]]:
    """(env_id, env_kwargs) of the evaluation environment of a map (see module docstring)."""
    maze = maze.lower()
    if maze not in MAZES:
        raise InvalidData(f"unknown maze '{maze}'; choose one of {', '.join(MAZES)}")
    grid = _base_map(maze)
    r, c = EVAL_GOAL_CELLS[maze]
    assert grid[r][c] == 0, f"evaluation goal cell {(r, c)} of {maze} is a wall"
    grid[r][c] = "g"
    env_id = f"PointMaze_{MAZES[maze]}{'Dense' if dense else ''}-v3"
    kwargs = {
        "maze_map": grid,
        "continuing_task": True,
        "reset_target": False,
        "max_episode_steps": EPISODE_STEPS[maze],
    }
    return env_id, kwargs


def _rollout_returns(
    env: gym.Env, policy_factory: Callable[[], Callable[[dict], np.ndarray]], episodes: int, seed: int
) -> np.ndarray:
    returns = np.zeros(episodes)
    for i in range(episodes):
        policy = policy_factory()
        obs, _ = env.reset(seed=seed + i)
        done, total = False, 0.0
        while not done:
            obs, r, term, trunc, _ = env.step(policy(obs))
            total += float(r)
            done = term or trunc
        returns[i] = total
    return returns


REFERENCE_POLICIES = ("random", "expert")  # the two policies whose mean returns are a map's reference scores


@functools.lru_cache(maxsize=64)
def reference_return(maze: str, dense: bool, episodes: int, seed: int, policy: str) -> float:
    """Mean return of one reference ``policy`` (``random`` or ``expert``) on the evaluation env of ``maze``.

    Each policy draws from its own stream of ``SeedSequence([seed, 7])`` and every episode resets the environment
    with its own seed, so the two are independent computations (another process may run either one).
    """
    if policy not in REFERENCE_POLICIES:
        raise InvalidData(f"unknown reference policy '{policy}'; choose one of {', '.join(REFERENCE_POLICIES)}")
    _register()
    env_id, kwargs = eval_env_spec(maze, dense)
    env = gym.make(env_id, **kwargs)
    maze_obj = env.unwrapped.maze
    rand_ss, jitter_ss = np.random.SeedSequence([seed, 7]).spawn(2)
    low, high = env.action_space.low, env.action_space.high
    horizon = EPISODE_STEPS[maze.lower()]
    if policy == "random":
        rand_rng = np.random.default_rng(rand_ss)

        def random_policy() -> Callable[[dict], np.ndarray]:
            block = iter(rand_rng.uniform(low, high, size=(horizon, len(low))).astype(np.float32))  # one per episode
            return lambda obs: next(block)

        factory = random_policy
    else:
        planner, jitter_rng = MazePlanner(maze_obj.maze_map), np.random.default_rng(jitter_ss)

        def factory() -> Callable[[dict], np.ndarray]:
            return WaypointController(maze_obj, planner=planner, rng=jitter_rng, action_low=float(low[0]),
                                      action_high=float(high[0]))

    returns = _rollout_returns(env, factory, episodes, seed)
    env.close()
    return float(returns.mean())


def reference_scores(maze: str, dense: bool = False, episodes: int = 100, seed: int = 0) -> tuple[float, float]:
    """(random, expert) mean returns on the evaluation env of ``maze`` over ``episodes`` seeded episodes.

    Deterministic, so results are cached per process (making several datasets of one map computes them once).
    """
    return (reference_return(maze, dense, episodes, seed, "random"),
            reference_return(maze, dense, episodes, seed, "expert"))


def generate_pointmaze(cfg: PointMazeConfig, progress: bool = True) -> OfflineDataset:
    """Collect a PointMaze dataset as D4RL maze2d (see module docstring); deterministic under ``cfg.seed``."""
    return with_reference_scores(collect_pointmaze(cfg, progress), cfg, reference_scores(*reference_args(cfg)))


def reference_args(cfg: PointMazeConfig) -> tuple[str, bool, int, int]:
    """The arguments of :func:`reference_scores` (and, with a policy, :func:`reference_return`) for ``cfg``'s set:
    the data seed never enters them unless ``cfg.ref_seed`` asks for it."""
    return cfg.maze, cfg.dense, cfg.ref_episodes, REFERENCE_SEED if cfg.ref_seed is None else cfg.ref_seed


def with_reference_scores(ds: OfflineDataset, cfg: PointMazeConfig, scores: tuple[float, float]) -> OfflineDataset:
    """``ds`` (from :func:`collect_pointmaze` with ``cfg``) carrying its (random, expert) reference scores: what
    :func:`generate_pointmaze` returns, for callers that compute the parts in separate processes."""
    return dataclasses.replace(ds, info=dataclasses.replace(ds.info, ref_min_score=scores[0], ref_max_score=scores[1]))


def _obs_slots(obs: dict[str, Any], keys: tuple[str, ...] | list[str]) -> list[tuple[str, int, int]]:
    """(key, first column, end column) of each key of a dict observation in its flat row (``flatten_obs`` order)."""
    slots, k = [], 0
    for key in keys:
        width = int(np.asarray(obs[key]).size)
        slots.append((key, k, k + width))
        k += width
    return slots


def collect_pointmaze(cfg: PointMazeConfig, progress: bool = True) -> OfflineDataset:
    """The collection run of :func:`generate_pointmaze` alone: its dataset without reference scores (None)."""
    _register()
    custom = {"maze_map": _base_map(cfg.maze)} if cfg.maze in CUSTOM_MAZES else {}
    env = gym.make(cfg.env_id, continuing_task=True, reset_target=True, max_episode_steps=cfg.steps + 1, **custom)
    maze = env.unwrapped.maze
    low, high = env.action_space.low.astype(np.float32), env.action_space.high.astype(np.float32)
    noise_ss, jitter_ss = np.random.SeedSequence(cfg.seed).spawn(2)
    noise_rng = np.random.default_rng(noise_ss)
    controller = WaypointController(
        maze, rng=np.random.default_rng(jitter_ss), action_low=float(low[0]), action_high=float(high[0])
    )
    n, obs_dim, act_dim = cfg.steps, 6, int(env.action_space.shape[0])
    observations = np.empty((n + 1, obs_dim), dtype=np.float32)
    actions = np.empty((n, act_dim), dtype=np.float32)
    rewards = np.empty(n, dtype=np.float32)
    timeouts = np.zeros(n, dtype=bool)
    noise = noise_rng.normal(0.0, cfg.action_noise, size=(n, act_dim))  # one draw for the whole run

    obs, _ = env.reset(seed=cfg.seed)
    observations[0] = flatten_obs(obs, POINTMAZE_OBS_KEYS)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc=f"collecting {cfg.dataset_name}", unit="step", mininterval=0.5)
    # the hot loop: the wrappers gym.make adds (time limit, reset order, the first step's checks) change nothing in a
    # run of n < max_episode_steps steps after a reset, so the environment is stepped directly; clipping is
    # np.clip's minimum(maximum(...)) without its dispatch, and the observation's keys go straight into their columns
    step, slots = env.unwrapped.step, _obs_slots(obs, POINTMAZE_OBS_KEYS)
    try:
        for t in range(n):
            action = np.minimum(np.maximum(controller(obs) + noise[t], low), high).astype(np.float32)
            obs, r, _, _, info = step(action)
            actions[t] = action
            rewards[t] = r
            row = observations[t + 1]
            for key, a, b in slots:
                row[a:b] = obs[key]
            timeouts[t] = bool(info["success"])
            if bar is not None and (t + 1) % 1000 == 0:
                bar.update(1000)
        if bar is not None:
            bar.update(n - bar.n)
    finally:
        if bar is not None:
            bar.close()
        env.close()
    timeouts[-1] = True
    episode_ids = np.concatenate([[0], np.cumsum(timeouts[:-1])]).astype(np.int64)

    eval_id, eval_kwargs = eval_env_spec(cfg.maze, cfg.dense)
    info = DatasetInfo(
        name=cfg.dataset_name,
        env_id=eval_id,
        env_kwargs=eval_kwargs,
        obs_keys=list(POINTMAZE_OBS_KEYS),
        action_low=low.tolist(),
        action_high=high.tolist(),
        ref_min_score=None,
        ref_max_score=None,
        sensitive=False,
        extra={
            "generator": "privsynth.data.pointmaze",
            "config": dataclasses.asdict(cfg),
            "collection_env_id": cfg.env_id,
            "collection_env_kwargs": {"continuing_task": True, "reset_target": True, **custom},
            "algorithm": "QIteration waypoint controller + N(0, 0.5^2) action noise",
        },
    )
    return OfflineDataset(
        observations=observations[:-1],
        actions=actions,
        rewards=rewards,
        next_observations=observations[1:],
        terminals=np.zeros(n, dtype=bool),
        timeouts=timeouts,
        episode_ids=episode_ids,
        info=info,
    )
