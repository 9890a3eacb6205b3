"""Minari round trip: exact arrays, DatasetInfo with privacy card, atomic writes, plain minari loading."""
from __future__ import annotations

import os
from pathlib import Path

import gymnasium as gym
import minari
import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.data import minari_io
from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import DatasetNotFound, InvalidData, PrivsynthError, SpaceMismatch

ARRAYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids")
CARD = {"epsilon": 2.5, "delta": 1e-5, "unit": "trajectory", "accountant": "pld", "steps": [1, 2, 3], "nested": {"a": None}}


def assert_same(a: OfflineDataset, b: OfflineDataset) -> None:
    for name in ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert a.info == b.info


def chained(lengths=(40, 25, 60), seed=0, **info) -> OfflineDataset:
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    obs = rng.normal(size=(n + len(lengths), 6)).astype(np.float32)
    rows, nxt, k = [], [], 0
    for length in lengths:
        rows.append(obs[k : k + length])
        nxt.append(obs[k + 1 : k + length + 1])
        k += length + 1
    timeouts = np.zeros(n, bool)
    timeouts[np.cumsum(lengths) - 1] = True
    return OfflineDataset(
        observations=np.concatenate(rows),
        actions=rng.uniform(-1, 1, (n, 2)),
        rewards=rng.normal(size=n),
        next_observations=np.concatenate(nxt),
        terminals=np.zeros(n, bool),
        timeouts=timeouts,
        episode_ids=np.repeat([7, 3, 9], lengths),
        info=DatasetInfo(name="chained", ref_min_score=1.0, ref_max_score=5.0, **info),
    )


def synthetic(n=1000, seed=1) -> OfflineDataset:
    rng = np.random.default_rng(seed)
    m = rng.normal(size=(n, 2 * 4 + 2 + 2)).astype(np.float32)
    info = DatasetInfo(name="synthetic", privacy_card=CARD, extra={"method": "privorl-n", "eps": np.float64(2.5)})
    return OfflineDataset.from_transition_matrix(m, 4, 2, info=info)


def _plain_transitions(dataset_id: str):
    """(s, a, r, s', terminated, truncated) rows as a plain Minari user reads them: obs[t], obs[t+1]."""
    plain = minari.load_dataset(dataset_id)
    rows = []
    for ep in plain.iterate_episodes():
        t = len(ep.rewards)
        assert ep.terminations[-1] or ep.truncations[-1]  # every Minari episode ends in one of them
        assert not ep.terminations[:-1].any() and not ep.truncations[:-1].any()
        for i in range(t):
            rows.append((ep.observations[i], ep.actions[i], ep.rewards[i], ep.observations[i + 1],
                         ep.terminations[i], ep.truncations[i]))
    return plain, rows


def test_chained_round_trip_is_exact_and_native():
    ds = chained(privacy_card=CARD, sensitive=True)
    path = minari_io.write_dataset(ds, "rt")
    assert path == Path(os.environ["MINARI_DATASETS_PATH"]) / "privsynth" / "rt-v0"
    assert minari_io.choose_scheme(ds) == "standard"
    back = minari_io.load_dataset("rt")
    assert_same(ds, back)
    assert back.info.privacy_card == CARD and back.info.sensitive
    plain, rows = _plain_transitions("privsynth/rt-v0")  # plain minari, no privsynth code
    assert plain.total_episodes == 3 and plain.total_steps == ds.n_transitions == len(rows)
    ep = next(iter(plain.iterate_episodes()))
    np.testing.assert_array_equal(ep.observations[:-1], ds.observations[:40])
    np.testing.assert_array_equal(ep.observations[-1], ds.next_observations[39])
    meta = plain.storage.metadata
    assert meta["privacy_card"] == CARD and "privacy_card" not in meta["privsynth"]["info"]  # one card
    assert "(2.5, 1e-05)-DP" in meta["description"] and "trajectory" in meta["description"]
    assert minari_io.read_card("rt") == CARD


def test_independent_transitions_become_one_episode_each():
    ds = synthetic()
    assert not np.array_equal(ds.next_observations[:-1], ds.observations[1:])
    minari_io.write_dataset(ds, "ns/synthetic-v3")
    back = minari_io.load_dataset("ns/synthetic-v3")
    info = ds.info.to_dict()
    info["extra"]["eps"] = 2.5  # numpy scalars come back as plain floats
    assert back.info.to_dict() == info
    back.info = ds.info
    assert_same(ds, back)
    plain, rows = _plain_transitions("ns/synthetic-v3")
    assert plain.total_steps == 1000 and plain.total_episodes == 1000
    for i, (s, a, r, s2, term, trunc) in enumerate(rows):
        np.testing.assert_array_equal(s, ds.observations[i])
        np.testing.assert_array_equal(s2, ds.next_observations[i])
        np.testing.assert_array_equal(a, ds.actions[i])
        assert r == ds.rewards[i] and term == ds.terminals[i] and trunc == (not ds.terminals[i])
    assert len(list(plain.iterate_episodes([0, 1, 2]))) == 3 and len(plain.sample_episodes(2)) == 2


def test_split_runs_and_fallback_reader():
    """Terminals and chain breaks inside an episode split it; without the arrays file the hdf5 alone loads."""
    toy = make_toy_dataset(lengths=(5, 1, 7, 1, 1), seed=4)
    minari_io.write_dataset(toy, "toy")
    assert_same(toy, minari_io.load_dataset("toy"))
    starts, ends = minari_io.minari_episode_bounds(toy)
    assert minari.load_dataset("privsynth/toy-v0").total_episodes == len(starts)
    ds = chained()
    ds.terminals[10] = True  # a terminal inside an episode ends a Minari episode there
    minari_io.write_dataset(ds, "split")
    assert minari.load_dataset("privsynth/split-v0").total_episodes == 4
    (minari_io.dataset_path("split") / "data" / minari_io.SIDECAR_FILE).unlink()
    back = minari_io.load_dataset("split")
    for name in ("observations", "actions", "rewards", "next_observations", "terminals", "episode_ids"):
        np.testing.assert_array_equal(getattr(back, name), getattr(ds, name), err_msg=name)
    assert back.info == ds.info


def test_bad_scheme():
    with pytest.raises(InvalidData):
        minari_io.write_dataset(chained(), "y", scheme="zip")


def test_pointmaze_round_trip_with_env_and_scores():
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze

    ds = generate_pointmaze(PointMazeConfig(maze="umaze", steps=800, ref_episodes=2), progress=False)
    minari_io.write_dataset(ds, "pointmaze/umaze-v0")
    back = minari_io.load_dataset("pointmaze/umaze")
    assert_same(ds, back)
    plain = minari.load_dataset("pointmaze/umaze-v0")
    meta = plain.storage.metadata
    assert meta["ref_min_score"] == ds.info.ref_min_score and meta["ref_max_score"] == ds.info.ref_max_score
    env = plain.recover_environment(eval_env=True)
    assert env.spec.max_episode_steps == 300 and env.spec.kwargs["reset_target"] is False
    assert env.spec.kwargs["maze_map"] == ds.info.env_kwargs["maze_map"]
    assert isinstance(plain.observation_space, gym.spaces.Dict)  # Dict stays Dict, as the environment has it
    assert plain.observation_space == env.observation_space and plain.action_space == env.action_space
    ep = plain[0]
    np.testing.assert_array_equal(ep.observations["achieved_goal"], ep.observations["observation"][:, :2])
    np.testing.assert_allclose(ep.observations["desired_goal"][:-1], ds.observations[: len(ep.rewards), 4:6])


def test_ids_namespace_and_versions():
    ds = chained()
    minari_io.write_dataset(ds, "privsynth/a-v0")
    minari_io.write_dataset(ds, "a-v2")
    assert minari_io.resolve_id("a") == "privsynth/a-v2"  # highest version
    assert minari_io.resolve_id("a-v0") == "privsynth/a-v0"
    assert minari_io.dataset_exists("privsynth/a-v2") and not minari_io.dataset_exists("a-v1")
    assert minari_io.list_datasets() == ["privsynth/a-v0", "privsynth/a-v2"]
    assert minari_io.delete_dataset("a-v0") == "privsynth/a-v0"
    assert minari_io.list_datasets() == ["privsynth/a-v2"]
    with pytest.raises(DatasetNotFound):
        minari_io.load_dataset("a-v0")
    with pytest.raises(DatasetNotFound):
        minari_io.delete_dataset("nothing")
    for bad in ("", "bad id!", "/x"):
        with pytest.raises(InvalidData):
            minari_io.resolve_id(bad)


def test_existing_id_needs_overwrite_and_overwrite_replaces():
    minari_io.write_dataset(chained(seed=0), "same")
    with pytest.raises(PrivsynthError, match="already exists"):
        minari_io.write_dataset(chained(seed=1), "same")
    assert_same(minari_io.load_dataset("same"), chained(seed=0))
    minari_io.write_dataset(chained(seed=1), "same", overwrite=True)
    assert_same(minari_io.load_dataset("same"), chained(seed=1))


def _root_entries() -> set[str]:
    root = Path(os.environ["MINARI_DATASETS_PATH"])
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def test_atomic_write_leaves_nothing_on_failure(monkeypatch):
    minari_io.write_dataset(chained(seed=0), "keep")
    before = _root_entries()
    real = minari.create_dataset_from_buffers

    def failing(*args, **kwargs):
        real(*args, **kwargs)  # a complete dataset lands in the temporary store ...
        raise OSError("disk full")  # ... and then the write fails

    monkeypatch.setattr(minari, "create_dataset_from_buffers", failing)
    with pytest.raises(OSError):
        minari_io.write_dataset(chained(seed=1), "new")
    with pytest.raises(OSError):
        minari_io.write_dataset(chained(seed=1), "keep", overwrite=True)
    assert _root_entries() == before  # no temporary directories, no partial dataset
    assert not minari_io.dataset_exists("new")
    assert_same(minari_io.load_dataset("keep"), chained(seed=0))  # the old dataset survived


def test_failed_final_rename_restores_old(monkeypatch):
    minari_io.write_dataset(chained(seed=0), "keep")
    before = _root_entries()
    real_rename = os.rename
    final = minari_io.target_path("keep")
    attempts = []

    def rename(src, dst):
        if Path(dst) == final and ".privsynth-tmp-new-" in str(src):  # moving the new dataset into place fails
            attempts.append(src)
            raise OSError("rename failed")
        return real_rename(src, dst)

    monkeypatch.setattr(minari_io.os, "rename", rename)
    with pytest.raises(OSError):
        minari_io.write_dataset(chained(seed=1), "keep", overwrite=True)
    assert attempts  # the failure happened at the final move, after the old dataset was set aside
    assert _root_entries() == before
    assert_same(minari_io.load_dataset("keep"), chained(seed=0))


def test_write_dataset_dir_for_external_atomic_placement(tmp_path):
    """Release code (privacy.guarded_write) writes to a hidden sibling and renames it to target_path itself."""
    ds = synthetic(n=50)
    final = minari_io.target_path("release/eps1")
    staged = final.parent / ".release.tmp-1234"
    minari_io.write_dataset_dir(ds, "release/eps1", staged)
    assert not minari_io.dataset_exists("release/eps1")  # hidden until renamed
    (staged / "privacy_card.md").write_text("## Privacy card")  # extra files beside data/ are fine
    os.rename(staged, final)
    back = minari_io.load_dataset("release/eps1-v0")
    assert back.info.privacy_card == CARD
    assert minari.load_dataset("release/eps1-v0").total_steps == 50
    with pytest.raises(PrivsynthError):
        minari_io.write_dataset_dir(ds, "release/eps1", final)  # the path exists


def test_invalid_data_is_refused_before_writing():
    ds = chained()
    ds.observations[3, 1] = np.nan
    with pytest.raises(InvalidData, match="NaN"):
        minari_io.write_dataset(ds, "nan")
    assert not minari_io.dataset_exists("nan")


def test_load_public_and_sensitive():
    minari_io.write_dataset(chained(seed=0), "pub1")
    minari_io.write_dataset(chained(seed=1), "pub2")
    minari_io.write_dataset(chained(seed=2), "sens")
    minari_io.write_dataset(synthetic(), "other-space")
    public, sensitive = minari_io.load_public_and_sensitive(["pub1", "pub2"], "sens")
    assert sensitive.info.sensitive and not public.info.sensitive
    assert public.n_transitions == 2 * chained().n_transitions and public.n_episodes == 6
    none, sensitive = minari_io.load_public_and_sensitive(None, "sens")
    assert none is None and sensitive.info.sensitive
    with pytest.raises(SpaceMismatch):
        minari_io.load_public_and_sensitive(["other-space"], "sens")
    with pytest.raises(InvalidData):
        minari_io.load_public_and_sensitive(["sens"], "sens")
    with pytest.raises(DatasetNotFound):
        minari_io.load_public_and_sensitive(["pub1"], "missing")
    minari_io.write_dataset(chained(seed=3).mark_sensitive(), "flagged")
    with pytest.raises(InvalidData, match="sensitive"):
        minari_io.load_public_and_sensitive(["flagged"], "sens")
    minari_io.write_dataset(chained(seed=2), "copy-of-sens")  # same content under another id
    with pytest.raises(InvalidData, match="shares 125 transitions"):
        minari_io.load_public_and_sensitive(["pub1", "copy-of-sens"], "sens")


def test_foreign_minari_dataset_loads():
    """A dataset written by other Minari code (dict observations, no privsynth metadata) loads as chained episodes."""
    import gymnasium as gym
    from minari.data_collector.episode_buffer import EpisodeBuffer

    rng = np.random.default_rng(0)
    space = gym.spaces.Dict({"observation": gym.spaces.Box(-np.inf, np.inf, (4,)), "desired_goal": gym.spaces.Box(-np.inf, np.inf, (2,)), "achieved_goal": gym.spaces.Box(-np.inf, np.inf, (2,))})
    bufs = []
    for t in (5, 8):
        bufs.append(EpisodeBuffer(
            observations={k: rng.normal(size=(t + 1, d)).astype(np.float32) for k, d in (("observation", 4), ("desired_goal", 2), ("achieved_goal", 2))},
            actions=rng.normal(size=(t, 2)).astype(np.float32), rewards=np.ones(t), terminations=np.zeros(t, bool),
            truncations=np.eye(1, t, t - 1, dtype=bool)[0]))
    minari.create_dataset_from_buffers("other/maze-v0", bufs, observation_space=space, action_space=gym.spaces.Box(-1, 1, (2,)))
    ds = minari_io.load_dataset("other/maze")
    assert ds.obs_dim == 6 and ds.n_episodes == 2 and ds.n_transitions == 13
    assert ds.info.obs_keys == ["observation", "desired_goal"]
    np.testing.assert_array_equal(ds.next_observations[:4], ds.observations[1:5])


def test_minari_data_collector_output_loads_as_sensitive_data():
    """Data recorded with minari.DataCollector (extra `create`: jax) is read with its env spec."""
    pytest.importorskip("jax")
    from minari import DataCollector

    env = DataCollector(gym.make("Pendulum-v1", max_episode_steps=50))
    env.reset(seed=0)
    for _ in range(100):
        _, _, term, trunc, _ = env.step(env.action_space.sample())
        if term or trunc:
            env.reset()
    env.create_dataset(dataset_id="mine/pendulum-v0", algorithm_name="random")
    public, sensitive = minari_io.load_public_and_sensitive([], "mine/pendulum-v0")
    assert public is None and sensitive.info.sensitive and sensitive.info.env_id == "Pendulum-v1"
    assert sensitive.n_transitions == 100 and sensitive.n_episodes == 2 and sensitive.obs_dim == 3
    minari_io.check_env_spaces(sensitive.info, sensitive.obs_dim, sensitive.act_dim)


def test_discrete_actions_are_stored_as_indices_of_the_env_space():
    rng = np.random.default_rng(0)
    n = 12
    ds = OfflineDataset(observations=rng.normal(size=(n, 4)), actions=rng.integers(0, 2, (n, 1)),
                        rewards=np.ones(n), next_observations=rng.normal(size=(n, 4)), terminals=np.zeros(n),
                        timeouts=np.zeros(n), episode_ids=np.arange(n), info=DatasetInfo(name="cp", env_id="CartPole-v1"))
    minari_io.write_dataset(ds, "cartpole")
    plain = minari.load_dataset("privsynth/cartpole-v0")
    assert isinstance(plain.action_space, gym.spaces.Discrete) and plain.total_episodes == n
    assert all(plain.action_space.contains(int(ep.actions[0])) for ep in plain.iterate_episodes())
    back = minari_io.load_dataset("cartpole")
    np.testing.assert_array_equal(back.actions, ds.actions)
    with pytest.raises(SpaceMismatch):
        minari_io.check_env_spaces(ds.info, 4, 2)
