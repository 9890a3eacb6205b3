"""state_distance: nearest-neighbour closeness and coverage of a release's states, by hand on tiny sets."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from privsynth.errors import SpaceMismatch
from privsynth.evaluation.state_distance import state_distance

from conftest import make_toy_dataset


def _with_obs(ds, obs):
    return dataclasses.replace(ds, observations=obs.astype(np.float32))


def test_identical_states_are_at_distance_zero():
    ref = make_toy_dataset(lengths=(40, 30), obs_dim=3, seed=1)
    assert state_distance(ref, ref) == {"closeness": 0.0, "coverage": 0.0}


def test_distances_by_hand_in_standardised_units():
    ref = make_toy_dataset(lengths=(2, 2), obs_dim=1)
    ref = _with_obs(ref, np.array([[0.0], [1.0], [2.0], [3.0]]))  # mean 1.5, std sqrt(1.25)
    syn = _with_obs(ref, np.array([[0.0], [0.0], [0.0], [0.0]]))  # every synthetic state on the first one
    out = state_distance(syn, ref)
    sd = np.sqrt(1.25)
    assert out["closeness"] == pytest.approx(0.0, abs=1e-6)  # each synthetic state sits on a reference state
    assert out["coverage"] == pytest.approx(round(np.median([0, 1, 2, 3]) / sd, 4), abs=1e-4)  # 1.5 / sd


def test_a_shifted_release_is_further_than_a_fresh_draw():
    ref = make_toy_dataset(lengths=(300,), obs_dim=4, seed=2)
    fresh = make_toy_dataset(lengths=(300,), obs_dim=4, seed=3)
    shifted = _with_obs(fresh, fresh.observations + 3.0)
    near, far = state_distance(fresh, ref), state_distance(shifted, ref)
    assert far["closeness"] > near["closeness"] + 1.0 and far["coverage"] > near["coverage"] + 1.0


def test_subsampling_is_seeded_and_widths_must_match():
    ref = make_toy_dataset(lengths=(200,), obs_dim=3, seed=4)
    syn = make_toy_dataset(lengths=(200,), obs_dim=3, seed=5)
    assert state_distance(syn, ref, max_rows=50, seed=7) == state_distance(syn, ref, max_rows=50, seed=7)
    with pytest.raises(SpaceMismatch):
        state_distance(make_toy_dataset(obs_dim=2), ref)
