"""Marginal (1 − KS) and correlation (1 − |Δρ|/2) scores against hand-computed values."""
from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from privsynth.errors import SpaceMismatch
from privsynth.evaluation.fidelity import (
    correlation_pairs,
    correlation_score,
    ks_statistic,
    marginal_per_column,
    marginal_score,
    tabular_fidelity,
    transition_columns,
)
from conftest import make_toy_dataset


def test_identical_data_scores_one():
    x = np.random.default_rng(0).normal(size=(500, 5))
    assert marginal_score(x, x) == 1.0
    assert correlation_score(x, x) == pytest.approx(1.0, abs=1e-12)


def test_ks_by_hand_on_shifted_column():
    # real = {0,1,2,3}, synth = real + 2 = {2,3,4,5}. The ECDFs differ most on [1, 2): F_real = 2/4, F_synth = 0,
    # and on [3, 4)... F_real = 1, F_synth = 2/4. So KS = 1/2 and the column's marginal score is 1 − 1/2.
    real = np.array([0.0, 1.0, 2.0, 3.0])
    synth = real + 2.0
    assert ks_statistic(real, synth) == pytest.approx(0.5)
    # a second column left unchanged scores 1, so the mean over the two columns is (0.5 + 1) / 2
    r2 = np.stack([real, real], axis=1)
    s2 = np.stack([synth, real], axis=1)
    np.testing.assert_allclose(marginal_per_column(r2, s2), [0.5, 1.0])
    assert marginal_score(r2, s2) == pytest.approx(0.75)


def test_ks_by_hand_unequal_sizes_and_ties():
    # real = {0, 0, 1}, synth = {0, 1, 1, 1}: at x=0, F_real = 2/3, F_synth = 1/4 -> KS = 5/12
    assert ks_statistic([0, 0, 1], [0, 1, 1, 1]) == pytest.approx(5 / 12)


def test_ks_matches_scipy():
    rng = np.random.default_rng(1)
    a = rng.normal(size=301)
    b = np.round(rng.normal(0.3, 1.2, size=177), 1)  # ties
    assert ks_statistic(a, b) == pytest.approx(stats.ks_2samp(a, b).statistic, abs=1e-12)


def test_disjoint_supports_give_zero_marginal():
    assert marginal_score(np.zeros((3, 1)), np.ones((4, 1))) == 0.0


def test_correlation_hand_made_three_columns():
    # real: c1 = t, c2 = 2t (ρ12 = 1), c3 = -t (ρ13 = ρ23 = -1)
    t = np.array([0.0, 1.0, 2.0, 3.0])
    real = np.stack([t, 2 * t, -t], axis=1)
    # synth: c1 = t, c2 = reversed t (ρ12 = -1), c3 = t (ρ13 = 1, ρ23 = -1)
    synth = np.stack([t, t[::-1], t], axis=1)
    # pairs: (1,2) 1 − |1 − (−1)|/2 = 0; (1,3) 1 − |−1 − 1|/2 = 0; (2,3) 1 − |−1 − (−1)|/2 = 1  -> mean 1/3
    res = correlation_pairs(real, synth)
    assert res.score == pytest.approx(1 / 3)
    assert res.pair_scores[0, 1] == pytest.approx(0.0)
    assert res.pair_scores[1, 2] == pytest.approx(1.0)
    assert np.isnan(res.pair_scores[0, 0])


def test_correlation_partial_by_hand():
    # real ρ = 1 for (x, x); synth second column uncorrelated with the first by construction: ρ = 0 -> score 1/2
    x = np.array([1.0, -1.0, 1.0, -1.0])
    y = np.array([1.0, 1.0, -1.0, -1.0])  # orthogonal to x, both zero-mean
    real = np.stack([x, x], axis=1)
    synth = np.stack([x, y], axis=1)
    assert correlation_score(real, synth) == pytest.approx(0.5)


def test_constant_columns_are_handled_explicitly():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(100, 3))
    real = a.copy()
    real[:, 2] = 7.0  # constant in real: pairs with column 2 are skipped
    res = correlation_pairs(real, a)
    assert sorted(res.skipped_pairs) == [(0, 2), (1, 2)]
    assert np.isfinite(res.score)
    # constant only in synth: ρ_synth = 0 for its pairs
    synth = a.copy()
    synth[:, 1] = 0.0
    res2 = correlation_pairs(a, synth)
    assert res2.skipped_pairs == []
    rho01 = np.corrcoef(a[:, 0], a[:, 1])[0, 1]
    assert res2.pair_scores[0, 1] == pytest.approx(1 - abs(rho01) / 2)
    # all pairs skipped -> NaN
    assert np.isnan(correlation_score(np.ones((5, 2)), a[:5, :2]))


def test_pearson_matches_numpy():
    rng = np.random.default_rng(3)
    real = rng.normal(size=(400, 4)) @ rng.normal(size=(4, 4))
    synth = rng.normal(size=(300, 4))
    res = correlation_pairs(real, synth)
    np.testing.assert_allclose(res.rho_real, np.corrcoef(real, rowvar=False), atol=1e-10)
    iu = np.triu_indices(4, 1)
    expected = (1 - np.abs(np.corrcoef(real, rowvar=False) - np.corrcoef(synth, rowvar=False)) / 2)[iu].mean()
    assert res.score == pytest.approx(expected)


def test_subsampling_is_seeded():
    rng = np.random.default_rng(0)
    real, synth = rng.normal(size=(1000, 3)), rng.normal(0.2, 1, size=(1000, 3))
    a = marginal_score(real, synth, max_rows=200, seed=1)
    assert a == marginal_score(real, synth, max_rows=200, seed=1)
    assert a != marginal_score(real, synth)


def test_tabular_fidelity_on_datasets_excludes_terminal():
    real = make_toy_dataset(lengths=(40, 30, 50), seed=0)
    same = tabular_fidelity(real, real)
    assert same.marginal == 1.0 and same.correlation == pytest.approx(1.0)
    assert same.columns == transition_columns(4, 2)
    assert "terminal" not in same.columns and len(same.columns) == 2 * 4 + 2 + 1
    other = make_toy_dataset(lengths=(40, 30, 50), seed=1)
    rep = tabular_fidelity(other, real)
    assert rep.marginal < 1.0
    d = rep.to_dict()
    assert set(d["per_column"]) == set(rep.columns)
    with_term = tabular_fidelity(other, real, include_terminal=True)
    assert with_term.columns[-1] == "terminal"


def test_mismatched_widths_raise():
    with pytest.raises(SpaceMismatch):
        marginal_score(np.zeros((3, 2)), np.zeros((3, 3)))
    with pytest.raises(SpaceMismatch):
        tabular_fidelity(make_toy_dataset(obs_dim=3), make_toy_dataset(obs_dim=4))


def test_float32_inputs_give_the_same_marginal():
    rng = np.random.default_rng(5)
    a = rng.normal(size=(500, 3)).astype(np.float32)
    b = rng.normal(0.1, 1.0, size=(400, 3)).astype(np.float32)
    np.testing.assert_array_equal(marginal_per_column(a, b), marginal_per_column(a.astype(np.float64), b.astype(np.float64)))


# ------------------------------------------------------------------------------------------- utility predictor
def _toy_rl(n_ep=40, length=50, seed=0, policy="linear", dynamics="true"):
    """Point mass: s = (x, y, vx, vy), s' = (x + 0.1 vx', y + 0.1 vy', vx', vy') with v' = 0.9 v + 0.5 a, and the
    action a = -pos (linear policy) or uniform noise (no policy)."""
    from privsynth.data.dataset import DatasetInfo, OfflineDataset

    rng = np.random.default_rng(seed)
    obs, act, nxt = [], [], []
    for _ in range(n_ep):
        s = np.concatenate([rng.uniform(-1, 1, 2), np.zeros(2)])
        for _ in range(length):
            a = -s[:2] + 0.05 * rng.normal(size=2) if policy == "linear" else rng.uniform(-1, 1, 2)
            v = 0.9 * s[2:] + 0.5 * a
            s2 = np.concatenate([s[:2] + 0.1 * v, v]) if dynamics == "true" else s.copy()
            obs.append(s); act.append(a); nxt.append(s2)
            s = s2 if dynamics == "true" else np.concatenate([rng.uniform(-1, 1, 2), rng.normal(0, 0.3, 2)])
    n = n_ep * length
    timeouts = np.zeros(n, dtype=bool)
    timeouts[length - 1 :: length] = True
    return OfflineDataset(observations=np.array(obs, np.float32), actions=np.array(act, np.float32),
                          rewards=np.zeros(n, np.float32), next_observations=np.array(nxt, np.float32),
                          terminals=np.zeros(n, bool), timeouts=timeouts,
                          episode_ids=np.repeat(np.arange(n_ep), length), info=DatasetInfo(name="toy-rl"))


def test_utility_predictor_known_answers():
    from privsynth.evaluation.fidelity import utility_predictor

    real = _toy_rl(seed=0)
    # an independent draw of the same process: the policy is learnable (R² high, equal to the real reference up to
    # sampling error) and the dynamics are exact for the linear model (error ≈ 0)
    good = utility_predictor(_toy_rl(seed=1), real)
    assert good["policy_r2_real"] > 0.7 and good["policy_r2"] > 0.7
    assert abs(good["policy_r2_ratio"] - 1) < 0.1
    assert good["dynamics"]["rel_step_mean"] < 1e-3 and good["dynamics_real"]["rel_step_mean"] < 1e-3
    # actions unrelated to states: R² ≤ ~0
    noise = utility_predictor(_toy_rl(seed=1, policy="random"), real)
    assert noise["policy_r2"] < 0.05
    # next state = state: the error equals the no-motion baseline exactly (rel_nomotion = 1)
    still = utility_predictor(_toy_rl(seed=1, dynamics="still"), real)
    assert still["dynamics"]["rel_nomotion_mean"] == pytest.approx(1.0, abs=1e-6)
    assert all(still["dynamics"]["moving"])
