"""Membership-inference metrics in the standard convention (Carlini et al., "MIA from first principles").

Members are the positive class and a higher score means "more member-like". TPR at a fixed FPR α is read at the
**last ROC point whose FPR is ≤ α** (the convention of mia-diffusion and of the PrivORL paper's code, ``mia.py``); it never interpolates above α. PrivORL reports the opposite tail
(non-members positive, score = loss); we do not.

The ROC itself comes from :func:`sklearn.metrics.roc_curve` with ``drop_intermediate=False`` so every threshold is kept.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np
from sklearn.metrics import roc_auc_score, roc_curve

from privsynth.errors import InvalidData

__all__ = ["AttackMetrics", "roc", "tpr_at_fpr", "attack_metrics", "bootstrap_intervals", "DEFAULT_FPRS"]

DEFAULT_FPRS: tuple[float, ...] = (0.001, 0.01, 0.1)


def _labels_scores(member_scores: np.ndarray, non_member_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    m = np.asarray(member_scores, dtype=np.float64).ravel()
    n = np.asarray(non_member_scores, dtype=np.float64).ravel()
    if m.size == 0 or n.size == 0:
        raise InvalidData("membership inference needs at least one member and one non-member score")
    scores = np.concatenate([m, n])
    if not np.all(np.isfinite(scores)):
        raise InvalidData("attack scores contain NaN or infinite values")
    labels = np.concatenate([np.ones(m.size, dtype=int), np.zeros(n.size, dtype=int)])
    return labels, scores


def roc(member_scores: np.ndarray, non_member_scores: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ROC of the attack (members positive): ``(fpr, tpr, thresholds)``, FPR non-decreasing."""
    labels, scores = _labels_scores(member_scores, non_member_scores)
    fpr, tpr, thr = roc_curve(labels, scores, pos_label=1, drop_intermediate=False)
    return fpr, tpr, thr


def tpr_at_fpr(fpr: np.ndarray, tpr: np.ndarray, alpha: float) -> float:
    """TPR at the last ROC point with FPR ≤ ``alpha`` (0 if none; the curve starts at (0, 0))."""
    idx = int(np.searchsorted(np.asarray(fpr), alpha, side="right")) - 1
    return float(tpr[idx]) if idx >= 0 else 0.0


@dataclass
class AttackMetrics:
    """Summary of one attack: AUC, best balanced accuracy over thresholds, TPR at fixed FPRs."""

    auc: float
    balanced_accuracy: float
    tpr_at_fpr: dict[str, float]  # key: the FPR α as a string, e.g. "0.01"
    n_members: int
    n_non_members: int

    def to_dict(self) -> dict:
        return asdict(self)


def attack_metrics(
    member_scores: np.ndarray, non_member_scores: np.ndarray, fprs: Sequence[float] = DEFAULT_FPRS
) -> tuple[AttackMetrics, tuple[np.ndarray, np.ndarray]]:
    """Metrics and the ROC ``(fpr, tpr)`` of one attack's scores."""
    labels, scores = _labels_scores(member_scores, non_member_scores)
    fpr, tpr, _ = roc_curve(labels, scores, pos_label=1, drop_intermediate=False)
    metrics = AttackMetrics(
        auc=float(roc_auc_score(labels, scores)),
        balanced_accuracy=float(np.max((tpr + 1.0 - fpr) / 2.0)),
        tpr_at_fpr={f"{a:g}": tpr_at_fpr(fpr, tpr, a) for a in fprs},
        n_members=int(labels.sum()),
        n_non_members=int((1 - labels).sum()),
    )
    return metrics, (fpr, tpr)


def bootstrap_intervals(
    member_scores: np.ndarray,
    non_member_scores: np.ndarray,
    fprs: Sequence[float] = DEFAULT_FPRS,
    *,
    n_boot: int = 1000,
    level: float = 0.95,
    seed: int = 0,
) -> dict[str, dict[str, list[float]]]:
    """Percentile bootstrap intervals of AUC and TPR at each FPR.

    Members and non-members are resampled separately (each with replacement, at its own size), so each replicate keeps
    the class sizes; the interval is the central ``level`` quantile range over ``n_boot`` replicates. The seed only
    drives the evaluation's resampling, never a privacy mechanism.
    """
    m = np.asarray(member_scores, dtype=np.float64).ravel()
    n = np.asarray(non_member_scores, dtype=np.float64).ravel()
    _labels_scores(m, n)  # validates
    rng = np.random.default_rng(seed)
    aucs, tprs = np.empty(n_boot), np.empty((n_boot, len(fprs)))
    labels = np.concatenate([np.ones(m.size, dtype=int), np.zeros(n.size, dtype=int)])
    for b in range(n_boot):
        s = np.concatenate([m[rng.integers(0, m.size, m.size)], n[rng.integers(0, n.size, n.size)]])
        fpr, tpr, _ = roc_curve(labels, s, pos_label=1, drop_intermediate=False)
        aucs[b] = roc_auc_score(labels, s)
        tprs[b] = [tpr_at_fpr(fpr, tpr, a) for a in fprs]
    lo, hi = (1 - level) / 2 * 100, (1 + level) / 2 * 100
    return {
        "level": level,
        "n_boot": n_boot,
        "auc": [float(np.percentile(aucs, lo)), float(np.percentile(aucs, hi))],
        "tpr_at_fpr": {f"{a:g}": [float(np.percentile(tprs[:, i], lo)), float(np.percentile(tprs[:, i], hi))]
                       for i, a in enumerate(fprs)},
    }
