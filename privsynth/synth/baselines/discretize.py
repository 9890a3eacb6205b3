"""Shared pieces of the marginal-based baselines (PGM and PrivSyn, PrivORL appendix E).

Both methods treat a transition as a table row ``state | action | reward | next state | terminal`` (the PrivORL-n
vector) and need the same three things, kept here so that they are written once:

* **Discretisation.** Continuous columns are first cut into ``fine_bins`` equal-width bins over *public* bounds (the
  range of the public datasets, widened by a margin; values outside are clipped), and the fine one-way histograms of
  the sensitive data are measured with the Gaussian mechanism. The coarse bins (10 for PGM, at most 32 for PrivSyn) are
  then equal-mass groups of fine bins under the *noisy* histogram, so the bin edges follow the sensitive distribution
  without spending anything beyond that one accounted measurement (the same move as MST's domain compression and
  PrivSyn's bin merging). Columns with few distinct public values (sparse reward, terminal flag) are categorical with
  the public support as their categories. Decoding draws a fine bin inside the coarse one in proportion to the noisy
  fine counts and a point uniformly inside it, so a round trip moves a value by less than its coarse bin's width.
* **Measurement.** Marginal count tables with the Gaussian mechanism: one transition changes one cell by one, so the
  L2 sensitivity of any count table is 1 under add/remove-one-transition neighbours. All noise (Gaussian measurements,
  exponential-mechanism selections) goes through :mod:`privsynth.privacy.mechanisms` and is drawn from a
  :class:`~privsynth.privacy.noise.NoiseSource` (OS entropy unless a test asks for reproducible noise), never from a
  seed written on the card.
* **Budget.** Both methods are analysed in zCDP (Bun & Steinke 2016), as their papers do: a Gaussian measurement with
  noise std σ costs ρ = 1/(2σ²), the exponential mechanism with parameter ε₀ costs ε₀²/8 (Cesar & Rogers 2021). The
  total ρ is the largest one whose (ε, δ) conversion through the RDP curve stays within the caller's ε, and every
  measurement goes to the ledger as a Gaussian or zCDP event, so the ledger (RDP accountant) recomputes the same ε.

Why our own code rather than a library: the discretisers of SynMeter/smartnoise fit their bins on the raw sensitive
data without accounting (a leak); this one fixes bins from public data plus an accounted histogram.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.accounting import gaussian_sigma_for_rho, zcdp_rho_for
from privsynth.privacy.ledger import LedgerEvent
from privsynth.privacy.mechanisms import gaussian_mechanism
from privsynth.privacy.noise import NoiseSource

__all__ = [
    "Discretizer",
    "column_names",
    "zcdp_rho_for",
    "gaussian_sigma_for_rho",
    "marginal_counts",
]


def column_names(obs_dim: int, act_dim: int) -> list[str]:
    """Readable names of the transition columns, in :meth:`OfflineDataset.transition_matrix` order."""
    return (
        [f"s{i}" for i in range(obs_dim)]
        + [f"a{i}" for i in range(act_dim)]
        + ["r"]
        + [f"s'{i}" for i in range(obs_dim)]
        + ["done"]
    )


# ------------------------------------------------------------------------------------------------------ budget
# zcdp_rho_for and gaussian_sigma_for_rho live in privsynth.privacy.accounting (the one zCDP implementation).


def marginal_counts(codes: np.ndarray, cols: Sequence[int], sizes: Sequence[int]) -> np.ndarray:
    """Exact count table of the columns ``cols`` of integer ``codes`` [N, D] (shape = sizes of those columns)."""
    shape = tuple(int(sizes[c]) for c in cols)
    flat = np.ravel_multi_index(tuple(codes[:, c] for c in cols), shape)
    return np.bincount(flat, minlength=int(np.prod(shape))).reshape(shape).astype(np.float64)


# ---------------------------------------------------------------------------------------------- discretiser
@dataclass
class Discretizer:
    """Public grid + DP coarse bins for the columns of a transition matrix.

    Build with :meth:`from_public` (or :meth:`from_bounds`), then :meth:`fit_dp` on the sensitive rows; afterwards
    :meth:`encode` maps rows to coarse integer codes and :meth:`decode` maps codes back to values.
    """

    low: np.ndarray  # [D] public lower bound per column (continuous columns)
    high: np.ndarray  # [D]
    categories: list[list[float] | None]  # per column: public support if categorical, else None
    fine_bins: int = 64
    names: list[str] = field(default_factory=list)
    # filled by fit_dp (all of it post-processing of one accounted measurement)
    fine_counts: list[np.ndarray] | None = None  # noisy fine histogram per column (categories for categorical)
    groups: list[np.ndarray] | None = None  # per column: fine bin -> coarse code
    sizes: list[int] | None = None  # number of coarse codes per column

    # ---------------------------------------------------------------------------------------- construction
    @classmethod
    def from_public(
        cls,
        public_rows: np.ndarray,
        *,
        fine_bins: int = 64,
        max_categories: int = 4,
        margin: float = 0.05,
        names: Sequence[str] | None = None,
    ) -> "Discretizer":
        """Bounds and categorical supports from public rows [N, D] (no privacy cost).

        A column with at most ``max_categories`` distinct public values is categorical; other columns span the
        public range widened by ``margin`` of its width on each side.
        """
        x = np.asarray(public_rows, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] == 0:
            raise InvalidData(f"expected a non-empty [N, D] matrix of public rows, got shape {x.shape}")
        if not np.isfinite(x).all():
            raise InvalidData("public rows contain NaN or infinite values")
        lo, hi = x.min(0), x.max(0)
        cats: list[list[float] | None] = []
        for j in range(x.shape[1]):
            values = np.unique(x[:, j])
            cats.append([float(v) for v in values] if len(values) <= max_categories else None)
        width = np.maximum(hi - lo, 1e-6)
        return cls(
            low=lo - margin * width,
            high=hi + margin * width,
            categories=cats,
            fine_bins=int(fine_bins),
            names=list(names) if names is not None else [f"c{j}" for j in range(x.shape[1])],
        )

    @classmethod
    def from_bounds(
        cls,
        low: Sequence[float],
        high: Sequence[float],
        *,
        categories: Sequence[Sequence[float] | None] | None = None,
        fine_bins: int = 64,
        names: Sequence[str] | None = None,
    ) -> "Discretizer":
        """Explicit public bounds (and optional categorical supports) per column."""
        lo, hi = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if lo.shape != hi.shape or lo.ndim != 1 or not (np.isfinite(lo).all() and np.isfinite(hi).all()):
            raise InvalidData("bounds must be two finite vectors of the same length")
        if not (hi > lo).all():
            raise InvalidData("every column needs high > low")
        cats = [list(map(float, c)) if c is not None else None for c in (categories or [None] * len(lo))]
        if len(cats) != len(lo):
            raise InvalidData("categories must have one entry per column")
        return cls(lo, hi, cats, int(fine_bins), list(names) if names is not None else [f"c{j}" for j in range(len(lo))])

    @property
    def dim(self) -> int:
        return int(self.low.shape[0])

    @property
    def fitted(self) -> bool:
        return self.groups is not None

    def _fine_size(self, j: int) -> int:
        cats = self.categories[j]
        return len(cats) if cats is not None else self.fine_bins

    def fine_index(self, rows: np.ndarray) -> np.ndarray:
        """Fine bin (or category) index of every entry of ``rows`` [N, D] (values outside the bounds are clipped)."""
        x = np.asarray(rows, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise InvalidData(f"expected rows with {self.dim} columns, got shape {x.shape}")
        out = np.empty(x.shape, dtype=np.int64)
        for j in range(self.dim):
            cats = self.categories[j]
            if cats is not None:
                c = np.asarray(cats)
                out[:, j] = np.abs(x[:, j, None] - c[None, :]).argmin(1)
            else:
                w = (self.high[j] - self.low[j]) / self.fine_bins
                out[:, j] = np.clip(np.floor((x[:, j] - self.low[j]) / w), 0, self.fine_bins - 1).astype(np.int64)
        return out

    # --------------------------------------------------------------------------------------------- DP fit
    def fit_dp_sensitive(
        self,
        sensitive_rows: np.ndarray,
        *,
        rho: float,
        coarse_bins: int,
        source: NoiseSource | None = None,
    ) -> LedgerEvent:
        """Measure the fine one-way histograms of the sensitive rows with ρ-zCDP in total and derive coarse bins.

        One call of :func:`~privsynth.privacy.mechanisms.gaussian_mechanism` (noise from ``source``: OS entropy by
        default) on the D histograms; returns its ledger event (D Gaussian count measurements of sensitivity 1).
        Everything stored afterwards is post-processing of the noisy histograms.
        """
        if coarse_bins < 2:
            raise InvalidData(f"coarse_bins must be at least 2, got {coarse_bins}")
        fine = self.fine_index(sensitive_rows)
        sigma = gaussian_sigma_for_rho(rho, self.dim)
        sizes = [self._fine_size(j) for j in range(self.dim)]
        exact = np.concatenate([np.bincount(fine[:, j], minlength=sizes[j]) for j in range(self.dim)]).astype(np.float64)
        noisy_all, event = gaussian_mechanism(
            exact,
            sigma=sigma,
            sensitivity=1.0,
            count=self.dim,
            name="one-way fine histograms (discretisation)",
            source=source,
            unit="transition",
            rho=float(rho),
            fine_bins=self.fine_bins,
            coarse_bins=int(coarse_bins),
        )
        self.fine_counts, self.groups, self.sizes = [], [], []
        for noisy in np.split(noisy_all, np.cumsum(sizes)[:-1]):
            j = len(self.fine_counts)
            self.fine_counts.append(noisy)
            if self.categories[j] is not None:
                group = np.arange(len(noisy))
            else:
                group = equal_mass_groups(noisy, coarse_bins)
            self.groups.append(group)
            self.sizes.append(int(group.max()) + 1)
        return event

    def _check_fitted(self) -> None:
        if not self.fitted:
            raise InvalidData("the discretiser has no bins yet: fit it on the sensitive data first")

    def encode(self, rows: np.ndarray) -> np.ndarray:
        """Coarse integer codes [N, D] of ``rows``."""
        return self.coarse_of(self.fine_index(rows))

    def coarse_of(self, fine: np.ndarray) -> np.ndarray:
        """Coarse integer codes [N, D] of fine bin indices (as returned by :meth:`fine_index`)."""
        self._check_fitted()
        return np.stack([self.groups[j][fine[:, j]] for j in range(self.dim)], 1)

    def coarse_one_way(self, j: int) -> np.ndarray:
        """Noisy one-way coarse marginal of column ``j`` (sum of its noisy fine counts; post-processing)."""
        self._check_fitted()
        return np.bincount(self.groups[j], weights=self.fine_counts[j], minlength=self.sizes[j])

    def coarse_width(self, j: int) -> np.ndarray:
        """Width of every coarse bin of continuous column ``j`` (zeros for a categorical column)."""
        self._check_fitted()
        if self.categories[j] is not None:
            return np.zeros(self.sizes[j])
        w = (self.high[j] - self.low[j]) / self.fine_bins
        return np.bincount(self.groups[j], minlength=self.sizes[j]) * w

    def decode(self, codes: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Values [N, D] for coarse codes: a fine bin drawn ∝ its noisy count inside the coarse bin, then uniform."""
        self._check_fitted()
        codes = np.asarray(codes, dtype=np.int64)
        if codes.ndim != 2 or codes.shape[1] != self.dim:
            raise InvalidData(f"expected codes with {self.dim} columns, got shape {codes.shape}")
        out = np.empty(codes.shape, dtype=np.float64)
        for j in range(self.dim):
            cats = self.categories[j]
            if cats is not None:
                out[:, j] = np.asarray(cats)[np.clip(codes[:, j], 0, len(cats) - 1)]
                continue
            group = self.groups[j]
            weight = np.maximum(self.fine_counts[j], 0.0) + 1e-3  # never zero: every fine bin stays reachable
            fine = np.empty(len(codes), dtype=np.int64)
            for g in range(self.sizes[j]):
                members = np.flatnonzero(group == g)
                rows = np.flatnonzero(codes[:, j] == g)
                if len(rows) == 0:
                    continue
                p = weight[members] / weight[members].sum()
                fine[rows] = rng.choice(members, size=len(rows), p=p)
            w = (self.high[j] - self.low[j]) / self.fine_bins
            out[:, j] = self.low[j] + (fine + rng.uniform(0.0, 1.0, size=len(fine))) * w
        return out

    # ---------------------------------------------------------------------------------------- persistence
    def to_dict(self) -> dict[str, Any]:
        return {
            "low": self.low.tolist(),
            "high": self.high.tolist(),
            "categories": self.categories,
            "fine_bins": self.fine_bins,
            "names": self.names,
            "fine_counts": [c.tolist() for c in self.fine_counts] if self.fine_counts is not None else None,
            "groups": [g.tolist() for g in self.groups] if self.groups is not None else None,
            "sizes": self.sizes,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "Discretizer":
        out = cls(
            low=np.asarray(d["low"], dtype=np.float64),
            high=np.asarray(d["high"], dtype=np.float64),
            categories=d["categories"],
            fine_bins=int(d["fine_bins"]),
            names=list(d.get("names") or []),
        )
        if d.get("groups") is not None:
            out.fine_counts = [np.asarray(c, dtype=np.float64) for c in d["fine_counts"]]
            out.groups = [np.asarray(g, dtype=np.int64) for g in d["groups"]]
            out.sizes = [int(s) for s in d["sizes"]]
        return out


def equal_mass_groups(noisy_counts: np.ndarray, k: int) -> np.ndarray:
    """Map each fine bin to one of at most ``k`` contiguous groups of (noisy) equal mass; negatives count as zero."""
    mass = np.maximum(np.asarray(noisy_counts, dtype=np.float64), 0.0)
    n = len(mass)
    if mass.sum() <= 0:
        return np.minimum(np.arange(n) * k // n, k - 1)
    cdf = np.cumsum(mass) / mass.sum()
    # fine bin i goes to the group of the mass quantile at its centre
    centre = cdf - mass / (2 * mass.sum())
    group = np.minimum(np.floor(centre * k), k - 1).astype(np.int64)
    group = np.maximum.accumulate(group)  # monotone (guards against float ties)
    _, group = np.unique(group, return_inverse=True)  # drop empty group numbers
    return group.astype(np.int64)
