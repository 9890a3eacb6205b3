"""Size on disk and write time of a PrivORL-n release per format, against its source, at 20,000 and 1,000,000 rows.

For each size N, in one run:

* source: a trajectory-level dataset of N PointMaze steps (Dict observations, 300-step chained episodes), written by
  :func:`privsynth.data.minari_io.write_dataset`, as ``privsynth datasets make pointmaze --steps N`` writes it;
* release: N independent transitions (one Minari episode each, the transition-level release layout) in PointMaze's
  spaces (the shipped ``pointmaze-umaze`` model's dataset template), written the same way;
* the release exported as npz and as a d3rlpy file (``privsynth datasets export --format npz|d3rlpy``), and, up to
  ``--d3rlpy-max`` rows, d3rlpy's own ``ReplayBuffer.dump`` of the same rows for reference (minutes at 1 M).

Rows are random (only the layout matters for the cost). Sizes are bytes allocated on disk (``du``); times are wall and
CPU seconds of the write. Plain ``minari.load_dataset`` reads each release back, and 2,000 of its episodes (random
ones, the first and the last) are compared with their transitions.

    OMP_NUM_THREADS=1 python scripts/bench_minari_write.py                  # 20,000 and 1,000,000 rows
    OMP_NUM_THREADS=1 python scripts/bench_minari_write.py --rows 20000     # quick
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def disk_bytes(path: Path) -> int:
    """Bytes allocated on disk for a file or a directory tree (what ``du`` reports)."""
    files = [path] if path.is_file() else [p for p in path.rglob("*") if p.is_file()]
    return sum(p.stat().st_blocks * 512 for p in files)


def timed(fn: Callable[[], Any]) -> tuple[Any, float, float]:
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def rows(n: int, template: Any, *, chained: bool) -> Any:
    """N PointMaze-shaped rows: 300-step chained episodes (a rollout) or independent transitions (a release)."""
    from privsynth.data.dataset import OfflineDataset

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n + 1, 6)).astype(np.float32)
    if chained:
        ids = np.arange(n) // 300
        nxt = obs[1:].copy()
        ends = np.r_[ids[1:] != ids[:-1], True]
        nxt[ends] = rng.normal(size=(int(ends.sum()), 6))  # each episode's final next observation
        term, trunc = np.zeros(n, bool), ends
    else:
        ids, nxt = np.arange(n), rng.normal(size=(n, 6)).astype(np.float32)
        term, trunc = rng.random(n) < 0.1, np.zeros(n, bool)
    info = dataclasses.replace(template, name="bench-minari-write", sensitive=chained)
    return OfflineDataset(obs[:n], rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                          (rng.random(n) < 0.05).astype(np.float32), nxt, term, trunc, ids, info=info)


def check_plain(plain: Any, release: Any, k: int) -> int:
    """Compare ``k`` episodes of the release as plain Minari reads them (random ones, the first and the last) with
    their transitions; returns how many were checked. Plain Minari reads about 200 episodes a second here, so a
    million are not all read."""
    n = release.n_transitions
    picks = np.unique(np.r_[0, n - 1, np.random.default_rng(1).choice(n, size=max(k - 2, 0), replace=False)])
    for i, ep in zip(picks, plain.iterate_episodes(picks.tolist())):
        o = np.concatenate([ep.observations["observation"], ep.observations["desired_goal"]], axis=1)
        np.testing.assert_allclose(o[0], release.observations[i], rtol=1e-6)
        np.testing.assert_allclose(o[1], release.next_observations[i], rtol=1e-6)
        np.testing.assert_array_equal(ep.actions[0], release.actions[i])
        assert ep.rewards[0] == release.rewards[i] and ep.terminations[0] == release.terminals[i]
        assert ep.truncations[0] == (not release.terminals[i]) and len(ep.rewards) == 1
    return len(picks)


def bench(n: int, template: Any, tmp: Path, d3rlpy_max: int) -> None:
    import minari

    from privsynth.commands._dataset_export import _d4rl_timeouts
    from privsynth.data.dataset import ARRAY_FIELDS
    from privsynth.data.minari_io import load_dataset, write_dataset

    lines = []
    src_path, wall, cpu = timed(lambda: write_dataset(rows(n, template, chained=True), f"bench/source-{n}-v0"))
    src = disk_bytes(src_path)
    lines.append(("source (trajectories, Minari hdf5)", src, wall, cpu))
    release = rows(n, template, chained=False)
    rel_path, wall, cpu = timed(lambda: write_dataset(release, f"bench/release-{n}-v0"))
    lines.append(("release (Minari hdf5, 1 episode/transition)", disk_bytes(rel_path), wall, cpu))
    plain = minari.load_dataset(f"bench/release-{n}-v0")
    assert plain.total_episodes == n
    checked = check_plain(plain, release, min(n, 2_000))
    back = load_dataset(f"bench/release-{n}-v0")
    assert all(np.array_equal(getattr(back, k), getattr(release, k)) for k in ARRAY_FIELDS)
    hdf5 = rel_path / "data" / "main_data.hdf5"
    lines.append(("  of which main_data.hdf5", disk_bytes(hdf5), float("nan"), float("nan")))
    npz = tmp / f"release-{n}.npz"
    arrays = dict(observations=release.observations, actions=release.actions, rewards=release.rewards,
                  next_observations=release.next_observations, terminals=release.terminals,
                  timeouts=_d4rl_timeouts(release), episode_ids=release.episode_ids)
    _, wall, cpu = timed(lambda: np.savez(npz, **arrays))
    lines.append(("export npz", disk_bytes(npz), wall, cpu))
    from privsynth.data.minari_hdf5 import write_d3rlpy_hdf5
    from privsynth.evaluation.agents.d3rlpy_export import d3rlpy_arrays, to_d3rlpy

    out = tmp / f"release-{n}.d3rlpy"
    _, wall, cpu = timed(lambda: write_d3rlpy_hdf5(out, d3rlpy_arrays(release)))
    lines.append(("export d3rlpy (privsynth's writer)", disk_bytes(out), wall, cpu))
    if n <= d3rlpy_max:
        theirs = tmp / f"release-{n}-d3rlpy-dump.d3rlpy"

        def dump() -> None:
            with open(theirs, "w+b") as f:
                to_d3rlpy(release).dump(f)

        _, wall, cpu = timed(dump)
        lines.append(("  d3rlpy's own ReplayBuffer.dump, for reference", disk_bytes(theirs), wall, cpu))
    print(f"\n{n:,} rows (load average {os.getloadavg()[0]:.1f}); plain minari reads the release back: {checked:,} "
          "episodes (random ones, the first and the last) equal to their transitions; privsynth reads all rows equal")
    print(f"  {'what':46s} {'MB on disk':>10s} {'x source':>9s} {'B/row':>7s} {'wall s':>7s} {'CPU s':>7s}")
    for what, size, wall, cpu in lines:
        print(f"  {what:46s} {size / 1e6:10.1f} {size / src:9.2f} {size / n:7.0f} {wall:7.1f} {cpu:7.1f}")
    if n > d3rlpy_max:
        print(f"  d3rlpy's own dump: skipped above --d3rlpy-max {d3rlpy_max:,} rows (about 10 minutes at 1 M)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[20_000, 1_000_000])
    ap.add_argument("--d3rlpy-max", type=int, default=20_000, help="largest size also dumped by d3rlpy's writer")
    args = ap.parse_args()
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.pretrained import resolve_pretrained

    template = TransitionSynthesizer.load(resolve_pretrained("pointmaze-umaze")).template
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = tmp
        for n in args.rows:
            bench(n, template, Path(tmp), args.d3rlpy_max)


if __name__ == "__main__":
    main()
