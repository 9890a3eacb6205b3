"""DP-VAPVI / VAPVI / PEVI on the synthetic linear MDP: noise scales, accounting, sensitivities, reductions."""
from __future__ import annotations

import math

import numpy as np
import pytest

from privsynth.cli import main
from privsynth.errors import InvalidData
from privsynth.methods.dp_vapvi import (
    VAPVIConfig,
    dp_vapvi,
    pevi,
    step_statistics,
    theory_D,
    vapvi,
    vapvi_noise_scales,
)
from privsynth.methods.linear_mdp import behaviour_policy, synthetic_linear_mdp
from privsynth.methods.zcdp import ZcdpLedger
from privsynth.privacy.noise import NoiseSource


@pytest.fixture(scope="module")
def lin():
    mdp = synthetic_linear_mdp(H=20, seed=0)
    return mdp, behaviour_policy(20)


def test_synthetic_mdp_is_linear_and_normalised():
    raw = synthetic_linear_mdp(H=5, seed=3, normalize_features=False)
    norm = synthetic_linear_mdp(H=5, seed=3)
    assert raw.feature_bound == pytest.approx(math.sqrt(7))  # popcount ≤ 6 for a < 100, plus one δ entry
    assert norm.feature_bound == pytest.approx(1.0)
    assert np.allclose(raw.tabular.P, norm.tabular.P) and np.allclose(raw.tabular.R, norm.tabular.R)
    assert np.allclose(norm.tabular.P.sum(-1), 1.0) and (norm.tabular.P >= 0).all()
    for mode in ("deterministic", "one_alpha"):
        for reward in ("orig", "R2"):
            m = synthetic_linear_mdp(H=4, transition_mode=mode, reward_mode=reward)
            assert 0 <= m.tabular.R.min() and m.tabular.R.max() <= 1


def test_noise_scales_match_the_formulas():
    H, d, rho, delta = 20, 10, 10.0, 0.05
    ns = vapvi_noise_scales(H, d, rho, delta)
    rho0 = rho / (5 * H)
    assert ns.rho0 == pytest.approx(rho0)
    assert ns.sigma_vsq**2 == pytest.approx(2 * H**4 / rho0)  # notes P2: H⁴, not H²
    assert ns.sigma_v**2 == pytest.approx(2 * H**2 / rho0)
    assert ns.sigma_w**2 == pytest.approx(2 * H**2 / rho0)
    assert ns.sigma_z**2 == pytest.approx(1 / (2 * rho0))  # replace-one matrix noise (notes P4)
    assert ns.E == pytest.approx(4 * ns.sigma_z * (math.sqrt(2 * d) + math.sqrt(math.log(2 * H / delta))))
    paper = vapvi_noise_scales(H, d, rho, delta, "paper")
    assert paper.sigma_z**2 == pytest.approx(1 / (4 * rho0)) and paper.rho_matrix == pytest.approx(2 * rho0)
    assert paper.E == pytest.approx(2 / math.sqrt(rho0) * (math.sqrt(2 * d) + math.sqrt(math.log(2 * H / delta))))
    assert math.isinf(theory_D(H, d, rho, kappa=0.0)) and math.isfinite(theory_D(H, d, rho, kappa=0.1))


@pytest.mark.parametrize("matrix_noise,total", [("replace_one", 1.0), ("paper", 7 / 5)])
def test_ledger_composes_5H_releases(lin, matrix_noise, total):
    mdp, mu = lin
    traj = mdp.sample(mu, 50, np.random.default_rng(0))
    ledger = ZcdpLedger()
    res = dp_vapvi(traj, mdp.Phi, rho=3.0, cfg=VAPVIConfig(matrix_noise=matrix_noise), ledger=ledger)
    assert len(ledger.events) == 5 * 20
    assert ledger.rho == pytest.approx(3.0 * total)
    for e in ledger.events:  # every vector release is a Gaussian at its stated sensitivity
        if "gram" not in e.name:
            assert e.params["rho"] == pytest.approx(e.params["sensitivity"] ** 2 / (2 * e.params["sigma"] ** 2))
    assert res.summary()["privacy"]["rho"] == pytest.approx(3.0 * total)


def test_statistic_sensitivities_under_replace_one(lin):
    mdp, mu = lin
    H, d = 20, mdp.d
    rng = np.random.default_rng(0)
    traj = mdp.sample(mu, 40, rng)
    bounds = {"gram_var": math.sqrt(2), "vsq": 2 * H**2, "v": 2 * H, "gram_w": math.sqrt(2), "w": 2 * H}
    worst = dict.fromkeys(bounds, 0.0)
    for _ in range(200):
        h = int(rng.integers(H))
        V = rng.uniform(0, H - h - 1, 2)  # any Ṽ_{h+1} in range
        sig2 = np.maximum(1.0, rng.uniform(0, H**2, (2, 100)))  # any σ̃² ≥ 1
        s, a, s2 = traj.states[:, h].copy(), traj.actions[:, h].copy(), traj.states[:, h + 1].copy()
        r = traj.rewards[:, h].copy()

        def stats(s, a, s2, r):
            X = mdp.Phi[s, a]
            return step_statistics(X, r, V[s2], 1.0 / sig2[s, a], X, V[s2])

        base = stats(s, a, s2, r)
        i = rng.integers(len(s))
        s[i], a[i], s2[i], r[i] = rng.integers(2), rng.integers(100), rng.integers(2), rng.random()
        nb = stats(s, a, s2, r)
        for k in bounds:
            worst[k] = max(worst[k], float(np.linalg.norm(base[k] - nb[k])))
    for k, b in bounds.items():
        assert worst[k] <= b + 1e-9, k
    raw = synthetic_linear_mdp(H=20, seed=0, normalize_features=False)  # notes P1: raw features break the bound
    X1, X2 = raw.Phi[0, 99][None], raw.Phi[1, 0][None]
    assert np.linalg.norm(X1.T @ X1 - X2.T @ X2) > math.sqrt(2)
    with pytest.raises(InvalidData):
        dp_vapvi(raw.sample(mu, 5, rng), raw.Phi, rho=1.0)


def test_vapvi_bonus_and_regression_on_one_step():
    mdp = synthetic_linear_mdp(H=1, seed=2)
    traj = mdp.sample(behaviour_policy(1), 200, np.random.default_rng(1))
    cfg = VAPVIConfig(lam=0.5, c_bonus=0.3, d_bonus=2.0, tie_break="first")
    res = vapvi(traj, mdp.Phi, cfg)
    X = mdp.Phi[traj.states[:, 0], traj.actions[:, 0]]  # with H = 1, Ṽ_2 = 0 so σ̃² = 1
    Lam = X.T @ X + 0.5 * np.eye(mdp.d)
    w = np.linalg.solve(Lam, X.T @ traj.rewards[:, 0])
    norm = np.sqrt(np.einsum("sai,ij,saj->sa", mdp.Phi, np.linalg.inv(Lam), mdp.Phi))
    want = np.clip(mdp.Phi @ w - 0.3 * math.sqrt(mdp.d) * norm - 2.0 / 200, 0, 1)
    assert np.allclose(res.Q[0], want)
    assert np.array_equal(res.policy[0], want.argmax(-1))


def test_dp_vapvi_without_noise_is_vapvi(lin):
    mdp, mu = lin
    traj = mdp.sample(mu, 200, np.random.default_rng(4))
    ref = vapvi(traj, mdp.Phi, seed=1)
    got = dp_vapvi(traj, mdp.Phi, rho=1e30, seed=1)
    assert got.noise.E < 1e-10
    assert np.allclose(got.Q, ref.Q, atol=1e-6)
    assert np.array_equal(got.policy, ref.policy)


def test_fixed_seed_gives_identical_results_and_noise_is_added(lin):
    mdp, mu = lin
    traj = mdp.sample(mu, 300, np.random.default_rng(0))
    a = dp_vapvi(traj, mdp.Phi, rho=50.0, seed=3, noise=NoiseSource.reproducible(3))
    b = dp_vapvi(traj, mdp.Phi, rho=50.0, seed=3, noise=NoiseSource.reproducible(3))
    c = dp_vapvi(traj, mdp.Phi, rho=50.0, seed=4, noise=NoiseSource.reproducible(4))
    assert np.array_equal(a.Q, b.Q) and np.array_equal(a.policy, b.policy)
    assert not np.allclose(a.Q, c.Q)
    assert not np.allclose(a.Q, vapvi(traj, mdp.Phi, seed=3).Q)


def test_gaps_vapvi_beats_pevi_and_dp_improves_with_rho(lin):
    mdp, mu = lin
    gaps = {"PEVI": [], "VAPVI": [], "rho=1": [], "rho=1e4": []}
    for seed in range(3):
        traj = mdp.sample(mu, 3000, np.random.default_rng([seed, 0]))
        gaps["PEVI"].append(mdp.gap(pevi(traj, mdp.Phi, seed=seed).policy))
        gaps["VAPVI"].append(mdp.gap(vapvi(traj, mdp.Phi, seed=seed).policy))
        gaps["rho=1"].append(mdp.gap(dp_vapvi(traj, mdp.Phi, 1.0, seed=seed, noise=NoiseSource.reproducible(seed)).policy))
        gaps["rho=1e4"].append(mdp.gap(dp_vapvi(traj, mdp.Phi, 1e4, seed=seed, noise=NoiseSource.reproducible(seed)).policy))
    m = {k: float(np.mean(v)) for k, v in gaps.items()}
    assert min(min(v) for v in gaps.values()) >= -1e-9
    assert m["VAPVI"] < 0.01
    split = vapvi(traj, mdp.Phi, VAPVIConfig(split=True), seed=0)  # theory variant: variance on D', regression on D
    assert mdp.gap(split.policy) < 0.1
    assert m["rho=1e4"] + 0.5 < m["rho=1"]


def test_cli_writes_table_and_plot(tmp_path):
    code = main(["methods", "dp-vapvi", "--out", str(tmp_path), "--ks", "20,40", "--seeds", "1", "--rhos", "10",
                 "--synthetic-rhos", "10"])
    assert code == 0
    table = (tmp_path / "linear_gap_vs_K_table.md").read_text()
    assert "DP-VAPVI (rho=10)" in table and "VAPVI on DP synthetic (rho=10)" in table
    assert (tmp_path / "linear_gap_vs_K.png").stat().st_size > 1000


def test_dp_vapvi_ledger_matches_an_independent_accountant(lin):
    pytest.importorskip("privsynth.privacy.ledger")
    import dp_accounting
    from dp_accounting import rdp

    mdp, mu = lin
    traj = mdp.sample(mu, 30, np.random.default_rng(0))
    ledger = ZcdpLedger()
    dp_vapvi(traj, mdp.Phi, rho=2.0, seed=0, ledger=ledger)
    pkg = ledger.to_ledger(delta=1e-5)
    assert len(pkg) == 100
    acc = rdp.RdpAccountant()
    acc.compose(dp_accounting.ZCDpEvent(2.0))
    assert pkg.epsilon() == pytest.approx(acc.get_epsilon(1e-5), rel=1e-6)
    assert pkg.card()["unit"] == "trajectory"
