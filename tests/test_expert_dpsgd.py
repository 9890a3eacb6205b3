"""Selective / expert-level DP-SGD (Algorithms 3–4): sampling, clipping, noise and strict accounting."""
from __future__ import annotations

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from torch.func import functional_call, grad, vmap

from privsynth.errors import PrivacyError
from privsynth.methods.discrete_learners import LearnerConfig, make_learner
from privsynth.methods.expert_dpsgd import (ExpertSampler, SelectiveConfig, paper_epsilon, plan_coins,
                                            selective_dpsgd, strict_epsilon)
from privsynth.methods.expert_envs import LinearExperts, collect_expert_data
from privsynth.methods.expert_svt import DataReleaseConfig, ReleaseResult, data_release


@pytest.fixture(scope="module")
def tiny():
    rng = np.random.default_rng(0)
    m = 1500
    base = rng.normal(size=(1, 2, 5))
    ex = LinearExperts(base[..., :4] + 0.3 * rng.normal(size=(m, 2, 4)), base[..., 4] + 0.3 * rng.normal(size=(m, 2)))
    data = collect_expert_data("cartpole", ex, 2, seed=0, horizon=40)
    rel = data_release(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-4, n_rounds=30, noise_seed=0))
    return ex, data, rel


def _rdp_eps(sigma, q, steps, delta, count_scale=0.0):
    acc = dpa.rdp.RdpAccountant()
    if count_scale:  # the Laplace count of the experts that set q (the number of experts m is private)
        acc.compose(dpa.LaplaceDpEvent(count_scale))
    acc.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), steps))
    return acc.get_epsilon(delta)


def test_strict_accounting_counts_noisy_steps_only(tiny):
    _, data, rel = tiny
    assert rel.n_stable > 0
    cfg = SelectiveConfig(steps=40, batch_size=32, p=0.5, eps2=2.0, delta2=1e-5, accountant="rdp", seed=3)
    res = selective_dpsgd(data, rel, LearnerConfig(hidden=16), cfg, n_actions=2)
    coins = plan_coins(40, 0.5, 3)
    assert res.noisy_steps == coins.sum() and 0 < res.noisy_steps < 40
    assert res.stable_steps == 40 - res.noisy_steps
    ev = [e for e in res.ledger.events if e.mechanism == "dpsgd"][0]
    # q = b / m~, m~ a Laplace count of the experts (m is private under add/remove one expert)
    m_noisy = ev.params["n_units_noisy"]
    assert "n_units" not in ev.params and m_noisy == res.info["m_noisy"]
    assert ev.params["steps"] == res.noisy_steps and ev.params["sample_rate"] == pytest.approx(32 / m_noisy)
    q = 32 / m_noisy
    # independent accountant: the count, then K steps at b/m~
    eps2 = _rdp_eps(res.noise_multiplier, q, res.noisy_steps, 1e-5, ev.params["count_scale"])
    assert eps2 == pytest.approx(res.eps2_strict, rel=1e-6) and eps2 <= 2.0 + 1e-6
    assert res.ledger.epsilon() >= eps2 * (1 - 1e-6)
    # the paper's hidden-coin number (all N steps at q = p·b/m) is smaller; it is never what the ledger holds
    assert paper_epsilon(res.noise_multiplier, 32, m_noisy, 0.5, 40, 1e-5, "rdp") < eps2
    total = res.ledger.epsilon()  # (ε₁ + ε₂) at δ₁ + δ₂
    assert res.ledger.delta == pytest.approx(1e-4 + 1e-5)
    assert total == pytest.approx(15.0 + eps2, rel=1e-4)
    assert res.ledger.unit == "expert"


def test_strict_epsilon_grows_with_noisy_steps():
    a = strict_epsilon(2.0, 64, 3000, 100, 1e-5, "rdp")
    b = strict_epsilon(2.0, 64, 3000, 200, 1e-5, "rdp")
    assert 0 < a < b


def test_stable_only_spends_only_the_release(tiny):
    _, data, rel = tiny
    res = selective_dpsgd(data, rel, LearnerConfig(hidden=16), SelectiveConfig(steps=10, batch_size=16, p=0.0,
                                                                               eps2=0.0, delta2=0.0), n_actions=2)
    assert res.noisy_steps == 0 and [e.mechanism for e in res.ledger.events] == ["approx_dp"]
    assert res.ledger.epsilon() == pytest.approx(15.0)


def test_noisy_steps_need_a_budget(tiny):
    _, data, rel = tiny
    with pytest.raises(PrivacyError):
        selective_dpsgd(data, rel, LearnerConfig(hidden=16), SelectiveConfig(steps=5, p=1.0, eps2=0.0, delta2=0.0),
                        n_actions=2)


def test_expert_sampler_takes_at_most_one_transition_per_expert():
    rng = np.random.default_rng(0)
    expert_of = np.repeat(np.arange(50), rng.integers(0, 6, 50))
    s = ExpertSampler(expert_of, np.arange(len(expert_of)), 50)
    seen = np.zeros(50)
    for _ in range(300):
        idx, n_chosen = s.sample(rng, 0.3)
        who = expert_of[idx]
        assert len(set(who.tolist())) == len(who) and len(idx) <= n_chosen
        seen[who] += 1
    has = np.bincount(expert_of, minlength=50) > 0
    assert (seen[~has] == 0).all()
    assert abs(seen[has].mean() / 300 - 0.3) < 0.05  # Poisson rate over experts, independent of their data size


@pytest.mark.parametrize("algo", ["cql", "bcq"])
def test_per_example_grads_match_autograd(algo):
    torch.manual_seed(0)
    net = make_learner(4, 3, LearnerConfig(algo=algo, hidden=8))
    s, s2 = torch.randn(5, 4), torch.randn(5, 4)
    a, r, d = torch.randint(0, 3, (5,)), torch.randn(5), torch.zeros(5)
    y = net.targets(r, s2, d)
    oh = torch.nn.functional.one_hot(a, 3).float()
    params = {k: v.detach() for k, v in net.trainable().items()}
    g = vmap(grad(lambda p, *x: functional_call(net, p, x)), in_dims=(None, 0, 0, 0))(params, s, oh, y)
    for i in range(5):
        net.zero_grad()
        net.loss(s[i: i + 1], a[i: i + 1], r[i: i + 1], s2[i: i + 1], d[i: i + 1]).sum().backward()
        for k, v in net.trainable().items():
            torch.testing.assert_close(g[k][i], v.grad, rtol=1e-4, atol=1e-6)


def test_noise_is_really_added(tiny):
    """With no unstable data every clipped sum is zero, so any weight change of a noisy step is the Gaussian noise."""
    _, data, _ = tiny
    empty = ReleaseResult(None, np.zeros(0, np.int64), np.zeros(0, np.int64))
    torch.manual_seed(0)
    before = torch.cat([v.detach().flatten() for v in make_learner(4, 2, LearnerConfig(hidden=8)).trainable().values()])
    cfg = SelectiveConfig(steps=2, batch_size=16, p=1.0, eps2=5.0, delta2=1e-5, accountant="rdp", seed=0)
    res = selective_dpsgd(data, empty, LearnerConfig(hidden=8), cfg, n_actions=2)
    after = torch.cat([v.detach().flatten() for v in res.model.trainable().values()])
    assert res.noisy_steps == 2 and res.noise_multiplier > 0
    assert (after - before).abs().max() > 1e-4
    with pytest.raises(PrivacyError):  # σ = 0 cannot meet a finite ε₂
        selective_dpsgd(data, empty, LearnerConfig(hidden=8),
                        SelectiveConfig(steps=2, batch_size=16, p=1.0, eps2=5.0, delta2=1e-5, noise_multiplier=0.0,
                                        accountant="rdp"), n_actions=2)


def test_notes_sigma_table_row_with_pld():
    """Notes §3.6: expert-level DP-SGD at ε = 10, δ = 1/3000, q = 128/3000, 50k steps needs σ ≈ 4.17 (PLD)."""
    eps = strict_epsilon(4.17, 128, 3000, 50_000, 1 / 3000, "pld")
    assert eps == pytest.approx(10.0, abs=0.05)
    assert strict_epsilon(4.0, 128, 3000, 50_000, 1 / 3000, "pld") > 10.0
