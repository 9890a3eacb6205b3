"""Issue 40: a transition-level release in the lean HDF5 layout reads right with plain Minari (no privsynth import),
every transition equal, the privacy card in the metadata; and its d3rlpy export still holds every transition."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from privsynth.cli import main
from privsynth.data import minari_io
from test_minari_hdf5 import _release_rows

PLAIN = r"""
import json, sys
import minari
import numpy as np

ds = minari.load_dataset(sys.argv[1])
rows = {k: [] for k in ("s", "a", "r", "s2", "term", "trunc")}
for ep in ds.iterate_episodes():
    o = np.concatenate([ep.observations["observation"], ep.observations["desired_goal"]], axis=1)
    assert len(ep.rewards) == 1 and np.array_equal(ep.observations["achieved_goal"], ep.observations["observation"][:, :2])
    rows["s"].append(o[:1]); rows["s2"].append(o[1:]); rows["a"].append(ep.actions); rows["r"].append(ep.rewards)
    rows["term"].append(ep.terminations); rows["trunc"].append(ep.truncations)
np.savez(sys.argv[2], **{k: np.concatenate(v) for k, v in rows.items()})
sampled = ds.sample_episodes(3)
print(json.dumps({
    "privsynth_imported": any(m.startswith("privsynth") for m in sys.modules),
    "episodes": ds.total_episodes, "steps": ds.total_steps, "sampled": [len(e.rewards) for e in sampled],
    "env": ds.recover_environment().spec.id, "card": ds.storage.metadata.get("privacy_card"),
    "meta": [int(m["total_steps"]) for m in ds.storage.get_episode_metadata([0, 1, 299])],
}))
"""
CARD = {"epsilon": 3.0, "delta": 1e-5, "unit": "transition", "neighbouring_relation": "add/remove",
        "accountant": "rdp"}


@pytest.mark.slow
def test_plain_minari_reads_every_transition_of_a_lean_release(tmp_path):
    ds = _release_rows(300)
    ds = dataclasses.replace(ds, info=dataclasses.replace(ds.info, privacy_card=CARD))
    minari_io.write_dataset(ds, "lean")
    out = tmp_path / "rows.npz"
    proc = subprocess.run([sys.executable, "-c", PLAIN, "privsynth/lean-v0", str(out)], env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not facts["privsynth_imported"]
    assert facts["episodes"] == facts["steps"] == 300 and facts["sampled"] == [1, 1, 1]
    assert facts["env"] == "PointMaze_UMaze-v3" and facts["card"] == CARD and facts["meta"] == [1, 1, 1]
    rows = np.load(out)
    np.testing.assert_allclose(rows["s"], ds.observations, rtol=1e-6)
    np.testing.assert_allclose(rows["s2"], ds.next_observations, rtol=1e-6)
    np.testing.assert_array_equal(rows["a"], ds.actions)
    np.testing.assert_array_equal(rows["r"], ds.rewards)
    np.testing.assert_array_equal(rows["term"], ds.terminals)
    np.testing.assert_array_equal(rows["trunc"], ~ds.terminals)
    assert minari_io.read_card("lean") == CARD


@pytest.mark.slow
def test_d3rlpy_export_of_a_lean_release_holds_every_transition(capsys, tmp_path):
    pytest.importorskip("d3rlpy")
    from d3rlpy.dataset import BasicTransitionPicker, InfiniteBuffer, ReplayBuffer

    ds = _release_rows(40)
    minari_io.write_dataset(ds, "lean")
    out = tmp_path / "lean.d3rlpy"
    assert main(["datasets", "export", "lean", str(out), "--format", "d3rlpy"]) == 0
    with open(out, "rb") as f:
        buffer = ReplayBuffer.load(f, InfiniteBuffer())
    picker = BasicTransitionPicker()
    got = [picker(ep, i) for ep in buffer.episodes for i in range(ep.transition_count)]
    assert len(got) == ds.n_transitions
    for k, tr in enumerate(got):
        np.testing.assert_allclose(tr.observation, ds.observations[k], atol=1e-6)
        np.testing.assert_allclose(tr.action, ds.actions[k], atol=1e-6)
        np.testing.assert_allclose(tr.reward, [ds.rewards[k]], atol=1e-6)
        assert bool(tr.terminal) == bool(ds.terminals[k])
        if not ds.terminals[k]:
            np.testing.assert_allclose(tr.next_observation, ds.next_observations[k], atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("rows", ["release", "mixed"])
def test_our_d3rlpy_file_loads_as_d3rlpys_own_dump(tmp_path, rows):
    """``write_d3rlpy_hdf5`` writes what d3rlpy's ``ReplayBuffer.dump`` writes, as d3rlpy loads it: the same episodes,
    arrays (dtype, shape, values) and ``terminated`` flags, for independent transitions and for real episodes."""
    pytest.importorskip("d3rlpy")
    from d3rlpy.dataset import InfiniteBuffer, ReplayBuffer

    from privsynth.data.minari_hdf5 import write_d3rlpy_hdf5
    from privsynth.evaluation.agents.d3rlpy_export import d3rlpy_arrays, to_d3rlpy
    from test_minari_hdf5 import _mixed_pointmaze_rows

    ds = _release_rows(200, sparse=False) if rows == "release" else _mixed_pointmaze_rows()
    theirs, ours = tmp_path / "theirs.d3", tmp_path / "ours.d3"
    with open(theirs, "w+b") as f:
        to_d3rlpy(ds).dump(f)
    assert write_d3rlpy_hdf5(ours, d3rlpy_arrays(ds)) == len(to_d3rlpy(ds).episodes)
    loaded = []
    for path in (theirs, ours):
        with open(path, "rb") as f:
            loaded.append(ReplayBuffer.load(f, InfiniteBuffer()).episodes)
    assert len(loaded[0]) == len(loaded[1])
    for a, b in zip(*loaded):
        for key in ("observations", "actions", "rewards"):
            x, y = getattr(a, key), getattr(b, key)
            assert x.dtype == y.dtype and x.shape == y.shape and np.array_equal(x, y), key
        assert a.terminated == b.terminated and type(a.terminated) is type(b.terminated)
    if rows == "release":
        assert ours.stat().st_size < 0.5 * theirs.stat().st_size
