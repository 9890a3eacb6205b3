"""The utility predictor on a benchmark suite's synthetic samples, beside the agents trained on them (issue 20 item 4).

For every finished ``synthesize`` cell of the suite (optionally one seed), reads its stored sample and the cell's
sensitive dataset, computes :func:`privsynth.evaluation.fidelity.utility_predictor` (policy R²: k-NN state → action,
scored on held-out real episodes; dynamics error per real step) and prints it with the final scores of the agent
cells downstream of that sample, then Spearman's ρ between each agent's score and each predictor over the rows.
Also the share of action components at the action box's bounds and the median |a| (round 8 of the utility study:
a DP fine-tune smears the point mass a clipped controller puts at the bounds). The real data's own predictor is the
reference row. Reads only stored artifacts: nothing is trained.

    OMP_NUM_THREADS=1 python scripts/suite_predictor.py evaluation/suites/table1_cpu.yaml --seed 0
"""
from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import numpy as np
from scipy.stats import spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privsynth.evaluation.bench.plan import current_records  # noqa: E402
from privsynth.evaluation.bench.sources import load_dataset_file  # noqa: E402
from privsynth.evaluation.bench.suite import load_suite  # noqa: E402
from privsynth.evaluation.bench.tables import eps_label  # noqa: E402
from privsynth.evaluation.fidelity import utility_predictor  # noqa: E402
from privsynth.evaluation.runner import CellContext  # noqa: E402


def action_shape(actions: np.ndarray, data) -> tuple[float, float]:
    """(share of action components at the environment's action bounds, median |a|); the bounds are the public
    environment facts the dataset records (nan without them)."""
    if data.info.action_low is None or data.info.action_high is None:
        return float("nan"), float(np.median(np.abs(actions)))
    lo, hi = np.asarray(data.info.action_low), np.asarray(data.info.action_high)
    return float(np.mean((actions <= lo + 1e-6) | (actions >= hi - 1e-6))), float(np.median(np.abs(actions)))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("suite")
    ap.add_argument("--seed", type=int, default=None, help="only the synthesize cells of this seed")
    ap.add_argument("--results-dir", default=None)
    args = ap.parse_args()
    suite = load_suite(args.suite, results_dir=args.results_dir)
    records = current_records(suite)
    agents: dict[str, dict[str, float]] = defaultdict(dict)
    for recs in records.values():
        for r in recs:
            if (r.kind == "agent" and r.done and r.upstream and not r.params.get("postprocess")
                    and not r.params.get("calibrate_actions")):
                agents[r.upstream][r.params["agent"]] = r.result["final_score"]
    ctx = CellContext(suite.out, "suite-predictor", suite.datasets)
    rows, real_ref = [], None
    sens_seen: dict[str, tuple[float, float]] = {}
    for recs in records.values():
        for r in recs:
            if r.kind != "synthesize" or not r.done or (args.seed is not None and r.params.get("seed") != args.seed):
                continue
            path = suite.out / "artifacts" / r.id / "synthetic.npz"
            if not path.exists():
                continue
            sens = ctx.dataset(r.params["data"]["sensitive"])
            name = f"{r.params.get('synthesizer', 'privorl-n')} ε={eps_label(r.params.get('epsilon'))}"
            synth = load_dataset_file(path)
            pred = utility_predictor(synth, sens, seed=0)
            real_ref = pred["policy_r2_real"]
            sens_seen.setdefault(r.params["data"]["sensitive"], action_shape(sens.actions, sens))
            bounds, median = action_shape(synth.actions, sens)
            rows.append({"name": name, "seed": r.params.get("seed"), "r2": pred["policy_r2"],
                         "dyn": pred["dynamics"]["rel_step_mean"], "bounds": bounds, **agents.get(r.id, {})})
            print(f"{name:32s} seed {rows[-1]['seed']}: policy R² {pred['policy_r2']:.3f}, dynamics error / step "
                  f"{rows[-1]['dyn']:.3f}, actions at bounds {bounds:.3f} (median |a| {median:.3f}), "
                  + ", ".join(f"{a} {v:.1f}" for a, v in agents.get(r.id, {}).items()), flush=True)
    if real_ref is not None:
        print(f"real data: policy R² {real_ref:.3f}; "
              + "; ".join(f"{k}: actions at bounds {b:.3f} (median |a| {m:.3f})" for k, (b, m) in sens_seen.items()))
    for agent in sorted({a for row in rows for a in ("iql", "td3bc") if a in row}):
        sub = [row for row in rows if agent in row]
        if len(sub) >= 3:
            for key in ("r2", "dyn", "bounds"):
                rho = spearmanr([row[key] for row in sub], [row[agent] for row in sub]).statistic
                print(f"{agent}: Spearman ρ of the final score with {key} over {len(sub)} samples: {rho:+.2f}")


if __name__ == "__main__":
    main()
