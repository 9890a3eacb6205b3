"""How a transition-level release is laid out in Minari episodes: one per transition, or chained (issue 40).

Plain Minari stores an episode as an HDF5 group with its own datasets, about 1.1 kB even when it holds one
transition (docs/datasets.md, "Size on disk"), so a release of independent transitions costs about 7.7x its
source on disk, and the write grows with the number of episodes. The ``chained`` layout orders the released rows
into episodes (:func:`privsynth.synth.chain.chain_nearest`: each next row is the unused row whose state is nearest
to the current row's next state) and writes each in the standard Minari layout with ``observations[t+1]`` = the
current row's next state ``s'_t`` (exact): the following row's own sampled state is replaced by ``s'_t``
("snapped"). Every transition is otherwise exactly a released row. A chain ends at a terminal row, when none of
its row's ``k`` nearest candidates is unused, or at ``max_length`` rows. Candidates are the exact ``k`` nearest up to
:data:`EXACT_UP_TO` rows and within a factor 1 + :data:`APPROX` of the k-th distance above (a million rows of
PointMaze chain in about 16 CPU-s instead of about 90).

Free under DP: a deterministic function of the released rows alone (docs/DESIGN.md invariant 1). The release's
metadata ``extra["layout"]`` records the layout, the episode count, why chains ended and the snap distances (mean,
p95, max, in the state's units and in units of the rows' per-column standard deviation); the privacy card names
the layout only.

What it costs (docs/datasets.md, "Chained layout"): marginal and correlation scores do not move, but a snapped
row's state is a few real steps from its own, so its ``(s, a, s')`` no longer follows the dynamics as closely.

The default is ``layout="transitions"``: the released rows exactly. On a 20k UMaze release (ε = 10) chaining left
the marginal and correlation scores unchanged (0.885 / 0.990) but raised the next-state error against a dynamics
model fitted on the data from 0.09 to 4.7 real steps (``scripts/chained_fidelity.py``): a cost in what agents learn
that no agent run has measured yet, so it is the publisher's choice to pay it for size, not a default.
``layout="auto"`` chains a release of more than :data:`CHAIN_THRESHOLD` transitions: at 100,000 one-transition
episodes the one-step layout already costs about 110 MB of HDF5 objects and 20 CPU-s of writing for 14 MB of rows
(the measured 1.1 kB and 0.2 ms per episode), while below it the exact rows cost little.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData

__all__ = ["LAYOUTS", "CHAIN_THRESHOLD", "resolve_layout", "chained", "apply_layout"]

LAYOUTS = ("auto", "transitions", "chained")
CHAIN_THRESHOLD = 100_000  # "auto" chains releases of more transitions than this
CHAIN_K = 16  # nearest candidates per row
CHAIN_MAX_LENGTH = 1000  # rows per chained episode at most
EXACT_UP_TO = 200_000  # exact k nearest candidates up to this many rows; above, within a factor 1 + APPROX (speed)
APPROX = 3.0


def resolve_layout(layout: str, n: int) -> str:
    """``transitions`` or ``chained`` for a release of ``n`` transitions; ``auto`` chains above CHAIN_THRESHOLD."""
    if layout not in LAYOUTS:
        raise InvalidData(f"unknown layout '{layout}': choose one of {', '.join(LAYOUTS)}")
    if layout == "auto":
        return "chained" if n > CHAIN_THRESHOLD else "transitions"
    return layout


def _stats(values: np.ndarray) -> dict[str, float]:
    if len(values) == 0:
        return {"mean": 0.0, "p95": 0.0, "max": 0.0}
    return {"mean": float(values.mean()), "p95": float(np.percentile(values, 95)), "max": float(values.max())}


def chained(ds: OfflineDataset, *, k: int = CHAIN_K, max_length: int = CHAIN_MAX_LENGTH) -> OfflineDataset:
    """``ds``'s rows ordered into chained episodes, each following row's state snapped to the previous row's next
    state; ``info.extra["layout"]`` records the chaining (see the module docstring). A pure function of the rows."""
    from privsynth.synth.chain import chain_nearest

    approx = 0.0 if ds.n_transitions <= EXACT_UP_TO else APPROX
    c = chain_nearest(ds.observations, ds.next_observations, ds.terminals, k=k, max_length=max_length,
                      approx=approx)
    o = c.order
    obs = ds.observations[o].copy()
    nxt = ds.next_observations[o]
    follow = np.flatnonzero(np.r_[False, c.episode_ids[1:] == c.episode_ids[:-1]])
    obs[follow] = nxt[follow - 1]  # snapped: observations[t+1] of the episode is exactly s'_t
    scale = ds.observations.std(axis=0).astype(np.float64)
    scale[~(scale > 0)] = 1.0
    snapped = c.snap[follow]
    scaled = np.linalg.norm((ds.observations[o[follow]] - nxt[follow - 1]) / scale, axis=1)
    n_eps = int(c.episode_ids[-1]) + 1
    record: dict[str, Any] = {
        "layout": "chained",
        "episodes": n_eps,
        "mean_episode_length": ds.n_transitions / n_eps,
        "snapped_rows": int(len(follow)),
        "snap_distance": _stats(snapped),
        "snap_distance_in_std": _stats(scaled),
        "chain_ends": dict(c.ends),
        "k": int(k),
        "approx": approx,
        "max_length": int(max_length),
    }
    info = _with_layout(ds.info, "chained", record)
    return dataclasses.replace(ds, observations=obs, actions=ds.actions[o], rewards=ds.rewards[o],
                               next_observations=nxt, terminals=ds.terminals[o], timeouts=c.timeouts,
                               episode_ids=c.episode_ids, info=info)


def _with_layout(info: Any, name: str, record: dict[str, Any]) -> Any:
    card = None if info.privacy_card is None else {**info.privacy_card, "layout": name}
    return dataclasses.replace(info, privacy_card=card, extra={**info.extra, "layout": record})


def apply_layout(ds: OfflineDataset, layout: str = "auto") -> OfflineDataset:
    """A transition-level release in ``layout`` (``auto``, ``transitions`` or ``chained``), recorded in its
    metadata and card. ``transitions`` keeps the rows as they are (one Minari episode per transition)."""
    name = resolve_layout(layout, ds.n_transitions)
    if name == "chained":
        return chained(ds)
    record = {"layout": "transitions", "episodes": ds.n_episodes}
    return dataclasses.replace(ds, info=_with_layout(ds.info, "transitions", record))
