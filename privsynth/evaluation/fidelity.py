"""Tabular fidelity of synthetic transitions: marginal (KS) and correlation (Pearson) scores.

These are the two statistics PrivORL reports for transition synthesis (paper section VIII-C, Table III), which its
code computes with SDV's quality report (``KSComplement`` averaged = "marginal", ``CorrelationSimilarity`` averaged =
"correlation"). We compute them directly with numpy instead of depending on SDV: the definitions are two lines each,
SDV pins old pandas versions, and our own code lets us keep every row (the KS statistic below is exact and
vectorised: two sorts and two ``searchsorted`` per column, about a second for a million rows).

Definitions (``real`` and ``synth`` are matrices with the same columns, one row per transition):

* **Marginal** = mean over columns ``j`` of ``1 − KS_j``, where
  ``KS_j = sup_x |F_real,j(x) − F_synth,j(x)|`` is the two-sample Kolmogorov–Smirnov statistic between the empirical
  CDFs of column ``j``. Identical columns give 1; disjoint supports give 0.
* **Correlation** = mean over unordered column pairs ``(i, j)``, ``i < j``, of ``1 − |ρ_real,ij − ρ_synth,ij| / 2``,
  with ``ρ`` the Pearson correlation. Range [0, 1]; identical data gives 1.

  Constant columns: Pearson's ρ is undefined when a column has zero variance. A pair with a column that is constant
  in the *real* data has no reference value and is **skipped** (listed in ``skipped_pairs``). A column that varies in
  the real data but is constant in the synthetic data cannot express any linear relation, so its synthetic ρ is
  taken as 0. If every pair is skipped the score is NaN.

* Transition matrices use the columns ``state | action | reward | next state``; the **terminal flag is excluded**,
  as in PrivORL's evaluation code (it builds its table from actions, observations, rewards and next observations
  only). ``include_terminal=True`` adds it as a last column.

``max_rows`` caps the rows of each matrix by a seeded uniform subsample without replacement; the default ``None``
keeps every row (exact scores). The cost is O(N log N · D) for the marginal and O(N · D²) for the correlation.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, SpaceMismatch

__all__ = [
    "ks_statistic",
    "marginal_score",
    "marginal_per_column",
    "correlation_score",
    "correlation_pairs",
    "CorrelationResult",
    "transition_columns",
    "transition_table",
    "FidelityReport",
    "tabular_fidelity",
    "policy_r2",
    "dynamics_error",
    "utility_predictor",
]


# --------------------------------------------------------------------------------------------- low-level statistics
def ks_statistic(a: np.ndarray, b: np.ndarray) -> float:
    """Exact two-sample KS statistic ``sup_x |F_a(x) − F_b(x)|`` (same value as ``scipy.stats.ks_2samp``).

    The supremum of the difference of two step functions is attained at one of the sample points, so evaluating both
    empirical CDFs (right-continuous, ``side="right"`` handles ties) at every point of the pooled sample is exact.
    """
    a = np.asarray(a, dtype=np.float64).reshape(-1)
    b = np.asarray(b, dtype=np.float64).reshape(-1)
    if a.size == 0 or b.size == 0:
        raise InvalidData("the KS statistic needs at least one value in each sample")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):  # NaN sorts last and would count as a large value
        raise InvalidData("the KS statistic needs finite values; a sample has NaN or inf")
    return _ks_sorted(np.sort(a), np.sort(b))


def _ks_sorted(a: np.ndarray, b: np.ndarray) -> float:
    pooled = np.concatenate([a, b])
    cdf_a = np.searchsorted(a, pooled, side="right") / a.size
    cdf_b = np.searchsorted(b, pooled, side="right") / b.size
    return float(np.max(np.abs(cdf_a - cdf_b)))


def _check_pair(real: np.ndarray, synth: np.ndarray, *, keep_float32: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validated 2-D float copies; float32 inputs stay float32 if asked (the KS statistic only compares values)."""
    real, synth = np.asarray(real), np.asarray(synth)
    dtype = np.float64
    if keep_float32 and real.dtype == np.float32 and synth.dtype == np.float32:
        dtype = np.float32
    real = real.astype(dtype, copy=False)
    synth = synth.astype(dtype, copy=False)
    if real.ndim == 1:
        real = real[:, None]
    if synth.ndim == 1:
        synth = synth[:, None]
    if real.ndim != 2 or synth.ndim != 2:
        raise InvalidData(f"fidelity scores need 2-D matrices, got shapes {real.shape} and {synth.shape}")
    if real.shape[1] != synth.shape[1]:
        raise SpaceMismatch(f"real data has {real.shape[1]} columns but synthetic data has {synth.shape[1]}")
    if real.shape[0] == 0 or synth.shape[0] == 0:
        raise InvalidData("fidelity scores need at least one row in each matrix")
    for name, x in (("real", real), ("synthetic", synth)):
        if not np.isfinite(x).all():
            raise InvalidData(f"the {name} matrix has NaN or inf values")
    return real, synth


def _subsample(x: np.ndarray, max_rows: int | None, rng: np.random.Generator) -> np.ndarray:
    if max_rows is None or x.shape[0] <= max_rows:
        return x
    idx = np.sort(rng.choice(x.shape[0], size=max_rows, replace=False))
    return x[idx]


def marginal_per_column(
    real: np.ndarray, synth: np.ndarray, *, max_rows: int | None = None, seed: int = 0
) -> np.ndarray:
    """``1 − KS`` of every column (SDV's ``KSComplement``), shape [D]."""
    real, synth = _check_pair(real, synth, keep_float32=True)
    rng = np.random.default_rng(seed)
    real, synth = _subsample(real, max_rows, rng), _subsample(synth, max_rows, rng)
    real_sorted = np.sort(real.T, axis=1)  # one contiguous sorted row per column
    synth_sorted = np.sort(synth.T, axis=1)
    return np.array([1.0 - _ks_sorted(r, s) for r, s in zip(real_sorted, synth_sorted)])


def marginal_score(real: np.ndarray, synth: np.ndarray, *, max_rows: int | None = None, seed: int = 0) -> float:
    """Marginal fidelity: mean over columns of ``1 − KS`` (PrivORL section VIII-C)."""
    return float(marginal_per_column(real, synth, max_rows=max_rows, seed=seed).mean())


def _pearson(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Pearson matrix with constant columns marked; their rows/columns are set to 0 (off the diagonal)."""
    centered = x - x.mean(axis=0)
    std = np.sqrt((centered**2).mean(axis=0))
    scale = np.abs(x).max(axis=0) + 1.0
    constant = std <= 1e-12 * scale
    safe = np.where(constant, 1.0, std)
    z = centered / safe
    rho = (z.T @ z) / x.shape[0]
    rho[constant, :] = 0.0
    rho[:, constant] = 0.0
    np.fill_diagonal(rho, 1.0)
    return np.clip(rho, -1.0, 1.0), constant


@dataclass
class CorrelationResult:
    score: float
    pair_scores: np.ndarray  # [D, D] 1 − |Δρ|/2, NaN on the diagonal and for skipped pairs
    rho_real: np.ndarray
    rho_synth: np.ndarray
    skipped_pairs: list[tuple[int, int]] = field(default_factory=list)


def correlation_pairs(
    real: np.ndarray, synth: np.ndarray, *, max_rows: int | None = None, seed: int = 0
) -> CorrelationResult:
    """Per-pair correlation similarities ``1 − |ρ_real − ρ_synth| / 2`` (Pearson), their mean, both ρ matrices.

    Pairs with a column that is constant in the real data are skipped; a column constant only in the synthetic data
    gets ρ = 0 with every other column (see the module docstring).
    """
    real, synth = _check_pair(real, synth)
    d = real.shape[1]
    if d < 2:
        raise InvalidData("the correlation score needs at least two columns")
    rng = np.random.default_rng(seed)
    real, synth = _subsample(real, max_rows, rng), _subsample(synth, max_rows, rng)
    rho_r, const_r = _pearson(real)
    rho_s, _ = _pearson(synth)
    pair = 1.0 - np.abs(rho_r - rho_s) / 2.0
    iu, ju = np.triu_indices(d, k=1)
    valid = ~(const_r[iu] | const_r[ju])
    skipped = [(int(i), int(j)) for i, j, v in zip(iu, ju, valid) if not v]
    pair_matrix = np.full((d, d), np.nan)
    pair_matrix[iu[valid], ju[valid]] = pair[iu[valid], ju[valid]]
    pair_matrix[ju[valid], iu[valid]] = pair[iu[valid], ju[valid]]
    score = float(pair[iu[valid], ju[valid]].mean()) if valid.any() else float("nan")
    return CorrelationResult(score=score, pair_scores=pair_matrix, rho_real=rho_r, rho_synth=rho_s, skipped_pairs=skipped)


def correlation_score(real: np.ndarray, synth: np.ndarray, *, max_rows: int | None = None, seed: int = 0) -> float:
    """Correlation fidelity: mean over column pairs of ``1 − |ρ_real − ρ_synth| / 2`` (PrivORL section VIII-C)."""
    return correlation_pairs(real, synth, max_rows=max_rows, seed=seed).score


# ------------------------------------------------------------------------------------------ transition matrices
def transition_columns(obs_dim: int, act_dim: int, *, include_terminal: bool = False) -> list[str]:
    """Column names of :func:`transition_table`: ``state[i]``, ``action[i]``, ``reward``, ``next_state[i]``."""
    names = [f"state[{i}]" for i in range(obs_dim)] + [f"action[{i}]" for i in range(act_dim)] + ["reward"]
    names += [f"next_state[{i}]" for i in range(obs_dim)]
    return names + (["terminal"] if include_terminal else [])


def transition_table(dataset: OfflineDataset, *, include_terminal: bool = False) -> np.ndarray:
    """The transition matrix ``state | action | reward | next state`` (+ terminal if asked), float32 as stored."""
    m = dataset.transition_matrix()
    return np.ascontiguousarray(m if include_terminal else m[:, :-1])


@dataclass
class FidelityReport:
    """Marginal and correlation scores of a synthetic dataset against a real one, with per-column breakdowns."""

    marginal: float
    correlation: float
    columns: list[str]
    marginal_per_column: list[float]
    correlation_per_column: list[float]  # mean pair score of each column with all the others
    skipped_pairs: list[tuple[str, str]]
    rows_real: int
    rows_synthetic: int
    include_terminal: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "marginal": self.marginal,
            "correlation": self.correlation,
            "include_terminal": self.include_terminal,
            "rows_real": self.rows_real,
            "rows_synthetic": self.rows_synthetic,
            "per_column": {
                c: {"marginal": m, "correlation": r}
                for c, m, r in zip(self.columns, self.marginal_per_column, self.correlation_per_column)
            },
            "skipped_pairs": [list(p) for p in self.skipped_pairs],
        }


def tabular_fidelity(
    synthetic: OfflineDataset,
    real: OfflineDataset,
    *,
    include_terminal: bool = False,
    max_rows: int | None = None,
    seed: int = 0,
) -> FidelityReport:
    """Marginal and correlation scores of ``synthetic`` against ``real`` on their transition matrices."""
    real.check_compatible(synthetic)
    r = transition_table(real, include_terminal=include_terminal)
    s = transition_table(synthetic, include_terminal=include_terminal)
    cols = transition_columns(real.obs_dim, real.act_dim, include_terminal=include_terminal)
    rng = np.random.default_rng(seed)
    r, s = _subsample(r, max_rows, rng), _subsample(s, max_rows, rng)
    per_col = marginal_per_column(r, s)
    corr = correlation_pairs(r, s)
    with np.errstate(invalid="ignore"):
        pair = corr.pair_scores
        per_col_corr = [
            float(np.nanmean(pair[j])) if np.isfinite(pair[j]).any() else float("nan") for j in range(len(cols))
        ]
    return FidelityReport(
        marginal=float(per_col.mean()),
        correlation=corr.score,
        columns=cols,
        marginal_per_column=[float(v) for v in per_col],
        correlation_per_column=per_col_corr,
        skipped_pairs=[(cols[i], cols[j]) for i, j in corr.skipped_pairs],
        rows_real=int(r.shape[0]),
        rows_synthetic=int(s.shape[0]),
        include_terminal=include_terminal,
    )


# --------------------------------------------------------------------------------------- utility predictor
# Cheap proxies of what an offline-RL agent can learn from a transition dataset (issue 20). Marginal/correlation
# scores miss the two things agents need: (1) which action goes with which state, (2) next states that follow the
# dynamics. Both are scored against held-out REAL episodes, so a synthetic set is judged by what it teaches about
# real data.
def _knn_predict(x_fit: np.ndarray, y_fit: np.ndarray, x_query: np.ndarray, k: int) -> np.ndarray:
    """Mean target of the ``k`` nearest fit points (Euclidean) of every query point; chunked, exact."""
    from sklearn.neighbors import KNeighborsRegressor

    k = max(1, min(k, x_fit.shape[0]))
    return KNeighborsRegressor(n_neighbors=k).fit(x_fit, y_fit).predict(x_query)


def _r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Coefficient of determination pooled over output columns: 1 − SSE / SST (SST around the true mean)."""
    sse = float(((y_true - y_pred) ** 2).sum())
    sst = float(((y_true - y_true.mean(axis=0)) ** 2).sum())
    return 1.0 - sse / sst if sst > 0 else float("nan")


def policy_r2(
    fit: OfflineDataset, test: OfflineDataset, *, k: int = 10, max_fit: int = 20_000, max_test: int = 2_000,
    scale: np.ndarray | None = None, seed: int = 0,
) -> float:
    """R² of a k-NN regression state → action fitted on ``fit`` and scored on ``test`` (held-out real episodes).

    States are divided by ``scale`` (default: the per-column std of ``test``, so fit sets are compared on one metric).
    1 = the test actions are a function of the state that ``fit`` teaches exactly; 0 = no better than the mean action;
    below 0 = worse than that (e.g. actions unrelated to states).
    """
    rng = np.random.default_rng(seed)
    xs, ys = fit.observations, fit.actions
    if xs.shape[0] > max_fit:
        idx = rng.choice(xs.shape[0], max_fit, replace=False)
        xs, ys = xs[idx], ys[idx]
    xt, yt = test.observations, test.actions
    if xt.shape[0] > max_test:
        idx = rng.choice(xt.shape[0], max_test, replace=False)
        xt, yt = xt[idx], yt[idx]
    if scale is None:
        scale = test.observations.std(axis=0)
    scale = np.where(scale > 1e-8, scale, 1.0)
    pred = _knn_predict(xs / scale, ys, xt / scale, k)
    return _r2(yt.astype(np.float64), pred)


def _features(s: np.ndarray, a: np.ndarray) -> np.ndarray:
    return np.concatenate([s, a, np.ones((s.shape[0], 1))], axis=1).astype(np.float64)


def dynamics_error(
    data: OfflineDataset, real: OfflineDataset, *, max_rows: int = 20_000, ridge: float = 1e-6, seed: int = 0,
) -> dict[str, Any]:
    """Next-state error of ``data`` against a linear dynamics model (s, a, 1) → s′ − s fitted on ``real``.

    A least-squares model is the right one for a point mass (velocity′ and position′ are linear in velocity and
    action away from walls) and cheap for any environment; its own error on held-out real data is the floor. Per
    next-state component j, with ŝ′ = s + f_real(s, a):

    * ``rel_step[j]`` = RMS(s′_j − ŝ′_j) / RMS(real step s′_j − s_j): error in units of the real step size;
    * ``rel_nomotion[j]`` = RMS(s′_j − ŝ′_j) / RMS(ŝ′_j − s_j): error relative to the no-motion baseline s′ = s
      (1 = as bad as predicting no motion).

    Components that move in fewer than half the real transitions (a goal that jumps on reset) are reported but left
    out of the means (``moving``). Pass held-out real episodes as ``data`` to get the model's floor.
    """
    rng = np.random.default_rng(seed)

    def take(ds: OfflineDataset) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        s, a, s2 = ds.observations, ds.actions, ds.next_observations
        if s.shape[0] > max_rows:
            idx = rng.choice(s.shape[0], max_rows, replace=False)
            s, a, s2 = s[idx], a[idx], s2[idx]
        return s.astype(np.float64), a.astype(np.float64), s2.astype(np.float64)

    rs, ra, rs2 = take(real)
    s, a, s2 = take(data)
    x = _features(rs, ra)
    step_real = rs2 - rs
    w = np.linalg.solve(x.T @ x + ridge * x.shape[0] * np.eye(x.shape[1]), x.T @ step_real)
    pred_step = _features(s, a) @ w
    err = (s2 - s) - pred_step
    rms = lambda v: np.sqrt((v**2).mean(axis=0))  # noqa: E731
    real_step = rms(step_real)
    moving = (np.abs(step_real) > 1e-7).mean(axis=0) > 0.5
    rel_step = rms(err) / np.where(real_step > 0, real_step, 1.0)
    nomo = rms(pred_step)
    rel_nomotion = rms(err) / np.where(nomo > 0, nomo, 1.0)
    return {
        "rel_step": [float(v) for v in rel_step],
        "rel_nomotion": [float(v) for v in rel_nomotion],
        "moving": [bool(v) for v in moving],
        "rel_step_mean": float(rel_step[moving].mean()) if moving.any() else float("nan"),
        "rel_nomotion_mean": float(rel_nomotion[moving].mean()) if moving.any() else float("nan"),
    }


def utility_predictor(
    synthetic: OfflineDataset, real: OfflineDataset, *, holdout: float = 0.2, k: int = 10, seed: int = 0,
) -> dict[str, Any]:
    """Policy R² and dynamics error of ``synthetic``, with the real-data references, on held-out real episodes.

    ``real`` is split by episode (``holdout`` of them held out). ``policy_r2``: k-NN state → action fitted on the
    synthetic data, scored on the held-out real episodes; ``policy_r2_real``: the same fitted on the real training
    episodes (the reference; their ratio is ``policy_r2_ratio``). ``dynamics``: :func:`dynamics_error` of the
    synthetic transitions against a model fitted on all real transitions; ``dynamics_real``: the held-out real
    episodes against a model fitted on the training ones (the floor).
    """
    real.check_compatible(synthetic)
    train, test = real.split_episodes(1.0 - holdout, seed=seed)
    scale = test.observations.std(axis=0)
    r2_syn = policy_r2(synthetic, test, k=k, scale=scale, seed=seed)
    r2_real = policy_r2(train, test, k=k, scale=scale, seed=seed)
    return {
        "policy_r2": r2_syn,
        "policy_r2_real": r2_real,
        "policy_r2_ratio": r2_syn / r2_real if r2_real and r2_real == r2_real else float("nan"),
        "dynamics": dynamics_error(synthetic, real, seed=seed),
        "dynamics_real": dynamics_error(test, train, seed=seed),
    }
