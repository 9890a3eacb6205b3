"""TrajScore: 1 for identical sets, lower for time-shuffled or shifted data, deterministic, public-only encoder."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from pointmaze_util import pointmaze_rollouts
from privsynth.errors import InvalidData, PrivacyError
from privsynth.evaluation.trajscore import (
    TrajEncoder,
    TrajScoreConfig,
    fit_trajscore_encoder,
    trajectory_windows,
    trajscore,
    trajscore_baseline,
)

CFG = TrajScoreConfig(window=16, hidden=64, embed_dim=16, steps=300, batch_size=64, seed=0)


@pytest.fixture(scope="module")
def data():
    public = pointmaze_rollouts(steps=1600, episode_len=80, seed=1000)
    real = pointmaze_rollouts(steps=1600, episode_len=80, seed=0)
    return public, real


@pytest.fixture(scope="module")
def encoder(data):
    return fit_trajscore_encoder(data[0], CFG)


def _time_shuffle(ds, seed=0):
    rng = np.random.default_rng(seed)
    idx, s = [], 0
    for length in ds.episode_lengths():
        idx.append(s + rng.permutation(length))
        s += length
    idx = np.concatenate(idx)
    return dataclasses.replace(ds, observations=ds.observations[idx], actions=ds.actions[idx],
                               rewards=ds.rewards[idx], next_observations=ds.next_observations[idx])


def _shift(ds, delta):
    o, n = ds.observations.copy(), ds.next_observations.copy()
    o[:, :2] += delta
    n[:, :2] += delta
    return dataclasses.replace(ds, observations=o, next_observations=n)


def test_windows_stay_inside_episodes(toy_dataset):
    w = trajectory_windows(toy_dataset, 3)  # lengths 5, 3, 7 -> 1 + 1 + 2 windows
    assert w.shape == (4, 3, toy_dataset.transition_dim - 1)
    np.testing.assert_array_equal(w[2], toy_dataset.transition_matrix()[8:11, :-1])
    with pytest.raises(InvalidData):
        trajectory_windows(toy_dataset, 8)


def test_identical_is_one_and_perturbations_lower(data, encoder):
    _, real = data
    same = trajscore(real, real, encoder)
    assert same["trajscore"] == pytest.approx(1.0, abs=1e-9)
    assert same["precision"] == pytest.approx(1.0, abs=1e-9)
    shuffled = trajscore(_time_shuffle(real), real, encoder)["trajscore"]
    shifted = trajscore(_shift(real, 1.0), real, encoder)["trajscore"]
    assert shuffled < 0.97
    assert shifted < 0.97
    # a bigger shift is further away
    assert trajscore(_shift(real, 2.0), real, encoder)["trajscore"] < shifted


def test_shuffled_scores_below_real_baseline(data, encoder):
    _, real = data
    base = trajscore_baseline(real, encoder)["trajscore"]
    shuffled = trajscore(_time_shuffle(real), real, encoder)["trajscore"]
    assert shuffled < base < 1.0


def test_deterministic_under_seed_and_save_load(data, encoder, tmp_path):
    public, real = data
    other = fit_trajscore_encoder(public, CFG)
    for a, b in zip(encoder.state_dict().values(), other.state_dict().values()):
        if not isinstance(a, torch.Tensor):
            continue
        assert torch.equal(a, b)
    synth = _time_shuffle(real)
    s1 = trajscore(synth, real, encoder)
    path = encoder.save(tmp_path / "enc.pt")
    loaded = TrajEncoder.load(path)
    assert trajscore(synth, real, loaded) == s1
    different = fit_trajscore_encoder(public, dataclasses.replace(CFG, seed=1))
    assert trajscore(synth, real, different)["trajscore"] != s1["trajscore"]


def test_encoder_refuses_sensitive_data():
    sensitive = make_toy_dataset(lengths=(20, 20), sensitive=True)
    with pytest.raises(PrivacyError):
        fit_trajscore_encoder(sensitive, CFG)


def test_transitions_without_episodes_have_no_trajscore(data, encoder):
    _, real = data
    flat = dataclasses.replace(real, episode_ids=np.arange(real.n_transitions))
    with pytest.raises(InvalidData):
        trajscore(flat, real, encoder)
