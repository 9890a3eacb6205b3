"""Whole trajectories from independently sampled transitions: post-processing of released rows (free under DP).

A release at unit = trajectory should hold episodes, not one-step fragments. :func:`chain_episodes` links rows
greedily: an episode starts at an unused non-terminal row and each next row is the unused one whose state is closest
to the current row's next state (in the normalised encoding); a terminal row ends the episode. Episode lengths thus
follow the model's own terminal rate; nothing but the sampled rows is read.
"""
from __future__ import annotations

import numpy as np

__all__ = ["chain_episodes"]


def chain_episodes(states: np.ndarray, next_states: np.ndarray,
                   terminals: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(row order, episode id per ordered row, timeouts per ordered row) for rows with ``states`` [N, k],
    ``next_states`` [N, k] and ``terminals`` [N] (bool). The last episode, if it runs out of rows before a terminal
    row, is truncated (its timeout flag is set); so is every episode whose chain ends without one."""
    s = np.asarray(states, dtype=np.float32)
    nx = np.asarray(next_states, dtype=np.float32)
    term = np.asarray(terminals, dtype=bool)
    n = len(s)
    used = np.zeros(n, dtype=bool)
    sq = (s * s).sum(axis=1)
    order, ids, timeouts = [], [], []
    episode = 0
    starts = list(np.flatnonzero(~term)[::-1]) + list(np.flatnonzero(term)[::-1])  # non-terminal rows first
    while len(order) < n:
        while used[starts[-1]]:
            starts.pop()
        cur = starts.pop()
        while True:
            used[cur] = True
            order.append(cur)
            ids.append(episode)
            timeouts.append(False)
            if term[cur]:
                break
            if used.all():
                timeouts[-1] = True
                break
            d = sq - 2.0 * (s @ nx[cur])
            d[used] = np.inf
            cur = int(np.argmin(d))
        episode += 1
    return np.asarray(order), np.asarray(ids, dtype=np.int64), np.asarray(timeouts, dtype=bool)
