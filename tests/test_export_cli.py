"""`privsynth datasets export`: D4RL episode ends equal to the Minari episodes, the written path, one-line errors.

Also the one-line fix named by the missing-reference-scores error of agent scoring.
"""
from __future__ import annotations

import dataclasses

import minari
import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data import DatasetInfo, OfflineDataset, minari_io
from privsynth.errors import InvalidData
from privsynth.evaluation.agents.common import normalized_score
from test_datasets_cli import assert_one_line_error, run




def _independent(n=12, seed=1):
    """A PrivORL-n-like release: independent transitions, one episode id per row, no timeouts, one terminal."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    terminals = np.zeros(n, dtype=bool)
    terminals[4] = True
    return OfflineDataset(observations=obs, actions=rng.uniform(-1, 1, size=(n, 2)), rewards=rng.normal(size=n),
                          next_observations=rng.normal(size=(n, 3)).astype(np.float32), terminals=terminals,
                          timeouts=np.zeros(n, dtype=bool), episode_ids=np.arange(n),
                          info=DatasetInfo(name="indep", ref_min_score=0.0, ref_max_score=1.0))


def _trajectories():
    """A PrivORL-j-like release: multi-row episodes whose rows do not chain, no timeouts at all."""
    ds = make_toy_dataset(lengths=(5, 3, 7))
    return dataclasses.replace(ds, timeouts=np.zeros(ds.n_transitions, dtype=bool))


def _chained():
    """Real-rollout-like episodes (next_observations[t] == observations[t+1] inside an episode), no timeouts."""
    lengths = (4, 6, 3)
    rng = np.random.default_rng(2)
    obs, nxt, ids = [], [], []
    for k, t in enumerate(lengths):
        states = rng.normal(size=(t + 1, 3)).astype(np.float32)
        obs.append(states[:-1])
        nxt.append(states[1:])
        ids.append(np.full(t, 7 + k))
    n = sum(lengths)
    terminals = np.zeros(n, dtype=bool)
    terminals[lengths[0] - 1] = True
    return OfflineDataset(observations=np.concatenate(obs), actions=rng.uniform(-1, 1, size=(n, 2)),
                          rewards=rng.normal(size=n), next_observations=np.concatenate(nxt), terminals=terminals,
                          timeouts=np.zeros(n, dtype=bool), episode_ids=np.concatenate(ids),
                          info=DatasetInfo(name="chained"))


def _d4rl_split(z):
    """Episodes as a D4RL/CORL consumer finds them: a new episode after every terminal or timeout."""
    ends = np.flatnonzero(z["terminals"] | z["timeouts"]) + 1
    assert len(ends) and ends[-1] == len(z["rewards"]), "the last row must end an episode"
    return np.split(np.arange(len(z["rewards"])), ends[:-1])


@pytest.mark.parametrize("make,n_minari", [(_independent, 12), (_trajectories, 15), (_chained, 3)])
def test_npz_episodes_end_in_terminal_or_timeout_and_match_minari(capsys, tmp_path, make, n_minari):
    ds = make()
    minari_io.write_dataset(ds, "rel")
    out = tmp_path / "rel.npz"
    code, text, _ = run(capsys, "datasets", "export", "rel", str(out))
    assert code == 0 and f"-> {out}" in text and f"({n_minari} episodes" in text
    z = dict(np.load(out))
    for k in ("observations", "actions", "rewards", "next_observations", "terminals", "episode_ids"):
        np.testing.assert_array_equal(z[k], getattr(ds, k))
    assert not np.any(z["terminals"] & z["timeouts"])
    # every dataset episode (by id) ends in a terminal or a timeout
    last_of_id = np.r_[z["episode_ids"][1:] != z["episode_ids"][:-1], True]
    assert np.all((z["terminals"] | z["timeouts"])[last_of_id])
    # splitting on terminals | timeouts gives exactly the episodes plain Minari reads, with Minari's flags
    episodes = _d4rl_split(z)
    mds = minari.load_dataset("privsynth/rel-v0")
    ref = list(mds.iterate_episodes())
    assert len(episodes) == len(ref) == n_minari
    for rows, ep in zip(episodes, ref):
        np.testing.assert_allclose(z["rewards"][rows], ep.rewards)
        np.testing.assert_allclose(z["actions"][rows], ep.actions, rtol=1e-6)
        np.testing.assert_array_equal(z["terminals"][rows], ep.terminations)
        np.testing.assert_array_equal(z["timeouts"][rows], ep.truncations)


def test_reimported_export_keeps_ids_and_exports_the_same_file(capsys, tmp_path):
    minari_io.write_dataset(_trajectories(), "rel")
    first, second = tmp_path / "a.npz", tmp_path / "b.npz"
    assert run(capsys, "datasets", "export", "rel", str(first))[0] == 0
    assert run(capsys, "datasets", "import", str(first), "--name", "back")[0] == 0
    assert run(capsys, "datasets", "export", "back", str(second))[0] == 0
    a, b = np.load(first), np.load(second)
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k])


def test_npz_path_is_decided_first_printed_and_checked_for_overwrite(capsys, tmp_path):
    minari_io.write_dataset(make_toy_dataset(), "toy")
    given, real = tmp_path / "rel1.txt", tmp_path / "rel1.txt.npz"
    code, text, _ = run(capsys, "datasets", "export", "toy", str(given))
    assert code == 0 and text.strip().endswith(f"-> {real}")
    assert real.is_file() and not given.exists()
    real.write_bytes(b"keep me")
    code, _, err = run(capsys, "datasets", "export", "toy", str(given))
    assert_one_line_error(code, err, f"{real} exists; pass --overwrite")
    assert real.read_bytes() == b"keep me"
    code, _, _ = run(capsys, "datasets", "export", "toy", str(given), "--overwrite")
    assert code == 0 and len(np.load(real)["rewards"]) == 15
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rel1.txt.npz"]


@pytest.mark.parametrize("fmt", ["npz", "d3rlpy"])
def test_bad_destinations_are_one_line_errors_and_leave_nothing(capsys, tmp_path, fmt):
    minari_io.write_dataset(make_toy_dataset(), "toy")
    code, _, err = run(capsys, "datasets", "export", "toy", str(tmp_path / "no" / "dir" / "x.npz"), "--format", fmt)
    assert_one_line_error(code, err, "does not exist")
    (tmp_path / "adir").mkdir()
    (tmp_path / "adir.npz").mkdir()
    code, _, err = run(capsys, "datasets", "export", "toy", str(tmp_path / "adir"), "--format", fmt, "--overwrite")
    assert_one_line_error(code, err, "is a directory")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["adir", "adir.npz"]
    assert not any((tmp_path / "adir").iterdir()) and not any((tmp_path / "adir.npz").iterdir())


def test_a_failed_write_removes_the_temporary_file(capsys, tmp_path, monkeypatch):
    minari_io.write_dataset(make_toy_dataset(), "toy")

    def disk_full(f, **arrays):
        f.write(b"partial")
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", disk_full)
    code, _, err = run(capsys, "datasets", "export", "toy", str(tmp_path / "x.npz"))
    assert_one_line_error(code, err, "No space left on device")
    assert list(tmp_path.iterdir()) == []

    def bug(f, **arrays):
        f.write(b"partial")
        raise RuntimeError("boom")

    monkeypatch.setattr(np, "savez", bug)
    with pytest.raises(RuntimeError):
        main(["datasets", "export", "toy", str(tmp_path / "x.npz")])
    assert list(tmp_path.iterdir()) == []


def test_missing_reference_scores_error_names_the_fix(capsys, tmp_path):
    with pytest.raises(InvalidData) as exc:
        normalized_score(DatasetInfo(name="privsynth/mine-v0"), 1.0)
    msg = str(exc.value)
    assert "\n" not in msg
    for needle in ("has no reference scores", "privsynth datasets import", "--ref-min", "--ref-max", "--eval-from",
                   "--real"):
        assert needle in msg
    ds = make_toy_dataset()
    src = tmp_path / "mine.npz"
    np.savez(src, **{k: getattr(ds, k) for k in ("observations", "actions", "rewards", "next_observations",
                                                 "terminals", "timeouts")})
    assert run(capsys, "datasets", "import", str(src))[0] == 0
    code, _, err = run(capsys, "agents", "train", "--data", "mine", "--agents", "iql", "--seeds", "0",
                       "--updates", "2", "--quiet")
    assert_one_line_error(code, err, "--ref-min RANDOM_RETURN --ref-max EXPERT_RETURN")
