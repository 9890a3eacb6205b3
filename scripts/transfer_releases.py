"""Gap closed over several releases at the shipped default (issue 37): one row per body, agent, ε and post-processing.

The committed transfer suites (``evaluation/suites/transfer_*.yaml``) ran one release per row at the schedule of
their day. This script collects, from ``evaluation/results/transfer_study/studies.jsonl``, every row that was made
at a default configuration for locomotion (150 DP epochs, every parameter, the release route with its repairs and
the DP action relabel at ``share`` 0.1, each its own synthesizer seed, from the suite's pre-trained checkpoint) and
puts them next to the suites' real-data and public-alone cells. Two post-processings count:

* ``repair`` (the default above ε = 1, since round 4): the simulator repair alone, route rows without rollouts;
* ``repair+rollout`` (the default at ε ≤ 1 since round 9, an option above it; measured against the repair alone
  since round 8): the repair, then rollouts
  of 100 steps. Its rows are route rows whose post-processing rolled out at a horizon of 100, and rows re-read from
  a saved default release with ``--schedule chain=100`` (``rows_from``): the route applies the same
  ``chain_rollouts`` to the same repaired rows, so the two are the same release.

Each fine-tune is its own row: ``dp`` (no curiosity in the DP fine-tune, the default to round 10) and
``dp+finecur`` (``finecur=1``: FineCur, the ``cpu`` default on locomotion above ε = 1 since), each with ``+sa`` when
its DP loss covered the state and action columns only (``cols=1``, or ``fit_columns`` on the line: the default on
locomotion above ε = 1 since round 14). A saved default release given its agents later (``--rows-from REL.npz
--schedule seed=S[,finecur=1][,cols=1]``, its own seed and fine-tune) counts as that release.

The Hopper ablation suite (``evaluation/suites/transfer_hopper_ablations.yaml``, tenth round) made its ``default``
and ``finecur`` releases the same way (the suite's pre-trained checkpoint, the release route at ``postprocess: auto``
and ``policy_share: auto``, 150 DP epochs of every parameter, 50k rows; IQL, 3 agent seeds, 20k updates, the same
evaluation): its two releases of each (synthesizer seeds 1 and 2) count under ``repair`` with ``dp`` and
``dp+finecur``, ``round`` ``ablations``. Its other variants (no curiosity, no pre-training) are not defaults.

Outputs:

* ``evaluation/results/transfer_releases/cells.csv``: one line per agent run (``synthesizer``, ``epsilon`` (0 = the
  public model alone, empty = real data), ``agent``, ``release_seed``, ``seed``, ``final_score``, ``env``, ``round``,
  ``postprocess``, ``finetune``);
* ``gap.md``: per body, agent, ε and post-processing, each release's mean, the mean over releases and the share of
  the public-to-real gap closed, with a percentile bootstrap that resamples *releases* (each the mean of its agent
  seeds), so the interval shows how much one release differs from the next, which the suites' per-seed intervals
  cannot; then the two post-processings on the releases measured both ways (paired);
* ``gap.png``: the same figures as dots, one per release.

Rows made for a diagnosis (other ``rows_from`` schedules, ``chain`` at other horizons, ``edge``, ``beta``, other
schedules) and the no-relabel half of a pair (``variant``) are left out. Nothing here trains or reads sensitive data:
it re-reads published scores.

    python scripts/transfer_releases.py            # rewrite the three files
    python scripts/transfer_releases.py --check    # fail if the committed files are out of date
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import pathlib
import re
import sys

import numpy as np

from privsynth.release.rollout import CHAIN_HORIZON

ROOT = pathlib.Path(__file__).resolve().parents[1]
STUDIES = ROOT / "evaluation/results/transfer_study/studies.jsonl"
SUITES = {"walker2d": ROOT / "evaluation/results/transfer_walker2d/tables/transfer_walker2d_gap.cells.csv",
          "hopper": ROOT / "evaluation/results/transfer_hopper/tables/transfer_hopper_gap.cells.csv"}
ABLATIONS = {"hopper": ROOT / "evaluation/results/transfer_hopper_ablations/tables/hopper_ablations_final.cells.csv"}
ABLATION_VARIANTS = {"default": "dp", "finecur": "dp+finecur"}  # the suite's variants made at a default
OUT = ROOT / "evaluation/results/transfer_releases"
# keys a default-configuration schedule may carry (the seed is the release's; pair only adds a no-relabel twin)
DEFAULT_KEYS = {"epochs", "seed", "route", "share", "pair", "finecur", "cols"}
COLUMNS = ["env", "synthesizer", "epsilon", "agent", "release_seed", "seed", "final_score", "round", "postprocess",
           "finetune"]
DEFAULT, ROLLOUT = "repair", "repair+rollout"  # the default above eps = 1; at eps <= 1 (and an option above)
PLAIN, FINECUR = "dp", "dp+finecur"  # the DP fine-tune without curiosity (to round 10), with it (locomotion since)
STATE_ACTION = "+sa"  # suffix: the DP loss over the state and action columns only (dp.fit_columns, round 14)


def is_default(line: dict) -> bool:
    """True for a study row made through the release route at a default configuration (module docstring), rolled
    out or not."""
    return (not line.get("rows_from") and "variant" not in line and default_schedule(line.get("schedule") or {})
            and bool(line.get("policy")))


def default_schedule(s: dict[str, float]) -> bool:
    """True for a schedule at a default configuration: the release route, 150 DP epochs, relabel share 0.1, a
    synthesizer seed, with or without FineCur (``finecur=1``) and the state-action loss (``cols=1``)."""
    return (set(s) <= DEFAULT_KEYS and s.get("route") == 1 and s.get("epochs") == 150 and s.get("share", 0.1) == 0.1
            and "seed" in s and s.get("finecur", 1.0) == 1.0)


def finetune(schedule: dict[str, float], fit_columns: str | None = None) -> str:
    """The fine-tune a default release had: with curiosity (FineCur) or without, and with ``+sa`` when its DP loss
    covered the state and action columns only (``cols=1``, or the route's resolved ``fit_columns`` on the line)."""
    tune = FINECUR if schedule.get("finecur") == 1.0 else PLAIN
    return tune + STATE_ACTION if schedule.get("cols") == 1.0 or fit_columns == "state_action" else tune


def _saved_schedule(name: str) -> tuple[str, dict[str, float]]:
    """The body and schedule a saved release's file name records (``hopper_20000_epochs150_seed7_route1_share0.1``;
    the inverse of the label ``scripts/transfer_study.py --save`` writes)."""
    env, _steps, *parts = name.split("_")
    sched = {}
    for part in parts:
        m = re.fullmatch(r"([a-z]+)([0-9.]+)", part)
        if m is None:  # e.g. "norelabel": not a default release
            return env, {}
        sched[m.group(1)] = float(m.group(2))
    return env, sched


def configuration(line: dict, lines: list[dict]) -> tuple[str, dict] | None:
    """``(post-processing, the release's own line)`` for a row at a default configuration, else None: a route row
    (rolled out at ``CHAIN_HORIZON`` or not), a saved default release re-read and rolled out at that horizon, or a
    saved default release re-read as it was (its schedule only its ``seed`` and ``finecur``: agents given later).

    A saved release whose own line is not in the studies (its run stopped after ``--save``) stands for itself:
    its seed and FineCur from the file name, its ε the budget the re-read line records (the release's own)."""
    if is_default(line):
        horizon = (line.get("postprocess") or {}).get("chain_horizon")
        if horizon is None:
            return DEFAULT, line
        return (ROLLOUT, line) if horizon == CHAIN_HORIZON else None
    sched_here = line.get("schedule") or {}
    if not line.get("rows_from") or "variant" in line:
        return None
    if sched_here == {"chain": float(CHAIN_HORIZON)}:
        post = ROLLOUT
    elif sched_here and set(sched_here) <= {"seed", "finecur", "cols"}:
        post = DEFAULT
    else:
        return None
    env, sched = _saved_schedule(line["rows_from"])
    if post == DEFAULT and any(sched.get(k) != sched_here.get(k) for k in ("seed", "finecur", "cols")):
        return None  # the re-read line must name the saved release's own seed and fine-tune
    sources = [x for x in lines if is_default(x) and x["env"] == env and x["schedule"] == sched
               and "chain_horizon" not in (x.get("postprocess") or {})]
    if len(sources) == 1:
        return post, sources[0]
    if not sources and default_schedule(sched) and isinstance(line.get("epsilon"), (int, float)):
        return post, {"env": env, "epsilon": float(line["epsilon"]), "schedule": sched}
    return None


def ablation_cells(ablations: dict[str, pathlib.Path]) -> list[dict]:
    """The ablation suites' releases made at a default (module docstring), as rows of ``cells.csv``."""
    out = []
    for env, path in ablations.items():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                tune = ABLATION_VARIANTS.get(row.get("variant") or "")
                if tune is None or row["synthesizer"] != "privorl-n" or not row.get("release"):
                    continue
                out.append({"env": env, "synthesizer": row["synthesizer"], "epsilon": float(row["epsilon"]),
                            "agent": row["agent"], "release_seed": int(float(row["release"])),
                            "seed": int(row["seed"]), "final_score": float(row["final_score"]),
                            "round": "ablations", "postprocess": DEFAULT, "finetune": tune})
    return out


def cells(studies: pathlib.Path = STUDIES, suites: dict[str, pathlib.Path] = SUITES,
          ablations: dict[str, pathlib.Path] = ABLATIONS) -> list[dict]:
    """Real and public-alone cells of the suites, every default release's agent runs in the studies, then the
    ablation suites' default releases."""
    out: list[dict] = []
    for env, path in suites.items():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                real = row["synthesizer"] == "real"
                if real or (row["epsilon"] != "" and float(row["epsilon"]) == 0.0):  # real data, public alone
                    out.append({"env": env, "synthesizer": row["synthesizer"], "epsilon": "" if real else 0.0,
                                "agent": row["agent"], "release_seed": "", "seed": int(row["seed"]),
                                "final_score": round(float(row["final_score"]), 2), "round": "", "postprocess": "",
                                "finetune": ""})
    lines = [json.loads(text) for text in studies.read_text().splitlines()]
    for line in lines:
        found = configuration(line, lines)
        if found is None:
            continue
        post, release = found
        for agent in ("iql", "td3bc"):
            for seed, score in enumerate(line.get(f"{agent}_final") or []):
                out.append({"env": line["env"], "synthesizer": "privorl-n", "epsilon": float(release["epsilon"]),
                            "agent": agent, "release_seed": int(release["schedule"]["seed"]), "seed": seed,
                            "final_score": float(score), "round": line.get("round", ""), "postprocess": post,
                            "finetune": finetune(release["schedule"], release.get("fit_columns"))})
    extra = ablation_cells(ablations)
    taken = {(r["env"], r["epsilon"], r["finetune"], r["release_seed"]) for r in out if r["release_seed"] != ""}
    clash = taken & {(r["env"], r["epsilon"], r["finetune"], r["release_seed"]) for r in extra}
    if clash:  # a study release with the suite's seed would merge two releases into one
        raise ValueError(f"study releases and ablation-suite releases share seeds: {sorted(clash)}")
    return out + extra


def table(rows: list[dict]) -> tuple[str, list[dict]]:
    """The markdown table and its figures (one dict per body, agent and ε)."""
    from privsynth.evaluation.bench.gap import gap_closed

    figures = []
    keys = sorted({(r["env"], r["agent"], r["epsilon"], r["postprocess"], r["finetune"]) for r in rows
                   if r["release_seed"] != ""}, key=lambda k: (k[0], k[1], -k[2], k[4] != PLAIN, k[4], k[3] != DEFAULT))
    for env, agent, eps, post, tune in keys:
        mine = [r for r in rows if r["env"] == env and r["agent"] == agent]
        real = [r["final_score"] for r in mine if r["synthesizer"] == "real"]
        public = [r["final_score"] for r in mine if r["synthesizer"] != "real" and r["release_seed"] == ""]
        releases: dict[int, list[float]] = {}
        for r in mine:
            if (r["release_seed"] != "" and r["epsilon"] == eps and r["postprocess"] == post
                    and r["finetune"] == tune):
                releases.setdefault(r["release_seed"], []).append(r["final_score"])
        means = {s: float(np.mean(v)) for s, v in sorted(releases.items())}
        g = gap_closed(real, public, list(means.values()), resamples=2000, seed=0)
        per = {s: None if g.point is None else (m - float(np.mean(public))) / g.gap for s, m in means.items()}
        figures.append({"env": env, "agent": agent, "epsilon": eps, "postprocess": post, "finetune": tune,
                        "real": float(np.mean(real)),
                        "public": float(np.mean(public)), "releases": means, "per_release_gap": per,
                        "mean": float(np.mean(list(means.values()))), "gap": g})
    lines = ["## Gap closed over several releases at the default (locomotion transfer proxies, issue 37)", "",
             "Made by `python scripts/transfer_releases.py` from `evaluation/results/transfer_study/studies.jsonl` "
             "(rows at a default: 150 DP epochs, every parameter, release route with repairs and the DP action "
             f"relabel) and the suites' real and public-alone cells. `{DEFAULT}`: the simulator repair (the default "
             f"above ε = 1); `{ROLLOUT}`: the same releases with rollouts of {CHAIN_HORIZON} steps after the repair "
             "(the default at ε ≤ 1 since the ninth round, an option above). Fine-tune: "
             f"`{PLAIN}` without curiosity (the default to the tenth round), `{FINECUR}` with it (FineCur, the "
             f"`cpu` default on locomotion above ε = 1 since); `{STATE_ACTION}`: the DP loss over the state and "
             "action columns only (the default on locomotion above ε = 1 since the fourteenth round). Each release: "
             "its own synthesizer seed, 50k rows, 3 agent seeds, 20k updates; interval: percentile bootstrap over "
             "releases (95%).", "",
             "| body | agent | ε | fine-tune | post-processing | real | public alone | releases | each release's gap "
             "closed (seed: value) | mean over releases | gap closed [95% over releases] |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for f in figures:
        g = f["gap"]
        each = ", ".join(f"{s}: {v:.2f}" for s, v in f["per_release_gap"].items() if v is not None) or "–"
        closed = ("non-discriminating" if g.point is None
                  else f"**{g.point:.2f}** [{g.low:.2f}, {g.high:.2f}]" if len(f["releases"]) > 1
                  else f"{g.point:.2f} (one release)")
        lines.append(f"| {f['env']} | {f['agent']} | {f['epsilon']:g} | {f['finetune']} | {f['postprocess']} | "
                     f"{f['real']:.1f} | "
                     f"{f['public']:.1f} | {len(f['releases'])} | {each} | {f['mean']:.1f} | {closed} |")
    lines += paired(figures)
    return "\n".join(lines) + "\n", figures


def paired(figures: list[dict]) -> list[str]:
    """Markdown lines comparing the rollout option with the repair alone on the releases measured both ways."""
    out = ["", f"### `{ROLLOUT}` against `{DEFAULT}` on the same releases", "",
           f"| body | agent | ε | fine-tune | releases in both | gap closed, {DEFAULT} | gap closed, {ROLLOUT} | "
           "change |", "|---|---|---|---|---|---|---|---|"]
    by_key = {(f["env"], f["agent"], f["epsilon"], f["postprocess"], f.get("finetune", PLAIN)): f["per_release_gap"]
              for f in figures}
    for (env, agent, eps, post, tune), new in by_key.items():
        old = by_key.get((env, agent, eps, DEFAULT, tune))
        both = sorted(set(new) & set(old or {}))
        if post != ROLLOUT or not both or any(new[s] is None or old[s] is None for s in both):
            continue
        a, b = float(np.mean([old[s] for s in both])), float(np.mean([new[s] for s in both]))
        out.append(f"| {env} | {agent} | {eps:g} | {tune} | {len(both)} | {a:.2f} | {b:.2f} | {b - a:+.2f} |")
    return out


def plot(figures: list[dict], path: pathlib.Path) -> None:
    """One dot per release's gap closed, a bar at the mean over releases, the 0.8 goal as a line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(max(7.0, 0.75 * len(figures)), 3.4))
    labels = []
    for i, f in enumerate(figures):
        vals = [v for v in f["per_release_gap"].values() if v is not None]
        tune = f.get("finetune") or PLAIN
        labels.append(f"{f['env']}\n{f['agent']} ε={f['epsilon']:g}\n{f['postprocess']}"
                      + ("\nFineCur" if tune.startswith(FINECUR) else "")
                      + ("\ns,a loss" if tune.endswith(STATE_ACTION) else ""))
        colour = ("tab:grey" if f["postprocess"] != DEFAULT else "tab:green" if tune.endswith(STATE_ACTION)
                  else "tab:orange" if tune == FINECUR else "tab:blue")
        ax.scatter([i] * len(vals), vals, color=colour,
                   alpha=0.7, zorder=3)
        if f["gap"].point is not None:
            ax.hlines(f["gap"].point, i - 0.3, i + 0.3, color="black", zorder=4)
    ax.axhline(0.8, ls="--", color="tab:red", lw=1, label="goal at ε = 10 (0.8)")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xticks(range(len(figures)), labels, fontsize=6)
    ax.set_ylabel("share of gap closed")
    ax.set_title(f"Each release (dots; blue: {DEFAULT}; orange: {DEFAULT} after a FineCur fine-tune; green: the same "
                 f"with the state-action loss, the default above ε = 1; grey: {ROLLOUT}, the default at ε ≤ 1) and "
                 "their mean (bar)", fontsize=8)
    ax.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def render(rows: list[dict]) -> tuple[str, str, list[dict]]:
    """cells.csv's text, gap.md's text and the figures behind them (one bootstrap per row of the table)."""
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    md, figures = table(rows)
    return buf.getvalue(), md, figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="fail if cells.csv or gap.md differ from the studies")
    args = ap.parse_args(argv)
    rows = cells()
    csv_text, md, figures = render(rows)
    if args.check:
        stale = [n for n, t in (("cells.csv", csv_text), ("gap.md", md))
                 if not (OUT / n).exists() or (OUT / n).read_text() != t]
        if stale:
            print(f"out of date: {', '.join(stale)} (run python scripts/transfer_releases.py)", file=sys.stderr)
            return 1
        print("transfer_releases: up to date")
        return 0
    OUT.mkdir(parents=True, exist_ok=True)
    (OUT / "cells.csv").write_text(csv_text)
    (OUT / "gap.md").write_text(md)
    plot(figures, OUT / "gap.png")
    print(md)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
