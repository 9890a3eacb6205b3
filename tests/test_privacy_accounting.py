"""Accounting: ε agrees with an independent dp-accounting computation, calibration is tight, bad input is refused."""
from __future__ import annotations

import math

import dp_accounting as dpa
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from privsynth.errors import PrivacyError
from privsynth.privacy import accounting as acc


def _independent(sigma, q, steps, delta, accountant):
    ev = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps)
    a = rdp_privacy_accountant.RdpAccountant() if accountant == "rdp" else pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    return a.compose(ev).get_epsilon(delta)


@pytest.mark.parametrize("accountant", ["rdp", "pld"])
@pytest.mark.parametrize("sigma,q,steps", [(1.1, 0.01, 1000), (0.8, 2.56e-3, 5000)])
def test_epsilon_matches_dp_accounting(accountant, sigma, q, steps):
    ours = acc.dpsgd_epsilon(sigma, q, steps, 1e-5, accountant)
    ref = _independent(sigma, q, steps, 1e-5, accountant)
    assert ours == pytest.approx(ref, rel=0.01)


def test_prv_agrees_with_pld_and_rdp_is_above():
    prv = acc.dpsgd_epsilon(1.1, 0.0128, 2000, 1e-5, "prv")
    pld = _independent(1.1, 0.0128, 2000, 1e-5, "pld")
    rdp = acc.dpsgd_epsilon(1.1, 0.0128, 2000, 1e-5, "rdp")
    assert prv == pytest.approx(pld, rel=0.02)
    assert rdp > pld


@pytest.mark.parametrize("accountant", ["rdp", "pld", "prv"])
def test_calibration_is_tight(accountant):
    target, delta, q, steps = 4.0, 1e-5, 0.02, 500
    sigma = acc.calibrate_noise_multiplier(target, delta, q, steps, accountant)
    assert acc.dpsgd_epsilon(sigma, q, steps, delta, accountant) <= target
    assert acc.dpsgd_epsilon(sigma * 0.98, q, steps, delta, accountant) > target


def test_more_noise_less_epsilon_and_zero_steps():
    assert acc.dpsgd_epsilon(2.0, 0.01, 100, 1e-5) < acc.dpsgd_epsilon(1.0, 0.01, 100, 1e-5)
    assert acc.dpsgd_epsilon(1.0, 0.01, 0, 1e-5) == 0.0


def test_statistics_mechanisms():
    sigma = acc.gaussian_sigma(1.0, 1e-5, sensitivity=2.0)
    assert acc.gaussian_epsilon(sigma, 1e-5, sensitivity=2.0) == pytest.approx(1.0, rel=1e-6)
    assert acc.laplace_scale(0.5, sensitivity=2.0) == 4.0
    # Laplace with scale b = Δ/ε is ε-DP: the PLD accountant agrees up to discretisation
    eps = acc.events_epsilon([dpa.LaplaceDpEvent(1 / 0.5)], 1e-6, "pld")
    assert eps == pytest.approx(0.5, abs=0.01)
    rho = acc.gaussian_zcdp_rho(sigma=2.0)
    assert rho == pytest.approx(1 / 8)
    eps_z = acc.zcdp_epsilon(rho, 1e-5)
    assert eps_z <= rho + 2 * math.sqrt(rho * math.log(1e5)) + 1e-9  # at least as tight as Bun & Steinke's bound


@pytest.mark.parametrize(
    "call",
    [
        lambda: acc.dpsgd_epsilon(1.0, 0.01, 10, 0.0),
        lambda: acc.dpsgd_epsilon(1.0, 1.5, 10, 1e-5),
        lambda: acc.dpsgd_epsilon(-1.0, 0.01, 10, 1e-5),
        lambda: acc.calibrate_noise_multiplier(0.0, 1e-5, 0.01, 10),
        lambda: acc.dpsgd_epsilon(1.0, 0.01, 10, 1e-5, "moments"),
        lambda: acc.check_delta(1e-3, n=1000),
    ],
)
def test_bad_requests_are_refused(call):
    with pytest.raises(PrivacyError):
        call()
