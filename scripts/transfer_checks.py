"""Do a release's data checks tell a good release from a bad one? (issue 37, "what stands in the way")

Releases of one default configuration differ in the share of the public-to-real gap their agents close by as much
as the distance to the goal (``scripts/transfer_releases.py``). If a check of the rows against the sensitive set
(``scripts/transfer_study.py --diagnose``: the policy R² of a k-NN state → action map fitted on the rows and scored
on real states, coverage, mean reward, terminal rate) foretold that share, a release could be chosen among several
by a DP selection over that check. This script measures whether it does: for every group of releases made at one
default (same body, agent, ε, fine-tune and post-processing; the releases ``transfer_releases`` counts, each once,
from the first of its study lines that carries the checks of the rows its agents trained on), the Pearson correlation between each check and the gap closed across releases, and
the pooled correlation within groups (each group's values z-scored before pooling, so a group's level does not
count). Small groups (4-11 releases): read the signs and the pooled figure, not one group's value.

Nothing here trains or reads sensitive data: it re-reads published study lines.

    python scripts/transfer_checks.py            # write evaluation/results/transfer_releases/checks.md
    python scripts/transfer_checks.py --check    # fail if the committed file is out of date
"""
from __future__ import annotations

import argparse
import functools
import importlib.util
import json
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
OUT = ROOT / "evaluation/results/transfer_releases/checks.md"
CHECKS = ("policy_r2", "coverage_jaccard", "reward_mean", "terminal_rate")
MIN_RELEASES = 4  # a group with fewer releases gives no correlation


@functools.cache
def _releases_module():
    """The sibling script whose rules say which study lines are default releases (scripts/ is no package)."""
    spec = importlib.util.spec_from_file_location("transfer_releases", ROOT / "scripts" / "transfer_releases.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def groups(lines: list[dict]) -> dict[tuple, list[tuple[dict, float]]]:
    """``(env, agent, ε, fine-tune, post-processing) -> [(checks, gap closed), ...]``, one item per release line
    at a default that carries its own checks and that agent's gap closed."""
    rel = _releases_module()
    out: dict[tuple, list[tuple[dict, float]]] = {}
    seen = set()
    for line in lines:
        found = rel.configuration(line, lines)
        if found is None or not line.get("checks"):
            continue
        post, release = found
        for agent in ("iql", "td3bc"):
            gap = line.get(f"{agent}_gap_closed")
            tune = rel.finetune(release["schedule"], release.get("fit_columns"))
            key = (line["env"], agent, float(release["epsilon"]), tune, post)
            if gap is None or (key, release["schedule"]["seed"]) in seen:  # a release counts once per group
                continue
            seen.add((key, release["schedule"]["seed"]))
            out.setdefault(key, []).append((line["checks"], float(gap)))
    return out


def _corr(x: np.ndarray, y: np.ndarray) -> float | None:
    if len(x) < 2 or x.std() == 0 or y.std() == 0:
        return None
    return float(np.corrcoef(x, y)[0, 1])


def correlations(by_group: dict[tuple, list[tuple[dict, float]]]) -> tuple[list[tuple], dict[str, tuple]]:
    """Per group (with at least ``MIN_RELEASES``) each check's correlation with the gap closed; then per check the
    pooled within-group correlation and the number of releases it pools."""
    rows, pooled = [], {c: ([], []) for c in CHECKS}
    for key in sorted(by_group, key=lambda k: (k[0], k[1], -k[2], k[3], k[4])):
        items = by_group[key]
        if len(items) < MIN_RELEASES:
            continue
        y = np.array([g for _, g in items])
        per = {}
        for c in CHECKS:
            x = np.array([float(ch.get(c, np.nan)) for ch, _ in items])
            per[c] = None if np.isnan(x).any() else _corr(x, y)
            if per[c] is not None:
                pooled[c][0].extend((x - x.mean()) / x.std())
                pooled[c][1].extend((y - y.mean()) / y.std())
        rows.append((key, len(items), per))
    return rows, {c: (_corr(np.array(xs), np.array(ys)), len(xs)) for c, (xs, ys) in pooled.items()}


def render(rows: list[tuple], pooled: dict[str, tuple]) -> str:
    fmt = lambda v: "–" if v is None else f"{v:+.2f}"  # noqa: E731
    lines = ["## Do a release's data checks foretell its gap closed? (issue 37)", "",
             "Made by `python scripts/transfer_checks.py` from `evaluation/results/transfer_study/studies.jsonl`: "
             "per group of releases at one default, the Pearson correlation across releases between each check "
             "(against the sensitive set, `--diagnose`) and the share of the gap the release's agents closed; "
             "last row: pooled within groups (z-scored per group). A positive value: releases that score higher "
             "on the check train better agents.", "",
             "| body | agent | ε | fine-tune | post-processing | releases | " + " | ".join(CHECKS) + " |",
             "|---|---|---|---|---|---|" + "---|" * len(CHECKS)]
    for (env, agent, eps, tune, post), n, per in rows:
        lines.append(f"| {env} | {agent} | {eps:g} | {tune} | {post} | {n} | "
                     + " | ".join(fmt(per[c]) for c in CHECKS) + " |")
    lines.append("| pooled within groups | | | | | | "
                 + " | ".join(f"{fmt(r)} ({n})" for r, n in pooled.values()) + " |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if checks.md differs from the studies")
    args = ap.parse_args(argv)
    rel = _releases_module()
    lines = [json.loads(t) for t in rel.STUDIES.read_text().splitlines()]
    md = render(*correlations(groups(lines)))
    if args.check:
        if not OUT.exists() or OUT.read_text() != md:
            print("out of date: checks.md (run python scripts/transfer_checks.py)", file=sys.stderr)
            return 1
        print("transfer_checks: up to date")
        return 0
    OUT.write_text(md)
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
