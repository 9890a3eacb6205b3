"""The shared marginal machinery: discretisation round trip, the zCDP budget, accounted one-way histograms."""
import numpy as np
import pytest

from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.noise import NoiseSource
from privsynth.synth.baselines.discretize import (
    Discretizer,
    equal_mass_groups,
    gaussian_sigma_for_rho,
    zcdp_rho_for,
)


def _rows(n=4000, seed=0):
    rng = np.random.default_rng(seed)
    x = np.stack([rng.normal(size=n), rng.exponential(size=n), rng.integers(0, 2, size=n).astype(float)], 1)
    return x


def test_round_trip_error_is_bounded_by_the_coarse_bin_width():
    pub, sens = _rows(seed=1), _rows(seed=2)
    disc = Discretizer.from_public(pub, fine_bins=64, max_categories=3)
    assert disc.categories[2] == [0.0, 1.0] and disc.categories[0] is None
    disc.fit_dp_sensitive(sens, rho=1.0, coarse_bins=10, source=NoiseSource.reproducible(0))
    inside = sens[(sens[:, :2] >= disc.low[:2]).all(1) & (sens[:, :2] <= disc.high[:2]).all(1)]
    codes = disc.encode(inside)
    back = disc.decode(codes, np.random.default_rng(1))
    for j in range(2):
        width = disc.coarse_width(j)[codes[:, j]]
        assert (np.abs(back[:, j] - inside[:, j]) <= width + 1e-9).all()
        assert disc.sizes[j] <= 10
    np.testing.assert_array_equal(back[:, 2], inside[:, 2])  # categorical columns round-trip exactly
    # and the bound is not vacuous: the coarse bins are much narrower than the public range
    assert disc.coarse_width(0).min() < (disc.high[0] - disc.low[0]) / 5


def test_bins_follow_the_noisy_histogram_and_cost_what_the_event_says():
    sens = _rows(seed=3)
    disc = Discretizer.from_public(_rows(seed=4), fine_bins=64)
    rho = 0.05
    event = disc.fit_dp_sensitive(sens, rho=rho, coarse_bins=8, source=NoiseSource.reproducible(0))
    sigma = event.params["sigma"]
    assert sigma == pytest.approx(gaussian_sigma_for_rho(rho, 3))
    assert event.params["count"] == 3 and event.params["sensitivity"] == 1.0
    # noise is really added: the stored histogram differs from the exact one with about the stated spread
    exact = np.bincount(disc.fine_index(sens)[:, 0], minlength=64)
    resid = disc.fine_counts[0] - exact
    assert 0.6 * sigma < resid.std() < 1.4 * sigma
    # the event's zCDP cost, recomputed independently: 3 Gaussians of multiplier sigma cost 3/(2 sigma^2)
    assert 3 / (2 * sigma**2) == pytest.approx(rho, rel=1e-9)


def test_zcdp_budget_matches_the_ledger_conversion():
    for eps in (0.5, 1.0, 10.0):
        rho = zcdp_rho_for(eps, 1e-5)
        assert acc.zcdp_epsilon(rho, 1e-5) <= eps
        assert acc.zcdp_epsilon(rho * 1.01, 1e-5) > eps
        # the textbook bound rho + 2 sqrt(rho log 1/delta) is looser, so it must exceed eps
        assert rho + 2 * np.sqrt(rho * np.log(1e5)) >= eps


def test_equal_mass_groups_are_contiguous_and_balanced():
    counts = np.r_[np.zeros(10), np.full(20, 100.0), np.zeros(10)]
    g = equal_mass_groups(counts, 4)
    assert (np.diff(g) >= 0).all() and g.max() == 3
    mass = np.bincount(g, weights=counts)
    assert mass.min() == mass.max() == 500.0


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_bad_budget_is_refused(bad):
    with pytest.raises(PrivacyError):
        zcdp_rho_for(bad, 1e-5)


def test_empty_or_bad_public_rows_are_refused():
    with pytest.raises(InvalidData):
        Discretizer.from_public(np.zeros((0, 3)))
    with pytest.raises(InvalidData):
        Discretizer.from_public(np.array([[np.nan, 1.0]]))
    disc = Discretizer.from_public(_rows())
    with pytest.raises(InvalidData, match="no bins"):
        disc.encode(_rows())
    with pytest.raises(InvalidData):
        disc.fine_index(np.zeros((3, 5)))


def test_serialisation_round_trip():
    disc = Discretizer.from_public(_rows(seed=5))
    disc.fit_dp_sensitive(_rows(seed=6), rho=0.5, coarse_bins=10, source=NoiseSource.reproducible(0))
    again = Discretizer.from_dict(disc.to_dict())
    x = _rows(seed=7)
    np.testing.assert_array_equal(disc.encode(x), again.encode(x))
