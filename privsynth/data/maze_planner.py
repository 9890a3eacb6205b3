"""Maze planner and waypoint controller for PointMaze, as used to make D4RL maze2d / Minari pointmaze data.

* :class:`MazePlanner`: value iteration on the maze grid (states = free cells of ``maze.maze_map``; 4 deterministic
  moves, blocked by walls; reward 1 for entering the goal cell; γ = 0.99). The greedy rollout of the value table from
  the agent's cell is the cell path to the goal. Tables are cached per goal cell, so a long collection run solves each
  goal cell once (the maps have at most ~40 free cells).
* :class:`WaypointController`: a PD controller on waypoints, ``a = 10·(waypoint − xy) − 1·velocity`` clipped to the
  action box. Intermediate waypoints are cell centres jittered by ``−U(0,1)²·0.2`` per coordinate; the last waypoint
  is the exact goal; the controller advances when within 0.1 of a waypoint and re-plans whenever the desired goal
  moves (> 1e-3). This follows the Minari generation scripts (``scripts/pointmaze``: ``QIteration`` and
  ``WaypointController``) and D4RL's waypoint controller.

Written here rather than imported because those scripts are not an installable package. The controller reads the
dict observation of gymnasium-robotics PointMaze (``observation`` = [x, y, vx, vy], ``desired_goal``) and uses the
maze object's own ``cell_xy_to_rowcol`` / ``cell_rowcol_to_xy`` conversions. Arithmetic on the per-step path uses
Python floats (a 2-vector numpy op costs more than the arithmetic), which keeps the controller far cheaper than a
MuJoCo step.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

__all__ = ["MazePlanner", "WaypointController"]

_MOVES: tuple[tuple[int, int], ...] = ((-1, 0), (1, 0), (0, -1), (0, 1))  # up, down, left, right


def _is_free(cell: Any) -> bool:
    return not (isinstance(cell, (int, np.integer)) and int(cell) == 1)


class MazePlanner:
    """Value iteration on the free cells of a maze map (Minari's ``QIteration``), cached per goal cell."""

    def __init__(self, maze_map: Sequence[Sequence[Any]], gamma: float = 0.99, max_sweeps: int = 1000) -> None:
        self.maze_map = [list(row) for row in maze_map]
        self.rows = len(self.maze_map)
        self.cols = len(self.maze_map[0])
        self.gamma = gamma
        self.max_sweeps = max_sweeps
        self.free = np.array([[_is_free(c) for c in row] for row in self.maze_map], dtype=bool)
        self._cache: dict[tuple[int, int], np.ndarray] = {}

    def neighbours(self, cell: tuple[int, int]) -> list[tuple[int, int]]:
        """Free cells reachable from ``cell`` in one move (up, down, left, right)."""
        r, c = cell
        out = []
        for dr, dc in _MOVES:
            rr, cc = r + dr, c + dc
            if 0 <= rr < self.rows and 0 <= cc < self.cols and self.free[rr, cc]:
                out.append((rr, cc))
        return out

    def values(self, goal: tuple[int, int]) -> np.ndarray:
        """State values V[row, col] for reaching ``goal`` (−inf on walls); computed once per goal cell.

        Q(s, a) = 1[s' = goal] + γ·V(s') with V(goal) = 0 after entry counted (the goal is absorbing), swept until
        the values stop changing.
        """
        goal = (int(goal[0]), int(goal[1]))
        if goal in self._cache:
            return self._cache[goal]
        if not (0 <= goal[0] < self.rows and 0 <= goal[1] < self.cols) or not self.free[goal]:
            raise ValueError(f"goal cell {goal} is not a free cell of the maze")
        v = np.where(self.free, 0.0, -np.inf)
        cells = [(r, c) for r in range(self.rows) for c in range(self.cols) if self.free[r, c]]
        nbrs = {cell: self.neighbours(cell) for cell in cells}
        for _ in range(self.max_sweeps):
            new = v.copy()
            for cell in cells:
                if cell == goal:
                    new[cell] = 0.0
                    continue
                best = -np.inf
                for nxt in nbrs[cell]:
                    q = (1.0 if nxt == goal else 0.0) + self.gamma * v[nxt]
                    best = max(best, q)
                new[cell] = best if nbrs[cell] else 0.0
            if np.array_equal(new, v):
                break
            v = new
        self._cache[goal] = v
        return v

    def path(self, start: tuple[int, int], goal: tuple[int, int]) -> list[tuple[int, int]]:
        """Cells after ``start`` up to and including ``goal`` along the greedy value rollout ([] if start == goal)."""
        start = (int(start[0]), int(start[1]))
        goal = (int(goal[0]), int(goal[1]))
        v = self.values(goal)
        out: list[tuple[int, int]] = []
        cell = start
        for _ in range(self.rows * self.cols):
            if cell == goal:
                return out
            options = self.neighbours(cell)
            if not options:
                break
            cell = max(options, key=lambda n: (1.0 if n == goal else 0.0) + self.gamma * v[n])
            out.append(cell)
        if cell != goal:  # unreachable goal or the agent is inside a wall cell: head straight for the goal
            return [goal]
        return out


class WaypointController:
    """PD waypoint follower for PointMaze dict observations (Minari/D4RL expert; see module docstring).

    ``rng`` drives only the waypoint jitter; pass a seeded generator for deterministic behaviour.
    """

    def __init__(
        self,
        maze: Any,
        *,
        planner: MazePlanner | None = None,
        kp: float = 10.0,
        kd: float = 1.0,
        threshold: float = 0.1,
        jitter: float = 0.2,
        action_low: float = -1.0,
        action_high: float = 1.0,
        rng: np.random.Generator | None = None,
    ) -> None:
        self.maze = maze
        self.planner = planner or MazePlanner(maze.maze_map)
        self.kp, self.kd = kp, kd
        self.threshold = threshold
        self.jitter = jitter
        self.low, self.high = action_low, action_high
        self.rng = rng if rng is not None else np.random.default_rng()
        self.reset()

    def reset(self) -> None:
        """Forget the current goal and waypoints (the next call re-plans)."""
        self._goal: tuple[float, float] | None = None
        self._waypoints: list[tuple[float, float]] = []
        self._index = 0

    def _plan(self, xy: tuple[float, float], goal: tuple[float, float]) -> None:
        start = tuple(int(v) for v in self.maze.cell_xy_to_rowcol(np.asarray(xy)))
        goal_cell = tuple(int(v) for v in self.maze.cell_xy_to_rowcol(np.asarray(goal)))
        cells = self.planner.path(start, goal_cell)
        waypoints: list[tuple[float, float]] = []
        for cell in cells[:-1]:
            cx, cy = self.maze.cell_rowcol_to_xy(np.asarray(cell))
            jx, jy = self.rng.uniform(size=2) ** 2 * self.jitter
            waypoints.append((float(cx) - jx, float(cy) - jy))
        waypoints.append(goal)
        self._goal = goal
        self._waypoints = waypoints
        self._index = 0

    @property
    def waypoints(self) -> list[tuple[float, float]]:
        """Waypoints still ahead (the current one first)."""
        return self._waypoints[self._index :]

    def __call__(self, obs: dict[str, np.ndarray]) -> np.ndarray:
        """Action for a PointMaze dict observation."""
        o = obs["observation"]
        x, y, vx, vy = float(o[0]), float(o[1]), float(o[2]), float(o[3])
        g = obs["desired_goal"]
        goal = (float(g[0]), float(g[1]))
        if self._goal is None or math.hypot(goal[0] - self._goal[0], goal[1] - self._goal[1]) > 1e-3:
            self._plan((x, y), goal)
        wx, wy = self._waypoints[self._index]
        if self._index < len(self._waypoints) - 1 and math.hypot(wx - x, wy - y) <= self.threshold:
            self._index += 1
            wx, wy = self._waypoints[self._index]
        ax = min(max(self.kp * (wx - x) - self.kd * vx, self.low), self.high)
        ay = min(max(self.kp * (wy - y) - self.kd * vy, self.low), self.high)
        return np.array([ax, ay], dtype=np.float32)
