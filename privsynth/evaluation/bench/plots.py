"""A suite's plots from its finished records (matplotlib, Agg): privacy-utility curves, grouped bars of a whole
results table (e.g. Table I: every synthesizer and ε beside the real data) and ROC curves of the
membership-inference cells (docs/benchmarks.md, "Where things go")."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.plan import records_for
from privsynth.evaluation.bench.suite import Suite
from privsynth.evaluation.bench.tables import eps_label, label, made_by, records_frame, remove_stale

__all__ = ["write_plots", "privacy_utility_plot", "bars_plot", "axis_label", "AXIS_LABELS"]

_SCORE = "normalised return (0 = random, 100 = expert)"
AXIS_LABELS = {
    "final_score": f"final {_SCORE}",
    "best_score": f"best {_SCORE}",
    "marginal": "marginal fidelity (1 − KS, 1 = same marginals)",
    "correlation": "correlation fidelity (1 = same correlations)",
    "dp_epsilon": "ε spent",
    "fit_seconds": "fit time (s, pre-train + fine-tune)",
    "finetune_seconds": "fine-tune time (s)",
    "sample_seconds": "sampling time (s)",
    "seconds_per_step": "seconds per DP step",
    "samples_per_second": "samples per second",
    "checkpoint_mb": "checkpoint size (MB)",
    "peak_rss_mb": "peak memory (MB)",
}


def axis_label(key: str) -> str:
    """What the number ``key`` is, for an axis: ``final_score`` → "final normalised return (0 = random, 100 =
    expert)", ``loss_auc`` → "loss attack AUC"; the key itself when unknown."""
    if key in AXIS_LABELS:
        return AXIS_LABELS[key]
    if key.endswith("_auc"):
        return f"{key[:-4]} attack AUC (0.5 = chance)"
    if "_tpr@" in key:
        attack, at = key.split("_tpr@", 1)
        return f"{attack} attack TPR at {at} FPR"
    return key


def write_plots(suite: Suite, log: Callable[[str], None] | None = print) -> list[Path]:
    """Privacy-utility curves (value vs ε per series), grouped bars and ROC plots of MIA cells. A plot with nothing
    to draw (no current cell, or no cell with its ``y``) is not written, its old file is removed, and it says so."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = suite.out / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    origin = made_by(suite)
    for spec in suite.plots:
        if spec.get("type") not in ("privacy_utility", "bars", "roc"):
            raise InvalidData(f"unknown plot type '{spec.get('type')}': use privacy_utility, bars or roc")
        recs = records_for(suite, spec)
        if not recs:
            remove_stale(spec["name"], out_dir, (".png",), log=log, what="plot")
            continue
        spec = {**spec, "title": spec.get("title") or f"{spec['name']} ({origin.split(',')[0]})"}
        path = out_dir / f"{spec['name']}.png"
        if spec["type"] == "privacy_utility":
            drawn = privacy_utility_plot(plt, recs, spec, path)
        elif spec["type"] == "bars":
            drawn = bars_plot(plt, recs, spec, path)
        else:
            drawn = _roc_plot(recs, spec, path)
        if not drawn:
            y = spec.get("y", spec.get("audit", "audit"))
            keys = ", ".join(sorted(str(c) for c in records_frame(recs).columns))
            removed = remove_stale(spec["name"], out_dir, (".png",), log=None)
            if log is not None:
                log(f"plot '{spec['name']}' not drawn: '{y}' is in none of its {len(recs)} cells (their keys: {keys})"
                    + ("; removed its old png" if removed else ""))
            continue
        written.append(path)
    return written


def _roc_plot(recs: Sequence[Mapping[str, Any]], spec: dict[str, Any], path: Path) -> bool:
    """ROC curves of the audits in the records, one per cell labelled by ``spec['label']``; False if none."""
    from privsynth.evaluation.mia.audit import plot_roc

    label_keys = spec.get("label", ["synthesizer", "epsilon"])
    runs = {}
    for r in recs:
        audit = (r["result"] or {}).get(spec.get("audit", "audit"))  # "data_audit": data-only attacks
        if audit:
            name = " ".join(label(k, r["params"].get(k)) for k in label_keys)
            attacks = {a: v for a, v in audit["attacks"].items() if a in spec.get("attacks", audit["attacks"])}
            runs[name] = {**audit, "attacks": attacks}
    if not runs:
        return False
    plot_roc(runs, str(path), title=spec.get("title"))
    return True


def _varying(df, keys: Sequence[str], exclude: Sequence[str]) -> list[str]:
    """The ``keys`` (param columns) that take more than one value in ``df``, minus ``exclude``."""
    return [k for k in keys if k in df.columns and k not in exclude
            and df[k].astype(object).where(df[k].notna(), None).astype(str).nunique() > 1]


def _group_label(keys: Sequence[str], values: Sequence[Any]) -> str:
    if len(keys) == 1:
        return str(values[0])
    return " ".join(label(k, v) for k, v in zip(keys, values))


def privacy_utility_plot(plt, recs: Sequence[Mapping[str, Any]], spec: dict[str, Any], path: Path) -> bool:
    """y vs ε, one line per ``series`` value and per every other param that varies among the cells (but ε and seed:
    two synthesizers are never pooled into one point), mean ± std over seeds; no DP drawn at the right, the public
    model alone (ε = 0) at the left. Cells without an ε (``synthesizer: real``) are drawn as dashed "real data"
    reference lines. False (nothing written) if no cell has ``y``."""
    import pandas as pd

    df = records_frame(recs)
    x, y = spec.get("x", "epsilon"), spec["y"]
    series = spec.get("series", "synthesizer")
    series = [series] if isinstance(series, str) else list(series)
    if y not in df.columns:
        return False
    df[y] = pd.to_numeric(df[y], errors="coerce")
    df = df[df[y].notna()].reset_index(drop=True)
    if df.empty:
        return False
    params = list(dict.fromkeys(k for r in recs for k, v in r["params"].items() if not isinstance(v, (dict, list))))
    real = df[x].isna() if x in df.columns else pd.Series(True, index=df.index)
    if "synthesizer" in df.columns:
        real |= (df["synthesizer"] == "real")
    curves, refs = df[~real].copy(), df[real].copy()
    fig, ax = plt.subplots(figsize=(5.6, 3.8))
    if not curves.empty:
        curves["_x"], names = epsilon_positions(curves[x])
        keys = [k for k in series if k in curves.columns]
        keys += [k for k in _varying(curves, params, [x, "seed", *keys])]
        groups = curves.groupby([curves[k].astype(str) for k in keys], sort=True) if keys else [((), curves)]
        for key, g in groups:
            key = key if isinstance(key, tuple) else (key,)
            agg = g.groupby("_x")[y].agg(["mean", "std"]).reset_index().sort_values("_x")
            ax.errorbar(agg["_x"], agg["mean"], yerr=agg["std"].fillna(0), marker="o", capsize=3,
                        label=_group_label(keys, key) if keys else y)
        ax.set_xscale("log")
        ax.minorticks_off()
        ticks = sorted(curves["_x"].unique())
        ax.set_xticks(ticks)
        ax.set_xticklabels([names.get(t, f"{t:g}") for t in ticks])
    if not refs.empty:
        rkeys = _varying(refs, params, [x, "seed", "synthesizer"])
        groups = refs.groupby([refs[k].astype(str) for k in rkeys], sort=True) if rkeys else [((), refs)]
        for i, (key, g) in enumerate(groups):
            key = key if isinstance(key, tuple) else (key,)
            name = "real data" + (f" ({' '.join(label(k, v) for k, v in zip(rkeys, key))})" if rkeys else "")
            ax.axhline(float(g[y].mean()), color="gray", linestyle=("--", ":", "-.")[i % 3], linewidth=1, label=name)
    ax.set(xlabel="ε", ylabel=spec.get("ylabel", axis_label(y)), title=spec.get("title", ""))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True


def epsilon_positions(values) -> tuple[Any, dict[float, str]]:
    """x positions on a log axis for ε values as tables show them (numbers, "no DP", "0 (public only)"): numbers where
    they are, no DP 3x right of the largest, the public-only model 3x left of the smallest; and the tick names of the
    two non-numeric positions."""
    import pandas as pd

    values = pd.Series(values)
    finite = pd.to_numeric(values, errors="coerce")
    positive = finite[finite > 0]
    top = (positive.max() if len(positive) else 1.0) * 3
    bottom = (positive.min() if len(positive) else 1.0) / 3
    public = (values.astype(str) == eps_label(0.0)) | (finite == 0)
    pos = finite.where(finite > 0).fillna(top).where(~public, bottom)
    names = {}
    if (~public & finite.isna()).any():
        names[float(top)] = "no DP"
    if public.any():
        names[float(bottom)] = "public only"
    return pos.astype(float), names


def _row_label(row: Mapping[str, Any], keys: Sequence[str]) -> str:
    parts = []
    for k in keys:
        v = row.get(k)
        if v is None or (isinstance(v, float) and np.isnan(v)):
            continue
        if k == "epsilon":
            parts.append(v if isinstance(v, str) else f"ε={v:g}")
        else:
            parts.append(str(v))
    return " ".join(parts) or "?"


def bars_plot(plt, recs: Sequence[Mapping[str, Any]], spec: dict[str, Any], path: Path) -> bool:
    """Horizontal grouped bars: one group per ``rows`` combination (e.g. synthesizer and ε), one bar per ``series``
    value (e.g. agent), mean ± std of ``y`` over the rest (seeds). ``reference`` (params, e.g. ``{synthesizer:
    real}``) also draws its means as dashed lines across the groups. False if no record has ``y``."""
    import pandas as pd

    df = records_frame(recs)
    y, series, rows = spec["y"], spec.get("series", "agent"), list(spec.get("rows", ["synthesizer", "epsilon"]))
    if y not in df.columns:
        return False
    df[y] = pd.to_numeric(df[y], errors="coerce")
    df = df[df[y].notna()]
    if df.empty:
        return False
    df["_row"] = [_row_label(r, [k for k in rows if k in df.columns]) for r in df.to_dict("records")]
    df["_series"] = df[series].astype(str) if series in df.columns else ""
    ref = spec.get("reference") or {}
    is_ref = np.ones(len(df), dtype=bool) if ref else np.zeros(len(df), dtype=bool)
    for k, v in ref.items():
        is_ref &= (df[k] == v).to_numpy() if k in df.columns else False
    groups = list(dict.fromkeys(list(df.loc[is_ref, "_row"]) + list(df.loc[~is_ref, "_row"])))
    names = list(dict.fromkeys(df["_series"]))
    agg = df.groupby(["_row", "_series"])[y].agg(["mean", "std"])
    height = 0.8 / max(len(names), 1)
    fig, ax = plt.subplots(figsize=(6.4, 0.9 + 0.42 * len(groups) * max(1, len(names) / 2)))
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for j, name in enumerate(names):
        pos, mean, std = [], [], []
        for i, g in enumerate(groups):
            if (g, name) in agg.index:
                a = agg.loc[(g, name)]
                pos.append(i + (j - (len(names) - 1) / 2) * height)
                mean.append(a["mean"])
                std.append(0.0 if np.isnan(a["std"]) else a["std"])
        color = colors[j % len(colors)]
        ax.barh(pos, mean, height=height * 0.95, xerr=std, capsize=2, color=color, label=name)
        if ref and is_ref.any():
            r = df.loc[is_ref & (df["_series"] == name).to_numpy(), y]
            if len(r):
                ax.axvline(float(r.mean()), color=color, linestyle="--", linewidth=1)
    ax.set_yticks(range(len(groups)))
    ax.set_yticklabels(groups, fontsize=8)
    ax.invert_yaxis()
    ax.axvline(0.0, color="black", linewidth=0.6)
    ax.set(xlabel=spec.get("xlabel", axis_label(y)), title=spec.get("title", ""))
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True
