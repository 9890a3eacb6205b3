"""NumPy CartPole/Acrobot replicas, p_min-greedy experts and expert-tagged data."""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from privsynth.methods.expert_envs import (LinearExperts, VecClassicEnv, collect_expert_data, train_linear_experts,
                                           variant_grid)


@pytest.mark.parametrize("env_id,name", [("CartPole-v1", "cartpole"), ("Acrobot-v1", "acrobot")])
def test_numpy_replica_matches_gymnasium(env_id, name):
    env = gym.make(env_id)
    rng = np.random.default_rng(0)
    for ep in range(3):
        obs, _ = env.reset(seed=ep)
        venv = VecClassicEnv(name, 1)
        venv.state = np.array(env.unwrapped.state, dtype=np.float64)[None]
        np.testing.assert_allclose(venv.obs()[0], obs, rtol=1e-5, atol=1e-6)
        for _ in range(60):
            a = int(rng.integers(env.action_space.n))
            obs, r, term, trunc, _ = env.step(a)
            o2, r2, t2 = venv.step(np.array([a]))
            np.testing.assert_allclose(o2[0], obs, rtol=1e-4, atol=1e-5)
            assert r2[0] == r and bool(t2[0]) == term
            if term:
                break


def test_variant_physics_changes_dynamics():
    g = variant_grid("cartpole", 2)
    assert len(g["gravity"]) == 8 and g["gravity"].min() == 8.75 and g["masscart"].max() == 1.25
    venv = VecClassicEnv("cartpole", 8, g)
    venv.state = np.tile([0.0, 0.0, 0.05, 0.0], (8, 1))
    venv.step(np.ones(8, dtype=int))
    assert len(np.unique(venv.state[:, 3].round(8))) > 1


def test_pmin_greedy_probabilities_and_log_probs():
    rng = np.random.default_rng(0)
    ex = LinearExperts(rng.normal(size=(3, 3, 6)), rng.normal(size=(3, 3)), p_min=0.02)
    obs = rng.normal(size=(1, 6)).repeat(20000, 0)
    who = np.zeros(20000, dtype=int)
    a = ex.sample(obs, who, rng)
    g = ex.greedy_own(obs[:1], who[:1])[0]
    freq = np.bincount(a, minlength=3) / len(a)
    assert freq[g] == pytest.approx(0.96, abs=0.01)
    assert all(freq[b] == pytest.approx(0.02, abs=0.005) for b in range(3) if b != g)
    lp = ex.log_probs(obs[:3], np.array([g, (g + 1) % 3, g]))
    assert lp[0, 0] == pytest.approx(math.log(0.96)) and lp[0, 1] == pytest.approx(math.log(0.02))
    with pytest.raises(Exception):
        LinearExperts(ex.W, ex.c, p_min=0.5)  # (|A|-1)·p_min ≥ 1


def test_expert_data_keeps_ids_and_flags():
    ex = train_linear_experts("cartpole", per_factor=2, keep=2, candidates=6, rounds=2, seed=0)
    assert ex.m == 16
    data = collect_expert_data("cartpole", ex, 3, seed=1, horizon=50)
    assert data.n_episodes == 48 and (np.bincount(data.ep_expert) == 3).all()
    for e in range(data.n_episodes):
        sl = data.episode_slice(e)
        assert (data.expert[sl] == data.ep_expert[e]).all()
        assert not data.terminals[sl][:-1].any()  # only the last transition may terminate
        np.testing.assert_allclose(data.obs[sl][1:], data.next_obs[sl][:-1])
        x, th = data.next_obs[sl][-1, 0], data.next_obs[sl][-1, 2]
        fell = abs(x) > 2.4 or abs(th) > 12 * 2 * math.pi / 360
        assert bool(data.terminals[sl][-1]) == fell  # time-limit ends stay non-terminal (bootstrap)
        assert fell or data.ep_len[e] == 50
    ds = data.to_offline_dataset()
    assert ds.actions.shape == (len(data), 1) and ds.info.sensitive
    assert ds.info.extra["episode_expert"] == data.ep_expert.tolist()
