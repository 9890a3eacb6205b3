"""A suite's plots from its finished records (matplotlib, Agg): privacy-utility curves and ROC curves of the
membership-inference cells (docs/benchmarks.md, "Where things go")."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.plan import selections
from privsynth.evaluation.bench.suite import Suite
from privsynth.evaluation.bench.tables import label, records_frame

__all__ = ["write_plots", "privacy_utility_plot"]


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
        elif spec["type"] == "roc":
            if not _roc_plot(recs, spec, path):
                continue
        else:
            raise InvalidData(f"unknown plot type '{spec['type']}': use privacy_utility or roc")
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
    """y vs ε, one line per ``series`` key value, mean ± std over the other keys (seeds); no-DP drawn at the right."""
    import pandas as pd

    df = records_frame(recs)
    x, y, series = spec.get("x", "epsilon"), spec["y"], spec.get("series", "synthesizer")
    if y not in df.columns or x not in df.columns:
        return
    finite = pd.to_numeric(df[x], errors="coerce")
    top = (finite.max() if finite.notna().any() else 1.0) * 3
    df["_x"] = finite.fillna(top)
    df[y] = pd.to_numeric(df[y], errors="coerce")
    fig, ax = plt.subplots(figsize=(5, 3.6))
    for name, g in df.groupby(df[series].astype(str) if series in df.columns else np.zeros(len(df))):
        agg = g.groupby("_x")[y].agg(["mean", "std"]).reset_index().sort_values("_x")
        ax.errorbar(agg["_x"], agg["mean"], yerr=agg["std"].fillna(0), marker="o", capsize=3, label=str(name))
    ax.set_xscale("log")
    ticks = sorted(df["_x"].unique())
    ax.set_xticks(ticks)
    ax.set_xticklabels(["no DP" if t == top else f"{t:g}" for t in ticks])
    ax.set(xlabel="ε", ylabel=spec.get("ylabel", y), title=spec.get("title", ""))
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
