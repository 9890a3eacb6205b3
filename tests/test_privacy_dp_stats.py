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


def test_each_column_gets_noise_relative_to_its_own_range():
    """A narrow column next to a wide one: raw sums gave both the wide column's noise (a 13-wide temperature got the
    noise of a 230-wide heart rate and a std floored at 1e-3 of its range, which blew normalised rows up)."""
    rng = np.random.default_rng(0)
    n = 2000
    x = np.stack([rng.normal(90, 14, n), rng.normal(37.5, 0.6, n), np.zeros(n)], 1)
    stds, means = [], []
    for seed in range(20):
        m, s, _ = dp_normalizer_stats(x, low=[20, 30, 0], high=[250, 43, 1], epsilon=0.5, delta=1e-5, noise_seed=seed)
        stds.append(s[:2])
        means.append(m[:2])
    stds, means = np.array(stds), np.array(means)
    assert np.abs(means[:, 1] - 37.5).max() < 0.5  # within its own 6.5 half-width, not the heart rate's 115
    assert stds[:, 1].min() > 0.3 and stds[:, 1].max() < 2.0  # never a near-zero std from the floor
    assert np.abs(means[:, 0] - 90).max() < 15
    assert means.std(0).min() > 0  # noise really added


def test_a_variance_lost_in_the_noise_is_floored_at_the_noise_level():
    """Few units, small ε: the std is at least the noise std of the scaled variance estimate, at most the half-width;
    skipped columns take the fallback statistics."""
    x = np.full((50, 3), 0.5)
    for seed in range(10):
        m, s, _ = dp_normalizer_stats(x, low=0.0, high=1.0, epsilon=0.2, delta=1e-3, noise_seed=seed,
                                      fallback=(np.full(3, 7.0), np.full(3, 3.0)))
        assert (s[:2] >= 0.5 * 0.2).all() and (s[:2] <= 0.5 + 1e-12).all()
        assert m[-1] == 7.0 and s[-1] == 3.0


def test_scaled_sums_have_the_recorded_sensitivity():
    """Adding one unit (any row in the box) moves S1/sqrt(k) and S2/(sqrt(k)/2) by at most 1 each: the sensitivity 1
    the event records, on columns of different widths."""
    lo, hi = np.array([20.0, 30.0, 0.0]), np.array([250.0, 43.0, 20.0])
    c, r = (lo + hi) / 2, (hi - lo) / 2
    k = 3
    rng = np.random.default_rng(1)
    for row in [lo, hi, rng.uniform(lo, hi), np.array([250.0, 30.0, 20.0])]:
        u = (np.clip(row, lo, hi) - c) / r
        assert np.linalg.norm(u / np.sqrt(k)) <= 1 + 1e-12
        assert np.linalg.norm((u**2 - 0.5) / (np.sqrt(k) / 2)) <= 1 + 1e-12
