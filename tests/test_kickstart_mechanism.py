"""Dirichlet mechanism: per-query (ε, δ) against the reconstructed Theorem 1, and the sampler."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.stats import dirichlet

from privsynth.errors import PrivacyError
from privsynth.methods.kickstart.dirichlet import (
    DirichletMechanism,
    concentration_radius,
    delta_mc,
    delta_union_bound,
    eps_floor,
    eps_paper,
    eps_tight,
    lipschitz_upper_bound,
    log_tau_for_delta,
    restrict,
    sample_dirichlet,
)


def _eq12(k, m, eta, tau, L, b):
    """Eq. 12 written out independently with math.lgamma."""
    return (math.sqrt(m) * L * b * k * math.log(1 / tau) + (m - 1) * math.lgamma(k * eta)
            + math.lgamma(k * (1 - (m - 1) * eta)) - m * math.lgamma(k / m))


def test_eps_matches_reconstructed_formula_and_paper_headline():
    # the paper's (4.46, 0.05) at k0 = 5 under the notes' documented eta, tau, L*b (notes Appendix B.2)
    assert eps_paper(5, 6, 0.1, 1.91e-5, 1.0, 0.0153) == pytest.approx(4.456, abs=2e-3)
    rng = np.random.default_rng(0)
    for _ in range(20):
        m = int(rng.integers(2, 8))
        eta = float(rng.uniform(0.01, 0.99 / m))
        k, tau, L, b = rng.uniform(0.2, 20), rng.uniform(1e-8, 0.9 / m), rng.uniform(0, 5), rng.uniform(0, 0.1)
        assert eps_paper(k, m, eta, tau, L, b) == pytest.approx(_eq12(k, m, eta, tau, L, b), rel=1e-10, abs=1e-10)
        assert eps_paper(k, m, eta, None, L, b, log_tau=math.log(tau)) == pytest.approx(_eq12(k, m, eta, tau, L, b), rel=1e-10, abs=1e-10)


def test_delta_union_bound_upper_bounds_monte_carlo():
    est, upper = delta_mc(5, 6, 0.1, 1.91e-5, n=100_000, rng=np.random.default_rng(1))
    assert est == pytest.approx(0.05, abs=0.004)  # the paper's δ = 0.05
    ub = delta_union_bound(5, 6, 0.1, 1.91e-5)
    assert est <= ub + 0.003 and ub <= upper + 0.01
    # τ calibration: the union bound at the returned τ is at most the target and close to it
    for k in (5.0, 1.0, 0.3, 0.05):
        lt = log_tau_for_delta(k, 3, 0.1, 1e-6)
        d = delta_union_bound(k, 3, 0.1, None, log_tau=lt)
        assert d <= 1e-6 and d > 0.99e-6


def test_delta_grows_to_one_at_fixed_tau_and_eps_floor():
    # notes P5 (Monte Carlo): 0.05 at k=5, 0.51 at k=2, 0.87 at k=1, ~1 at k=0.15
    ds = [delta_mc(k, 6, 0.1, 1.9e-5, n=20_000, rng=np.random.default_rng(0))[0] for k in (5, 2, 1, 0.15)]
    assert all(a < b for a, b in zip(ds, ds[1:])) and ds[-1] > 0.99
    assert ds[1] == pytest.approx(0.51, abs=0.03) and ds[2] == pytest.approx(0.87, abs=0.02)
    ub = [delta_union_bound(k, 6, 0.1, 1.9e-5) for k in (5, 2, 1, 0.15)]
    assert all(u >= d - 0.01 for u, d in zip(ub, ds))
    assert eps_paper(1e-6, 6, 0.1, 0.1, 0.0, 0.0) == pytest.approx(eps_floor(6, 0.1), abs=1e-4)
    assert eps_floor(6, 0.1) == pytest.approx(1.46, abs=0.01)


def test_log_density_ratio_below_eps_on_adjacent_pairs():
    rng = np.random.default_rng(2)
    m, eta, k, tau, Lb = 4, 0.1, 5.0, 1e-4, 0.05
    bound = eps_paper(k, m, eta, tau, 1.0, Lb)
    tight = eps_tight(k, m, eta, tau, 1.0, Lb)
    worst = -np.inf
    for _ in range(300):
        p = restrict(rng.dirichlet(np.ones(m)), eta)
        d = rng.normal(size=m)
        d -= d.mean()
        d *= rng.uniform(0, Lb) / np.linalg.norm(d)
        q = p + d
        if q.min() < eta:
            continue
        z = rng.dirichlet(np.ones(m))
        z = np.maximum(z, tau * 1.01)
        z /= z.sum()
        if z.min() < tau:
            continue
        worst = max(worst, abs(dirichlet.logpdf(z, k * p) - dirichlet.logpdf(z, k * q)))
    assert np.isfinite(worst) and worst <= bound and worst <= tight


def test_sampler_stays_on_simplex_with_right_moments():
    rng = np.random.default_rng(3)
    pi = np.array([0.6, 0.3, 0.1])
    x = sample_dirichlet(np.broadcast_to(pi, (40_000, 3)), 5.0, rng)
    assert np.all(x >= 0) and np.allclose(x.sum(1), 1)
    assert np.allclose(x.mean(0), pi, atol=0.01)
    assert np.allclose(x.var(0), pi * (1 - pi) / 6, rtol=0.08)
    a = sample_dirichlet(pi, 5.0, np.random.default_rng(7))
    assert np.array_equal(a, sample_dirichlet(pi, 5.0, np.random.default_rng(7)))


def test_tiny_k_answers_are_teacher_action_samples():
    # documents notes P4: Dir_k with k -> 0 is a one-hot sample of the teacher's action, not noise
    pi = np.array([0.7, 0.2, 0.1])
    x = sample_dirichlet(np.broadcast_to(pi, (20_000, 3)), 1e-3, np.random.default_rng(4))
    assert np.isfinite(x).all()
    freq = np.bincount(x.argmax(1), minlength=3) / len(x)
    assert np.allclose(freq, pi, atol=0.015)
    assert (x.max(1) > 0.99).mean() > 0.99


def test_restrict_and_lipschitz_bound():
    rng = np.random.default_rng(5)
    pi = rng.dirichlet(np.ones(5) * 0.1, size=100)
    assert restrict(pi, 0.05).min() >= 0.05 - 1e-12
    with pytest.raises(PrivacyError):
        restrict(pi, 0.3)
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(6, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
    L = lipschitz_upper_bound(net, eta=0.1)
    x = torch.randn(500, 6)
    y = x + 0.05 * torch.randn(500, 6)
    with torch.no_grad():
        fx = restrict(torch.softmax(net(x), -1).double().numpy(), 0.1)
        fy = restrict(torch.softmax(net(y), -1).double().numpy(), 0.1)
    ratio = np.linalg.norm(fx - fy, axis=1) / np.linalg.norm((x - y).double().numpy(), axis=1)
    assert ratio.max() <= L


def test_radius_values_and_mechanism_cost():
    assert concentration_radius(5.0, 0.05, 0.5) == pytest.approx(0.250, abs=1e-3)
    assert concentration_radius(0.0, 0.05, 0.5) == pytest.approx(0.612, abs=1e-3)
    mech = DirichletMechanism(m=3, L=2.0, b=0.01, eta=0.1, delta_per_query=1e-5)
    c = mech.cost(5.0)
    assert c.delta <= 1e-5
    assert c.epsilon == pytest.approx(_eq12(5.0, 3, 0.1, math.exp(c.log_tau), 2.0, 0.01), rel=1e-9)
    with pytest.raises(PrivacyError):
        DirichletMechanism(m=3, L=1.0, b=0.1, eta=0.5)


def test_cost_stays_finite_for_vanishing_k():
    # the 'sampling' teacher keeps decaying k (0.9^200 * 5 ~ 1e-9 and below): the cost tends to a constant, not 0
    mech = DirichletMechanism(m=3, L=14.0, b=1e-3, eta=0.1, delta_per_query=1e-6)
    costs = [mech.cost(k) for k in (5.0, 1e-3, 2.5e-10, 1e-60)]
    assert all(np.isfinite(c.epsilon) and c.delta <= 1e-6 for c in costs)
    assert costs[-1].epsilon >= eps_floor(3, 0.1)
    assert costs[-1].epsilon == pytest.approx(costs[-2].epsilon, rel=1e-6)
    x = sample_dirichlet(np.array([0.5, 0.3, 0.2]), 1e-60, np.random.default_rng(0))
    assert np.isfinite(x).all() and x.max() == pytest.approx(1.0)
