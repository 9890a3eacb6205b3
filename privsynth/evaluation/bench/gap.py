"""The gap-closed table of a transfer suite (docs/transfer.md): per agent, the share of the public-to-real gap a
release closes, ``(DP − public) / (real − public)``, with a seeded percentile bootstrap over seeds.

Rows are told apart by their params: ``synthesizer: real`` is the real data, ``epsilon`` 0 the public model alone
(``finetune: none``), ``epsilon`` null ("no DP") the non-private fine-tune, any other ``epsilon`` a DP release. A task
whose real − public gap is under ``min_gap`` points is "non-discriminating": any release looks as if it closed
(or overshot) it, so no ratio is quoted. Pure numpy / pandas: it imports nothing else of the runner.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from privsynth.errors import InvalidData

__all__ = ["GapClosed", "gap_closed", "gap_table", "numeric_epsilon", "GAP_TABLE_KEYS"]

# the keys a `type: gap_closed` table spec takes (name, title, kind, stage, where as any table)
GAP_TABLE_KEYS = ("value", "by", "resamples", "seed", "level", "min_gap", "digits")


@dataclass(frozen=True)
class GapClosed:
    """Point estimate and bootstrap interval of the gap closed; ``discriminating`` False: no ratio is quoted."""

    gap: float  # mean(real) − mean(public), points
    point: float | None
    low: float | None
    high: float | None
    discriminating: bool


def _values(x: Sequence[float], what: str) -> np.ndarray:
    arr = np.asarray([float(v) for v in x], dtype=np.float64)
    arr = arr[np.isfinite(arr)]
    if arr.size == 0:
        raise InvalidData(f"gap closed: no finite {what} score")
    return arr


def gap_closed(real: Sequence[float], public: Sequence[float], dp: Sequence[float], *, resamples: int = 2000,
               seed: int = 0, level: float = 0.95, min_gap: float = 20.0) -> GapClosed:
    """``(mean dp − mean public) / (mean real − mean public)`` and its percentile bootstrap interval at ``level``.

    Each group's seeds are resampled with replacement, independently (its cells are separate runs); a resample whose
    real − public is 0 has no ratio and is dropped. ``seed`` fixes the resampling (not a privacy seed: the inputs
    are published scores). Under ``min_gap`` points of real − public (real == public included) the task does not
    discriminate and only the gap is returned; so does a gap of 0 or less whatever ``min_gap``."""
    r, p, d = _values(real, "real"), _values(public, "public"), _values(dp, "release")
    if resamples < 1 or not 0.0 < level < 1.0:
        raise InvalidData(f"gap closed: resamples must be >= 1 and level in (0, 1), got {resamples} and {level}")
    gap = float(r.mean() - p.mean())
    if not (gap >= min_gap and gap > 0):  # real == public (or public ahead) never gives a ratio
        return GapClosed(gap=gap, point=None, low=None, high=None, discriminating=False)
    point = float((d.mean() - p.mean()) / gap)
    rng = np.random.default_rng(seed)

    def boot(x: np.ndarray) -> np.ndarray:
        return x[rng.integers(0, x.size, size=(resamples, x.size))].mean(axis=1)

    br, bp, bd = boot(r), boot(p), boot(d)
    den = br - bp
    ok = den != 0
    ratios = (bd[ok] - bp[ok]) / den[ok]
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = (float(v) for v in np.percentile(ratios, [tail, 100.0 - tail]))
    return GapClosed(gap=gap, point=point, low=low, high=high, discriminating=True)


def _stats(x: Sequence[float], digits: int) -> str:
    vals = [float(v) for v in x if v is not None and math.isfinite(float(v))]
    if not vals:
        return "–"
    if len(vals) == 1:
        return f"{vals[0]:.{digits}f} (n=1)"
    return f"{np.mean(vals):.{digits}f} ± {np.std(vals, ddof=1):.{digits}f} (n={len(vals)})"


def _role(row: Mapping[str, Any]) -> tuple[str, Any]:
    """("real" | "public" | "nodp" | "dp", ε) of one cell from its params (ε as the tables label it)."""
    if row.get("synthesizer") == "real":
        return "real", None
    eps = row.get("epsilon")
    if isinstance(eps, str):
        if eps in ("no DP", "0 (public only)"):
            return ("nodp" if eps == "no DP" else "public"), None
        try:
            eps = float(eps)
        except ValueError:
            raise InvalidData(f"gap closed: epsilon '{eps}' is not a number") from None
    if eps is None or not math.isfinite(float(eps)):  # null (a missing value reads as NaN) or infinite: no DP
        return "nodp", None
    return ("public", None) if float(eps) == 0 else ("dp", float(eps))


def numeric_epsilon(df):
    """The frame with ε as numbers for the gap table's cells CSV: 0 for the public model alone, empty (null) for no
    DP and for real data, the number for a DP release (the other tables keep the labels ``eps_label`` gives); the
    column is there even when no cell has an ε yet (only real-data cells finished)."""
    eps = [None if role in ("real", "nodp") else (0.0 if role == "public" else e)
           for role, e in (_role(row) for _, row in df.iterrows())]
    return df.assign(epsilon=eps)


def gap_table(df, spec: Mapping[str, Any]):
    """The gap-closed table from a :func:`~privsynth.evaluation.bench.tables.records_frame` of agent cells.

    One row per ``by`` value (default: agent) and DP ε: real, public alone, no DP and the DP release side by side
    (mean ± std over seeds), the gap real − public, and the gap closed by the release and by the no-DP fine-tune
    with their bootstrap intervals, or "non-discriminating" when the gap is under ``min_gap``."""
    import pandas as pd

    unknown = sorted(set(spec) - set(GAP_TABLE_KEYS) - {"name", "title", "type", "kind", "stage", "where", "caption"})
    if unknown:
        raise InvalidData(f"table '{spec.get('name')}': unknown key(s) {', '.join(unknown)} for a gap_closed table "
                          f"(it takes {', '.join(GAP_TABLE_KEYS)})")
    value, by = str(spec.get("value", "final_score")), str(spec.get("by", "agent"))
    for key in (value, by, "synthesizer"):
        if key not in df.columns:
            raise InvalidData(f"table '{spec.get('name')}': key '{key}' is in none of its {len(df)} cells")
    if "epsilon" not in df.columns:
        df = df.assign(epsilon=None)
    digits = int(spec.get("digits", 1))
    opts = dict(resamples=int(spec.get("resamples", 2000)), seed=int(spec.get("seed", 0)),
                level=float(spec.get("level", 0.95)), min_gap=float(spec.get("min_gap", 20.0)))
    pct = f"{round(opts['level'] * 100):d}%"
    out = []
    for group, g in df.groupby(df[by].astype(str), sort=True):
        scores: dict[tuple[str, Any], list[float]] = {}
        for _, row in g.iterrows():
            scores.setdefault(_role(row), []).append(pd.to_numeric(row[value], errors="coerce"))
        real, public, nodp = (scores.get((role, None), []) for role in ("real", "public", "nodp"))
        dp_eps = sorted((k[1] for k in scores if k[0] == "dp"), key=lambda e: -float(e)) or [None]
        for eps in dp_eps:
            dp = scores.get(("dp", eps), []) if eps is not None else []
            row = {by: group, "epsilon": "–" if eps is None else eps, "real": _stats(real, digits),
                   "public alone": _stats(public, digits), "no DP": _stats(nodp, digits), "DP": _stats(dp, digits),
                   "real − public": _gap(real, public, digits)}
            for label, release in (("gap closed", dp), ("no-DP gap closed", nodp)):
                row[label] = _quoted(real, public, release, opts, pct)
            out.append(row)
    return pd.DataFrame(out)


def _gap(real: list[float], public: list[float], digits: int) -> str:
    r, p = ([float(v) for v in x if v is not None and math.isfinite(float(v))] for x in (real, public))
    return f"{np.mean(r) - np.mean(p):.{digits}f}" if r and p else "–"


def _quoted(real: list[float], public: list[float], release: list[float], opts: dict[str, Any], pct: str) -> str:
    """"0.85 [0.70, 0.98] (95%)", "non-discriminating (real − public = 3.1)", or "–" when a row is missing."""
    try:
        res = gap_closed(real, public, release, **opts)
    except InvalidData:
        return "–"
    if not res.discriminating:
        return f"non-discriminating (real − public = {res.gap:.1f} < {opts['min_gap']:g})"
    return f"{res.point:.2f} [{res.low:.2f}, {res.high:.2f}] ({pct})"
