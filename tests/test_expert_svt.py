"""Algorithms 1–2 of the expert-level DP paper: constants, count, release, neighbour behaviour."""
from __future__ import annotations

import dataclasses
import math
from collections import Counter

import numpy as np
import pytest

from privsynth.errors import PrivacyError
from privsynth.methods.expert_envs import LinearExperts, collect_expert_data
from privsynth.methods.expert_svt import (DataReleaseConfig, budget_split, data_release, prefix_counts, svt_constants,
                                          svt_round)

# notes 000_expert_svt.md §3.5 (derived table for m = 3000, p_min = 0.02, δ = 1/3000):
# env, ε₁, δ₁, T, L, |A|, ε', δ', c_min, θ, shift, E[θ̂], thr/query scale, k, adv.-comp. ε_tot
TABLE = [
    ("acrobot", 5, 1 / 3000, 20, 200, 3, 0.0670, 4.17e-08, 15.43, 771.4, 1014.4, 1785.9, 29.8, 59.7, 12, 2.884),
    ("acrobot", 7.5, 1 / 3000, 20, 200, 3, 0.1005, 4.17e-08, 10.46, 522.9, 676.3, 1199.1, 19.9, 39.8, 22, 4.645),
    ("acrobot", 10, 1 / 3000, 25, 200, 3, 0.1199, 3.33e-08, 8.85, 442.6, 574.5, 1017.1, 16.7, 33.4, 26, 6.624),
    ("lunar", 5.625, 3e-4, 62, 1000, 4, 0.0426, 2.42e-09, 24.00, 1200.0, 1864.7, 3064.7, 47.0, 94.0, 0, 3.281),
    ("lunar", 7.5, 3e-4, 100, 1000, 4, 0.0447, 1.5e-09, 22.88, 1144.2, 1818.9, 2963.1, 44.8, 89.5, 0, 4.585),
    ("lunar400", 7.5, 3e-4, 100, 400, 4, 0.0447, 3.75e-09, 22.88, 1144.2, 1736.9, 2881.1, 44.8, 89.5, 0, 4.585),
    ("cartpole", 5.625, 3e-4, 20, 200, 2, 0.0749, 3.75e-08, 13.85, 692.6, 912.8, 1605.3, 26.7, 53.4, 30, 3.297),
    ("cartpole", 7.5, 3e-4, 25, 200, 2, 0.0894, 3e-08, 11.70, 584.9, 775.4, 1360.3, 22.4, 44.8, 39, 4.624),
    ("hiv", 7.5, 1 / 3000, 50, 50, 4, 0.0636, 6.67e-08, 16.24, 811.8, 1039.7, 1851.5, 31.5, 62.9, 7, 4.612),
    ("hiv", 10, 1 / 3000, 50, 50, 4, 0.0848, 6.67e-08, 12.31, 615.3, 779.8, 1395.0, 23.6, 47.2, 12, 6.566),
    ("hiv-bcq", 5.625, 3e-4, 50, 50, 4, 0.0474, 6e-08, 21.60, 1080.2, 1403.5, 2483.8, 42.2, 84.4, 3, 3.284),
    ("hiv-bcq", 7.5, 3e-4, 50, 50, 4, 0.0632, 6e-08, 16.33, 816.5, 1052.7, 1869.2, 31.7, 63.3, 7, 4.601),
]


@pytest.mark.parametrize("row", TABLE, ids=[f"{r[0]}-{r[1]}" for r in TABLE])
def test_constants_match_notes_table(row):
    _, e1, d1, T, L, n_act, eps_p, delta_p, c_min, theta, shift, e_thr, s_thr, s_q, k, adv = row
    c = svt_constants(e1, d1, T, L, 0.02)
    assert c.eps_prime == pytest.approx(eps_p, abs=5e-5)
    assert c.delta_prime == pytest.approx(delta_p, rel=2e-3)
    assert c.c_min == pytest.approx(c_min, abs=5e-3)
    assert c.theta == pytest.approx(theta, abs=0.06)
    assert c.thr_shift == pytest.approx(shift, abs=0.06)
    assert c.expected_threshold == pytest.approx(e_thr, abs=0.06)
    assert c.thr_scale == pytest.approx(s_thr, abs=0.06) and c.query_scale == pytest.approx(s_q, abs=0.06)
    assert c.max_consensus_length(3000, n_act) == k
    assert c.eps_adv_composition == pytest.approx(adv, abs=5e-4) and c.eps_adv_composition <= e1
    assert c.eps_round == pytest.approx(2 * c.eps_prime) and c.delta_round == pytest.approx(d1 / (2 * T))


def test_budget_split_rules():
    assert budget_split("acrobot", 10, 1 / 3000) == (10, 1 / 3000, 0.0, 0.0)
    e1, d1, e2, d2 = budget_split("cartpole", 10, 1 / 3000)
    assert (e1, e2) == (7.5, 2.5) and d1 + d2 == pytest.approx(1 / 3000) and d1 == pytest.approx(0.9 / 3000)


def test_constants_refuse_uncovered_inputs():
    with pytest.raises(PrivacyError):
        svt_constants(10, 0.0, 25, 200, 0.02)  # δ₁ = 0 with ε₁ > 0
    with pytest.raises(PrivacyError):
        svt_constants(0.0, 1e-4, 25, 200, 0.02)
    with pytest.raises(PrivacyError):
        svt_constants(10, 1e-4, 25, 200, 0.0)  # p_min = 0: θ infinite
    with pytest.raises(PrivacyError):
        svt_constants(200.0, 0.2, 1, 5, 0.1)  # advanced composition bound above ε₁


def test_threshold_shift_pass_probability_matches_lemma_5_2():
    """At count = θ a query passes w.p. (2/3)δ' − δ'²/6 (notes §2.2): checks both Laplace scales and the shift."""
    c = svt_constants(30.0, 0.5, 1, 1, 0.1, check_composition=False)  # δ' = 0.25: large enough for Monte Carlo
    rng = np.random.default_rng(0)
    n = 400_000
    thr = c.theta + c.thr_shift + rng.laplace(0, c.thr_scale, n)
    passed = c.theta + rng.laplace(0, c.query_scale, n) > thr
    expect = 2 / 3 * c.delta_prime - c.delta_prime**2 / 6
    assert passed.mean() == pytest.approx(expect, abs=4 * math.sqrt(expect / n))


class TableExperts:
    """Experts on a 'clock' MDP (state = time step): expert i's greedy action at step j is G[i, j]."""

    def __init__(self, G: np.ndarray, n_actions: int, p_min: float) -> None:
        self.G, self.n_actions, self.p_min = G, n_actions, p_min
        self.hi = 1 - (n_actions - 1) * p_min

    def log_probs(self, obs, actions):
        t = np.asarray(obs, dtype=np.int64).ravel()
        return np.where(self.G[:, t] == np.asarray(actions)[None], math.log(self.hi), math.log(self.p_min))

    def rollout(self, i: int, rng) -> np.ndarray:
        g = self.G[i]
        other = (g + rng.integers(1, self.n_actions, len(g))) % self.n_actions
        return np.where(rng.random(len(g)) < self.hi, g, other)


def test_prefix_counts_equal_brute_force():
    rng = np.random.default_rng(1)
    ex = TableExperts(rng.integers(0, 3, (50, 8)), 3, 0.05)
    acts = rng.integers(0, 3, 8)
    got = prefix_counts(ex, np.arange(8)[:, None], acts)
    probs = np.where(ex.G == acts[None], ex.hi, ex.p_min)
    want = [sum(np.prod(probs[i, : k + 1]) for i in range(50)) for k in range(8)]
    np.testing.assert_allclose(got, want, rtol=1e-10)


def _pool(seed=0, m=2000, n_traj=2):
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(1, 2, 5))
    W = base[..., :4] + 0.3 * rng.normal(size=(m, 2, 4))
    c = base[..., 4] + 0.3 * rng.normal(size=(m, 2))
    ex = LinearExperts(W, c, p_min=0.02)
    return ex, collect_expert_data("cartpole", ex, n_traj, seed=seed, horizon=60)


def test_release_never_includes_a_prefix_that_failed():
    ex, data = _pool()
    res = data_release(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-4, n_rounds=30, noise_seed=3))  # < 1/m
    assert res.n_stable > 0, "tiny instance should release something"
    stable = set(res.stable_idx.tolist())
    released = set()
    for rnd in res.rounds:
        sl = data.episode_slice(rnd["episode"])
        k, thr, trace = rnd["k"], rnd["threshold"], rnd["trace"]
        assert all(noisy > thr for _, noisy in trace[:k])  # every released prefix passed its noisy test
        if k < sl.stop - sl.start:
            assert trace[k][1] <= thr and len(trace) == k + 1  # stopped at the first failure
        counts = prefix_counts(ex, data.obs[sl], data.actions[sl])
        np.testing.assert_allclose([t[0] for t in trace], counts[: len(trace)])
        released |= set(range(sl.start, sl.start + k))
    assert stable == released
    assert set(res.unstable_idx.tolist()) == set(range(len(data))) - released
    ev = res.ledger_event()
    assert ev.epsilon == 15.0 and ev.delta == 1e-4 and ev.params["unit"] == "expert"


def test_release_skipped_at_eps1_zero():
    ex, data = _pool(m=50)
    res = data_release(data, ex, DataReleaseConfig(eps1=0.0, delta1=0.0, n_rounds=5))
    assert res.n_stable == 0 and len(res.unstable_idx) == len(data) and res.ledger_event() is None


def _round_outcomes(ex: TableExperts, members: np.ndarray, const, trials: int, seed: int) -> Counter:
    """Outcome distribution of one round A = A₁∘A₂: a uniformly random expert's fresh rollout, then one SVT round;
    the output is the released action prefix (states are the clock, so the prefix is its actions)."""
    sub = TableExperts(ex.G[members], ex.n_actions, ex.p_min)
    rng = np.random.default_rng(seed)
    L = ex.G.shape[1]
    out = Counter()
    for _ in range(trials):
        acts = ex.rollout(int(members[rng.integers(len(members))]), rng)
        k, _, _ = svt_round(prefix_counts(sub, np.arange(L)[:, None], acts), const, rng)
        out[tuple(acts[:k])] += 1
    return out


def _max_violation(a: Counter, b: Counter, n: int, eps: float, delta: float) -> float:
    """max over outcomes o of p̂_a(o) − e^ε p̂_b(o) − δ − (4 standard errors)."""
    worst = -1.0
    for o in set(a) | set(b):
        pa, pb = a[o] / n, b[o] / n
        se = math.sqrt(pa * (1 - pa) / n + math.exp(2 * eps) * pb * (1 - pb) / n)
        worst = max(worst, pa - math.exp(eps) * pb - delta - 4 * se)
    return worst


def test_removing_one_expert_changes_release_only_within_round_guarantee():
    """Thm 5.3: one round is (2ε', δ₁/(2T))-DP for add/remove of one expert. Monte Carlo on a tiny instance (38
    identical experts, chosen so that removing one moves the all-agree count across E[θ̂] at prefix length 2). The same
    check rejects the noise-free variant of the round, so it has power."""
    L, m = 4, 38
    ex = TableExperts(np.zeros((m, L), dtype=np.int64), 2, 0.1)
    const = svt_constants(8.6, 0.2, 1, L, 0.1, check_composition=False)  # ε' ≈ 1, E[θ̂] ≈ 30.6
    assert m * 0.9**2 > const.expected_threshold > (m - 1) * 0.9**2
    n = 20_000
    full = _round_outcomes(ex, np.arange(m), const, n, seed=1)
    minus = _round_outcomes(ex, np.arange(m - 1), const, n, seed=2)
    assert sum(v for o, v in full.items() if len(o) > 0) > 0.3 * n, "instance must release prefixes often"
    for a, b in ((full, minus), (minus, full)):
        assert _max_violation(a, b, n, const.eps_round, const.delta_round) <= 0
    frozen = dataclasses.replace(const, thr_scale=1e-9, query_scale=1e-9)
    full0 = _round_outcomes(ex, np.arange(m), frozen, n, seed=1)
    minus0 = _round_outcomes(ex, np.arange(m - 1), frozen, n, seed=2)
    assert max(_max_violation(full0, minus0, n, const.eps_round, const.delta_round),
               _max_violation(minus0, full0, n, const.eps_round, const.delta_round)) > 0


def test_cli_constants(capsys):
    import json

    from privsynth.cli import main

    assert main(["expert", "constants", "--eps1", "10", "--delta1", str(1 / 3000), "-T", "25", "-L", "200"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["theta"] == pytest.approx(442.6, abs=0.06) and out["max_consensus_prefix"] == 26
