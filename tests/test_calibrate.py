"""Action-marginal calibration onto public data: rank-preserving, the reference's marginal, no sensitive input."""
import dataclasses

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.release.calibrate import calibrate_actions


def _with_actions(ds, actions):
    return dataclasses.replace(ds, actions=actions.astype(np.float32))


@pytest.fixture()
def pair():
    rng = np.random.default_rng(0)
    release = make_toy_dataset(lengths=(400, 400, 200), seed=1, name="release")
    public = make_toy_dataset(lengths=(1500, 1500), seed=2, name="public")
    # public: a clipped controller (a third of the components at the bounds); release: a smeared copy of it
    public = _with_actions(public, np.clip(rng.normal(0, 1.2, size=public.actions.shape), -1, 1))
    release = _with_actions(release, np.clip(rng.normal(0, 0.7, size=release.actions.shape), -1, 1))
    return release, public


def test_calibrated_actions_take_the_public_marginal_and_keep_their_order(pair):
    release, public = pair
    out, stats = calibrate_actions(release, public)
    assert out.actions.shape == release.actions.shape
    for j in range(release.act_dim):
        # rank for rank: the ordering of each component is kept (ties aside)
        a, b = release.actions[:, j], out.actions[:, j]
        order = np.argsort(a, kind="stable")
        assert np.all(np.diff(b[order]) >= -1e-6)
        # marginal: quantiles close to the public ones
        q = [0.1, 0.25, 0.5, 0.75, 0.9]
        assert np.allclose(np.quantile(b, q), np.quantile(public.actions[:, j], q), atol=0.05)
    assert stats["at_bounds_before"] < 0.2 and abs(stats["at_bounds_after"] - stats["at_bounds_reference"]) < 0.05
    assert stats["costs_privacy"] is False and out.info.extra["calibrate_actions"] == stats
    # nothing but the actions changes
    for f in ("observations", "next_observations", "rewards", "terminals", "timeouts", "episode_ids"):
        assert np.array_equal(getattr(out, f), getattr(release, f))


def test_calibration_onto_its_own_marginal_changes_little(pair):
    release, _ = pair
    out, stats = calibrate_actions(release, dataclasses.replace(release, info=dataclasses.replace(release.info)))
    assert stats["mean_abs_change"] < 0.01


def test_calibration_refuses_sensitive_data_and_bad_shapes(pair):
    release, public = pair
    with pytest.raises(PrivacyError):
        calibrate_actions(release.mark_sensitive(), public)
    with pytest.raises(PrivacyError):
        calibrate_actions(release, public.mark_sensitive())
    with pytest.raises(InvalidData):
        calibrate_actions(release, make_toy_dataset(act_dim=3))
    with pytest.raises(InvalidData):
        calibrate_actions(release, [])


def test_agent_cell_calibrates_its_training_data_onto_its_public_datasets(pair, tmp_path):
    from types import SimpleNamespace

    from privsynth.evaluation.bench.sources import save_dataset
    from privsynth.evaluation.cells import _agent_data

    release, public = pair
    save_dataset(release, tmp_path / "synthetic.npz")
    sensitive = make_toy_dataset(seed=5, sensitive=True, name="sens")
    seen = []

    def dataset(name):
        seen.append(name)
        return {"pub": public, "sens": sensitive}[name]

    ctx = SimpleNamespace(cell_id="agent-1", upstream=object(), upstream_dir=tmp_path, dataset=dataset)
    params = {"agent": "iql", "data": {"sensitive": "sens", "public": ["pub"]}, "calibrate_actions": True}
    data, extra = _agent_data(params, ctx)
    assert seen == ["pub"]  # the reference is the public data only; the sensitive set is not read
    assert extra["calibrate_actions"]["at_bounds_after"] > extra["calibrate_actions"]["at_bounds_before"]
    assert not np.array_equal(data.actions, release.actions)
    with pytest.raises(InvalidData, match="synthetic data"):
        _agent_data({**params, "synthesizer": "real"}, ctx)
    # a public list that names the sensitive set is refused, not silently used
    with pytest.raises(PrivacyError):
        _agent_data({**params, "data": {"sensitive": "sens", "public": ["sens"]}}, ctx)
