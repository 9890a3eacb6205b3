"""The PriMORL policy stage never reaches the dataset; rollouts start from ρ0 / model states; the uncertainty
penalties; the Pendulum data generator matches gymnasium."""
from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.methods.primorl.data import (PENDULUM_INFO_KW, PendulumDataConfig, energy_controller,
                                            make_pendulum_dataset, pendulum_obs, pendulum_step)
from privsynth.methods.primorl.dynamics import GaussianEnsemble, TrajectoryTensors
from privsynth.methods.primorl.pessimistic_mdp import PessimismConfig, PessimisticMDP, uncertainty
from privsynth.methods.primorl.sac import SACConfig, train_sac_in_model

PENDULUM = DatasetInfo(name="pendulum", **PENDULUM_INFO_KW)
TINY_SAC = SACConfig(hidden=(16, 16), epochs=2, steps_per_epoch=5, horizon=4, rollout_batch=8, batch=8)


def _mdp(starts: np.ndarray | None = None) -> PessimisticMDP:
    model = GaussianEnsemble(3, 1, seed=0)
    sampler = (lambda n, rng: starts[rng.integers(0, len(starts), n)]) if starts is not None else None
    if sampler is None:
        return PessimisticMDP.for_env(model, PENDULUM)
    return PessimisticMDP(model, sampler, obs_low=np.array([-1, -1, -8.0]), obs_high=np.array([1, 1, 8.0]),
                          act_low=np.array([-2.0]), act_high=np.array([2.0]))


def test_policy_stage_refuses_anything_but_the_model():
    ds = make_pendulum_dataset(PendulumDataConfig(episodes=3))
    with pytest.raises(TypeError, match="PessimisticMDP"):
        train_sac_in_model(ds, TINY_SAC)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        train_sac_in_model(_mdp(), TINY_SAC, dataset=ds)  # type: ignore[call-arg]  # no such parameter


def _reachable(obj, depth=0, seen=None):
    seen = set() if seen is None else seen
    if id(obj) in seen or depth > 6:
        return
    seen.add(id(obj))
    yield obj
    children = []
    if isinstance(obj, dict):
        children = list(obj.values())
    elif isinstance(obj, (list, tuple)):
        children = list(obj)
    elif hasattr(obj, "__dict__"):
        children = list(vars(obj).values())
    if callable(obj) and getattr(obj, "__closure__", None):
        children += [c.cell_contents for c in obj.__closure__]
    for c in children:
        yield from _reachable(c, depth + 1, seen)


def test_pessimistic_mdp_holds_no_data():
    mdp = _mdp()
    found = [o for o in _reachable(mdp) if isinstance(o, (OfflineDataset, TrajectoryTensors))]
    assert not found


def test_rollouts_never_start_from_sensitive_states():
    """Starts are ρ0 draws (marked states here) or states the model produced; a sentinel sensitive state never
    appears in the SAC buffer's start states."""
    sentinel = np.array([[0.6, 0.8, 7.5]], dtype=np.float32)  # a "sensitive" state nobody gives to the MDP
    rho0 = np.array([[1.0, 0.0, 0.0], [-1.0, 0.0, 0.0]], dtype=np.float32)
    mdp = _mdp(starts=rho0)
    seen = []
    orig = mdp.reset
    mdp.reset = lambda n, rng: (lambda s: (seen.append(s), s)[1])(orig(n, rng))  # type: ignore[method-assign]
    train_sac_in_model(mdp, TINY_SAC)
    starts = torch.cat(seen)
    assert all(any(torch.allclose(s, torch.as_tensor(r)) for r in rho0) for s in starts)
    assert not any(torch.allclose(s, torch.as_tensor(sentinel[0])) for s in starts)


def test_sac_in_model_runs_and_is_seeded():
    a = train_sac_in_model(_mdp(), TINY_SAC)
    b = train_sac_in_model(_mdp(), TINY_SAC)
    obs = np.array([[1.0, 0.0, 0.0]], dtype=np.float32)
    assert np.allclose(a.policy.act(obs), b.policy.act(obs))
    assert np.all(np.abs(a.policy.act(obs)) <= 2.0)
    assert len(a.history) == 2 and "eval_return" not in a.history[0]


def test_uncertainty_penalties():
    means = torch.tensor([[[0.0, 0.0]], [[3.0, 4.0]], [[0.0, 1.0]]])  # N=3, B=1, D=2
    stds = torch.tensor([[[1.0, 0.0]], [[0.0, 2.0]], [[0.3, 0.4]]])
    assert float(uncertainty(means, stds, "mpd")) == pytest.approx(5.0)  # pairwise max, not distance to the mean
    assert float(uncertainty(means, stds, "ma")) == pytest.approx(2.0)  # max norm of the std
    with pytest.raises(Exception):
        uncertainty(means, stds, "bogus")


def test_penalty_lowers_reward_by_lambda_u():
    mdp = _mdp()
    mdp.pessimism = PessimismConfig(penalty="mpd", lam=2.0)
    obs = torch.randn(5, 3, generator=torch.Generator().manual_seed(1))
    out = mdp.step(obs, torch.ones(5, 1), torch.Generator().manual_seed(0))
    assert torch.allclose(out["reward"], out["model_reward"] - 2.0 * out["u"])
    assert torch.all(out["u"] > 0)  # independent inits disagree


def test_vectorised_pendulum_matches_gymnasium():
    import gymnasium as gym

    env = gym.make("Pendulum-v1")
    env.reset(seed=0)
    th, thdot = np.array([2.0]), np.array([-0.5])
    env.unwrapped.state = np.array([th[0], thdot[0]])
    rng = np.random.default_rng(0)
    for _ in range(50):
        u = np.clip(energy_controller(th, thdot) + rng.normal(size=1), -2, 2)
        obs, r, *_ = env.step(u.astype(np.float32))
        th, thdot, r2 = pendulum_step(th, thdot, u)
        assert np.allclose(obs, pendulum_obs(th, thdot)[0], atol=1e-5)
        assert r == pytest.approx(float(r2[0]), abs=1e-4)


def test_pendulum_dataset_shape_and_mixture():
    ds = make_pendulum_dataset(PendulumDataConfig(episodes=40, seed=1))
    assert ds.n_episodes == 40 and ds.n_transitions == 40 * 200 and ds.info.sensitive
    rets = ds.rewards.reshape(40, 200).sum(1)
    assert rets.max() > -400 and rets.min() < -700  # expert-ish and random-ish episodes
    expert = make_pendulum_dataset(PendulumDataConfig(episodes=20, random_fraction=0.0, max_noise=0.0))
    assert expert.rewards.reshape(20, 200).sum(1).mean() > -250
    gc.collect()
