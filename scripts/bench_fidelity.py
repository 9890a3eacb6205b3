"""Micro-benchmark: marginal and correlation scores on N x D random matrices (default 1M x 12).

Run: OMP_NUM_THREADS=1 python scripts/bench_fidelity.py [--rows 1000000] [--cols 12]
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from privsynth.evaluation.fidelity import correlation_score, marginal_score


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--cols", type=int, default=12)
    args = p.parse_args()
    rng = np.random.default_rng(0)
    real = rng.normal(size=(args.rows, args.cols)).astype(np.float32)
    synth = (rng.normal(size=(args.rows, args.cols)) + 0.1).astype(np.float32)
    t0 = time.perf_counter()
    m = marginal_score(real, synth)
    t1 = time.perf_counter()
    c = correlation_score(real, synth)
    t2 = time.perf_counter()
    print(f"{args.rows} x {args.cols}: marginal {m:.4f} in {t1 - t0:.2f} s, correlation {c:.4f} in {t2 - t1:.2f} s")


if __name__ == "__main__":
    main()
