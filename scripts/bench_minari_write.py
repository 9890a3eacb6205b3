"""Size on disk and write time of a PrivORL-n release per format, against its source, at 20,000 and 1,000,000 rows.

For each size N, in one run:

* source: a trajectory-level dataset of N PointMaze steps (Dict observations, 300-step chained episodes), written by
  :func:`privsynth.data.minari_io.write_dataset`, as ``privsynth datasets make pointmaze --steps N`` writes it;
* release: N independent transitions sampled from the shipped ``pointmaze-umaze`` model, prepared as a release, in
  both transition-level layouts (:mod:`privsynth.release.layout`): ``transitions`` (one Minari episode each; up to
  ``--transitions-max`` rows) and ``chained`` (rows chained into episodes; the chaining is timed with the write);
* each release exported as npz and as a d3rlpy file (``privsynth datasets export --format npz|d3rlpy``), and, up to
  ``--d3rlpy-max`` rows, d3rlpy's ``ReplayBuffer.load`` checks every transition of the export and d3rlpy's own
  ``ReplayBuffer.dump`` of the same rows is measured for reference.

The source's rows are random (only the layout matters for its cost); the release's are the model's, since the
chaining's cost and episode lengths depend on how the rows lie. Sizes are bytes allocated on disk (``du``); times are
wall and CPU seconds of the write (one thread). Plain ``minari.load_dataset`` reads each release back
(``iterate_episodes``: every episode up to ``--plain-all-max`` episodes, else 2,000 random ones with the first and
the last; ``sample_episodes``; ``recover_environment``), compared with the rows as laid out; privsynth reads every
row.

    OMP_NUM_THREADS=1 python scripts/bench_minari_write.py                  # 20,000 and 1,000,000 rows
    OMP_NUM_THREADS=1 python scripts/bench_minari_write.py --rows 20000     # quick
    OMP_NUM_THREADS=1 python scripts/bench_minari_write.py --cache /tmp/rows.npz   # sample the model's rows once
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


def rows(n: int, template: Any) -> Any:
    """N PointMaze-shaped random rows: 300-step chained episodes (the source, a rollout)."""
    from privsynth.data.dataset import OfflineDataset

    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n + 1, 6)).astype(np.float32)
    ids = np.arange(n) // 300
    nxt = obs[1:].copy()
    ends = np.r_[ids[1:] != ids[:-1], True]
    nxt[ends] = rng.normal(size=(int(ends.sum()), 6))  # each episode's final next observation
    info = dataclasses.replace(template, name="bench-minari-write", sensitive=True)
    return OfflineDataset(obs[:n], rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                          (rng.random(n) < 0.05).astype(np.float32), nxt, np.zeros(n, bool), ends, ids, info=info)


def release_rows(n: int, model: Any, cache: Path | None) -> Any:
    """N independent transitions sampled from the shipped ``pointmaze-umaze`` model (what a release holds; the
    chaining's cost and episode lengths depend on how the rows lie), prepared as a release (clipped to the
    environment's support, PointMaze's terminals cleared). ``cache``: an npz of the sampled rows, reused."""
    from privsynth.data.dataset import OfflineDataset
    from privsynth.release.support import prepare_release

    if cache is not None and cache.is_file():
        z = np.load(cache)
        ds = OfflineDataset(z["o"][:n], z["a"][:n], z["r"][:n], z["nx"][:n], z["t"][:n], np.zeros(n, bool),
                            np.arange(n), info=model.template)
    else:
        t = time.perf_counter()
        ds = model.sample(n, progress=False)
        print(f"(sampled {n:,} rows from pointmaze-umaze in {time.perf_counter() - t:.0f} s; not part of any write)")
        if cache is not None:
            np.savez(cache, o=ds.observations, a=ds.actions, r=ds.rewards, nx=ds.next_observations, t=ds.terminals)
    return prepare_release(dataclasses.replace(ds, info=dataclasses.replace(ds.info, name="bench-release")),
                           model.template)


def check_plain(plain: Any, release: Any, k: int | None) -> int:
    """Compare episodes of the release as plain Minari reads them with its rows (all of them, or ``k``: random ones,
    the first and the last); returns how many episodes were checked. Plain Minari reads about 200 episodes a second
    here, so a million one-transition episodes are not all read."""
    from privsynth.data.minari_io import minari_episode_bounds

    starts, ends = minari_episode_bounds(release)
    m = len(starts)
    picks = np.arange(m) if k is None or k >= m else np.unique(
        np.r_[0, m - 1, np.random.default_rng(1).choice(m, size=max(k - 2, 0), replace=False)])
    for i, ep in zip(picks, plain.iterate_episodes(picks.tolist())):
        s, e = starts[i], ends[i]
        o = np.concatenate([ep.observations["observation"], ep.observations["desired_goal"]], axis=1)
        np.testing.assert_allclose(o[:-1], release.observations[s:e], rtol=1e-6)
        np.testing.assert_allclose(o[1:], release.next_observations[s:e], rtol=1e-6)
        np.testing.assert_array_equal(ep.actions, release.actions[s:e])
        np.testing.assert_array_equal(ep.rewards, release.rewards[s:e])
        np.testing.assert_array_equal(ep.terminations, release.terminals[s:e])
        assert ep.truncations[-1] == (not release.terminals[e - 1]) and not ep.truncations[:-1].any()
    assert len(plain.sample_episodes(5)) == 5 and plain.recover_environment().spec.id == release.info.env_id
    return len(picks)


def check_d3rlpy(path: Path, release: Any) -> None:
    """d3rlpy's own ``ReplayBuffer.load`` reads every transition of the release from privsynth's d3rlpy file."""
    from d3rlpy.dataset import BasicTransitionPicker, InfiniteBuffer, ReplayBuffer

    with open(path, "rb") as f:
        buffer = ReplayBuffer.load(f, InfiniteBuffer())
    picker = BasicTransitionPicker()
    k = 0
    for ep in buffer.episodes:
        for i in range(ep.transition_count):
            tr = picker(ep, i)
            np.testing.assert_allclose(tr.observation, release.observations[k], atol=1e-6)
            np.testing.assert_allclose(tr.action, release.actions[k], atol=1e-6)
            assert abs(float(tr.reward[0]) - float(release.rewards[k])) <= 1e-6
            if not release.terminals[k]:
                np.testing.assert_allclose(tr.next_observation, release.next_observations[k], atol=1e-6)
            k += 1
    assert k == release.n_transitions


def write_layout(release: Any, layout: str, n: int, tmp: Path, lines: list, d3rlpy_max: int,
                 plain_all_max: int) -> str:
    """Write ``release`` in ``layout`` (the chaining timed with the write), check it with plain Minari, privsynth's
    reader and (up to ``d3rlpy_max`` rows) d3rlpy's, export it; append the figures to ``lines``."""
    import minari

    from privsynth.commands._dataset_export import _d4rl_timeouts
    from privsynth.data.dataset import ARRAY_FIELDS
    from privsynth.data.minari_hdf5 import write_d3rlpy_hdf5
    from privsynth.data.minari_io import load_dataset, write_dataset
    from privsynth.evaluation.agents.d3rlpy_export import d3rlpy_arrays, to_d3rlpy
    from privsynth.release.layout import apply_layout

    did = f"bench/release-{layout}-{n}-v0"
    laid = {}

    def write() -> Path:
        laid["ds"] = apply_layout(release, layout)
        return write_dataset(laid["ds"], did)

    rel_path, wall, cpu = timed(write)
    ds = laid["ds"]
    what = "1 episode/transition" if layout == "transitions" else "chaining included"
    lines.append((f"release {layout} (Minari hdf5, {what})", disk_bytes(rel_path), wall, cpu))
    lines.append(("  of which main_data.hdf5", disk_bytes(rel_path / "data" / "main_data.hdf5"), float("nan"),
                  float("nan")))
    plain = minari.load_dataset(did)
    assert plain.total_steps == n and plain.total_episodes == ds.n_episodes
    checked = check_plain(plain, ds, None if ds.n_episodes <= plain_all_max else 2_000)
    back = load_dataset(did)
    assert all(np.array_equal(getattr(back, k), getattr(ds, k)) for k in ARRAY_FIELDS)
    npz = tmp / f"release-{layout}-{n}.npz"
    arrays = dict(observations=ds.observations, actions=ds.actions, rewards=ds.rewards,
                  next_observations=ds.next_observations, terminals=ds.terminals, timeouts=_d4rl_timeouts(ds),
                  episode_ids=ds.episode_ids)
    _, wall, cpu = timed(lambda: np.savez(npz, **arrays))
    lines.append(("  export npz", disk_bytes(npz), wall, cpu))
    out = tmp / f"release-{layout}-{n}.d3rlpy"
    _, wall, cpu = timed(lambda: write_d3rlpy_hdf5(out, d3rlpy_arrays(ds)))
    lines.append(("  export d3rlpy (privsynth's writer)", disk_bytes(out), wall, cpu))
    if n <= d3rlpy_max:
        check_d3rlpy(out, ds)
        theirs = tmp / f"release-{layout}-{n}-d3rlpy-dump.d3rlpy"

        def dump() -> None:
            with open(theirs, "w+b") as f:
                to_d3rlpy(ds).dump(f)

        _, wall, cpu = timed(dump)
        lines.append(("  d3rlpy's own ReplayBuffer.dump, for reference", disk_bytes(theirs), wall, cpu))
    rec = ds.info.extra["layout"]
    note = f"{layout}: {ds.n_episodes:,} Minari episodes; plain minari: {checked:,} episodes equal to their rows"
    note += " (all)" if checked == ds.n_episodes else " (random ones, the first and the last)"
    if n <= d3rlpy_max:
        note += "; d3rlpy's ReplayBuffer.load of the export: every transition equal"
    if layout == "chained":
        snap = rec["snap_distance"]
        note += (f"\n    chains: mean length {rec['mean_episode_length']:.1f}, ends {rec['chain_ends']}; snap distance "
                 f"mean {snap['mean']:.3f} / p95 {snap['p95']:.3f} / max {snap['max']:.3f} (state units; "
                 f"in per-column std: mean {rec['snap_distance_in_std']['mean']:.3f})")
    return note


def bench(n: int, template: Any, model: Any, tmp: Path, args: Any) -> None:
    from privsynth.data.minari_io import write_dataset

    lines: list = []
    src_path, wall, cpu = timed(lambda: write_dataset(rows(n, template), f"bench/source-{n}-v0"))
    src = disk_bytes(src_path)
    lines.append(("source (trajectories, Minari hdf5)", src, wall, cpu))
    release = release_rows(n, model, args.cache)
    notes = []
    for layout in ("transitions", "chained"):
        if layout == "transitions" and n > args.transitions_max:
            notes.append(f"transitions: skipped above --transitions-max {args.transitions_max:,} rows (1 M: 1171 MB, "
                         "238 CPU-s; docs/datasets.md)")
            continue
        notes.append(write_layout(release, layout, n, tmp, lines, args.d3rlpy_max, args.plain_all_max))
    print(f"\n{n:,} rows (load average {os.getloadavg()[0]:.1f}); privsynth reads every row of each release equal")
    for note in notes:
        print("  " + note)
    print(f"  {'what':58s} {'MB on disk':>10s} {'x source':>9s} {'B/row':>7s} {'wall s':>7s} {'CPU s':>7s}")
    for what, size, wall, cpu in lines:
        print(f"  {what:58s} {size / 1e6:10.1f} {size / src:9.2f} {size / n:7.0f} {wall:7.1f} {cpu:7.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, nargs="+", default=[20_000, 1_000_000])
    ap.add_argument("--d3rlpy-max", type=int, default=20_000,
                    help="largest size whose d3rlpy export d3rlpy loads and checks, and d3rlpy's own writer dumps")
    ap.add_argument("--transitions-max", type=int, default=100_000,
                    help="largest size also written one episode per transition (1 M: about 4 minutes of CPU)")
    ap.add_argument("--plain-all-max", type=int, default=100_000,
                    help="plain minari compares every episode up to this many (else 2,000 of them)")
    ap.add_argument("--cache", type=Path, default=None, help="npz of sampled release rows, written or reused")
    args = ap.parse_args()
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.pretrained import resolve_pretrained

    model = TransitionSynthesizer.load(resolve_pretrained("pointmaze-umaze"))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = tmp
        for n in args.rows:
            bench(n, model.template, model, Path(tmp), args)


if __name__ == "__main__":
    main()
