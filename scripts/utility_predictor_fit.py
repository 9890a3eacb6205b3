"""How well the fidelity report's utility predictor ranks the agents' scores (issue 20 item 4).

Reads the utility study's runs (``evaluation/results/utility_study/*.jsonl``, written by ``scripts/utility_study.py``),
groups them by (task, configuration, ε), divides each group's mean agent score by the real data's mean on the same
task, and prints Spearman's rank correlation of that ratio with the predictor's two numbers: the policy R² ratio
(k-NN state → action, synthetic / real, scored on held-out real episodes) and minus the dynamics error relative to
the real step (``privsynth.evaluation.fidelity.utility_predictor``).

    python scripts/utility_predictor_fit.py [--dir evaluation/results/utility_study]
"""
from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

AGENTS = ("iql", "td3bc")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", default=str(Path(__file__).resolve().parents[1] / "evaluation/results/utility_study"))
    args = ap.parse_args()
    rows = [json.loads(line) for f in sorted(Path(args.dir).glob("*.jsonl")) for line in f.read_text().splitlines()
            if line.strip()]
    real: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for r in rows:
        if r["config"] == "real":
            for a in AGENTS:
                if r.get(a) is not None:
                    real[r["task"]][a].append(r[a])
        elif r.get("predictor") and any(r.get(a) is not None for a in AGENTS):
            groups[(r["task"], r["config"], None if r["epsilon"] is None else round(r["epsilon"]))].append(r)
    table = []
    print(f"{'task':8s} {'config':16s} {'eps':>4s} {'n':>2s} {'iql':>6s} {'td3bc':>6s} {'R2 ratio':>9s} {'dyn':>6s}")
    for (task, config, eps), runs in sorted(groups.items(), key=str):
        ratio = {}
        for a in AGENTS:
            vals = [r[a] for r in runs if r.get(a) is not None]
            ref = real[task].get(a)
            ratio[a] = float(np.mean(vals)) / float(np.mean(ref)) if vals and ref and np.mean(ref) > 0 else np.nan
        r2 = float(np.mean([r["predictor"]["policy_r2_ratio"] for r in runs]))
        dyn = float(np.mean([r["dyn_rel_step"] for r in runs]))
        table.append((ratio["iql"], ratio["td3bc"], r2, dyn))
        print(f"{task:8s} {config:16s} {str(eps):>4s} {len(runs):2d} {ratio['iql']:6.2f} {ratio['td3bc']:6.2f} "
              f"{r2:9.2f} {dyn:6.2f}")
    t = np.array(table, dtype=float)
    for j, a in enumerate(AGENTS):
        ok = ~np.isnan(t[:, j])
        rho_r2 = spearmanr(t[ok, 2], t[ok, j]).correlation
        rho_dyn = spearmanr(-t[ok, 3], t[ok, j]).correlation
        print(f"{a}: {ok.sum()} groups; Spearman with the policy R² ratio {rho_r2:+.2f}, with minus the dynamics "
              f"error {rho_dyn:+.2f}")


if __name__ == "__main__":
    main()
