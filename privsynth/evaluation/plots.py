"""Figures for reports: t-SNE of real vs synthetic transitions, ROC curves, privacy-utility curves.

Every function writes one PNG with matplotlib's Agg backend (no display needed) through a temporary file that is
renamed into place, and returns the path. Subsampling and t-SNE are seeded, so a figure is reproducible from its call.
"""
from __future__ import annotations

from pathlib import Path
from typing import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from privsynth.data.dataset import OfflineDataset  # noqa: E402

__all__ = ["tsne_plot", "roc_plot", "privacy_utility_plot"]

REAL_COLOR, SYNTH_COLOR = "#1f77b4", "#d62728"


def _save(fig: plt.Figure, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp" + path.suffix)
    fig.savefig(tmp, dpi=120, bbox_inches="tight")
    plt.close(fig)
    tmp.replace(path)
    return path


def tsne_plot(
    real: OfflineDataset | np.ndarray,
    synthetic: OfflineDataset | np.ndarray,
    path: str | Path,
    *,
    n_points: int = 600,
    seed: int = 0,
    perplexity: float = 30.0,
    title: str | None = None,
) -> Path:
    """2-D t-SNE of ``n_points`` real and ``n_points`` synthetic transition rows (state | action | reward | next state).

    Rows are z-scored with the pooled mean/std of the plotted points (a plotting convenience only), embedded jointly
    with scikit-learn's t-SNE (PCA initialisation, ``random_state=seed``), and drawn as two colours.
    """
    from sklearn.manifold import TSNE

    def rows(x: OfflineDataset | np.ndarray) -> np.ndarray:
        return x.transition_matrix()[:, :-1] if isinstance(x, OfflineDataset) else np.asarray(x, dtype=np.float32)

    rng = np.random.default_rng(seed)
    r, s = rows(real), rows(synthetic)
    r = r[rng.choice(len(r), size=min(n_points, len(r)), replace=False)]
    s = s[rng.choice(len(s), size=min(n_points, len(s)), replace=False)]
    x = np.concatenate([r, s]).astype(np.float64)
    x = (x - x.mean(axis=0)) / np.maximum(x.std(axis=0), 1e-8)
    perp = float(min(perplexity, max(2.0, (len(x) - 1) / 3)))
    emb = TSNE(n_components=2, perplexity=perp, init="pca", random_state=seed, learning_rate="auto").fit_transform(x)
    fig, ax = plt.subplots(figsize=(5.5, 5))
    # draw all points in one seeded random order so that neither set hides the other
    order = rng.permutation(len(emb))
    colors = np.array([REAL_COLOR] * len(r) + [SYNTH_COLOR] * len(s))
    ax.scatter(emb[order, 0], emb[order, 1], s=6, alpha=0.55, c=colors[order], linewidths=0)
    ax.scatter([], [], s=6, c=REAL_COLOR, label=f"real ({len(r)})")
    ax.scatter([], [], s=6, c=SYNTH_COLOR, label=f"synthetic ({len(s)})")
    ax.set_xticks([])
    ax.set_yticks([])
    ax.set_title(title or "t-SNE of transitions: real vs synthetic")
    ax.legend(loc="best", markerscale=3, frameon=True)
    return _save(fig, path)


def roc_plot(
    curves: Mapping[str, tuple[Sequence[float], Sequence[float]]] | None = None,
    path: str | Path = "roc.png",
    *,
    fpr: Sequence[float] | None = None,
    tpr: Sequence[float] | None = None,
    label: str = "attack",
    title: str = "Membership inference ROC",
    log_scale: bool = True,
) -> Path:
    """ROC curves on log-log axes (the MIA convention: the low-FPR region matters), with the chance diagonal.

    Pass several curves as ``{label: (fpr, tpr)}``, or one as ``fpr=..., tpr=..., label=...``. The AUC of each curve
    (trapezoid rule) is shown in its legend entry.
    """
    if curves is None:
        if fpr is None or tpr is None:
            raise ValueError("roc_plot needs curves={label: (fpr, tpr)} or fpr= and tpr=")
        curves = {label: (fpr, tpr)}
    fig, ax = plt.subplots(figsize=(5, 5))
    lo = 1e-4
    for name, (f, t) in curves.items():
        f, t = np.asarray(f, dtype=float), np.asarray(t, dtype=float)
        order = np.argsort(f, kind="stable")
        auc = float(np.trapezoid(t[order], f[order])) if hasattr(np, "trapezoid") else float(np.trapz(t[order], f[order]))
        ax.plot(np.maximum(f, lo), np.maximum(t, lo), label=f"{name} (AUC {auc:.3f})")
    grid = np.logspace(-4, 0, 100) if log_scale else np.linspace(0, 1, 100)
    ax.plot(grid, grid, "k--", lw=0.8, label="chance")
    if log_scale:
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlim(lo, 1)
        ax.set_ylim(lo, 1)
    ax.set_xlabel("false positive rate")
    ax.set_ylabel("true positive rate")
    ax.set_title(title)
    ax.legend(loc="lower right")
    ax.grid(True, which="major", alpha=0.3)
    return _save(fig, path)


def privacy_utility_plot(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]] | tuple[Sequence[float], Sequence[float], Sequence[float]]],
    path: str | Path,
    *,
    ylabel: str = "normalized score",
    title: str = "Privacy-utility trade-off",
    reference: Mapping[str, float] | None = None,
    log_x: bool = True,
) -> Path:
    """Utility against ε: ``{method: (eps, mean)}`` or ``{method: (eps, mean, std)}`` (std drawn as a band).

    ``reference`` draws horizontal lines, e.g. ``{"real data": 71.0}``. ε = inf (non-private) is drawn at the right
    edge, labelled ∞.
    """
    fig, ax = plt.subplots(figsize=(6, 4))
    finite_max = 1.0
    for vals in series.values():
        e = np.asarray(vals[0], dtype=float)
        if np.isfinite(e).any():
            finite_max = max(finite_max, float(e[np.isfinite(e)].max()))
    inf_x = finite_max * (4 if log_x else 1.25)
    for name, vals in series.items():
        e = np.asarray(vals[0], dtype=float)
        m = np.asarray(vals[1], dtype=float)
        x = np.where(np.isfinite(e), e, inf_x)
        order = np.argsort(x)
        (line,) = ax.plot(x[order], m[order], marker="o", label=name)
        if len(vals) == 3:
            sd = np.asarray(vals[2], dtype=float)[order]
            ax.fill_between(x[order], m[order] - sd, m[order] + sd, alpha=0.2, color=line.get_color())
    for name, y in (reference or {}).items():
        ax.axhline(y, ls="--", lw=1, color="gray")
        ax.annotate(name, (0.0, y), xycoords=("axes fraction", "data"), textcoords="offset points", xytext=(4, 3),
                    fontsize=9, color="gray")
    if log_x:
        ax.set_xscale("log")
    if any(not np.isfinite(np.asarray(v[0], dtype=float)).all() for v in series.values()):
        ax.axvline(inf_x, ls=":", lw=0.8, color="gray")
        ax.annotate("ε = ∞", (inf_x, 1.0), xycoords=("data", "axes fraction"), xytext=(0, 3),
                    textcoords="offset points", ha="center", fontsize=9, color="gray")
    ax.set_xlabel("ε (privacy budget)")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(loc="best")
    return _save(fig, path)
