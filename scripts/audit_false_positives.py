"""How often the canary audit wrongly refutes a true claim: its family-wise false-VIOLATION rate, by simulation.

    OMP_NUM_THREADS=1 python scripts/audit_false_positives.py --runs 2000 --epsilon 1

The mechanism is exactly ε-DP under add/remove of one canary: randomized response on each canary's inclusion coin
(report the coin with probability e^ε / (1 + e^ε)). Like ``privsynth audit --canaries`` with white-box scoring, two
score sources each see half of the canaries (both are post-processing of the one ε-DP output), every source is
turned into a one-run bound by :func:`privsynth.privacy.audit.audit_scores` with k fixed in advance, and the run
counts as a VIOLATION when any source refutes the claim (the command's exit status 1). The script prints the
rate with each source tested at 95% (no correction) and at 1 − 0.05/2 (the Bonferroni level
:func:`privsynth.evaluation.mia.canary.run_canary_audit` uses); the second must stay at or below 5%.
"""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from privsynth.privacy.audit import audit_scores


def false_violation_rate(runs: int, epsilon: float, canaries: int, guesses: int, delta: float, confidence: float,
                         seed: int) -> float:
    """Share of ``runs`` in which either of the two sources refutes the true claim ``epsilon``."""
    rng = np.random.default_rng(seed)
    keep = math.exp(epsilon) / (1.0 + math.exp(epsilon))
    half = np.arange(canaries) < canaries // 2
    refuted = 0
    for _ in range(runs):
        included = rng.random(canaries) < 0.5
        reported = np.where(rng.random(canaries) < keep, included, ~included).astype(float)
        sources = (np.where(half, reported, 0.5), np.where(half, 0.5, reported))  # each sees its own half
        refuted += any(not audit_scores(s, included, k_pos=guesses, k_neg=guesses, delta=delta,
                                        claimed_epsilon=epsilon, confidence=confidence).consistent for s in sources)
    return refuted / runs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--epsilon", type=float, default=1.0, help="the true and the claimed epsilon")
    ap.add_argument("--canaries", type=int, default=500)
    ap.add_argument("--guesses", type=int, default=50, help="k guesses per side (m / 10, as the canary audit)")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    for label, confidence in (("each source at 95% (no correction)", 0.95),
                              ("each source at 97.5% (Bonferroni over 2)", 1.0 - 0.05 / 2)):
        rate = false_violation_rate(args.runs, args.epsilon, args.canaries, args.guesses, args.delta, confidence,
                                    args.seed)
        print(f"{label}: a true eps = {args.epsilon:g} refuted in {rate:.3f} of {args.runs} runs (stated: 0.05)")


if __name__ == "__main__":
    main()
