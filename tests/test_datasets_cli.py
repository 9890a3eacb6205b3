"""`privsynth datasets ...` through privsynth.cli.main: happy paths and one-line errors with exit status 2."""
from __future__ import annotations

import json

import gymnasium as gym
import minari
import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data import minari_io


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def assert_one_line_error(code, err, needle):
    assert code == 2
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert len(lines) == 1, err
    assert lines[0].startswith("privsynth: error:") and needle in lines[0], err
    assert "Traceback" not in err


def test_make_list_show(capsys):
    code, out, _ = run(capsys, "datasets", "make", "pointmaze", "--maze", "open", "--steps", "1500", "--seed", "1",
                       "--ref-episodes", "2", "--quiet")
    assert code == 0 and "privsynth/pointmaze-open-v0" in out and "reference scores" in out
    ds = minari_io.load_dataset("pointmaze-open")
    assert ds.n_transitions == 1500 and ds.obs_dim == 6
    code, out, _ = run(capsys, "datasets", "make", "pointmaze", "--maze", "umaze", "--steps", "800", "--dense",
                       "--name", "mine/um-v1", "--ref-episodes", "1", "--quiet")
    assert code == 0 and minari_io.dataset_exists("mine/um-v1")
    assert minari_io.load_dataset("mine/um-v1").info.env_id == "PointMaze_UMazeDense-v3"

    code, out, _ = run(capsys, "datasets", "list")
    assert code == 0 and "privsynth/pointmaze-open-v0" in out and "mine/um-v1" in out
    code, out, _ = run(capsys, "datasets", "list", "--json")
    assert {r["id"] for r in json.loads(out)} == {"privsynth/pointmaze-open-v0", "mine/um-v1"}

    code, out, _ = run(capsys, "datasets", "show", "pointmaze-open", "--json")
    shown = json.loads(out)
    assert code == 0 and shown["transitions"] == 1500 and shown["episodes"] == ds.n_episodes
    assert shown["ref_min_score"] == ds.info.ref_min_score and shown["privacy_card"] is None
    code, out, _ = run(capsys, "datasets", "show", "pointmaze-open")
    assert code == 0 and "episodes:" in out and "reference:" in out and "No privacy card" in out


def test_show_privacy_card(capsys):
    ds = make_toy_dataset()
    ds.info.privacy_card = {"epsilon": 4.0, "delta": 1e-5, "unit": "trajectory"}
    minari_io.write_dataset(ds, "carded")
    code, out, _ = run(capsys, "datasets", "show", "carded")
    assert code == 0 and "(4, 1e-05)-DP; privacy unit: trajectory" in out
    code, out, _ = run(capsys, "datasets", "list")
    assert "privsynth/carded-v0" in out and " 4 " in out
    code, out, _ = run(capsys, "privacy", "card", "carded")  # the card of a released dataset, by id
    assert code == 0 and "(4, 1e-05)-DP" in out
    code, out, _ = run(capsys, "privacy", "card", "carded", "--json")
    assert code == 0 and json.loads(out) == ds.info.privacy_card
    minari_io.write_dataset(make_toy_dataset(), "plain")
    code, _, err = run(capsys, "privacy", "card", "plain")
    assert code == 2 and "carries no privacy card" in err


def test_import_export_round_trip(capsys, tmp_path):
    ds = make_toy_dataset(lengths=(6, 4, 9))
    # rows chain inside an episode, as in a real D4RL file, so its episodes are the Minari episodes and the exported
    # timeouts (the ends of the Minari episodes, tests/test_export_cli.py) are the file's own
    chain = np.r_[ds.episode_ids[1:] == ds.episode_ids[:-1], False]
    ds.next_observations[chain] = ds.observations[1:][chain[:-1]]
    src = tmp_path / "d.npz"
    np.savez(src, observations=ds.observations, actions=ds.actions, rewards=ds.rewards,
             next_observations=ds.next_observations, terminals=ds.terminals, timeouts=ds.timeouts)
    code, out, _ = run(capsys, "datasets", "import", str(src), "--name", "imp")
    assert code == 0 and "3 episodes" in out
    dst = tmp_path / "out.npz"
    code, _, _ = run(capsys, "datasets", "export", "imp", str(dst))
    back = np.load(dst)
    for k in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts"):
        np.testing.assert_array_equal(back[k], getattr(ds, k))
    assert len(np.unique(back["episode_ids"])) == 3
    code, out, _ = run(capsys, "datasets", "delete", "imp")
    assert code == 0 and not minari_io.dataset_exists("imp")


@pytest.mark.parametrize("argv,needle", [
    (("datasets", "show"), "dataset id is required"),
    (("datasets", "show", "no-such-dataset"), "no local dataset"),
    (("datasets", "delete", "no-such-dataset"), "no local dataset"),
    (("datasets", "export", "no-such-dataset", "x.npz"), "no local dataset"),
    (("datasets", "show", "bad id!"), "malformed dataset id"),
    (("datasets", "make", "pointmaze", "--maze", "huge", "--quiet"), "unknown maze"),
    (("datasets", "make", "pointmaze", "--steps", "0", "--quiet"), "steps"),
    (("datasets", "import", "missing.npz"), "no such file"),
])
def test_errors_exit_2_one_line(capsys, argv, needle):
    code, _, err = run(capsys, *argv)
    assert_one_line_error(code, err, needle)


def test_existing_id_without_overwrite(capsys):
    minari_io.write_dataset(make_toy_dataset(), "pointmaze-umaze")
    code, _, err = run(capsys, "datasets", "make", "pointmaze", "--steps", "50", "--quiet")
    assert_one_line_error(code, err, "already exists")
    assert minari_io.load_dataset("pointmaze-umaze").n_transitions == make_toy_dataset().n_transitions
    code, _, _ = run(capsys, "datasets", "make", "pointmaze", "--steps", "50", "--ref-episodes", "1", "--overwrite",
                     "--quiet")
    assert code == 0 and minari_io.load_dataset("pointmaze-umaze").n_transitions == 50


def test_nan_rows_and_empty_data_on_import(capsys, tmp_path):
    ds = make_toy_dataset()
    obs = ds.observations.copy()
    obs[2, 0] = np.inf
    bad = tmp_path / "bad.npz"
    np.savez(bad, observations=obs, actions=ds.actions, rewards=ds.rewards, next_observations=ds.next_observations,
             terminals=ds.terminals)
    code, _, err = run(capsys, "datasets", "import", str(bad))
    assert_one_line_error(code, err, "NaN or inf")
    assert not minari_io.dataset_exists("bad")
    empty = tmp_path / "empty.npz"
    np.savez(empty, observations=np.zeros((0, 4)), actions=np.zeros((0, 2)), rewards=np.zeros(0),
             next_observations=np.zeros((0, 4)), terminals=np.zeros(0, bool))
    code, _, err = run(capsys, "datasets", "import", str(empty))
    assert_one_line_error(code, err, "no transitions")
    partial = tmp_path / "partial.npz"
    np.savez(partial, observations=np.zeros((3, 4)))
    code, _, err = run(capsys, "datasets", "import", str(partial))
    assert_one_line_error(code, err, "lacks the arrays")


def _foreign(dataset_id, lengths, nan=False):
    from minari.data_collector.episode_buffer import EpisodeBuffer

    rng = np.random.default_rng(0)
    bufs = []
    for t in lengths:
        obs = rng.normal(size=(t + 1, 3)).astype(np.float32)
        if nan:
            obs[0, 0] = np.nan
        bufs.append(EpisodeBuffer(observations=obs, actions=rng.normal(size=(t, 2)).astype(np.float32),
                                  rewards=np.zeros(t), terminations=np.zeros(t, bool), truncations=np.zeros(t, bool)))
    minari.create_dataset_from_buffers(dataset_id, bufs, observation_space=gym.spaces.Box(-np.inf, np.inf, (3,)),
                                       action_space=gym.spaces.Box(-1, 1, (2,)))


def test_nan_rows_and_empty_episodes_in_a_minari_dataset(capsys):
    import h5py

    _foreign("ext/nan-v0", [4, 3], nan=True)
    code, _, err = run(capsys, "datasets", "show", "ext/nan-v0")
    assert_one_line_error(code, err, "NaN or inf")
    # Minari refuses to write a 0-step episode, so cut one down by hand in the hdf5 file
    _foreign("ext/empty-v0", [4, 2])
    with h5py.File(minari_io.dataset_path("ext/empty-v0") / "data" / "main_data.hdf5", "a") as f:
        ep = f["episode_1"]
        for key in ("actions", "rewards", "terminations", "truncations"):
            ep[key].resize((0, *ep[key].shape[1:]))
        ep["observations"].resize((1, 3))
    code, _, err = run(capsys, "datasets", "show", "ext/empty-v0")
    assert_one_line_error(code, err, "empty episode")
    _foreign("ext/none-v0", [])
    code, _, err = run(capsys, "datasets", "show", "ext/none-v0")
    assert_one_line_error(code, err, "no episodes")


def test_export_d3rlpy_holds_exactly_the_transitions(capsys, tmp_path):
    d3rlpy = pytest.importorskip("d3rlpy")
    from d3rlpy.dataset import BasicTransitionPicker

    ds = make_toy_dataset(lengths=(6, 4, 9))
    minari_io.write_dataset(ds, "toy")
    out = tmp_path / "toy.h5"
    code, text, _ = run(capsys, "datasets", "export", "toy", str(out), "--format", "d3rlpy")
    assert code == 0 and "d3rlpy dataset" in text
    with open(out, "rb") as f:
        buf = d3rlpy.dataset.ReplayBuffer.load(f, d3rlpy.dataset.InfiniteBuffer())
    picker = BasicTransitionPicker()
    got = [picker(ep, i) for ep in buf.episodes for i in range(ep.transition_count)]
    assert len(got) == ds.n_transitions
    for k, tr in enumerate(got):
        np.testing.assert_allclose(tr.observation, ds.observations[k])
        np.testing.assert_allclose(tr.action, ds.actions[k])
        assert bool(tr.terminal) == bool(ds.terminals[k])
        if not ds.terminals[k]:
            np.testing.assert_allclose(tr.next_observation, ds.next_observations[k])
    code, _, err = run(capsys, "datasets", "export", "toy", str(out), "--format", "d3rlpy")
    assert code == 2 and "--overwrite" in err


def test_listing_a_missing_store_says_so_and_does_not_create_it(capsys, tmp_path):
    missing = tmp_path / "typo"
    code, out, _ = run(capsys, "--store", str(missing), "datasets", "list")
    assert code == 0 and "does not exist" in out and not missing.exists()
