"""A suite's plots from its finished records (matplotlib, Agg): privacy-utility curves, grouped bars of a whole
results table (e.g. Table I: every synthesizer and ε beside the real data) and ROC curves of the
membership-inference cells (docs/benchmarks.md, "Where things go")."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.plan import selections
from privsynth.evaluation.bench.suite import Suite
from privsynth.evaluation.bench.tables import eps_label, label, records_frame

__all__ = ["write_plots", "privacy_utility_plot", "bars_plot"]


def write_plots(suite: Suite) -> list[Path]:
    """Privacy-utility curves (value vs ε per series) and ROC plots of MIA cells."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = suite.out / "plots"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec, recs in selections(suite, suite.plots):
        path = out_dir / f"{spec['name']}.png"
        if spec["type"] == "privacy_utility":
            privacy_utility_plot(plt, recs, spec, path)
        elif spec["type"] == "bars":
            if not bars_plot(plt, recs, spec, path):
                continue
        elif spec["type"] == "roc":
            if not _roc_plot(recs, spec, path):
                continue
        else:
            raise InvalidData(f"unknown plot type '{spec['type']}': use privacy_utility, bars or roc")
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


def privacy_utility_plot(plt, recs: Sequence[Mapping[str, Any]], spec: dict[str, Any], path: Path) -> None:
    """y vs ε, one line per ``series`` key value, mean ± std over the other keys (seeds); no DP drawn at the right, the
    public model alone (ε = 0) at the left."""
    import pandas as pd

    df = records_frame(recs)
    x, y, series = spec.get("x", "epsilon"), spec["y"], spec.get("series", "synthesizer")
    if y not in df.columns or x not in df.columns:
        return
    df["_x"], names = epsilon_positions(df[x])
    df[y] = pd.to_numeric(df[y], errors="coerce")
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, g in df.groupby(df[series].astype(str) if series in df.columns else np.zeros(len(df))):
        agg = g.groupby("_x")[y].agg(["mean", "std"]).reset_index().sort_values("_x")
        ax.errorbar(agg["_x"], agg["mean"], yerr=agg["std"].fillna(0), marker="o", capsize=3, label=str(name))
    ax.set_xscale("log")
    ticks = sorted(df["_x"].unique())
    ax.set_xticks(ticks)
    ax.set_xticklabels([names.get(t, f"{t:g}") for t in ticks])
    ax.set(xlabel="ε", ylabel=spec.get("ylabel", y), title=spec.get("title", ""))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)


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
    ax.set(xlabel=spec.get("xlabel", y), title=spec.get("title", ""))
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
    return True
