"""The demo's ``report.md`` (used by :mod:`privsynth.demo` only): the datasets and the stored split with the command
that re-runs the audit, the privacy card, what it covers, fidelity, RL-aware checks, agents, the membership audit with
its verdict on the claimed ε, and the stage timings."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

__all__ = ["render_report"]


def _num(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "–"


def _verdict(ea: dict[str, Any]) -> str:
    """The audit's verdict line, in bold when it is not ``consistent`` (a VIOLATION, or a design that cannot test)."""
    line = ea.get("line", "–")
    return f"**{line}**" if ea.get("status") in ("violation", "uninformative") else line


def render_report(report: dict[str, Any], card_md: str, out: Path) -> str:
    """``report.md`` from the demo's report dict and the card's markdown (``out``: the demo's output folder)."""
    cfg, sec = report["config"], report["seconds"]
    fid, fm = report.get("fidelity") or {}, report.get("fidelity_members") or {}
    store = cfg["store"] or str(out / "minari")
    members_id, non_members_id = report["datasets"]["members"]["id"], report["datasets"]["non_members"]["id"]
    split = report["datasets"].get("split") or {}
    lines = [
        "# privsynth demo report",
        "",
        f"Sensitive data: `{report['datasets']['sensitive']}` (members {report['datasets']['members']['transitions']}"
        f" transitions; non-members {report['datasets']['non_members']['transitions']}). Public pre-training data: "
        + ", ".join(f"`{p}`" for p in report["datasets"]["public"])
        + f". Released synthetic dataset: `{report['datasets']['synthetic']}` in the Minari store `{store}`.",
        "",
        f"The audit's members and non-members, a random {split.get('fraction', cfg['member_fraction']):g} / "
        f"{1 - split.get('fraction', cfg['member_fraction']):g} split of the sensitive set by "
        f"{split.get('by', 'episode')} (seed {split.get('seed', cfg['seed'])}), are stored (sensitive) as "
        f"`{members_id}` and `{non_members_id}`; the synthesizer was fine-tuned on the members only. Re-run the audit "
        "(the same attacks, settings and ε test, from the store and the work folder) from the directory the demo ran "
        "in: `"
        + (report.get("audit_command") or f"privsynth --store {store} audit --release "
           f"{report['datasets']['synthetic']} --members {members_id} --non-members {non_members_id} --out "
           f"{out / 'audit-rerun.json'}") + "`.",
        "",
        card_md.strip(),
        "",
        "## What the card covers, and what it does not",
        "",
        "The guarantee above covers the released synthetic dataset and the fine-tuned weights. **Every section below "
        "marked _internal, not DP_ is computed from the sensitive data without any privacy mechanism** (fidelity "
        "against the sensitive set and the members, RL checks on the sensitive set, the membership-inference audit, "
        "the t-SNE of the sensitive set in evaluation.md): it is for the data holder's own assessment and must not be "
        "published with the release.",
        "",
        "## Fidelity (synthetic vs the whole sensitive set, and vs the members it was fine-tuned on; internal, not DP)",
        "",
        "| metric | vs sensitive set | vs members |",
        "|---|---|---|",
        f"| marginal (1 − mean KS) | {_num(fid.get('marginal'))} | {_num(fm.get('marginal'))} |",
        f"| correlation similarity | {_num(fid.get('correlation'))} | {_num(fm.get('correlation'))} |",
    ]
    ts = report.get("trajscore") or {}
    if isinstance(ts, dict) and isinstance(ts.get("trajscore"), (int, float)):
        lines.append(f"| TrajScore | {_num(ts['trajscore'])} | – |")
    rl = report.get("rl_checks") or {}
    if isinstance(rl, dict) and "synthetic" in rl:
        syn, real = rl["synthetic"], rl.get("real", {})
        lines += [
            "",
            f"## RL-aware checks (against the simulator, {rl.get('adapter', '?')} adapter; internal, not DP)",
            "",
            "| check | synthetic | real |",
            "|---|---|---|",
        ]
        for group, key, label in (
            ("dynamics", "within_tol", "dynamics consistency: next state within tolerance"),
            ("dynamics", "median_error", "dynamics: median next-state error"),
            ("reward", "within_tol", "reward consistency: within tolerance"),
        ):
            lines.append(f"| {label} | {_num((syn.get(group) or {}).get(key))} | {_num((real.get(group) or {}).get(key))} |")
        cov = rl.get("coverage") or {}
        lines.append(f"| states in valid maze cells | {_num(1 - cov['synthetic_invalid_rate']) if 'synthetic_invalid_rate' in cov else '–'} "
                     f"| {_num(1 - cov['real_invalid_rate']) if 'real_invalid_rate' in cov else '–'} |")
        if "synthetic_goal_invalid_rate" in cov:
            lines.append(f"| goals in valid maze cells | {_num(1 - cov['synthetic_goal_invalid_rate'])} "
                         f"| {_num(1 - cov['real_goal_invalid_rate'])} |")
    agents = report.get("agents")
    if agents:
        lines += ["", "## Agents (normalised score, real environment; trained on the released data, public)", "", "```", json.dumps(agents, indent=1, default=str)[:3000], "```"]
    lines += [
        "",
        "## Membership-inference audit (members = fine-tuning records; positive class; internal, not DP)",
        "",
        "| attack | access | AUC | TPR@1% FPR | TPR@10% FPR | ε lower bound (right / guesses) |",
        "|---|---|---|---|---|---|",
    ]
    for name, a in report["audit"].items():
        t, et = a.get("tpr_at_fpr", {}), a.get("epsilon_test") or {}
        bound = (f"{_num(et['epsilon_lower_bound'])} ({et.get('correct')}/{et.get('guesses')})"
                 if et.get("epsilon_lower_bound") is not None else "–")
        lines.append(f"| {name} | {(a.get('config') or {}).get('access', '–')} | {_num(a.get('auc'))} | "
                     f"{_num(t.get('0.01'))} | {_num(t.get('0.1'))} | {bound} |")
    ea = report.get("epsilon_audit") or {}
    lines += ["", f"**Claimed ε tested** (one-run bound on member/non-member pairs, Bonferroni over the attacks; "
              f"[audit.md](audit.md)): " + _verdict(ea)] + [f"- note: {n}" for n in ea.get("notes") or []]
    lines += [
        "",
        "![ROC](audit_roc.png)",
        "",
        "Full evaluation (internal, not DP): [evaluation.md](evaluation.md) (t-SNE, RL-aware checks, per-column scores).",
        "",
        "## Time (seconds)",
        "",
        "The release (and a split not stored yet, store_split) is written by a child process while evaluate and "
        "audit run; CPU counts child processes.",
        "",
        "| stage | wall s | CPU s |",
        "|---|---|---|",
    ]
    cpu = report.get("cpu_seconds") or {}
    lines += [f"| {k} | {v:.1f} | {_num(cpu.get(k), 1)} |" for k, v in sec.items()]
    lines += ["", f"Reproduce: `privsynth demo --out {out}` (seed {cfg['seed']})."]
    return "\n".join(lines) + "\n"
