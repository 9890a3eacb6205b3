"""Data-only membership inference on a **released** synthetic dataset: no weights, only published rows.

Threat model (the one a published release faces): the attacker holds the synthetic dataset and, optionally, some
*reference* records from the same population that were not used for fine-tuning (e.g. a public or held-out sample).
For a candidate record x they decide whether x was among the sensitive fine-tuning records. Members are the positive
class and every score is "higher = more member-like", as for the white-box attacks (:mod:`.attacks`).

Attacks (one class each, overriding one step, :meth:`DataAttack.row_scores`):

* :class:`DCRAttack`: distance to the closest synthetic record, score = −log DCR_syn(x) (Chen et al. 2020
  "GAN-Leaks" full black-box; the DCR of synthcity / SDMetrics privacy checks).
* :class:`CalibratedDCRAttack`: per-record calibration by the reference data: score = log DCR_ref(x) − log DCR_syn(x).
  A record that is close to the synthetic data *only because it sits in a dense region* is also close to the
  reference data, so the ratio keeps what the generator added (the GAN-Leaks calibrated attack; the same idea as
  ``loss_ref`` for weights).
* :class:`DOMIASAttack`: the density ratio of DOMIAS (van Breugel et al., AISTATS 2023): score = log p̂_syn(x) −
  log p̂_ref(x) with Gaussian kernel density estimates, bandwidth by Scott's rule. Overfitting shows as local
  over-density of the synthetic data at the members.
* :class:`TrajectoryScore`: the unit "one user": a whole episode's score is the mean (or sum) of its transitions'
  scores under any of the above.

Every attack works in one standardised space: columns z-scored by statistics of the data the attacker holds (the
reference data if given, else the synthetic data), constant columns dropped. Nothing here reads the members'
statistics, so the only thing that differs between members and non-members is the release.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData

__all__ = [
    "DataAttack", "DCRAttack", "CalibratedDCRAttack", "DOMIASAttack", "TrajectoryScore", "DATA_ATTACKS",
    "make_data_attack", "as_rows", "nearest_distance", "gaussian_kde_logpdf",
]

_CHUNK = 512


def as_rows(data: OfflineDataset | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(rows [N, D] float64, episode position [N])``; a bare matrix is one transition per unit."""
    if isinstance(data, OfflineDataset):
        return data.transition_matrix().astype(np.float64), data.episode_index()
    rows = np.asarray(data, dtype=np.float64)
    if rows.ndim != 2 or rows.shape[0] == 0:
        raise InvalidData(f"expected a non-empty [N, D] matrix of transitions, got shape {rows.shape}")
    return rows, np.arange(rows.shape[0])


def nearest_distance(queries: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Euclidean distance from each query row to its nearest row of ``points`` (exact, chunked)."""
    from scipy.spatial import cKDTree

    tree = cKDTree(points)
    dist, _ = tree.query(queries, k=1)
    return np.asarray(dist, dtype=np.float64)


def gaussian_kde_logpdf(queries: np.ndarray, points: np.ndarray, bandwidth: float | None = None) -> np.ndarray:
    """log of an isotropic Gaussian KDE of ``points`` at ``queries`` (both already standardised).

    Bandwidth: Scott's rule h = n^(−1/(d+4)) on unit-variance columns, as ``scipy.stats.gaussian_kde``'s default.
    """
    from scipy.special import logsumexp

    n, d = points.shape
    h = float(bandwidth) if bandwidth is not None else n ** (-1.0 / (d + 4))
    norm = -np.log(n) - d * np.log(h) - 0.5 * d * np.log(2 * np.pi)
    sq_p = (points**2).sum(1)
    out = np.empty(queries.shape[0])
    for s in range(0, queries.shape[0], _CHUNK):
        q = queries[s : s + _CHUNK]
        d2 = np.maximum((q**2).sum(1)[:, None] + sq_p[None, :] - 2.0 * q @ points.T, 0.0)
        out[s : s + _CHUNK] = logsumexp(-0.5 * d2 / h**2, axis=1) + norm
    return out


class DataAttack:
    """Base class: fit on what the attacker holds (synthetic, reference), then score candidate rows."""

    name: str = "data_attack"
    needs_reference: bool = False
    threat_model: str = "synthetic data only"

    def fit(self, synthetic: OfflineDataset | np.ndarray, reference: OfflineDataset | np.ndarray | None = None,
            ) -> "DataAttack":
        syn, _ = as_rows(synthetic)
        ref = as_rows(reference)[0] if reference is not None else None
        if self.needs_reference and ref is None:
            raise InvalidData(f"attack '{self.name}' needs reference data from the same population (--reference)")
        if ref is not None and ref.shape[1] != syn.shape[1]:
            raise InvalidData(f"reference records have {ref.shape[1]} columns but the release has {syn.shape[1]}")
        basis = ref if ref is not None else syn
        mu, sd = basis.mean(0), basis.std(0)
        self._keep = sd > 1e-8 * max(1.0, float(np.abs(mu).max()))  # constant columns carry no distance
        self._mu, self._sd = mu[self._keep], sd[self._keep]
        self._dim = syn.shape[1]
        self._syn = self.transform(syn)
        self._ref = self.transform(ref) if ref is not None else None
        return self

    def transform(self, rows: np.ndarray) -> np.ndarray:
        if rows.shape[1] != self._dim:
            raise InvalidData(f"records have {rows.shape[1]} columns but the release has {self._dim}")
        return (rows[:, self._keep] - self._mu) / self._sd

    def row_scores(self, z: np.ndarray) -> np.ndarray:
        """Scores of standardised rows ``z`` (higher = more member-like)."""
        raise NotImplementedError

    def score(self, data: OfflineDataset | np.ndarray) -> np.ndarray:
        """Per-unit scores (here one unit = one transition; see :class:`TrajectoryScore`)."""
        if not hasattr(self, "_syn"):
            raise InvalidData(f"attack '{self.name}' must be fitted on the released data before scoring")
        rows, _ = as_rows(data)
        return self.row_scores(self.transform(rows))

    def describe(self) -> dict[str, Any]:
        cfg = {k: v for k, v in vars(self).items() if not k.startswith("_")}
        return {"name": self.name, "threat_model": self.threat_model, **cfg}


@dataclass
class DCRAttack(DataAttack):
    """−log of the distance to the closest synthetic record."""

    name: str = "dcr"
    threat_model: str = "synthetic data only"

    def row_scores(self, z):
        return -np.log(nearest_distance(z, self._syn) + 1e-12)


@dataclass
class CalibratedDCRAttack(DataAttack):
    """log DCR to the reference data − log DCR to the synthetic data (per-record calibration)."""

    name: str = "dcr_ref"
    needs_reference: bool = field(default=True, repr=False)
    threat_model: str = "synthetic data + reference records from the same population"

    def row_scores(self, z):
        return np.log(nearest_distance(z, self._ref) + 1e-12) - np.log(nearest_distance(z, self._syn) + 1e-12)


@dataclass
class DOMIASAttack(DataAttack):
    """DOMIAS density ratio log p̂_syn(x) − log p̂_ref(x), Gaussian KDEs (Scott bandwidth unless ``bandwidth``)."""

    name: str = "domias"
    bandwidth: float | None = None
    max_points: int = 20_000  # KDE support subsampled to this many rows (cost is queries x points)
    needs_reference: bool = field(default=True, repr=False)
    threat_model: str = "synthetic data + reference records from the same population"

    def _support(self, z: np.ndarray) -> np.ndarray:
        if z.shape[0] <= self.max_points:
            return z
        idx = np.random.default_rng(0).choice(z.shape[0], self.max_points, replace=False)
        return z[np.sort(idx)]

    def row_scores(self, z):
        syn, ref = self._support(self._syn), self._support(self._ref)
        return gaussian_kde_logpdf(z, syn, self.bandwidth) - gaussian_kde_logpdf(z, ref, self.bandwidth)


class TrajectoryScore(DataAttack):
    """A whole episode's score: the mean (or sum) of its transitions' scores under ``inner`` (one unit = one user)."""

    def __init__(self, inner: DataAttack, reduce: str = "mean", name: str | None = None) -> None:
        if reduce not in ("mean", "sum"):
            raise InvalidData(f"trajectory reduction must be 'mean' or 'sum', got '{reduce}'")
        self.inner, self.reduce = inner, reduce
        self.name = name or f"{inner.name}_traj"
        self.needs_reference = inner.needs_reference
        self.threat_model = inner.threat_model + "; candidate = a whole episode"

    def fit(self, synthetic, reference=None):
        self.inner.fit(synthetic, reference)
        return self

    def score(self, data):
        if not isinstance(data, OfflineDataset):
            raise InvalidData("trajectory-level scores need an OfflineDataset (episode ids), not a bare matrix")
        per_row = self.inner.score(data)
        pos = data.episode_index()
        sums = np.bincount(pos, weights=per_row)
        return sums / np.bincount(pos) if self.reduce == "mean" else sums

    def describe(self):
        return {"name": self.name, "threat_model": self.threat_model, "reduce": self.reduce,
                "per_transition": self.inner.describe()}


DATA_ATTACKS: dict[str, type[DataAttack]] = {"dcr": DCRAttack, "dcr_ref": CalibratedDCRAttack, "domias": DOMIASAttack}


def make_data_attack(name: str, unit: str = "transition", **kwargs) -> DataAttack:
    """A data-only attack by name (``dcr``, ``dcr_ref``, ``domias``); ``unit='trajectory'`` wraps it per episode."""
    if name not in DATA_ATTACKS:
        raise InvalidData(f"unknown data-only attack '{name}': choose from {', '.join(sorted(DATA_ATTACKS))}")
    attack = DATA_ATTACKS[name](**kwargs)
    if unit == "trajectory":
        return TrajectoryScore(attack)
    if unit != "transition":
        raise InvalidData(f"unknown privacy unit '{unit}': use 'transition' or 'trajectory'")
    return attack
