"""DP-APVI / APVI, the count release, and the zCDP arithmetic (tested against dp-accounting)."""
from __future__ import annotations

import json
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import pld, rdp
from scipy.optimize import linprog

from privsynth.errors import PrivacyError, PrivsynthError
from privsynth.methods.dp_apvi import (
    APVIConfig,
    apvi,
    consistency_threshold,
    count_noise_scale,
    count_visits,
    dp_apvi,
    pessimism_bonus,
    private_kernel,
    project_counts,
    release_counts_sensitive,
    reward_sums,
)
from privsynth.methods.tabular_mdp import Trajectories, gridworld_mdp, random_tabular_mdp, uniform_policy
from privsynth.methods.zcdp import ZcdpLedger, epsilon_to_zcdp, gaussian_sigma, zcdp_to_epsilon
from privsynth.privacy.noise import NoiseSource


@pytest.fixture(scope="module")
def small():
    mdp = random_tabular_mdp(S=4, A=3, H=5, seed=1)
    H, S, A = mdp.shape
    traj = mdp.sample(uniform_policy(H, S, A), 300, np.random.default_rng(0))
    return mdp, traj


# ------------------------------------------------------------------------------------------------ zCDP arithmetic
@pytest.mark.parametrize("rho", [0.01, 0.1, 1.0, 10.0])
def test_zcdp_rdp_conversion_matches_dp_accounting(rho):
    acc = rdp.RdpAccountant(orders=list(np.linspace(1.01, 20, 400)) + list(range(21, 3000)))
    acc.compose(dp_accounting.ZCDpEvent(rho))
    theirs = acc.get_epsilon(1e-5)
    ours = zcdp_to_epsilon(rho, 1e-5, "rdp")
    assert ours <= theirs + 1e-9  # continuous optimum over α is never worse than a finite order grid
    assert ours == pytest.approx(theirs, rel=2e-3)


@pytest.mark.parametrize("rho", [0.01, 0.1, 1.0, 10.0])
def test_zcdp_gdp_conversion_matches_pld_of_gaussian(rho):
    # a ρ-zCDP Gaussian release is a Gaussian mechanism with σ = 1/√(2ρ) at sensitivity 1; PLD is (near) exact
    acc = pld.PLDAccountant(value_discretization_interval=1e-4)
    acc.compose(dp_accounting.GaussianDpEvent(gaussian_sigma(1.0, rho)))
    assert zcdp_to_epsilon(rho, 1e-5, "gdp") == pytest.approx(acc.get_epsilon(1e-5), rel=5e-3, abs=2e-3)


def test_zcdp_conversions_order_and_inverse():
    for rho in (0.05, 1.0, 20.0):
        std, cks, gdp = (zcdp_to_epsilon(rho, 1e-6, m) for m in ("standard", "rdp", "gdp"))
        assert std == pytest.approx(rho + 2 * math.sqrt(rho * math.log(1e6)))
        assert gdp < cks < std
    for eps in (0.5, 2.0, 8.0):
        assert zcdp_to_epsilon(epsilon_to_zcdp(eps, 1e-5), 1e-5) == pytest.approx(eps, rel=1e-6)
    with pytest.raises(PrivacyError):
        zcdp_to_epsilon(1.0, 1.5)
    with pytest.raises(PrivacyError):
        gaussian_sigma(1.0, 0.0)


# ------------------------------------------------------------------------------------------------ noise scales
def test_count_noise_scale_and_threshold_match_formulas():
    H, S, A, rho, delta = 7, 4, 3, 0.5, 0.1
    assert count_noise_scale(H, rho) ** 2 == pytest.approx(2 * H / rho)  # eq. (2)
    assert count_noise_scale(H, rho, private_rewards=True) ** 2 == pytest.approx(3 * H / rho)
    E = consistency_threshold(H, S, A, delta, sigma=count_noise_scale(H, rho))
    assert E == pytest.approx(4 * math.sqrt(H * math.log(4 * H * S * S * A / delta) / rho))  # Alg. 1 line 2
    eps = 2.0
    assert consistency_threshold(H, S, A, delta, laplace_scale=4 * H / eps) == pytest.approx(
        8 * H / eps * math.log(4 * H * S * S * A / delta))


def test_gaussian_noise_is_added_with_the_stated_scale():
    mdp = random_tabular_mdp(S=2, A=2, H=3, seed=0)
    H, S, A = mdp.shape
    traj = mdp.sample(uniform_policy(H, S, A), 20000, np.random.default_rng(0))
    n_sa, _ = count_visits(traj, S, A)
    rho = 1e-3
    sigma = math.sqrt(2 * H / rho)
    assert n_sa.min() > 20 * sigma  # no count is near the clip at 0, so the released minus true counts are the noise
    # the noise is secure (unseeded), so the bounds must hold for every draw: 400 releases x 12 cells = 4800 draws put
    # the mean's bound at 6.9 standard errors and the std's at 9.8 (each fails with probability below 1e-11)
    diffs = np.concatenate([
        (release_counts_sensitive(traj, S, A, rho=rho, reward=mdp.R).noisy_n_sa - n_sa).ravel()
        for _ in range(400)])
    assert diffs.size == 4800
    assert abs(diffs.mean()) < 0.1 * sigma
    assert diffs.std() == pytest.approx(sigma, rel=0.1)


def test_laplace_variant_is_accounted_as_pure_dp(small):
    mdp, traj = small
    H, S, A = mdp.shape
    res = dp_apvi(traj, mdp.R, S, A, epsilon=1.5, seed=0)
    assert res.release.mechanism == "laplace"
    assert res.release.noise_scale == pytest.approx(4 * H / 1.5)
    assert res.release.ledger.pure_epsilon == pytest.approx(1.5)
    assert res.release.ledger.rho == pytest.approx(1.5**2 / 2)


def test_ledger_records_the_budget_and_bad_budgets_are_refused(small):
    mdp, traj = small
    H, S, A = mdp.shape
    ledger = ZcdpLedger()
    dp_apvi(traj, mdp.R, S, A, rho=0.7, seed=0, ledger=ledger)
    assert ledger.rho == pytest.approx(0.7)
    assert ledger.events[0].params["sigma"] == pytest.approx(gaussian_sigma(ledger.events[0].params["sensitivity"], 0.7))
    assert ledger.epsilon(1e-5) == pytest.approx(zcdp_to_epsilon(0.7, 1e-5, "gdp"))
    with pytest.raises(PrivacyError):
        dp_apvi(traj, mdp.R, S, A, rho=-1.0)
    with pytest.raises(PrivacyError):
        dp_apvi(traj, mdp.R, S, A, rho=1.0, epsilon=1.0)


@pytest.mark.parametrize("private_rewards", [False, True])
def test_count_sensitivity_under_replace_one(small, private_rewards):
    mdp, traj = small
    H, S, A = mdp.shape
    rng = np.random.default_rng(3)
    bound = 6 * H if private_rewards else 4 * H
    for _ in range(20):
        i = rng.integers(traj.n_episodes)
        other = mdp.sample(uniform_policy(H, S, A), 1, rng)
        states, actions, rewards = traj.states.copy(), traj.actions.copy(), traj.rewards.copy()
        states[i], actions[i], rewards[i] = other.states[0], other.actions[0], rng.random(H)
        nb = Trajectories(states, actions, rewards)
        a1, b1 = count_visits(traj, S, A)
        a2, b2 = count_visits(nb, S, A)
        sq = ((a1 - a2) ** 2).sum() + ((b1 - b2) ** 2).sum()
        if private_rewards:
            sq += ((reward_sums(traj, S, A) - reward_sums(nb, S, A)) ** 2).sum()
        assert sq <= bound + 1e-9


# ------------------------------------------------------------------------------------------------ post-processing
def test_project_counts_is_the_lp_optimum():
    rng = np.random.default_rng(0)
    for _ in range(150):
        S = int(rng.integers(1, 7))
        n3 = np.maximum(0, rng.normal(3, 4, S)) * (rng.random(S) < 0.8)
        n2 = max(0.0, rng.normal(n3.sum(), 6))
        E = float(rng.uniform(0, 8))
        x = project_counts(n3[None], np.array([n2]), E)[0]
        t_ours = np.abs(x - n3).max()
        assert (x >= -1e-12).all() and abs(x.sum() - n2) <= E / 2 + 1e-9
        # LP (4): variables (x, t); min t s.t. ±(x - n3) ≤ t, |Σx − n2| ≤ E/2, x ≥ 0
        c = np.r_[np.zeros(S), 1.0]
        I = np.eye(S)
        A_ub = np.block([[I, -np.ones((S, 1))], [-I, -np.ones((S, 1))], [np.ones((1, S)), np.zeros((1, 1))],
                         [-np.ones((1, S)), np.zeros((1, 1))]])
        b_ub = np.r_[n3, -n3, n2 + E / 2, -(n2 - E / 2)]
        lp = linprog(c, A_ub=A_ub, b_ub=b_ub, bounds=[(0, None)] * (S + 1), method="highs")
        assert lp.status == 0
        assert t_ours == pytest.approx(lp.fun, abs=1e-7)


@pytest.mark.parametrize("kwargs", [{"rho": 0.05}, {"rho": 5.0}, {"epsilon": 1.0}])
def test_released_counts_are_consistent_and_non_negative(small, kwargs):
    mdp, traj = small
    H, S, A = mdp.shape
    rel = release_counts_sensitive(traj, S, A, reward=mdp.R, **kwargs)
    assert (rel.n_sas >= 0).all() and (rel.noisy_n_sa >= 0).all()
    assert np.abs(rel.n_sas.sum(-1) - rel.noisy_n_sa).max() <= rel.threshold / 2 + 1e-9
    P, n = rel.kernel()
    assert np.allclose(P.sum(-1), 1.0) and (P >= 0).all()
    uniform = n <= rel.threshold
    assert np.allclose(P[uniform], 1.0 / S)


def test_private_kernel_falls_back_to_uniform():
    counts = np.array([[[[3.0, 1.0], [0.5, 0.5]]]])  # h=1, s=1, a=2, s'=2
    P, n = private_kernel(counts, E=2.0)
    assert np.allclose(P[0, 0, 0], [0.75, 0.25]) and np.allclose(P[0, 0, 1], [0.5, 0.5])
    assert np.allclose(n, [[[4.0, 1.0]]])


def test_bonus_matches_its_formula():
    cfg = APVIConfig(c1=1.3, c2=16.0, c2_np=2.0, c_fallback=1.5, delta=0.1)
    H, S, A, E, iota = 6, 4, 3, 2.5, math.log(6 * 4 * 3 / 0.1)
    var = np.array([0.0, 1.7, 4.0, 2.0])
    n = np.array([10.0, 40.0, 2.5, 1.0])
    got = pessimism_bonus(var, n, E, H, S, iota, cfg)
    want = [cfg.c1 * math.sqrt(v * iota / (m - E)) + (cfg.c2 * S * H * E + cfg.c2_np * H) * iota / m for v, m in zip(var[:2], n[:2])]
    assert np.allclose(got[:2], want)
    assert np.allclose(got[2:], cfg.c_fallback * H)  # ñ ≤ E: Γ = C·H
    hoeff = pessimism_bonus(var, n, E, H, S, iota, APVIConfig(c1=1.3, c2=0.0, bonus="hoeffding"))
    assert hoeff[1] == pytest.approx(1.3 * H * math.sqrt(iota / (40.0 - E)))


# ------------------------------------------------------------------------------------------------ learners
def test_fixed_seed_gives_identical_results(small):
    mdp, traj = small
    H, S, A = mdp.shape
    a = dp_apvi(traj, mdp.R, S, A, rho=1.0, seed=5, noise=NoiseSource.reproducible(5))
    b = dp_apvi(traj, mdp.R, S, A, rho=1.0, seed=5, noise=NoiseSource.reproducible(5))
    c = dp_apvi(traj, mdp.R, S, A, rho=1.0, seed=6, noise=NoiseSource.reproducible(6))
    assert np.array_equal(a.release.n_sas, b.release.n_sas) and np.array_equal(a.policy, b.policy)
    assert np.array_equal(a.Q, b.Q)
    assert not np.array_equal(a.release.n_sas, c.release.n_sas)  # noise really depends on the seed


def test_dp_apvi_without_noise_is_apvi(small):
    mdp, traj = small
    H, S, A = mdp.shape
    ref = apvi(traj, mdp.R, S, A, seed=2)
    got = dp_apvi(traj, mdp.R, S, A, rho=1e22, seed=2)
    assert got.release.threshold < 1e-8
    assert np.allclose(got.Q, ref.Q, atol=1e-7)
    assert np.array_equal(got.policy, ref.policy)


def test_theory_constants_give_the_trivial_policy(small):
    mdp, traj = small
    H, S, A = mdp.shape
    res = dp_apvi(traj, mdp.R, S, A, rho=1.0, cfg=APVIConfig.theory(), seed=0)
    assert np.all(res.Q == 0.0)  # notes pitfall P9


def test_dp_apvi_converges_to_apvi_as_n_grows():
    mdp = random_tabular_mdp(S=5, A=3, H=10, seed=0)
    H, S, A = mdp.shape
    gaps = {n: [] for n in (300, 30000)}
    for n in gaps:
        for seed in range(3):
            traj = mdp.sample(uniform_policy(H, S, A), n, np.random.default_rng([seed, 0]))
            ref = mdp.gap(apvi(traj, mdp.R, S, A, seed=seed).policy)
            dp = mdp.gap(dp_apvi(traj, mdp.R, S, A, rho=1.0, seed=seed, noise=NoiseSource.reproducible(seed)).policy)
            assert dp >= -1e-9 and ref >= -1e-9
            gaps[n].append(dp - ref)
    assert np.mean(gaps[30000]) < 0.02
    assert np.mean(gaps[300]) > 0.5  # the privacy cost is visible at small n


# ------------------------------------------------------------------------------------------------ the release
def test_count_release_samples_synthetic_trajectories(small):
    mdp, traj = small
    H, S, A = mdp.shape
    rel = release_counts_sensitive(traj, S, A, rho=2.0, reward=None)
    assert rel.reward_source == "private" and (rel.reward >= 0).all() and (rel.reward <= 1).all()
    syn = rel.sample(50, np.random.default_rng(1))
    assert syn.states.shape == (50, H + 1) and syn.actions.shape == (50, H)
    assert np.allclose(syn.rewards, rel.reward[np.arange(H), syn.states[:, :-1], syn.actions])
    card = rel.card(1e-5)
    assert card["rho"] == pytest.approx(2.0) and card["epsilon"] == pytest.approx(zcdp_to_epsilon(2.0, 1e-5))
    assert card["unit"] == "trajectory"
    ds = syn.to_offline_dataset(name="syn", privacy_card=card)
    back = Trajectories.from_offline_dataset(ds)
    assert np.array_equal(back.states, syn.states) and np.array_equal(back.actions, syn.actions)


def test_gridworld_is_a_valid_mdp_with_a_nontrivial_optimum():
    mdp = gridworld_mdp(size=4, H=12)
    H, S, A = mdp.shape
    v_star, pi = mdp.optimal()
    assert S == 14 and A == 4
    assert v_star > 3.0 > mdp.policy_value(uniform_policy(H, S, A))
    assert mdp.gap(pi) == pytest.approx(0.0)


def test_release_writes_a_minari_dataset_with_a_card_and_the_guard_refuses():
    minari_io = pytest.importorskip("privsynth.data.minari_io")
    pytest.importorskip("privsynth.privacy.guard")
    from privsynth.errors import BudgetExceeded
    from privsynth.methods.dp_apvi_release import release_synthetic_dataset

    with pytest.raises(BudgetExceeded):
        release_synthetic_dataset("privsynth/grid/dp-counts-v0", n_episodes=200, rho=1.0, epsilon_budget=1.0)
    assert not minari_io.dataset_exists("privsynth/grid/dp-counts-v0")  # nothing written on refusal
    release_synthetic_dataset("privsynth/grid/dp-counts-v0", n_episodes=200, n_synthetic=30, rho=1.0, epsilon_budget=10.0)
    ds = minari_io.load_dataset("privsynth/grid/dp-counts-v0")
    card = ds.info.privacy_card
    assert ds.n_episodes == 30 and ds.info.env_id is None and ds.info.extra["mdp"]["kind"] == "gridworld"
    assert card["rho"] == pytest.approx(1.0) and card["unit"] == "trajectory"
    assert card["epsilon"] == pytest.approx(zcdp_to_epsilon(1.0, 1e-5, "gdp"), rel=1e-2)
    back = Trajectories.from_offline_dataset(ds)
    assert back.horizon == 12 and back.states.max() < 14
    assert (minari_io.target_path("privsynth/grid/dp-counts-v0") / "privacy_ledger.json").is_file()  # guard attached it
    with pytest.raises(PrivsynthError):  # an existing release is not overwritten by accident
        release_synthetic_dataset("privsynth/grid/dp-counts-v0", n_episodes=50, rho=1.0, epsilon_budget=10.0)


# ------------------------------------------------------------------------------------------------ issue 21: noise
def test_privacy_noise_is_not_replayable_from_the_seed(small):
    """Two runs with the same seed draw different noise by default (OS entropy); only the explicit reproducible
    switch replays it, and then the ledger says not DP and the guard refuses it."""
    from privsynth.privacy.guard import check_budget

    mdp, traj = small
    H, S, A = mdp.shape
    a = dp_apvi(traj, mdp.R, S, A, rho=1.0, seed=5)
    b = dp_apvi(traj, mdp.R, S, A, rho=1.0, seed=5)
    assert not np.array_equal(a.release.noisy_n_sa, b.release.noisy_n_sa)
    assert a.release.ledger.private and check_budget(a.release.ledger, 100.0) > 0
    lap = release_counts_sensitive(traj, S, A, epsilon=1.0, reward=mdp.R)
    lap2 = release_counts_sensitive(traj, S, A, epsilon=1.0, reward=mdp.R)
    assert not np.array_equal(lap.noisy_n_sa, lap2.noisy_n_sa)
    with pytest.raises(TypeError):  # a seeded Generator is no longer accepted as the noise source
        release_counts_sensitive(traj, S, A, np.random.default_rng(0), rho=1.0, reward=mdp.R)
    r = dp_apvi(traj, mdp.R, S, A, rho=1.0, seed=5, noise=NoiseSource.reproducible(1))
    assert r.release.ledger.reproducible_noise and not r.release.ledger.private
    assert "not_dp" in r.release.card() and "not_dp" in r.release.ledger.card()
    with pytest.raises(PrivacyError):
        check_budget(r.release.ledger, 100.0)


def test_release_metadata_does_not_reveal_the_sensitive_data_seed(monkeypatch):
    """env=random wrote the MDP seed in extra["mdp"], and the same seed drew the sensitive trajectories ([seed, 0]):
    anyone reading the release could regenerate the sensitive data exactly. Now the data comes from OS entropy."""
    minari_io = pytest.importorskip("privsynth.data.minari_io")
    from privsynth.methods import dp_apvi_release
    from privsynth.methods.dp_apvi_release import make_tabular_source, release_outputs, release_synthetic_dataset

    seen = []
    real = dp_apvi_release.release_outputs

    def spy(sensitive, *args, **kw):
        seen.append(sensitive)
        return real(sensitive, *args, **kw)

    monkeypatch.setattr(dp_apvi_release, "release_outputs", spy)
    release_synthetic_dataset("privsynth/rand/dp-counts-v0", env="random", n_episodes=100, n_synthetic=5, rho=1.0,
                              epsilon_budget=10.0)
    written = minari_io.load_dataset("privsynth/rand/dp-counts-v0")
    seed = written.info.extra["mdp"]["seed"]
    mdp, mu = make_tabular_source("random", seed=seed)
    replay = mdp.sample(mu, 100, np.random.default_rng([seed, 0]))  # what the old code drew as the sensitive data
    assert not np.array_equal(replay.states, seen[0].states)
    ds, ledger = release_outputs(replay, mdp, name="x", rho=1.0, n_synthetic=5)
    assert ledger.private and "seed" not in json.dumps(ds.info.privacy_card)
    with pytest.raises(PrivacyError):  # the reproducible switch cannot be released
        release_synthetic_dataset("privsynth/rand/dp-counts-v1", env="random", n_episodes=100, n_synthetic=5,
                                  rho=1.0, epsilon_budget=10.0, noise_seed=3)
    assert not minari_io.dataset_exists("privsynth/rand/dp-counts-v1")


def test_reproducible_source_gives_each_mechanism_call_its_own_stream():
    """One reproducible source feeding 100 DP-VAPVI releases must not reuse one draw for all of them."""
    src = NoiseSource.reproducible(3)
    a, b = src.numpy_rng().normal(size=4), src.numpy_rng().normal(size=4)
    assert not np.allclose(a, b)
    again = NoiseSource.reproducible(3)
    assert np.array_equal(again.numpy_rng().normal(size=4), a) and np.array_equal(again.numpy_rng().normal(size=4), b)
    assert np.array_equal(NoiseSource.reproducible(3).numpy_rng(0).normal(size=4), a)  # explicit streams unchanged
