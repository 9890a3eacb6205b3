"""The shared RL pieces: one evaluate_policy (gymnasium envs, lockstep lists, batched envs), one make_env, one SAC
actor whose shipped locomotion snapshots still load and act exactly as their stored weights say."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch

from privsynth.data.envs import make_env
from privsynth.data.locomotion.policies import load_card, pretrained_dir
from privsynth.rl.evaluate import evaluate_policy
from privsynth.rl.sac import SAC, SquashedGaussianActor
from privsynth.synth.checkpoint import load_weights_only


class CountEnv(gym.Env):
    """Reward = the action; the episode terminates after ``3 + seed % 3`` steps."""

    observation_space = gym.spaces.Box(-10, 10, (2,), np.float32)
    action_space = gym.spaces.Box(-1, 1, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, 3 + (seed or 0) % 3
        return np.array([self.t, seed or 0], np.float32), {}

    def step(self, action):
        self.t += 1
        return np.array([self.t, 0], np.float32), float(np.asarray(action).reshape(-1)[0]), self.t >= self.length, False, {}


def test_evaluate_policy_one_env_sums_rewards_per_seed():
    rets = evaluate_policy(CountEnv(), lambda obs: np.full((len(obs), 1), 0.5, np.float32), range(10, 13))
    np.testing.assert_allclose(rets, [0.5 * 4, 0.5 * 5, 0.5 * 3])  # lengths 3 + seed % 3


def test_lockstep_envs_give_the_same_returns_and_batch_the_policy():
    calls = []

    def act(obs):
        calls.append(len(obs))
        return obs[:, :1] * 0 + 1.0

    seeds = [0, 1, 2, 3, 4]
    one = evaluate_policy(CountEnv(), lambda o: o[:, :1] * 0 + 1.0, seeds)
    many = evaluate_policy([CountEnv(), CountEnv(), CountEnv()], act, seeds)
    np.testing.assert_array_equal(one, many)
    assert max(calls) == 3 and sum(calls) == sum(3 + s % 3 for s in seeds)


def test_max_steps_cuts_episodes():
    rets = evaluate_policy(CountEnv(), lambda o: np.ones((len(o), 1)), [2], max_steps=2)
    assert rets.tolist() == [2.0]


class Batched:
    """Two episodes: rewards 1 per step; the first terminates after 2 steps."""

    n = 2

    def reset(self):
        self.t = 0
        return np.zeros((2, 1), np.float32)

    def step(self, action):
        self.t += 1
        return np.zeros((2, 1), np.float32), np.ones(2), np.array([self.t >= 2, False])


def test_batched_env_stops_paying_after_termination():
    np.testing.assert_array_equal(evaluate_policy(Batched(), lambda o: np.zeros(2), max_steps=5), [2.0, 5.0])
    with pytest.raises(ValueError):
        evaluate_policy(Batched(), lambda o: np.zeros(2))


def test_make_env_takes_an_env_id():
    env = make_env("CartPole-v1", max_episode_steps=7)
    assert env.spec.id == "CartPole-v1" and env.spec.max_episode_steps == 7
    rets = evaluate_policy(env, lambda o: np.zeros(len(o), np.int64), [0])
    assert 1 <= rets[0] <= 7
    env.close()


def test_actor_scales_to_the_action_box_and_payload_round_trips():
    torch.manual_seed(0)
    actor = SquashedGaussianActor(3, 2, act_low=[-2.0, 0.0], act_high=[2.0, 1.0], hidden=(8, 8))
    obs = np.random.default_rng(0).standard_normal((50, 3)).astype(np.float32)
    a = actor.act(obs, deterministic=False, rng=np.random.default_rng(1))
    assert a.shape == (50, 2) and np.all(a[:, 0] >= -2) and np.all(a[:, 0] <= 2) and np.all((a[:, 1] >= 0) & (a[:, 1] <= 1))
    back = SquashedGaussianActor.from_payload(actor.to_payload(half=False))
    np.testing.assert_array_equal(back.act(obs), actor.act(obs))
    assert back.hidden == (8, 8)
    sampled, logp = actor.sample(torch.as_tensor(obs), torch.Generator().manual_seed(0))
    assert sampled.shape == (50, 2) and logp.shape == (50,) and torch.isfinite(logp).all()


def test_sac_update_changes_critics_and_keeps_targets_frozen():
    torch.manual_seed(0)
    sac = SAC(2, 1, hidden=(8,), target_entropy=-3.0)
    batch = (torch.randn(16, 2), torch.rand(16, 1) * 2 - 1, torch.randn(16, 1), torch.randn(16, 2), torch.zeros(16, 1))
    before = [p.clone() for p in sac.q1.parameters()]
    stats = sac.update(batch, torch.Generator().manual_seed(0))
    assert set(stats) == {"q_loss", "actor_loss", "alpha"} and sac.target_entropy == -3.0
    assert any(not torch.equal(a, b) for a, b in zip(before, sac.q1.parameters()))
    assert not any(p.requires_grad for p in sac.q1_t.parameters())


SHIPPED = (pretrained_dir("halfcheetah") / "card.json").is_file()


def _numpy_actor(payload: dict, obs: np.ndarray) -> np.ndarray:
    """Deterministic action straight from the stored float16 weights, independent of privsynth's modules."""
    sd = {k: v.float().numpy() for k, v in payload["state_dict"].items()}
    h = obs.astype(np.float32)
    for i in (0, 2, 4):
        h = h @ sd[f"net.{i}.weight"].T + sd[f"net.{i}.bias"]
        if i < 4:
            h = np.maximum(h, 0)
    return np.tanh(h[..., : payload["act_dim"]])


@pytest.mark.skipif(not SHIPPED, reason="shipped locomotion policies not present")
@pytest.mark.parametrize("env", ["halfcheetah", "hopper", "walker2d"])
def test_shipped_locomotion_snapshot_loads_with_its_stored_layout_and_outputs(env):
    card = load_card(env)
    step = card["levels"]["expert"]
    path = pretrained_dir(env) / "snapshots" / f"step_{step:07d}.pt"
    payload = load_weights_only(path)
    actor = SquashedGaussianActor.from_payload(payload)
    assert set(actor.to_payload()["state_dict"]) == set(payload["state_dict"])  # the file's layout is the builder's
    for k, v in actor.to_payload()["state_dict"].items():
        assert torch.equal(v, payload["state_dict"][k])
    obs = np.random.default_rng(0).standard_normal((5, actor.obs_dim)).astype(np.float32)
    np.testing.assert_allclose(actor.act(obs), _numpy_actor(payload, obs), atol=1e-5)
    np.testing.assert_array_equal(actor.act(obs[0]), actor.act(obs[:1])[0])
