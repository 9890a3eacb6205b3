"""Issue 40: the chained layout of a large transition-level release. Released rows are ordered into episodes (each
next row's state snapped to the current row's next state), so a million transitions are not a million Minari
episodes; every transition is otherwise a released row, terminals end episodes, and the chaining is a pure,
deterministic function of the rows. Plain Minari and the d3rlpy export read it back transition for transition."""
from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from privsynth.data import minari_io
from privsynth.errors import InvalidData
from privsynth.release import layout as lay
from privsynth.synth.chain import chain_nearest
from test_minari_hdf5 import _release_rows


def _rows(n: int = 3000, seed: int = 5):
    """Independent release rows whose rewards (0, 1, 2, ...) name them; next states near other rows' states."""
    ds = _release_rows(n, seed=seed, sparse=False)
    rng = np.random.default_rng(seed)
    nxt = ds.observations[rng.permutation(n)] + rng.normal(scale=0.05, size=ds.observations.shape)
    return dataclasses.replace(ds, rewards=np.arange(n, dtype=np.float32), next_observations=nxt.astype(np.float32),
                               terminals=rng.random(n) < 0.02)


def test_chained_transitions_are_the_released_rows_except_the_snapped_states():
    ds = _rows()
    out = lay.chained(ds)
    src = out.rewards.astype(int)  # the released row each ordered row came from
    assert sorted(src.tolist()) == list(range(ds.n_transitions))  # every row once
    np.testing.assert_array_equal(out.actions, ds.actions[src])
    np.testing.assert_array_equal(out.next_observations, ds.next_observations[src])
    np.testing.assert_array_equal(out.terminals, ds.terminals[src])
    first = np.r_[True, out.episode_ids[1:] != out.episode_ids[:-1]]
    np.testing.assert_array_equal(out.observations[first], ds.observations[src[first]])  # episode starts: unchanged
    np.testing.assert_array_equal(out.observations[1:][~first[1:]], out.next_observations[:-1][~first[1:]])  # snapped
    last = np.r_[out.episode_ids[1:] != out.episode_ids[:-1], True]
    assert not (out.terminals & ~last).any()  # a terminal row ends its episode
    np.testing.assert_array_equal(out.timeouts, last & ~out.terminals)
    assert out.n_episodes < ds.n_transitions / 5  # the point: far fewer episodes than rows
    starts, ends = minari_io.minari_episode_bounds(out)
    assert len(starts) == out.n_episodes  # each chain is one standard Minari episode
    rec = out.info.extra["layout"]
    assert rec["layout"] == "chained" and rec["episodes"] == out.n_episodes
    assert rec["snapped_rows"] == int((~first).sum()) and sum(rec["chain_ends"].values()) == out.n_episodes
    snaps = np.linalg.norm(ds.observations[src[~first]] - out.observations[~first], axis=1)
    assert rec["snap_distance"]["max"] == pytest.approx(float(snaps.max()), rel=1e-5)
    assert rec["snap_distance"]["mean"] == pytest.approx(float(snaps.mean()), rel=1e-5)
    assert 0 < rec["snap_distance"]["p95"] <= rec["snap_distance"]["max"]


def test_chaining_is_a_pure_deterministic_function_of_the_rows():
    ds = _rows()
    a = lay.chained(ds)
    other = dataclasses.replace(ds, info=dataclasses.replace(ds.info, name="other", sensitive=True, extra={"x": 1}))
    b = lay.chained(other)
    for k in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids"):
        np.testing.assert_array_equal(getattr(a, k), getattr(b, k))
    assert a.info.extra["layout"] == b.info.extra["layout"]


def test_chains_end_at_terminals_dead_ends_and_max_length():
    n = 400
    s = np.arange(n, dtype=np.float64)[:, None]
    term = np.zeros(n, bool)
    term[100] = True
    c = chain_nearest(s, s + 1.0, term, k=2, max_length=50)  # row i's next state is row i+1's state
    np.testing.assert_array_equal(c.order, np.arange(n))
    assert c.ends == {"terminal": 1, "no_candidate": 0, "max_length": 7, "last_row": 1}
    assert np.bincount(c.episode_ids).max() == 50 and c.snap.max() == 0.0
    gap = chain_nearest(np.r_[s, s + 1000], np.r_[s + 1, s + 2000], np.zeros(2 * n, bool), k=1, max_length=10_000)
    assert gap.ends["no_candidate"] >= 1


def test_auto_layout_chains_above_the_threshold_and_unknown_layouts_fail():
    assert lay.resolve_layout("auto", lay.CHAIN_THRESHOLD) == "transitions"
    assert lay.resolve_layout("auto", lay.CHAIN_THRESHOLD + 1) == "chained"
    assert lay.resolve_layout("chained", 5) == "chained"
    with pytest.raises(InvalidData, match="unknown layout 'rows'"):
        lay.resolve_layout("rows", 5)
    ds = _rows(50)
    kept = lay.apply_layout(ds, "auto")
    np.testing.assert_array_equal(kept.observations, ds.observations)
    assert kept.info.extra["layout"] == {"layout": "transitions", "episodes": 50}


PLAIN = r"""
import json, sys
import minari
import numpy as np

ds = minari.load_dataset(sys.argv[1])
rows = {k: [] for k in ("s", "a", "r", "s2", "term", "trunc")}
for ep in ds.iterate_episodes():
    o = np.concatenate([ep.observations["observation"], ep.observations["desired_goal"]], axis=1)
    t = len(ep.rewards)
    assert np.array_equal(ep.observations["achieved_goal"], ep.observations["observation"][:, :2])
    rows["s"].append(o[:t]); rows["s2"].append(o[1:]); rows["a"].append(ep.actions); rows["r"].append(ep.rewards)
    rows["term"].append(ep.terminations); rows["trunc"].append(ep.truncations)
np.savez(sys.argv[2], **{k: np.concatenate(v) for k, v in rows.items()})
sampled = ds.sample_episodes(3)
print(json.dumps({
    "privsynth_imported": any(m.startswith("privsynth") for m in sys.modules),
    "episodes": ds.total_episodes, "steps": ds.total_steps, "sampled": len(sampled),
    "env": ds.recover_environment().spec.id, "card": ds.storage.metadata.get("privacy_card"),
    "description": ds.storage.metadata.get("description"),
}))
"""


@pytest.mark.slow
def test_plain_minari_and_d3rlpy_read_every_chained_transition(tmp_path):
    from privsynth.cli import main

    ds = _rows(600)
    ds = dataclasses.replace(ds, terminals=np.zeros(600, bool),
                             info=dataclasses.replace(ds.info, privacy_card={"epsilon": 3.0, "unit": "transition"}))
    out = lay.apply_layout(ds, "chained")
    minari_io.write_dataset(out, "chained")
    npz = tmp_path / "rows.npz"
    proc = subprocess.run([sys.executable, "-c", PLAIN, "privsynth/chained-v0", str(npz)], env=dict(os.environ),
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not facts["privsynth_imported"] and facts["env"] == "PointMaze_UMaze-v3" and facts["sampled"] == 3
    assert facts["episodes"] == out.n_episodes < 200 and facts["steps"] == 600
    assert facts["card"]["layout"] == "chained" and "chain independent synthetic transitions" in facts["description"]
    rows = np.load(npz)
    np.testing.assert_allclose(rows["s"], out.observations, rtol=1e-6)
    np.testing.assert_allclose(rows["s2"], out.next_observations, rtol=1e-6)
    np.testing.assert_array_equal(rows["a"], out.actions)
    np.testing.assert_array_equal(rows["r"], out.rewards)
    np.testing.assert_array_equal(rows["term"], out.terminals)
    np.testing.assert_array_equal(rows["trunc"], out.timeouts)
    back = minari_io.load_dataset("chained")
    assert back.info.extra["layout"]["layout"] == "chained"
    pytest.importorskip("d3rlpy")
    from d3rlpy.dataset import BasicTransitionPicker, InfiniteBuffer, ReplayBuffer

    d3 = tmp_path / "chained.d3rlpy"
    assert main(["datasets", "export", "chained", str(d3), "--format", "d3rlpy"]) == 0
    with open(d3, "rb") as f:
        buffer = ReplayBuffer.load(f, InfiniteBuffer())
    picker = BasicTransitionPicker()
    got = [picker(ep, i) for ep in buffer.episodes for i in range(ep.transition_count)]
    assert len(got) == out.n_transitions and len(buffer.episodes) == out.n_episodes
    _same_transitions(got, out)
    from test_release_consumers import _doc_snippet  # the documented Minari -> d3rlpy conversion, on plain Minari

    scope: dict = {}
    exec(compile(_doc_snippet(), "docs/datasets.md", "exec"), scope)
    mdp = scope["minari_to_d3rlpy"]("privsynth/chained-v0")
    assert len(mdp.episodes) == out.n_episodes
    _same_transitions([picker(ep, i) for ep in mdp.episodes for i in range(ep.transition_count)], out)


def _same_transitions(got, out) -> None:
    assert len(got) == out.n_transitions
    for k, tr in enumerate(got):
        np.testing.assert_allclose(tr.observation, out.observations[k], atol=1e-6)
        np.testing.assert_allclose(tr.action, out.actions[k], atol=1e-6)
        np.testing.assert_allclose(tr.reward, [out.rewards[k]], atol=1e-6)
        np.testing.assert_allclose(tr.next_observation, out.next_observations[k], atol=1e-6)


@pytest.mark.slow
def test_synthesize_writes_the_layout_asked_and_says_which():
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
    from privsynth.release import synthesize
    from test_transition_synth import tiny_config

    minari_io.write_dataset(generate_pointmaze(PointMazeConfig(maze="open", steps=400, seed=1, ref_episodes=1),
                                               progress=False), "open")
    minari_io.write_dataset(generate_pointmaze(PointMazeConfig(maze="umaze", steps=400, seed=2, ref_episodes=1),
                                               progress=False), "umaze")
    with pytest.raises(InvalidData, match="unknown layout"):
        synthesize("umaze", public=["open"], epsilon=8.0, delta=1e-3, n=60, layout="rows", progress=False)
    res = synthesize("umaze", public=["open"], epsilon=8.0, delta=1e-3, n=300, config=tiny_config(),
                     out_dataset="umaze-chained", layout="chained", progress=False)
    back = minari_io.load_dataset("umaze-chained")
    assert back.n_transitions == 300 and back.n_episodes == res.dataset.n_episodes < 300
    assert minari_io.read_card("umaze-chained")["layout"] == "chained"
    assert back.info.extra["layout"]["snap_distance"]["max"] >= 0
    res = synthesize("umaze", public=["open"], epsilon=8.0, delta=1e-3, n=60, config=tiny_config(),
                     out_dataset="umaze-steps", progress=False)  # auto: below the threshold, one step each
    assert minari_io.read_card("umaze-steps")["layout"] == "transitions"
    assert minari_io.load_dataset("umaze-steps").n_episodes == 60
