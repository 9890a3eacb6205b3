"""Micro-benchmark of the evaluation metrics.

Random matrices (default 1M x 12):
    OMP_NUM_THREADS=1 python scripts/bench_fidelity.py [--rows 1000000] [--cols 12]
A stored dataset, optionally tiled K times (all metrics; TrajScore needs --encoder):
    OMP_NUM_THREADS=1 python scripts/bench_fidelity.py --dataset ID --tile 10 --encoder enc.pt
"""
from __future__ import annotations

import argparse
import dataclasses
import time

import numpy as np


def _time(label: str, fn):
    t0 = time.perf_counter()
    out = fn()
    print(f"{label}: {time.perf_counter() - t0:.2f} s", flush=True)
    return out


def main() -> None:
    import torch

    torch.set_num_threads(1)
    from privsynth.evaluation.fidelity import correlation_score, marginal_score

    p = argparse.ArgumentParser()
    p.add_argument("--rows", type=int, default=1_000_000)
    p.add_argument("--cols", type=int, default=12)
    p.add_argument("--dataset", default=None)
    p.add_argument("--tile", type=int, default=1)
    p.add_argument("--encoder", default=None)
    args = p.parse_args()
    if args.dataset is None:
        rng = np.random.default_rng(0)
        real = rng.normal(size=(args.rows, args.cols)).astype(np.float32)
        synth = (rng.normal(size=(args.rows, args.cols)) + 0.1).astype(np.float32)
        m = _time(f"marginal {args.rows} x {args.cols}", lambda: marginal_score(real, synth))
        c = _time(f"correlation {args.rows} x {args.cols}", lambda: correlation_score(real, synth))
        print(f"marginal {m:.4f}, correlation {c:.4f}")
        return
    from privsynth.data.dataset import OfflineDataset
    from privsynth.data.minari_io import load_dataset
    from privsynth.evaluation.fidelity import tabular_fidelity
    from privsynth.evaluation.rl_checks import rl_checks

    real = load_dataset(args.dataset)
    if args.tile > 1:
        real = OfflineDataset.concatenate([real] * args.tile, info=real.info)
    perm = np.random.default_rng(0).permutation(real.n_transitions)
    synth = dataclasses.replace(real, next_observations=real.next_observations[perm])
    print(f"{real.n_transitions} rows x {real.transition_dim - 1} columns (terminal excluded)")
    fid = _time("tabular_fidelity (marginal + correlation)", lambda: tabular_fidelity(synth, real))
    print(f"  marginal {fid.marginal:.4f}, correlation {fid.correlation:.4f}")
    rl = _time("rl_checks (5000 transitions per dataset)", lambda: rl_checks(synth, real))
    print(f"  dynamics within tol: synthetic {rl['synthetic']['dynamics']['within_tol']:.3f}, "
          f"real {rl['real']['dynamics']['within_tol']:.3f}")
    if args.encoder:
        from privsynth.evaluation.trajscore import TrajEncoder, trajscore

        enc = TrajEncoder.load(args.encoder)
        ts = _time("trajscore (2000 windows per side)", lambda: trajscore(synth, real, enc))
        print(f"  TrajScore {ts['trajscore']:.4f}")


if __name__ == "__main__":
    main()
