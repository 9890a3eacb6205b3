"""D4RL-style arrays as an :class:`~privsynth.data.dataset.OfflineDataset`: ``observations``, ``actions``,
``rewards``, ``next_observations``, ``terminals`` and, when present, ``timeouts`` and ``episode_ids`` (what
``privsynth datasets export`` writes, and what ``datasets import`` and ``audit`` read back)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData

__all__ = ["D4RL_KEYS", "from_d4rl_arrays"]

D4RL_KEYS = ("observations", "actions", "rewards", "next_observations", "terminals")


def from_d4rl_arrays(arrays: Mapping[str, Any], info: DatasetInfo) -> OfflineDataset:
    """The dataset of ``arrays`` (the :data:`D4RL_KEYS`, optional ``timeouts``/``episode_ids``): without episode ids,
    an episode ends at each terminal or timeout."""
    n = len(np.asarray(arrays["rewards"]).reshape(-1))
    terminals = _flags(arrays["terminals"], "terminals")
    timeouts = _flags(arrays.get("timeouts", np.zeros(n, bool)), "timeouts")
    if "episode_ids" in arrays:
        episode_ids = np.asarray(arrays["episode_ids"])
    else:
        ends = terminals | timeouts
        episode_ids = np.concatenate([[0], np.cumsum(ends[:-1])]) if ends.size == n else np.zeros(n)
    return OfflineDataset(observations=arrays["observations"], actions=arrays["actions"], rewards=arrays["rewards"],
                          next_observations=arrays["next_observations"], terminals=terminals, timeouts=timeouts,
                          episode_ids=episode_ids, info=info)


def _flags(values: Any, name: str) -> np.ndarray:
    """A 0/1 array as booleans; strings (where 'false' would read as True), fractions and NaN are refused."""
    a = np.asarray(values)
    if a.dtype.kind not in "biuf":
        raise InvalidData(f"{name} must hold booleans or 0/1, got an array of dtype {a.dtype}")
    if a.dtype.kind != "b" and not np.isin(a, (0, 1)).all():
        raise InvalidData(f"{name} must hold booleans or 0/1, got other values (e.g. {a[~np.isin(a, (0, 1))].flat[0]!r})")
    return a.astype(bool).reshape(-1)
