"""Whole trajectories from independently sampled transitions: post-processing of released rows (free under DP).

A release at unit = trajectory should hold episodes, not one-step fragments. :func:`chain_episodes` links rows
greedily: an episode starts at an unused non-terminal row and each next row is the unused one whose state is closest
to the current row's next state (in the normalised encoding); a terminal row ends the episode. Episode lengths thus
follow the model's own terminal rate; nothing but the sampled rows is read.

:func:`chain_nearest` does the same for large transition-level releases (the ``chained`` layout,
:mod:`privsynth.release.layout`) in about O(N log N): k nearest candidates per row from a k-d tree instead of a scan
of every row, so a million rows chain in seconds, not hours.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from privsynth.errors import InvalidData

__all__ = ["Chains", "chain_episodes", "chain_nearest", "choose_terminals"]


def choose_terminals(scores: np.ndarray, threshold: float, *,
                     target_share: float | None = None) -> tuple[np.ndarray, dict[str, object]]:
    """Which rows end an episode, from the sampled terminal scores [N] (post-processing of DP outputs only).

    With ``target_share`` (a share of terminal rows, from DP outputs or public facts only), the k = round(N × share)
    rows of highest score are terminal (k clipped to [1, N]), so episodes average 1 / share rows. Without it, the
    rule of a transition release: score > ``threshold``. Returns (terminal mask [N] bool, the rule's record for the
    release's metadata: ``terminal_rule``, ``terminal_rows`` and, for the share rule, ``terminal_target_length``)."""
    s = np.asarray(scores, dtype=np.float64)
    n = len(s)
    if target_share is None or not np.isfinite(target_share) or n == 0:
        term = s > threshold
        return term, {"terminal_rule": f"score > {threshold:g}", "terminal_rows": int(term.sum())}
    k = int(min(max(round(n * float(target_share)), 1), n))
    term = np.zeros(n, dtype=bool)
    term[np.argsort(-s, kind="stable")[:k]] = True
    return term, {"terminal_rule": "top-k by score, k = rows x target share", "terminal_rows": k,
                  "terminal_target_length": float(1.0 / float(target_share))}


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


@dataclass(frozen=True)
class Chains:
    """What :func:`chain_nearest` returns, per row of the release order (``order``: indices into the input rows)."""

    order: np.ndarray  # [N] int64: the input row at each position of the release
    episode_ids: np.ndarray  # [N] int64: the chain of each ordered row, 0, 1, ... in order
    timeouts: np.ndarray  # [N] bool: a chain's last row that is not terminal (its episode is truncated there)
    snap: np.ndarray  # [N] float: distance from an ordered row's own state to the previous row's next state (0 at starts)
    ends: dict[str, int]  # why chains ended: terminal, no_candidate, max_length, last_row


def chain_nearest(states: np.ndarray, next_states: np.ndarray, terminals: np.ndarray, *, k: int = 16,
                  max_length: int = 1000, approx: float = 0.0) -> Chains:
    """Chains of rows for a large release, in about O(N log N): a k-d tree over the states (each column scaled by its
    standard deviation over the rows, so no column dominates the distance), the ``k`` nearest states of every row's
    next state (``approx``: cKDTree's ``eps``, candidates within a factor 1 + approx of the exact k-th distance; one
    thread), then a greedy walk: a chain starts at the first unused row (input order) and continues to the first
    unused candidate, nearest first. A chain ends at a terminal row, when none of its row's ``k`` candidates is
    unused, or at ``max_length`` rows. A pure function of the rows (deterministic; nothing else is read). ``snap`` is
    measured in the rows' own units (Euclidean)."""
    from scipy.spatial import cKDTree

    s = np.asarray(states, dtype=np.float64)
    nx = np.asarray(next_states, dtype=np.float64)
    term = np.asarray(terminals, dtype=bool)
    n = len(s)
    if n == 0 or nx.shape != s.shape or term.shape != (n,) or k < 1 or max_length < 1:
        raise InvalidData(f"chain_nearest needs N >= 1 rows of states and next states of one shape, N terminals, "
                         f"k >= 1 and max_length >= 1 (got {s.shape}, {nx.shape}, {term.shape}, k={k}, "
                         f"max_length={max_length})")
    scale = s.std(axis=0)
    scale[~(scale > 0)] = 1.0
    tree = cKDTree(s / scale)
    k = min(k, n)
    cand = np.empty((n, k), dtype=np.int64)
    for i in range(0, n, 65536):  # bounded memory: a block of queries at a time
        idx = tree.query(nx[i:i + 65536] / scale, k=k, eps=approx, workers=1)[1]
        cand[i:i + 65536] = np.asarray(idx).reshape(-1, k)
    del tree
    used = bytearray(n)
    order = np.empty(n, dtype=np.int64)
    chain_end = np.zeros(n, dtype=bool)
    ends = {"terminal": 0, "no_candidate": 0, "max_length": 0, "last_row": 0}
    term_l = term.tolist()
    pos = start = 0
    while pos < n:
        while used[start]:
            start += 1
        cur, length = start, 0
        while True:
            used[cur] = 1
            order[pos] = cur
            pos += 1
            length += 1
            if term_l[cur]:
                ends["terminal"] += 1
                break
            if pos == n:
                ends["last_row"] += 1
                break
            if length >= max_length:
                ends["max_length"] += 1
                break
            nxt = -1
            for j in cand[cur].tolist():
                if not used[j]:
                    nxt = j
                    break
            if nxt < 0:
                ends["no_candidate"] += 1
                break
            cur = nxt
        chain_end[pos - 1] = True
    episode_ids = np.concatenate([[0], np.cumsum(chain_end[:-1])]).astype(np.int64)
    starts = np.r_[True, chain_end[:-1]]
    snap = np.zeros(n)
    follow = np.flatnonzero(~starts)
    snap[follow] = np.linalg.norm(s[order[follow]] - nx[order[follow - 1]], axis=1)
    timeouts = chain_end & ~term[order]
    return Chains(order=order, episode_ids=episode_ids, timeouts=timeouts, snap=snap, ends=ends)
