"""Time writing a release of independent transitions as Minari episodes (one Minari episode per transition).

A PrivORL-n release of ``--rows`` transitions in PointMaze's spaces (Dict observations, the shipped
``pointmaze-umaze`` model's dataset template) is ``--rows`` one-transition Minari episodes: 9 HDF5 objects each. The
rows are random (only the layout matters for the cost). Prints wall and CPU seconds of
:func:`privsynth.data.minari_io.write_dataset` and checks that plain ``minari.load_dataset`` reads it back; then, in
the same run, CPU seconds of the HDF5 file alone written by the direct libhdf5 calls and by h5py's low-level API
(:func:`privsynth.data.minari_hdf5.write_standard_hdf5` with ``native=False``), and their ratio.

    OMP_NUM_THREADS=1 python scripts/bench_minari_write.py              # 20,000 rows, the demo's release
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--rows", type=int, default=20_000)
    args = ap.parse_args()
    from privsynth.data.dataset import OfflineDataset
    from privsynth.data.minari_hdf5 import write_standard_hdf5
    from privsynth.data.minari_spaces import action_space, obs_writer
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.pretrained import resolve_pretrained

    template = TransitionSynthesizer.load(resolve_pretrained("pointmaze-umaze")).template
    rng = np.random.default_rng(0)
    n, o = args.rows, 6
    ds = OfflineDataset(rng.normal(size=(n, o)).astype(np.float32), rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                        rng.normal(size=n).astype(np.float32), rng.normal(size=(n, o)).astype(np.float32),
                        rng.random(n) < 0.1, np.zeros(n, bool), np.arange(n),
                        info=dataclasses.replace(template, name="bench-minari-write", sensitive=False))
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["MINARI_DATASETS_PATH"] = tmp
        import minari

        from privsynth.data.minari_io import write_dataset

        t, c = time.perf_counter(), time.process_time()
        path = write_dataset(ds, "bench/minari-write-v0")
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        size = (path / "data" / "main_data.hdf5").stat().st_size
        plain = minari.load_dataset("bench/minari-write-v0")
        ep = next(iter(plain.iterate_episodes([n - 1])))
        assert plain.total_episodes == n and bool(ep.terminations[0]) == bool(ds.terminals[-1])
        np.testing.assert_allclose(ep.observations["observation"][1], ds.next_observations[-1, :4], rtol=1e-6)
        print(f"{n} one-transition Minari episodes: {wall:.1f} s wall, {cpu:.1f} CPU-s ({1e6 * cpu / n:.0f} CPU-µs "
              f"per episode), main_data.hdf5 {size / 1e6:.1f} MB; load average {os.getloadavg()[0]:.1f}; minari "
              "reads it back")
        _, obs_fn = obs_writer(ds.info, o)
        cpus = {}
        for native in (True, False):
            c = time.process_time()
            write_standard_hdf5(Path(tmp) / f"native-{native}.hdf5", ds, obs_fn, action_space(ds), native=native)
            cpus[native] = time.process_time() - c
    print(f"main_data.hdf5 alone: direct libhdf5 calls {cpus[True]:.1f} CPU-s, h5py low-level API "
          f"{cpus[False]:.1f} CPU-s: {cpus[False] / cpus[True]:.2f}x")


if __name__ == "__main__":
    main()
