"""How close a release's states come to the sensitive states: nearest-neighbour distances both ways.

Marginal and correlation scores (``fidelity.py``) look at one or two columns at a time; an agent needs the states
themselves on the sensitive policy's manifold. Two medians, in states standardised by the reference (sensitive)
set's per-column mean and spread, so releases of one task share one metric:

* **closeness** (synthetic → reference): the median distance from a synthetic state to its nearest reference state.
  Low when the release's states lie where the reference's do (a precision-like figure; Kynkäänniemi et al. 2019 use
  the same neighbour geometry for generative models).
* **coverage** (reference → synthetic): the median distance from a reference state to its nearest synthetic state.
  Low when every part of the reference is reached by some synthetic state (a recall-like figure).

A scale for both: fresh rollouts of the reference policy, measured the same way (``docs/transfer.md``, sixteenth
round: 0.29 on the Hopper proxy; ``scripts/state_distances.py``). scikit-learn's exact ``NearestNeighbors`` does the
search; we only subsample and standardise. An evaluation figure read against the sensitive set, never a step of a
release.
"""
from __future__ import annotations

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import SpaceMismatch

__all__ = ["state_distance"]


def _rows(x: np.ndarray, n: int, rng: np.random.Generator) -> np.ndarray:
    return x[rng.choice(x.shape[0], n, replace=False)] if x.shape[0] > n else x


def state_distance(synthetic: OfflineDataset, reference: OfflineDataset, *, max_rows: int = 20_000,
                   seed: int = 0) -> dict[str, float]:
    """``{"closeness": median synth → reference, "coverage": median reference → synth}`` nearest-neighbour distances
    of observations standardised by ``reference``; each side subsampled to ``max_rows`` (seeded)."""
    from sklearn.neighbors import NearestNeighbors

    s, r = synthetic.observations, reference.observations
    if s.shape[1:] != r.shape[1:]:
        raise SpaceMismatch(f"state widths differ: synthetic {s.shape[1:]}, reference {r.shape[1:]}")
    rng = np.random.default_rng(seed)
    mu, sd = r.mean(axis=0), r.std(axis=0)
    sd = np.where(sd > 1e-8, sd, 1.0)
    zs = (_rows(s, max_rows, rng) - mu) / sd
    zr = (_rows(r, max_rows, rng) - mu) / sd
    to_ref = NearestNeighbors(n_neighbors=1).fit(zr).kneighbors(zs)[0][:, 0]
    to_syn = NearestNeighbors(n_neighbors=1).fit(zs).kneighbors(zr)[0][:, 0]
    return {"closeness": round(float(np.median(to_ref)), 4), "coverage": round(float(np.median(to_syn)), 4)}
