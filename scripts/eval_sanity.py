"""Sanity table for the evaluation metrics: real data against corrupted copies of itself.

Every metric should rank the variants sensibly: a held-out half of the real episodes (what an ideal synthesizer
could reach) near the top, corrupted copies lower on the metrics that see the corruption.

    privsynth datasets make pointmaze --maze umaze --steps 100000 --seed 0 --dense --name fid/umaze-dense-real-v0
    privsynth datasets make pointmaze --maze umaze --steps 50000 --seed 1 --dense --name fid/umaze-dense-public-v0
    OMP_NUM_THREADS=1 python scripts/eval_sanity.py --real fid/umaze-dense-real-v0 --public fid/umaze-dense-public-v0
"""
from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

import numpy as np
import torch

from privsynth.data.dataset import OfflineDataset
from privsynth.data.minari_io import load_dataset
from privsynth.evaluation.fidelity import tabular_fidelity
from privsynth.evaluation.rl_checks import rl_checks
from privsynth.evaluation.trajscore import TrajEncoder, fit_trajscore_encoder, trajscore


def _replace(ds: OfflineDataset, name: str, **arrays) -> OfflineDataset:
    return dataclasses.replace(ds, info=dataclasses.replace(ds.info, name=name), **arrays)


def variants(real: OfflineDataset, seed: int = 0) -> tuple[OfflineDataset, dict[str, OfflineDataset]]:
    rng = np.random.default_rng(seed)
    ref, held_out = real.split_episodes(0.5, seed=seed)
    n = ref.n_transitions
    perm = rng.permutation(n)
    time_idx, s = [], 0
    for length in ref.episode_lengths():
        time_idx.append(s + rng.permutation(length))
        s += length
    t_idx = np.concatenate(time_idx)
    cols = {}
    for name in ("observations", "actions", "next_observations"):
        a = getattr(ref, name).copy()
        for j in range(a.shape[1]):
            a[:, j] = a[rng.permutation(n), j]
        cols[name] = a
    cols["rewards"] = ref.rewards[rng.permutation(n)]
    noisy_o = ref.observations + rng.normal(0, 0.1, ref.observations.shape).astype(np.float32)
    noisy_n = ref.next_observations + rng.normal(0, 0.1, ref.observations.shape).astype(np.float32)
    shift = np.zeros(ref.obs_dim, dtype=np.float32)
    shift[:2] = 0.5
    out = {
        "identical copy": ref,
        "held-out real half": held_out,
        "next states shuffled": _replace(ref, "next-shuffled", next_observations=ref.next_observations[perm]),
        "rewards shuffled": _replace(ref, "rewards-shuffled", rewards=ref.rewards[perm]),
        "time-shuffled in episode": _replace(
            ref, "time-shuffled", observations=ref.observations[t_idx], actions=ref.actions[t_idx],
            rewards=ref.rewards[t_idx], next_observations=ref.next_observations[t_idx]),
        "columns shuffled independently": _replace(ref, "cols-shuffled", **cols),
        "state noise N(0, 0.1^2)": _replace(ref, "noisy", observations=noisy_o, next_observations=noisy_n),
        "xy shifted by +0.5": _replace(ref, "shifted", observations=ref.observations + shift,
                                       next_observations=ref.next_observations + shift),
    }
    return ref, out


def main() -> None:
    torch.set_num_threads(1)
    p = argparse.ArgumentParser()
    p.add_argument("--real", required=True)
    p.add_argument("--public", required=True)
    p.add_argument("--encoder", default="/tmp/privsynth-trajscore-encoder.pt")
    args = p.parse_args()
    real, public = load_dataset(args.real), load_dataset(args.public)
    t0 = time.perf_counter()
    if Path(args.encoder).exists():
        enc = TrajEncoder.load(args.encoder)
    else:
        enc = fit_trajscore_encoder(public)
        enc.save(args.encoder)
    print(f"encoder ready in {time.perf_counter() - t0:.1f} s")
    ref, vs = variants(real)
    print(f"reference: {ref.n_transitions} transitions, {ref.n_episodes} episodes of {real.info.name}")
    print("| variant | marginal | correlation | TrajScore | dyn. within 0.05 | dyn. rel. error | reward within 0.01 "
          "| coverage Jaccard | in walls | time (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, ds in vs.items():
        t = time.perf_counter()
        fid = tabular_fidelity(ds, ref)
        ts = trajscore(ds, ref, enc)["trajscore"]
        rl = rl_checks(ds, ref)
        syn = rl["synthetic"]
        print(f"| {name} | {fid.marginal:.4f} | {fid.correlation:.4f} | {ts:.4f} | {syn['dynamics']['within_tol']:.3f} | "
              f"{syn['dynamics']['relative_error']:.3g} | {syn['reward']['within_tol']:.3f} | "
              f"{rl['coverage']['overlap_jaccard']:.3f} | {rl['coverage']['synthetic_invalid_rate']:.3f} | "
              f"{time.perf_counter() - t:.1f} |", flush=True)


if __name__ == "__main__":
    main()
