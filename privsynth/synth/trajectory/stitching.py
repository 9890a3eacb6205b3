"""Whole trajectories from fragments: generate, cut at the end flags, and stitch (PrivORL section VI-C).

Each trajectory starts from an empty link (all zeros, has-link flag 0). Every round, one fragment of H transitions is
sampled for every unfinished trajectory, conditioned on the last transition of its previous fragment (in model space,
flag 1). A trajectory ends at the first transition whose terminal flag or end-of-trajectory flag exceeds the
threshold (that transition is kept and marked terminal or timeout), or when it reaches ``max_length`` (marked
timeout). Rows are un-normalised before they leave this module (PrivORL-J saved normalised samples: anchors §1.6).

Seamlessness is measured, not assumed: for every boundary between consecutive fragments, the gap between the first
state of the new fragment and the last next state of the previous one, and the same gap between consecutive rows
inside fragments, both in un-normalised units. ``snap=True`` overwrites each state with the previous next state
(after measuring), which makes the released trajectories chain exactly.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

__all__ = ["StitchResult", "stitch"]


@dataclass
class StitchResult:
    """Stitched trajectories in raw units: rows [N, D] (model layout), episode ids, terminal and timeout flags."""

    rows: np.ndarray
    episode_ids: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    lengths: np.ndarray
    fragments: int = 0
    boundary_gaps: np.ndarray = field(default_factory=lambda: np.zeros(0))  # L2 gap per fragment boundary
    inner_gaps: np.ndarray = field(default_factory=lambda: np.zeros(0))  # L2 gap per consecutive pair inside fragments
    ended_by: dict[str, int] = field(default_factory=dict)

    @classmethod
    def concatenate(cls, results: "list[StitchResult]") -> "StitchResult":
        """Several stitching rounds as one result: episode ids run on, counts and gaps pool."""
        if len(results) == 1:
            return results[0]
        offsets = np.cumsum([0] + [len(r.lengths) for r in results[:-1]])
        ended: dict[str, int] = {}
        for r in results:
            for k, v in r.ended_by.items():
                ended[k] = ended.get(k, 0) + int(v)
        return cls(
            rows=np.concatenate([r.rows for r in results]),
            episode_ids=np.concatenate([r.episode_ids + off for r, off in zip(results, offsets)]),
            terminals=np.concatenate([r.terminals for r in results]),
            timeouts=np.concatenate([r.timeouts for r in results]),
            lengths=np.concatenate([r.lengths for r in results]),
            fragments=sum(r.fragments for r in results),
            boundary_gaps=np.concatenate([r.boundary_gaps for r in results]),
            inner_gaps=np.concatenate([r.inner_gaps for r in results]),
            ended_by=ended,
        )

    def stats(self) -> dict[str, Any]:
        """Summary: lengths, how trajectories ended, and the stitching gaps (mean / p95 / max L2, raw units)."""
        def summ(g: np.ndarray) -> dict[str, Any]:
            if g.size == 0:
                return {"n": 0, "mean": None, "p95": None, "max": None}  # JSON-safe (cards are JSON)
            return {"n": int(g.size), "mean": float(g.mean()), "p95": float(np.percentile(g, 95)), "max": float(g.max())}

        return {
            "trajectories": int(len(self.lengths)),
            "transitions": int(self.lengths.sum()),
            "mean_length": float(self.lengths.mean()) if len(self.lengths) else 0.0,
            "fragments": int(self.fragments),
            "ended_by": dict(self.ended_by),
            "boundary_gap": summ(self.boundary_gaps),
            "inner_gap": summ(self.inner_gaps),
        }


def stitch(
    sample_fragments: Callable[[torch.Tensor], torch.Tensor],
    n: int,
    *,
    horizon: int,
    data_dim: int,
    max_length: int,
    to_raw: Callable[[np.ndarray], np.ndarray],
    state_slice: slice,
    next_state_slice: slice,
    terminal_col: int,
    end_col: int,
    threshold: float = 0.5,
    batch_size: int = 512,
    snap: bool = False,
    progress: Callable[[int], None] | None = None,
) -> StitchResult:
    """Generate ``n`` trajectories with ``sample_fragments(cond [m, D + 1]) -> fragments [m, H, D]`` (model space).

    ``to_raw`` maps model-space rows [..., D] to raw units (un-normalising); flags are read from raw rows.
    """
    if n < 1 or max_length < 1:
        raise ValueError("need at least one trajectory and a positive maximum length")
    trajs: list[np.ndarray] = []
    term_flags: list[bool] = []
    ended = {"terminal": 0, "end_flag": 0, "max_length": 0}
    bgaps: list[np.ndarray] = []
    igaps: list[np.ndarray] = []
    n_frag = 0
    for start in range(0, n, batch_size):
        m = min(batch_size, n - start)
        cond = torch.zeros(m, data_dim + 1)
        parts: list[list[np.ndarray]] = [[] for _ in range(m)]
        length = np.zeros(m, dtype=np.int64)
        active = np.arange(m)
        last_next = np.zeros((m, next_state_slice.stop - next_state_slice.start), dtype=np.float32)
        done_term = np.zeros(m, dtype=bool)
        while active.size:
            frag = sample_fragments(cond[active])  # [a, H, D] model space
            n_frag += active.size
            raw = to_raw(frag.numpy().astype(np.float32))
            inner = np.linalg.norm(raw[:, 1:, state_slice] - raw[:, :-1, next_state_slice], axis=-1)
            still = []
            for j, i in enumerate(active):
                rows = raw[j]
                if length[i] > 0:
                    bgaps.append(np.linalg.norm(rows[0, state_slice] - last_next[i])[None])
                flags = (rows[:, terminal_col] > threshold) | (rows[:, end_col] > threshold)
                room = max_length - length[i]
                stop = int(np.argmax(flags)) + 1 if flags.any() else horizon
                keep = min(stop, room)
                parts[i].append(rows[:keep])
                igaps.append(inner[j, : max(keep - 1, 0)])
                length[i] += keep
                last_next[i] = rows[keep - 1, next_state_slice]
                if flags.any() and stop <= room:
                    done_term[i] = bool(rows[stop - 1, terminal_col] > threshold)
                    ended["terminal" if done_term[i] else "end_flag"] += 1
                elif length[i] >= max_length:
                    ended["max_length"] += 1
                else:
                    still.append(j)
                    cond[i, :data_dim] = frag[j, -1]
                    cond[i, data_dim] = 1.0
            active = active[still] if still else np.zeros(0, dtype=np.int64)
        for i in range(m):
            traj = np.concatenate(parts[i], axis=0)
            if snap and len(traj) > 1:
                traj = traj.copy()
                traj[1:, state_slice] = traj[:-1, next_state_slice]
            trajs.append(traj)
            term_flags.append(bool(done_term[i]))
        if progress is not None:
            progress(m)
    lengths = np.array([len(t) for t in trajs], dtype=np.int64)
    rows = np.concatenate(trajs, axis=0)
    ep = np.repeat(np.arange(len(trajs)), lengths)
    ends = np.cumsum(lengths) - 1
    terminals = np.zeros(len(rows), dtype=bool)
    timeouts = np.zeros(len(rows), dtype=bool)
    term_arr = np.array(term_flags)
    terminals[ends[term_arr]] = True
    timeouts[ends[~term_arr]] = True
    rows[:, terminal_col] = terminals.astype(np.float32)
    return StitchResult(
        rows=rows,
        episode_ids=ep,
        terminals=terminals,
        timeouts=timeouts,
        lengths=lengths,
        fragments=n_frag,
        boundary_gaps=np.concatenate(bgaps) if bgaps else np.zeros(0),
        inner_gaps=np.concatenate(igaps) if igaps else np.zeros(0),
        ended_by=ended,
    )
