"""Environment adapters: put a simulator in a recorded state, step it, and recompute reward and termination.

Used by the RL-aware checks of the fidelity report (:mod:`privsynth.evaluation.rl_checks`) and by the free
post-processing of a release (:mod:`privsynth.release.postprocess`), so they live here, below both. Each adapter
answers ``simulate`` (state setter + one step), ``reward``, ``terminal``, ``in_wall`` and ``bins`` for one family:
:class:`PointMazeAdapter` for gymnasium-robotics PointMaze (qpos = xy, qvel = velocity, goal from the
``desired_goal`` part of the flat observation), :class:`MujocoLocomotionAdapter` for gymnasium MuJoCo locomotion
(observation = qpos without the first ``k`` root coordinates, then qvel; the excluded coordinates are set to 0, which
the dynamics of these robots do not depend on), and :class:`GridAdapter` (coverage only) when there is no simulator.
Our own code: gymnasium has no "step from this state" API, and each family hides its state differently.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

import numpy as np

from privsynth.data.dataset import DatasetInfo
from privsynth.errors import PrivsynthError

__all__ = ["EnvAdapter", "PointMazeAdapter", "MujocoLocomotionAdapter", "GridAdapter", "adapter_for",
           "simulator_kind", "simulator_kind_of", "hidden_root_coords"]


class EnvAdapter(ABC):
    """Environment-specific part of the checks. ``state_dims`` are the observation dims the simulator determines."""

    name: str = "adapter"
    state_dims: np.ndarray
    n_bins: int

    def simulate(self, obs: np.ndarray, action: np.ndarray) -> np.ndarray | None:
        """Next value of ``obs[state_dims]`` after one environment step from ``obs`` under ``action`` (None: no simulator)."""
        return None

    def reward(self, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray | None:
        """Vectorised reward of transitions [N, ·] -> [N] (None when not computable from the transition)."""
        return None

    def terminal(self, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray | None:
        """Vectorised termination flag [N] (None when not computable)."""
        return None

    def in_wall(self, obs: np.ndarray) -> np.ndarray | None:
        """Per state [N]: True where the state is impossible (inside a wall, off the map); None: no such notion."""
        return None

    def goal_in_wall(self, obs: np.ndarray) -> np.ndarray | None:
        """Per row [N]: True where the desired goal the row carries is impossible; None: no goal in the observation."""
        return None

    def determined(self, obs: np.ndarray) -> np.ndarray | None:
        """Per row [N]: True where the observation fixes the simulator state, so a step from it can be compared with
        the recorded one; None: every row does."""
        return None

    @abstractmethod
    def bins(self, obs: np.ndarray) -> np.ndarray:
        """Coverage bin of each state [N] in 0..n_bins-1, or -1 for an invalid state (inside a wall, off the map)."""

    def close(self) -> None:
        pass


def _obs_layout(info: DatasetInfo, env: Any) -> dict[str, slice]:
    """Slices of each dict-observation key in the flat observation, in ``obs_keys`` order."""
    layout, start = {}, 0
    for key in info.obs_keys or []:
        size = int(np.prod(env.unwrapped.observation_space[key].shape))
        layout[key] = slice(start, start + size)
        start += size
    return layout


class PointMazeAdapter(EnvAdapter):
    """gymnasium-robotics PointMaze: state = (x, y, vx, vy) = (qpos, qvel); reward and termination from the goal."""

    name = "pointmaze"

    def __init__(self, env: Any, info: DatasetInfo, *, bins_per_cell: int = 4) -> None:
        self.env = env
        self.maze_env = env.unwrapped
        self.point_env = self.maze_env.point_env
        layout = _obs_layout(info, env)
        if "observation" not in layout:
            raise PrivsynthError(f"dataset '{info.name}' has no 'observation' key; cannot map it to the PointMaze state")
        obs_sl = layout["observation"]
        self.pos = np.arange(obs_sl.start, obs_sl.start + 2)
        self.state_dims = np.arange(obs_sl.start, obs_sl.stop)
        goal = layout.get("desired_goal")
        self.goal = None if goal is None else np.arange(goal.start, goal.stop)
        self.reward_type = self.maze_env.reward_type
        self.continuing = bool(self.maze_env.continuing_task)
        maze = self.maze_env.maze
        self.scale = float(maze.maze_size_scaling)
        self.x_center, self.y_center = float(maze.x_map_center), float(maze.y_map_center)
        grid = np.array([[1 if c == 1 else 0 for c in row] for row in maze.maze_map])
        self.k = int(bins_per_cell)
        self.rows, self.cols = grid.shape
        fine = np.kron(1 - grid, np.ones((self.k, self.k), dtype=int)).astype(bool)  # True on free sub-cells
        self._bin_id = np.full(fine.shape, -1)
        self._bin_id[fine] = np.arange(int(fine.sum()))
        self.n_bins = int(fine.sum())

    def simulate(self, obs: np.ndarray, action: np.ndarray) -> np.ndarray:
        s = np.asarray(obs, dtype=np.float64)[self.state_dims]
        if self.goal is not None:
            self.maze_env.goal = np.asarray(obs, dtype=np.float64)[self.goal]
        self.point_env.data.qacc_warmstart[:] = 0  # no solver state carried over from the previous row
        self.point_env.set_state(s[:2].copy(), s[2:4].copy())
        nxt, *_ = self.point_env.step(np.asarray(action, dtype=np.float64))
        return np.asarray(nxt, dtype=np.float64)

    def _distance(self, obs: np.ndarray, next_obs: np.ndarray) -> np.ndarray | None:
        if self.goal is None:
            return None
        # PointMaze-v3 scores a step against the goal its next observation carries: on the step that reaches a goal
        # (continuing task, reset_target) the new goal is drawn first, and both reward and next observation use it.
        return np.linalg.norm(next_obs[:, self.pos] - next_obs[:, self.goal], axis=-1)

    def reward(self, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray | None:
        d = self._distance(obs, next_obs)
        if d is None:
            return None
        return np.exp(-d) if self.reward_type == "dense" else (d <= 0.45).astype(np.float64)

    def terminal(self, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray | None:
        if self.continuing:
            return np.zeros(len(obs), dtype=bool)
        d = self._distance(obs, next_obs)
        return None if d is None else d <= 0.45

    def in_wall(self, obs: np.ndarray) -> np.ndarray:
        """The ball's centre in a wall cell or off the map (no valid coverage bin)."""
        return self.bins(obs) < 0

    def goal_in_wall(self, obs: np.ndarray) -> np.ndarray | None:
        """The desired goal in a wall cell or off the map: PointMaze draws its goals in free cells only."""
        if self.goal is None:
            return None
        return self._cell_bins(np.asarray(obs, dtype=np.float64)[:, self.goal]) < 0

    def bins(self, obs: np.ndarray) -> np.ndarray:
        return self._cell_bins(np.asarray(obs, dtype=np.float64)[:, self.pos])

    def _cell_bins(self, xy: np.ndarray) -> np.ndarray:
        i = np.floor((self.y_center - xy[:, 1]) / self.scale * self.k).astype(np.int64)
        j = np.floor((xy[:, 0] + self.x_center) / self.scale * self.k).astype(np.int64)
        inside = (i >= 0) & (i < self.rows * self.k) & (j >= 0) & (j < self.cols * self.k)
        out = np.full(len(xy), -1, dtype=np.int64)
        out[inside] = self._bin_id[i[inside], j[inside]]
        return out

    def close(self) -> None:
        self.env.close()


class GridAdapter(EnvAdapter):
    """No simulator: coverage only, on a ``bins`` x ``bins`` grid over the first two state dims (real data's range)."""

    name = "grid"

    def __init__(self, reference_obs: np.ndarray, *, bins: int = 20) -> None:
        x = np.asarray(reference_obs, dtype=np.float64)
        self.dims = np.arange(min(2, x.shape[1]))
        self.lo = x[:, self.dims].min(axis=0)
        self.hi = x[:, self.dims].max(axis=0)
        self.b = int(bins)
        self.state_dims = np.arange(x.shape[1])
        self.n_bins = self.b ** len(self.dims)

    def bins(self, obs: np.ndarray) -> np.ndarray:
        x = np.asarray(obs, dtype=np.float64)[:, self.dims]
        width = np.where(self.hi > self.lo, self.hi - self.lo, 1.0)
        idx = np.floor((x - self.lo) / width * self.b).astype(np.int64)
        idx = np.where(x == self.hi, self.b - 1, idx)  # the real maximum belongs to the last bin
        valid = ((idx >= 0) & (idx < self.b)).all(axis=1)
        flat = np.ravel_multi_index(tuple(np.clip(idx, 0, self.b - 1).T), (self.b,) * len(self.dims))
        return np.where(valid, flat, -1)


class MujocoLocomotionAdapter(GridAdapter):
    """gymnasium MuJoCo locomotion (HalfCheetah, Hopper, Walker2d, ...): obs = qpos[k:] | qvel, k root coords hidden.

    The hidden root coordinates are set to 0 (translation invariance); reward and termination come from the
    environment's own ``step`` after the state is set, so they are compared against the simulator, not recomputed
    from the recorded next state. Coverage uses the grid over the first two observation dims.
    """

    name = "mujoco"

    def __init__(self, env: Any, reference_obs: np.ndarray, *, bins: int = 20) -> None:
        super().__init__(reference_obs, bins=bins)
        self.env = env
        self.mj = env.unwrapped
        nq, nv = self.mj.model.nq, self.mj.model.nv
        hidden = hidden_root_coords(env)
        if hidden is None:
            raise PrivsynthError(f"observation of width {int(np.prod(env.observation_space.shape))} is not "
                                 f"qpos[k:] | qvel for nq={nq}, nv={nv}; no dynamics adapter")
        self.hidden = hidden
        self.nq, self.nv = nq, nv
        self._last: dict[str, np.ndarray] = {}
        # gymnasium's Hopper and Walker2d (v4, v5) observe qvel clipped to [-10, 10]: a row at the clip does not fix
        # the state it came from, so stepping from it is no test of the recorded next state (determined())
        self.velocity_clip = 10.0 if type(self.mj).__name__ in ("HopperEnv", "Walker2dEnv") else None

    def determined(self, obs: np.ndarray) -> np.ndarray | None:
        if self.velocity_clip is None:
            return None
        start = self.nq - self.hidden
        vel = np.asarray(obs, dtype=np.float64)[:, start : start + self.nv]
        return (np.abs(vel) < self.velocity_clip - 1e-6).all(axis=1)

    def step_from(self, obs: np.ndarray, action: np.ndarray) -> tuple[np.ndarray, float, bool]:
        """(next observation, reward, terminated) of one environment step from the state ``obs`` under ``action``."""
        obs = np.asarray(obs, dtype=np.float64)
        qpos = np.concatenate([np.zeros(self.hidden), obs[: self.nq - self.hidden]])
        qvel = obs[self.nq - self.hidden : self.nq - self.hidden + self.nv]
        self.mj.data.qacc_warmstart[:] = 0  # no solver state carried over from the previous row
        self.mj.set_state(qpos, qvel)
        nxt, r, term, _, _ = self.mj.step(np.asarray(action, dtype=np.float64))
        return np.asarray(nxt, dtype=np.float64), float(r), bool(term)

    def terminated_at(self, next_obs: np.ndarray) -> np.ndarray | None:
        """Per row [N]: the environment's own termination rule read at the state ``next_obs`` (no step taken), or
        None when the environment never terminates. gymnasium's Hopper, Walker2d, Ant and Humanoid (v4, v5) end an
        episode when the state they step into is not ``is_healthy`` (and ``terminate_when_unhealthy``), so the flag
        of a transition is a function of its s′ alone."""
        if not hasattr(self.mj, "is_healthy") or not getattr(self.mj, "_terminate_when_unhealthy", True):
            return None
        out = np.zeros(len(next_obs), dtype=bool)
        for i, o in enumerate(np.asarray(next_obs, dtype=np.float64)):
            qpos = np.concatenate([np.zeros(self.hidden), o[: self.nq - self.hidden]])
            self.mj.set_state(qpos, o[self.nq - self.hidden : self.nq - self.hidden + self.nv])
            out[i] = not self.mj.is_healthy
        return out

    def simulate(self, obs: np.ndarray, action: np.ndarray) -> np.ndarray:
        return self.step_from(obs, action)[0]

    def reward(self, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        return np.array([self.step_from(o, a)[1] for o, a in zip(obs, action)])

    def terminal(self, obs: np.ndarray, action: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        return np.array([self.step_from(o, a)[2] for o, a in zip(obs, action)])

    def close(self) -> None:
        self.env.close()


def adapter_for(
    info: DatasetInfo, reference_obs: np.ndarray, *, bins_per_cell: int = 4, grid_bins: int = 20, seed: int = 0
) -> EnvAdapter:
    """The adapter for a dataset's environment; a coverage-only :class:`GridAdapter` when there is none.

    ``bins_per_cell`` and ``grid_bins`` set the coverage resolution; ``seed`` resets the environment once."""
    if not info.env_id:
        return GridAdapter(reference_obs, bins=grid_bins)
    from privsynth.data.envs import make_env

    env = make_env(info)
    env.reset(seed=seed)
    kind = simulator_kind(env)
    if kind == "pointmaze":
        return PointMazeAdapter(env, info, bins_per_cell=bins_per_cell)
    if kind == "mujoco":
        return MujocoLocomotionAdapter(env, reference_obs, bins=grid_bins)
    env.close()
    return GridAdapter(reference_obs, bins=grid_bins)


def simulator_kind(env: Any) -> str | None:
    """``"pointmaze"`` (gymnasium-robotics PointMaze), ``"mujoco"`` (a MuJoCo env whose state can be set from an
    observation: :func:`hidden_root_coords`) or None."""
    unwrapped = env.unwrapped
    if hasattr(unwrapped, "point_env") and hasattr(unwrapped, "maze"):
        return "pointmaze"
    if hasattr(unwrapped, "set_state") and hasattr(unwrapped, "model") and hidden_root_coords(env) is not None:
        return "mujoco"
    return None


def simulator_kind_of(info: DatasetInfo) -> str | None:
    """:func:`simulator_kind` of a dataset's environment, made and closed here; None for data without an environment
    id. Reads the environment's id only (a public fact); an environment this machine cannot make raises
    :class:`~privsynth.errors.PrivsynthError` (:func:`~privsynth.data.envs.make_env`)."""
    if not info.env_id:
        return None
    from privsynth.data.envs import make_env

    env = make_env(info)
    try:
        return simulator_kind(env)
    finally:
        env.close()


def simulator_kind_or_none(info: DatasetInfo) -> str | None:
    """:func:`simulator_kind_of`, with None for an environment this machine cannot make as well: for defaults that
    turn something on only where a simulator repairs the rows (a public fact)."""
    from privsynth.errors import PrivsynthError

    try:
        return simulator_kind_of(info)
    except PrivsynthError:
        return None


def hidden_root_coords(env: Any) -> int | None:
    """How many leading qpos coordinates a MuJoCo environment's observation hides (k of ``qpos[k:] | qvel``, 0-3),
    or None when the observation is not of that form (e.g. Ant-v5's contact forces): then a row does not fix the
    simulator state, and no step or state check can start from it."""
    model = env.unwrapped.model
    hidden = model.nq + model.nv - int(np.prod(env.observation_space.shape))
    return hidden if 0 <= hidden <= 3 else None

