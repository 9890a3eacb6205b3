"""The audit report a data holder attaches to a release: markdown + JSON + ROC plot.

:func:`write_report` takes the dict built by ``privsynth audit`` (data-only and/or white-box results, optionally a
canary audit) and writes ``<stem>.json``, ``<stem>.md`` and ``<stem>-roc.png``. The markdown says what was attacked,
the threat model of each attack, the results with their bootstrap intervals, the empirical ε lower bound beside the
claimed ε, and the caveats that bound what the numbers mean.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

__all__ = ["write_report", "render_markdown", "CAVEATS"]

CAVEATS = [
    "Members are the positive class; TPR at α FPR is read at the last ROC point with FPR ≤ α (no interpolation). "
    "Chance is TPR = α.",
    "Intervals are 95% percentile bootstrap intervals over members and non-members resampled separately. With n "
    "non-members, the 0.1% FPR point rests on about n/1000 non-members, so it is only meaningful for n ≥ 1000.",
    "An attack that finds nothing is not a proof of privacy: these attacks are lower bounds on what leaks. The formal "
    "guarantee is the card's (ε, δ); at (ε, δ)-DP every attack satisfies TPR ≤ e^ε·FPR + δ, which is vacuous at "
    "ε = 10 and 1% FPR.",
    "Data-only attacks see only the released rows (and reference records). White-box attacks use the released EMA "
    "weights, which a release of data alone does not publish.",
    "The canary lower bound (one run, Steinke, Nasr & Jagielski 2023) holds at the stated confidence for the canaries "
    "as crafted; a bound below the claim says these canaries did not expose a violation, not that the claim is tight.",
    "Non-members must come from the same distribution as the members; a shift between the two sets shows up as "
    "signal even against a model that never saw either (check a control).",
]


def _fmt(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _ci(att: dict[str, Any], key: str, alpha: str | None = None) -> str:
    ci = att.get("ci")
    if not ci:
        return ""
    lo, hi = ci["auc"] if alpha is None else ci["tpr_at_fpr"][alpha]
    return f" [{lo:.3f}, {hi:.3f}]"


def _results_table(res: dict[str, Any]) -> list[str]:
    fprs = [f"{a:g}" for a in res.get("fprs", [0.001, 0.01, 0.1])]
    head = "| attack | access | " + " | ".join(f"TPR@{float(a) * 100:g}% FPR" for a in fprs) + " | AUC |"
    lines = [head, "|" + "---|" * (len(fprs) + 3)]
    for name, att in res["attacks"].items():
        t = att["tpr_at_fpr"]
        cells = [f"{t[a]:.3f}{_ci(att, 'tpr', a)}" for a in fprs]
        access = att.get("config", {}).get("access", "")
        lines.append(f"| `{name}` | {access} | " + " | ".join(cells) + f" | {att['auc']:.3f}{_ci(att, 'auc')} |")
    first = next(iter(res["attacks"].values()))
    lines.append("")
    lines.append(f"{first['n_members']} member and {first['n_non_members']} non-member {res['unit']}s scored.")
    return lines


def render_markdown(report: dict[str, Any]) -> str:
    """The markdown text of an audit report (see :func:`write_report`)."""
    t = report.get("target", {})
    lines = ["# Privacy audit report", ""]
    lines += ["## What was attacked", ""]
    for key, label in (("release", "released dataset"), ("checkpoint", "synthesizer weights"),
                       ("members", "members (fine-tuning records)"), ("non_members", "non-members (held out)"),
                       ("reference", "reference data (attacker's)"), ("reference_model", "public reference model")):
        if t.get(key):
            lines.append(f"- {label}: `{t[key]}`")
    card = report.get("card") or {}
    if card:
        lines.append(f"- claimed guarantee (privacy card): ε = {_fmt(card.get('epsilon'))}, δ = {card.get('delta')}, "
                     f"unit = {card.get('unit')}, accountant = {card.get('accountant')}")
    lines.append("")
    sections = [("data_only", "Data-only attacks on the release"), ("white_box", "White-box attacks on the weights")]
    threat = {}
    for key, _ in sections:
        for name, att in (report.get(key) or {}).get("attacks", {}).items():
            cfg = att.get("config", {})
            threat[name] = cfg.get("threat_model") or (
                "released EMA weights (white-box)" + (" + a public reference model that never saw the sensitive data"
                                                      if cfg.get("calibrated_by") else "") if key == "white_box" else "")
    if threat:
        lines += ["## Threat model of each attack", "", "| attack | the attacker holds |", "|---|---|"]
        lines += [f"| `{n}` | {m} |" for n, m in threat.items()]
        lines.append("")
    for key, title in sections:
        res = report.get(key)
        if res:
            lines += [f"## {title}", ""] + _results_table(res) + [""]
    canary = report.get("canary")
    if canary:
        lines += ["## Empirical ε lower bound (canary audit)", ""]
        lines += ["| run | scored from | canaries | guesses | correct | ε lower bound | claimed ε | consistent |",
                  "|---|---|---|---|---|---|---|---|"]
        for run in canary["runs"]:
            for src, a in run["audits"].items():
                lines.append(f"| {run['label']} | {src} | {a['canaries']} | {a['guesses']} | {a['correct']} | "
                             f"{_fmt(a['epsilon_lower_bound'], 2)} | {_fmt(a['claimed_epsilon'], 2)} | "
                             f"{'yes' if a['consistent'] else '**no**'} |")
        lines += ["", f"Canaries: {canary.get('description', '')} Confidence {canary.get('confidence', 0.95)}."]
        if canary.get("max_bound") is not None:
            lines += ["", f"With every guess right this design would show ε ≥ {canary['max_bound']:.2f}: claims above that "
                      "cannot be refuted by it (one-run audits need many canaries to certify large ε)."]
        for run in canary["runs"]:
            if run.get("claimed_epsilon_source") and run.get("noise") == "off":
                lines += ["", f"'{run['label']}' is the no-privacy ablation of the same configuration (no clipping, no "
                          f"noise); its claimed ε is {run['claimed_epsilon_source']}. An audit that refutes it shows "
                          "the canaries and scores are strong enough to see a leak when there is one."]
        lines.append("")
    lines += ["## Caveats", ""] + [f"- {c}" for c in CAVEATS]
    if report.get("command"):
        lines += ["", "## Command", "", "```", report["command"], "```"]
    return "\n".join(lines) + "\n"


def _atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_report(report: dict[str, Any], json_path: str | Path, md_path: str | Path | None = None,
                 plot_path: str | Path | None = None) -> dict[str, Path]:
    """Write the JSON, the markdown and (when there are ROC curves) the log-log ROC plot; return the paths."""
    from privsynth.evaluation.mia.audit import plot_roc

    json_path = Path(json_path)
    md_path = Path(md_path) if md_path else json_path.with_suffix(".md")
    plot_path = Path(plot_path) if plot_path else json_path.with_name(json_path.stem + "-roc.png")
    runs = {label: report[key] for key, label in (("data_only", "data"), ("white_box", "weights")) if report.get(key)}
    written = {"json": json_path, "markdown": md_path}
    if runs:
        report = {**report, "roc_plot": str(plot_path)}
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        plot_roc(runs, str(plot_path), title=report.get("title"))
        written["plot"] = plot_path
    _atomic_write(json_path, json.dumps(report, indent=1, default=float))
    _atomic_write(md_path, render_markdown(report))
    return written
