"""DP normalisation statistics: accounted at the requested ε, really noisy, accurate with many units."""
from __future__ import annotations

import numpy as np
import pytest

from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy.dp_stats import dp_normalizer, dp_normalizer_from_dataset, dp_normalizer_stats
from privsynth.privacy.ledger import Ledger

from conftest import make_toy_dataset


def _rows(n=20000, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(loc=[1.0, -2.0, 0.5, 0.0], scale=[0.5, 1.0, 2.0, 1.0], size=(n, 4))
    x[:, -1] = rng.integers(0, 2, n)  # terminal-like flag, skipped
    return x


@pytest.mark.parametrize("accountant", ["pld", "rdp"])
def test_event_is_charged_at_the_requested_epsilon(accountant):
    _, _, event = dp_normalizer_stats(_rows(), low=-6, high=6, epsilon=0.5, delta=1e-6, noise_seed=0, accountant=accountant)
    led = Ledger(accountant=accountant, delta=1e-6).append(event)
    assert led.epsilon() == pytest.approx(0.5, rel=0.01)
    assert led.epsilon() <= 0.5 * 1.001


def test_noise_is_added_and_estimates_are_close():
    x = _rows()
    means = []
    for seed in range(5):
        norm, _ = dp_normalizer(x, low=-6, high=6, epsilon=1.0, delta=1e-6, noise_seed=seed)
        assert norm.source == "dp"
        means.append(norm.mean.numpy().copy())
        np.testing.assert_allclose(norm.mean.numpy()[:3], [1.0, -2.0, 0.5], atol=0.1)
        np.testing.assert_allclose(norm.std.numpy()[:3], [0.5, 1.0, 2.0], rtol=0.15)
        assert norm.mean[-1] == 0 and norm.std[-1] == 1
    spread = np.std(np.stack(means), 0)[:3]
    assert (spread > 1e-4).all()  # different noise draws give different statistics


def test_trajectory_unit_and_dataset_entry():
    ds = make_toy_dataset(lengths=(30, 40, 50) * 20, sensitive=True)
    norm, event = dp_normalizer_from_dataset(ds, low=-5, high=5, epsilon=2.0, delta=1e-4, unit="trajectory", noise_seed=0)
    # N is private under add/remove: divided by the noisy count, never published
    assert event.params["unit"] == "trajectory" and "n_units" not in event.params
    assert norm.dim == ds.transition_dim


def test_bad_input():
    with pytest.raises(InvalidData):
        dp_normalizer_stats(np.full((10, 2), np.nan), low=-1, high=1, epsilon=1, delta=1e-3)
    with pytest.raises(InvalidData):
        dp_normalizer_stats(np.zeros((10, 2)), low=1, high=-1, epsilon=1, delta=1e-3)
    with pytest.raises(PrivacyError):
        dp_normalizer_stats(np.zeros((10, 2)), low=-1, high=1, epsilon=1, delta=0.5)
