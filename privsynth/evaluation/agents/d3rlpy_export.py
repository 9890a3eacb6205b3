"""Export an :class:`~privsynth.data.dataset.OfflineDataset` to d3rlpy's ``MDPDataset`` (optional extra).

d3rlpy (``pip install 'privsynth[d3rlpy]'``, pinned 2.8.0) is not a dependency of the harness: our agents are compact
plain-torch learners (see :mod:`privsynth.evaluation.agents`). This module is for users who prefer d3rlpy's
algorithms; d3rlpy is imported only inside :func:`to_d3rlpy`.

d3rlpy stores episodes as observation sequences and derives a transition's next observation from the following row;
an episode that ends in a timeout loses its last transition, and an episode that ends in a terminal gets a zero next
observation. :func:`d3rlpy_arrays` therefore prepares rows so that d3rlpy sees exactly our transitions:

* ``"episodes"`` layout: each episode's observations in order; if it does not end in a terminal, one extra row holding
  its final next observation (zero action and reward, ``timeout=1``) closes it, so no transition is lost. Valid when
  ``next_observations[t] == observations[t+1]`` inside every episode and terminals only end episodes (real rollouts).
* ``"transitions"`` layout: every transition is its own d3rlpy episode: ``(s, a, r)`` then ``(s', 0, 0)`` with
  ``timeout=1``, or a single row with ``terminal=1``. Exact for independent synthetic transitions (PrivORL-n output).
* ``"auto"`` (default) picks ``"episodes"`` when the data is consistent with it, else ``"transitions"``.
"""
from __future__ import annotations

import contextlib
import io
from typing import Any, Literal

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivsynthError

__all__ = ["d3rlpy_arrays", "to_d3rlpy", "episodes_layout_valid", "require_d3rlpy"]

Layout = Literal["auto", "episodes", "transitions"]


def episodes_layout_valid(data: OfflineDataset, *, atol: float = 1e-6) -> bool:
    """True when next observations chain into the following observations and terminals only end episodes."""
    starts = np.concatenate([[0], np.cumsum(data.episode_lengths())[:-1]])
    ends = starts + data.episode_lengths() - 1  # last row of each episode
    is_end = np.zeros(data.n_transitions, dtype=bool)
    is_end[ends] = True
    if np.any(data.terminals & ~is_end):
        return False
    inner = ~is_end[:-1]  # row t whose successor t+1 is in the same episode
    return bool(np.allclose(data.next_observations[:-1][inner], data.observations[1:][inner], atol=atol))


def d3rlpy_arrays(data: OfflineDataset, layout: Layout = "auto") -> dict[str, np.ndarray]:
    """Rows for ``d3rlpy.dataset.MDPDataset``: observations, actions, rewards, terminals, timeouts (float32)."""
    if layout == "auto":
        layout = "episodes" if episodes_layout_valid(data) else "transitions"
    if layout == "episodes":
        if not episodes_layout_valid(data):
            raise InvalidData(
                f"dataset '{data.info.name}' cannot use the 'episodes' layout: next observations do not chain within "
                "episodes or a terminal falls inside an episode; use layout='transitions'"
            )
        lengths = data.episode_lengths()
        last = np.cumsum(lengths) - 1
        closed = data.terminals[last]  # episodes ending in a terminal need no extra row
        # position of each original row after inserting one row after every open episode
        shift = np.repeat(np.concatenate([[0], np.cumsum(~closed)[:-1]]), lengths)
        rows = np.arange(data.n_transitions) + shift
        extra = last[~closed] + shift[last[~closed]] + 1
        total = data.n_transitions + int((~closed).sum())
        src_obs, extra_obs = data.observations, data.next_observations[last[~closed]]
        term_rows = rows[data.terminals]
    elif layout == "transitions":
        open_ = ~data.terminals
        rows = np.arange(data.n_transitions) + np.concatenate([[0], np.cumsum(open_)[:-1]])
        extra = rows[open_] + 1
        total = data.n_transitions + int(open_.sum())
        src_obs, extra_obs = data.observations, data.next_observations[open_]
        term_rows = rows[data.terminals]
    else:
        raise InvalidData(f"unknown layout '{layout}'; use 'auto', 'episodes' or 'transitions'")
    obs = np.zeros((total, data.obs_dim), dtype=np.float32)
    act = np.zeros((total, data.act_dim), dtype=np.float32)
    rew = np.zeros(total, dtype=np.float32)
    terminals = np.zeros(total, dtype=np.float32)
    timeouts = np.zeros(total, dtype=np.float32)
    obs[rows], act[rows], rew[rows] = src_obs, data.actions, data.rewards
    obs[extra] = extra_obs
    terminals[term_rows] = 1.0
    timeouts[extra] = 1.0
    return {"observations": obs, "actions": act, "rewards": rew, "terminals": terminals, "timeouts": timeouts}


def require_d3rlpy() -> Any:
    """The d3rlpy module, or a one-line :class:`PrivsynthError` naming the extra to install."""
    try:
        with contextlib.redirect_stderr(io.StringIO()):  # d3rlpy imports the old gym, which prints a banner
            import d3rlpy
    except ImportError:
        raise PrivsynthError(
            "d3rlpy is not installed; install the optional extra with: pip install 'privsynth[d3rlpy]' (d3rlpy 2.8.0)"
        ) from None
    return d3rlpy


def to_d3rlpy(data: OfflineDataset, layout: Layout = "auto") -> Any:
    """A ``d3rlpy.dataset.MDPDataset`` holding exactly ``data``'s transitions: discrete actions when the dataset's
    schema declares one categorical or binary action (value indices), else continuous."""
    d3rlpy = require_d3rlpy()
    arrays = d3rlpy_arrays(data, layout)
    space = d3rlpy.constants.ActionSpace.DISCRETE if _discrete_schema_action(data) else \
        d3rlpy.constants.ActionSpace.CONTINUOUS
    with contextlib.redirect_stdout(io.StringIO()):  # its "signatures automatically determined" info lines
        return d3rlpy.dataset.MDPDataset(
            observations=arrays["observations"],
            actions=arrays["actions"],
            rewards=arrays["rewards"],
            terminals=arrays["terminals"],
            timeouts=arrays["timeouts"],
            action_space=space,
        )


def _discrete_schema_action(data: OfflineDataset) -> bool:
    """Whether ``data``'s schema declares a single categorical or binary action."""
    acts = (data.info.schema or {}).get("actions") or []
    return len(acts) == 1 and acts[0].get("kind") in ("categorical", "binary")
