"""The Minari HDF5 writer: the direct libhdf5 path writes exactly what h5py's low-level API writes, in Minari's
layout."""
from __future__ import annotations

import h5py
import numpy as np
import pytest

from privsynth.data import minari_hdf5
from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.envs import POINTMAZE_OBS_KEYS
from privsynth.data.minari_spaces import action_space, obs_writer
from privsynth.data.pointmaze import eval_env_spec


def _mixed_pointmaze_rows(seed: int = 0) -> OfflineDataset:
    """PointMaze rows: a chained episode longer than the compact-layout limit, a terminal split, then independent
    one-transition rows (the synthetic release's shape), with dataset episode ids that are not Minari's indices."""
    rng = np.random.default_rng(seed)
    env_id, kwargs = eval_env_spec("umaze")
    long_len, singles = 700, 30
    chain = rng.normal(size=(long_len + 1, 6)).astype(np.float32)
    obs = np.concatenate([chain[:-1], rng.normal(size=(singles, 6)).astype(np.float32)])
    nxt = np.concatenate([chain[1:], rng.normal(size=(singles, 6)).astype(np.float32)])
    n = len(obs)
    terminals = np.zeros(n, bool)
    terminals[100] = True  # splits the long run
    terminals[long_len + 3] = True
    timeouts = np.zeros(n, bool)
    timeouts[long_len - 1] = True
    ids = np.concatenate([np.zeros(long_len, np.int64), 5 + np.arange(singles)])
    info = DatasetInfo(name="mixed", env_id=env_id, env_kwargs=kwargs, obs_keys=list(POINTMAZE_OBS_KEYS))
    return OfflineDataset(obs, rng.uniform(-1, 1, (n, 2)).astype(np.float32), rng.normal(size=n).astype(np.float32),
                          nxt, terminals, timeouts, ids, info=info)


def _contents(path) -> dict:
    """Every object of the file: path -> (kind, dtype, shape, values, attributes); plus the root's link order."""
    out = {}
    with h5py.File(path, "r") as f:
        def visit(name, obj):
            attrs = {k: obj.attrs[k].item() for k in obj.attrs}
            if isinstance(obj, h5py.Dataset):
                layout = obj.id.get_create_plist().get_layout()
                out[name] = ("dataset", obj.dtype.str, obj.shape, obj[()].tobytes(), attrs, layout)
            else:
                out[name] = ("group", attrs)
        f.visititems(visit)
        out["<root order>"] = list(f.keys())
    return out


def test_direct_libhdf5_calls_write_what_h5py_writes(tmp_path):
    assert minari_hdf5._libhdf5() is not None  # the fast path is bound here (else the fallback runs everywhere)
    ds = _mixed_pointmaze_rows()
    _, obs_fn = obs_writer(ds.info, ds.obs_dim)
    files = {}
    for native in (True, False):
        files[native] = tmp_path / f"native{native}.hdf5"
        counts = minari_hdf5.write_standard_hdf5(files[native], ds, obs_fn, action_space(ds), native=native)
        starts, _ = minari_hdf5.minari_episode_bounds(ds)
        assert counts == (len(starts), ds.n_transitions)
    direct, fallback = _contents(files[True]), _contents(files[False])
    assert direct == fallback
    # Minari's layout: root episodes in creation order (h5py's track_order=True), Dict observations as groups
    n_eps = len(minari_hdf5.minari_episode_bounds(ds)[0])
    assert direct["<root order>"] == [f"episode_{i}" for i in range(n_eps)]
    assert direct["episode_0"][1] == {"id": 0, "total_steps": 101}
    assert direct["episode_1/observations/observation"][2] == (700 - 101 + 1, 4)
    assert direct["episode_1/observations/observation"][5] == h5py.h5d.CONTIGUOUS  # too big for compact
    assert direct["episode_5/rewards"][5] == h5py.h5d.COMPACT
    with h5py.File(files[True], "r") as f:
        ep = f["episode_1"]
        np.testing.assert_array_equal(ep["observations/achieved_goal"][()], ep["observations/observation"][:, :2])
        np.testing.assert_array_equal(ep["observations/observation"][:-1], ds.observations[101:700, :4])
        np.testing.assert_array_equal(ep["observations/observation"][-1], ds.next_observations[699, :4])
        np.testing.assert_array_equal(ep["actions"][()], ds.actions[101:700])
        assert ep["truncations"][-1] and not ep["terminations"][()].any() and ep["truncations"].dtype == bool
        np.testing.assert_array_equal(f["episode_3/infos/episode_id"][()], [6])
        assert f["episode_5/terminations"][0] and not f["episode_5/truncations"][0]
        # one-transition flags are stored once and hard-linked: the same object under every name
        assert f["episode_4/truncations"].id == f["episode_6/truncations"].id
        assert f["episode_4/truncations"].id != f["episode_5/truncations"].id
        # no object timestamps, as h5py's create_dataset / create_group (track_times=False)
        assert h5py.h5o.get_info(f["episode_2/rewards"].id).ctime == h5py.h5o.get_info(f["episode_2"].id).ctime == 0


def test_write_failure_raises_and_closes_the_file(tmp_path, monkeypatch):
    """An HDF5 error inside the episode loop surfaces as an exception, and the file is closed (reopenable)."""
    ds = _mixed_pointmaze_rows()
    _, obs_fn = obs_writer(ds.info, ds.obs_dim)
    calls = {"n": 0}
    real = minari_hdf5._LibCalls.dataset

    def failing(self, parent, *args):
        calls["n"] += 1
        return real(self, -1 if calls["n"] == 7 else parent, *args)  # HDF5 refuses an invalid location id

    monkeypatch.setattr(minari_hdf5._LibCalls, "dataset", failing)
    path = tmp_path / "broken.hdf5"
    with pytest.raises(OSError, match="could not create dataset"):
        minari_hdf5.write_standard_hdf5(path, ds, obs_fn, action_space(ds))
    assert calls["n"] == 7
    with h5py.File(path, "w") as f:  # not held open by the failed write
        f["x"] = 1


def _release_rows(n: int, seed: int = 3, sparse: bool = True) -> OfflineDataset:
    """A PrivORL-n release in PointMaze's spaces: n independent transitions (one Minari episode each)."""
    rng = np.random.default_rng(seed)
    env_id, kwargs = eval_env_spec("umaze")
    info = DatasetInfo(name="release", env_id=env_id, env_kwargs=kwargs, obs_keys=list(POINTMAZE_OBS_KEYS))
    rewards = (rng.random(n) < 0.2) if sparse else rng.normal(size=n)
    return OfflineDataset(rng.normal(size=(n, 6)).astype(np.float32), rng.uniform(-1, 1, (n, 2)).astype(np.float32),
                          rewards.astype(np.float32), rng.normal(size=(n, 6)).astype(np.float32),
                          rng.random(n) < 0.1, np.zeros(n, bool), np.arange(n), info=info)


@pytest.mark.parametrize("native", [True, False])
def test_a_one_transition_episode_costs_about_1_kb_not_2(tmp_path, native):
    """Issue 40: HDF5 1.8 object headers (a group holds its links), dataset headers without room for attributes, and
    shared sparse rewards: 2,000 one-transition PointMaze episodes take under 1.2 kB each (2.0 kB before)."""
    ds = _release_rows(2000)
    _, obs_fn = obs_writer(ds.info, ds.obs_dim)
    path = tmp_path / "release.hdf5"
    minari_hdf5.write_standard_hdf5(path, ds, obs_fn, action_space(ds), native=native)
    per_episode = path.stat().st_size / ds.n_transitions
    if native:  # h5py's low-level API cannot size headers; the direct path is what releases use
        assert per_episode < 1200, f"{per_episode:.0f} bytes per one-transition episode"
    with h5py.File(path, "r") as f:
        for i in (0, 7, 1999):
            ep = f[f"episode_{i}"]
            assert float(ep["rewards"][0]) == float(ds.rewards[i]) and ep["rewards"].dtype == np.float32
            np.testing.assert_array_equal(ep["observations/observation"][()],
                                          np.stack([ds.observations[i, :4], ds.next_observations[i, :4]]))
        # sparse rewards are stored once per value and hard-linked
        same = [i for i in range(1, 50) if ds.rewards[i] == ds.rewards[0]]
        assert f["episode_0/rewards"].id == f[f"episode_{same[0]}/rewards"].id


def test_continuous_rewards_are_not_shared(tmp_path):
    ds = _release_rows(50, sparse=False)
    _, obs_fn = obs_writer(ds.info, ds.obs_dim)
    path = tmp_path / "release.hdf5"
    minari_hdf5.write_standard_hdf5(path, ds, obs_fn, action_space(ds))
    with h5py.File(path, "r") as f:
        ids = {f[f"episode_{i}/rewards"].id for i in range(50)}
        assert len(ids) == 50
        np.testing.assert_array_equal([f[f"episode_{i}/rewards"][0] for i in range(50)], ds.rewards)
