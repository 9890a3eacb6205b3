"""Benchmarks for the data layer (numbers quoted in docs/datasets.md).

    OMP_NUM_THREADS=1 python scripts/bench_datasets.py [--io-transitions 20000] [--maps open umaze medium large]

1. Minari write / privsynth read / plain-Minari iteration of N independent synthetic transitions (standard layout:
   one Minari episode each), exactness checked.
2. The same for N chained transitions in episodes of ~83 steps.
3. PointMaze generation time for --gen-steps steps per map (collection + reference scores).
4. Reference scores (random, expert) per map over --ref-episodes episodes on the evaluation env.
Runs in a temporary Minari store; nothing is left behind.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time

import numpy as np


def _minari_iterate(dataset_id: str) -> float:
    """Seconds plain Minari takes to iterate every episode of a dataset."""
    import minari

    t = time.perf_counter()
    for _ in minari.load_dataset(dataset_id).iterate_episodes():
        pass
    return round(time.perf_counter() - t, 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--io-transitions", type=int, default=20_000)
    ap.add_argument("--gen-steps", type=int, default=20_000)
    ap.add_argument("--ref-episodes", type=int, default=100)
    ap.add_argument("--maps", nargs="*", default=["open", "umaze", "medium", "large"])
    args = ap.parse_args()
    store = tempfile.mkdtemp(prefix="privsynth-bench-")
    os.environ["MINARI_DATASETS_PATH"] = store
    import torch

    torch.set_num_threads(1)
    from privsynth.data import minari_io
    from privsynth.data.dataset import DatasetInfo, OfflineDataset
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze, reference_scores

    results: dict = {}
    try:
        n = args.io_transitions
        rng = np.random.default_rng(0)
        m = rng.normal(size=(n, 2 * 6 + 2 + 2)).astype(np.float32)
        ds = OfflineDataset.from_transition_matrix(m, 6, 2, info=DatasetInfo(name="bench", privacy_card={"epsilon": 1.0}))
        t = time.perf_counter(); minari_io.write_dataset(ds, "bench-independent"); w = time.perf_counter() - t
        t = time.perf_counter(); back = minari_io.load_dataset("bench-independent"); r = time.perf_counter() - t
        exact = all(np.array_equal(getattr(ds, k), getattr(back, k)) for k in
                    ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids"))
        plain = _minari_iterate("privsynth/bench-independent-v0")
        results["independent"] = {"transitions": n, "write_s": round(w, 2), "read_s": round(r, 2),
                                  "minari_iterate_s": plain, "exact": exact}
        print("independent", results["independent"], flush=True)

        obs = rng.normal(size=(n + 1, 6)).astype(np.float32)
        ids = np.sort(rng.integers(0, max(n // 83, 1), n))
        ds = OfflineDataset(observations=obs[:-1], next_observations=obs[1:], actions=rng.normal(size=(n, 2)),
                            rewards=rng.normal(size=n), terminals=np.zeros(n), timeouts=np.zeros(n), episode_ids=ids)
        t = time.perf_counter(); minari_io.write_dataset(ds, "bench-chained"); w = time.perf_counter() - t
        t = time.perf_counter(); back = minari_io.load_dataset("bench-chained"); r = time.perf_counter() - t
        exact = all(np.array_equal(getattr(ds, k), getattr(back, k)) for k in ("observations", "next_observations", "episode_ids"))
        results["chained"] = {"transitions": n, "episodes": ds.n_episodes, "scheme": minari_io.choose_scheme(ds),
                              "write_s": round(w, 2), "read_s": round(r, 2),
                              "minari_iterate_s": _minari_iterate("privsynth/bench-chained-v0"), "exact": exact}
        print("chained", results["chained"], flush=True)

        for maze in args.maps:
            t = time.perf_counter()
            ds = generate_pointmaze(PointMazeConfig(maze=maze, steps=args.gen_steps, ref_episodes=1), progress=False)
            gen = time.perf_counter() - t
            t = time.perf_counter()
            lo, hi = reference_scores(maze, episodes=args.ref_episodes, seed=0)
            ref = time.perf_counter() - t
            results[maze] = {"gen_steps": args.gen_steps, "collect_s": round(gen, 2), "episodes": ds.n_episodes,
                             "ref_episodes": args.ref_episodes, "ref_min_score": round(lo, 2),
                             "ref_max_score": round(hi, 2), "ref_s": round(ref, 2)}
            print(maze, results[maze], flush=True)
    finally:
        shutil.rmtree(store, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
