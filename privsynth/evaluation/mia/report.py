"""The audit report a data holder attaches to a release: markdown + JSON + ROC plot.

:func:`write_report` takes the dict built by ``privsynth audit`` (data-only and/or white-box results, optionally a
canary audit) and writes ``<stem>.json``, ``<stem>.md`` and ``<stem>-roc.png`` (three distinct paths,
:func:`report_paths`). The markdown says what was attacked, the threat model of each attack, the results with their
bootstrap intervals, the empirical ε lower bound beside the claimed ε with the verdict, and the caveats that bound
what the numbers mean. It is computed on the sensitive data and is not covered by the card's DP guarantee.
"""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from privsynth.errors import InvalidData

__all__ = ["write_report", "render_markdown", "report_paths", "CAVEATS"]

CAVEATS = [
    "This report is computed on the sensitive data: its AUCs, ROC curves, TPRs and ε bounds are statistics of "
    "sensitive records (the audited members and non-members, or the pipeline run on the sensitive data), released by "
    "no DP mechanism, and the card's DP guarantee does not cover them. It is an internal document for the data "
    "holder; publishing it beside the release discloses more than the card accounts for, which only the data holder "
    "can decide to accept.",
    "Members are the positive class; TPR at α FPR is read at the last ROC point with FPR ≤ α (no interpolation). "
    "Chance is TPR = α.",
    "Intervals are 95% percentile bootstrap intervals over members and non-members resampled separately. With n "
    "non-members, the 0.1% FPR point rests on about n/1000 non-members, so it is only meaningful for n ≥ 1000.",
    "An attack that finds nothing is not a proof of privacy: these attacks are lower bounds on what leaks. The formal "
    "guarantee is the card's (ε, δ); at (ε, δ)-DP every attack satisfies TPR ≤ e^ε·FPR + δ, which is vacuous at "
    "ε = 10 and 1% FPR.",
    "Data-only attacks see only the released rows (and reference records). White-box attacks use the released EMA "
    "weights, which a release of data alone does not publish.",
    "The ε lower bounds (one run, Steinke, Nasr & Jagielski 2023) hold at the stated confidence for the canaries, or "
    "the members and non-members, as audited; a bound below the claim says these attacks did not expose a violation, "
    "not that the claim is tight.",
    "Non-members must come from the same distribution as the members; a shift between the two sets shows up as "
    "signal even against a model that never saw either (check a control).",
]


def _fmt(v: float | None, digits: int = 3) -> str:
    return "–" if v is None else f"{v:.{digits}f}"


def _ci(att: dict[str, Any], key: str, alpha: str | None = None) -> str:
    ci = att.get("ci")
    if not ci:
        return ""
    pair = ci["auc"] if alpha is None else ci["tpr_at_fpr"].get(alpha)
    if pair is None:
        return ""
    lo, hi = pair
    return f" [{lo:.3f}, {hi:.3f}]"


def plural(unit: str | None) -> str:
    return {"transition": "transitions", "trajectory": "trajectories"}.get(unit or "", f"{unit}s")


def _tpr_cell(att: dict[str, Any], alpha: str) -> str:
    v = att["tpr_at_fpr"].get(alpha)
    if v is None:
        return att.get("not_available", {}).get(alpha, "n/a")
    return f"{v:.3f}{_ci(att, 'tpr', alpha)}"


def _results_table(res: dict[str, Any]) -> list[str]:
    fprs = [f"{a:g}" for a in res.get("fprs", [0.001, 0.01, 0.1])]
    head = "| attack | access | " + " | ".join(f"TPR@{float(a) * 100:g}% FPR" for a in fprs) + " | AUC |"
    lines = [head, "|" + "---|" * (len(fprs) + 3)]
    for name, att in res["attacks"].items():
        cells = [_tpr_cell(att, a) for a in fprs]
        access = att.get("config", {}).get("access", "")
        lines.append(f"| `{name}` | {access} | " + " | ".join(cells) + f" | {att['auc']:.3f}{_ci(att, 'auc')} |")
    first = next(iter(res["attacks"].values()))
    lines.append("")
    lines.append(f"{first['n_members']} member and {first['n_non_members']} non-member {plural(res['unit'])} scored.")
    return lines


def _epsilon_section(ea: dict[str, Any]) -> list[str]:
    lines = ["## ε lower bound against the claimed ε", ""]
    line = ea.get("line", "")
    lines += [f"**{line}**" if ea.get("status") in ("violation", "uninformative") else line, ""]
    if ea.get("bounds"):
        lines += ["| access | attack | pairs | guesses | correct | ε lower bound | at most (all right) | claimed ε |",
                  "|---|---|---|---|---|---|---|---|"]
        for b in ea["bounds"]:
            lb = b.get("epsilon_lower_bound")
            lines.append(f"| {b['access']} | `{b['attack']}` | {b['pairs']} | {b['guesses']} | {b['correct']} | "
                         f"{_fmt(lb) if lb is not None else b.get('not_available') or '–'} | "
                         f"{_fmt(b.get('max_bound'))} | {_fmt(ea['claimed_epsilon'])} |")
        lines.append("")
        conf = ea.get("family_confidence", 0.95)
        n = ea.get("tests", 1)
        step = ("one replace-one step" if ea.get("relation") == "replace-one" else
                "two add/remove steps, so (ε, δ)-DP gives (2ε, (1 + e^ε)δ) per pair")
        lines += [f"Design (fixed before any score was seen): each of n random members is paired with a random "
                  f"non-member, the order within a pair by a coin; the auditor guesses \"the first is the member\" "
                  f"for the k highest score differences and \"the second\" for the k lowest (k = a tenth of the pairs "
                  f"unless --guesses), and `privsynth.privacy.audit.audit_scores` turns the correct guesses into the "
                  f"largest ε rejected (Steinke, Nasr & Jagielski 2023). Swapping a member for a non-member is "
                  f"{step}; "
                  f"the bound is stated in the card's terms (δ = {ea.get('delta'):g}). Confidence {conf:.0%} for the "
                  f"report" + (f" (Bonferroni: each of the {n} attacks at {1 - (1 - conf) / n:.4g})" if n > 1 else "")
                  + ".", ""]
        lines += [f"Assumption: the bound is {ea.get('assumption', '')}", ""]
    for note in ea.get("notes", []):
        lines += [f"Note: {note}.", ""]
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
                     f"unit = {card.get('unit')}, accountant = {card.get('accountant')}"
                     + (f", {card['neighbouring_relation']}" if card.get("neighbouring_relation") else ""))
    elif not report.get("canary"):
        lines.append("- claimed guarantee: none; not a DP release (no privacy card): no claimed ε to test")
    if t.get("unit"):
        lines.append(f"- audited unit: one {t['unit']}")
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
    if report.get("epsilon_audit"):
        lines += _epsilon_section(report["epsilon_audit"])
    canary = report.get("canary")
    if canary:
        lines += ["## Empirical ε lower bound (canary audit)", ""]
        lines += ["| run | scored from | canaries | guesses | correct | ε lower bound | claimed ε | verdict |",
                  "|---|---|---|---|---|---|---|---|"]
        for run in canary["runs"]:
            for src, a in run["audits"].items():
                verdict = a.get("verdict") or ("consistent" if a["consistent"] else "violation")
                if verdict in ("violation", "uninformative"):
                    verdict = f"**{verdict}**"
                lines.append(f"| {run['label']} | {src} | {a['canaries']} | {a['guesses']} | {a['correct']} | "
                             f"{_fmt(a['epsilon_lower_bound'], 2)} | {_fmt(a['claimed_epsilon'], 2)} | {verdict} |")
        for src, pw in (canary.get("power") or {}).items():
            if pw.get("informative") is not True:
                head = ("No power" if pw.get("informative") is False else "Power unknown")
                lines += ["", f"**{head} ({src}): {pw['reason']}.**"]
            else:
                lines += ["", f"Power ({src}): {pw['reason']}."]
        conf_s = f"Confidence {canary.get('confidence', 0.95):.4g}"
        if canary.get("tests", 1) > 1:
            conf_s += (f" per score source ({canary['tests']} sources, Bonferroni: a violation holds at "
                       f"{canary.get('family_confidence', 0.95):.0%} whichever source shows it)")
        lines += ["", f"Canaries: {canary.get('description', '')} {conf_s}."]
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


def report_paths(json_path: str | Path, md_path: str | Path | None = None,
                 plot_path: str | Path | None = None) -> tuple[Path, Path, Path]:
    """(JSON, markdown, plot) paths: markdown and plot default to the JSON's stem; refuses paths that coincide. A
    folder (an existing one, or a path with no suffix) gets ``audit.json`` inside it, as ``evaluate --out`` does."""
    json_path = Path(json_path)
    if json_path.is_dir() or json_path.suffix == "":
        json_path = json_path / "audit.json"
    if json_path.suffix.lower() != ".json":  # as evaluate --out: JSON written into a .txt or .md would mislead
        raise InvalidData(f"--out {json_path} is where the JSON goes (the report and the plot are written beside it "
                          f"as <stem>.md and <stem>-roc.png): give a .json path or a folder")
    md_path = Path(md_path) if md_path else json_path.with_suffix(".md")
    plot_path = Path(plot_path) if plot_path else json_path.with_name(json_path.stem + "-roc.png")
    paths = {"--out (JSON)": json_path, "--report (markdown)": md_path, "--plot (ROC)": plot_path}
    seen: dict[Path, str] = {}
    for label, p in paths.items():
        key = Path(os.path.abspath(p))
        if key in seen:
            raise InvalidData(f"{label} and {seen[key]} are the same file {p}: give them different paths")
        seen[key] = label
    return json_path, md_path, plot_path


def write_report(report: dict[str, Any], json_path: str | Path, md_path: str | Path | None = None,
                 plot_path: str | Path | None = None) -> dict[str, Path]:
    """Write the JSON, the markdown and (when there are ROC curves) the log-log ROC plot; return the paths."""
    from privsynth.evaluation.mia.audit import plot_roc

    json_path, md_path, plot_path = report_paths(json_path, md_path, plot_path)
    runs = {label: report[key] for key, label in (("data_only", "data"), ("white_box", "weights")) if report.get(key)}
    written = {"json": json_path, "markdown": md_path}
    bound = (report.get("epsilon_audit") or {}).get("plot_bound")
    if runs:
        report = {**report, "roc_plot": str(plot_path)}
        plot_path.parent.mkdir(parents=True, exist_ok=True)
        plot_roc(runs, str(plot_path), title=report.get("title"), dp_bound=tuple(bound) if bound else None)
        written["plot"] = plot_path
    _atomic_write(json_path, json.dumps(report, indent=1, default=float))
    _atomic_write(md_path, render_markdown(report))
    return written
