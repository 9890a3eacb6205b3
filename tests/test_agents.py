"""Downstream agents: updates learn, normaliser from training data, real-env scoring, seeding, vectorised ensemble."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest
import torch
from torch import nn

from conftest import make_toy_dataset
from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.data.envs import POINTMAZE_OBS_KEYS
from privsynth.errors import InvalidData, PrivsynthError, SpaceMismatch
from privsynth.evaluation.agents import (
    EDAC,
    IQL,
    TD3BC,
    EDACConfig,
    Evaluator,
    IQLConfig,
    Policy,
    ReplayBuffer,
    TD3BCConfig,
    fit_state_normalizer,
    normalized_score,
    train_agent,
    run_seeds,
)
from privsynth.evaluation.agents.d3rlpy_export import d3rlpy_arrays, episodes_layout_valid, to_d3rlpy
from privsynth.evaluation.agents.nets import EnsembleLinear, EnsembleMLP, _EnsembleHeadFn

TINY = {
    "iql": IQLConfig(hidden=(32, 32)),
    "td3bc": TD3BCConfig(hidden=(32, 32)),
    "edac": EDACConfig(hidden=(32, 32), num_critics=3),
}
LEARNERS = {"iql": IQL, "td3bc": TD3BC, "edac": EDAC}


def pointmaze_info(**kw) -> DatasetInfo:
    return DatasetInfo(name="umaze-real", env_id="PointMaze_UMazeDense-v3", obs_keys=list(POINTMAZE_OBS_KEYS),
                       env_kwargs={"continuing_task": True, "reset_target": False},
                       ref_min_score=kw.get("lo", 10.0), ref_max_score=kw.get("hi", 200.0))


def chain_dataset(n_eps=8, length=40, obs_dim=6, act_dim=2, seed=0, offset=0.0, name="chain") -> OfflineDataset:
    """Episodes whose next observation is the following observation; reward depends on state and action."""
    rng = np.random.default_rng(seed)
    obs_all, nxt_all, act_all, rew_all, ids = [], [], [], [], []
    for e in range(n_eps):
        s = rng.normal(size=obs_dim) + offset
        for _ in range(length):
            a = rng.uniform(-1, 1, size=act_dim)
            s2 = s + 0.1 * np.pad(a, (0, obs_dim - act_dim)) + 0.01 * rng.normal(size=obs_dim)
            obs_all.append(s), act_all.append(a), nxt_all.append(s2)
            rew_all.append(-np.abs(s[:2] - offset).sum() + 0.1 * a.sum())
            ids.append(e)
            s = s2
    n = len(ids)
    timeouts = np.zeros(n, dtype=bool)
    timeouts[length - 1 :: length] = True
    return OfflineDataset(np.array(obs_all), np.array(act_all), np.array(rew_all), np.array(nxt_all),
                          np.zeros(n, dtype=bool), timeouts, np.array(ids), info=DatasetInfo(name=name))


# ---------------------------------------------------------------- networks
def test_ensemble_linear_equals_separate_linear_layers():
    torch.manual_seed(0)
    ens = EnsembleLinear(7, 5, ensemble_size=4)
    x = torch.randn(4, 9, 7)
    singles = []
    for k in range(4):
        lin = nn.Linear(7, 5)
        with torch.no_grad():
            lin.weight.copy_(ens.weight[k].T)
            lin.bias.copy_(ens.bias[k, 0])
        singles.append(lin)
    expected = torch.stack([singles[k](x[k]) for k in range(4)])
    torch.testing.assert_close(ens(x), expected)
    for k in range(4):
        torch.testing.assert_close(ens.member_forward(x[k], k), expected[k])
    # gradients of each member only come from its own slice
    ens(x)[2].sum().backward()
    assert ens.weight.grad[[0, 1, 3]].abs().sum() == 0 and ens.weight.grad[2].abs().sum() > 0


def test_one_output_ensemble_head_matches_batched_autograd_and_is_twice_differentiable():
    """The Q heads (``out_features == 1``) run one slice at a time through their own autograd function: same values
    and gradients as ``baddbmm`` with autograd, each member's output independent of the ensemble size, and a
    correct second derivative (EDAC's diversity term differentiates through ∂Q/∂a)."""
    torch.manual_seed(3)
    head = EnsembleLinear(5, 1, ensemble_size=4).double()
    x = torch.randn(4, 9, 5, dtype=torch.float64, requires_grad=True)
    y = head(x)
    want = torch.baddbmm(head.bias, x, head.weight)
    torch.testing.assert_close(y, want)
    g = torch.randn_like(y)
    got = torch.autograd.grad(y, (x, head.weight, head.bias), g)
    ref = torch.autograd.grad(want, (x, head.weight, head.bias), g)
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b)
    pair = EnsembleLinear(5, 1, ensemble_size=2).double()
    with torch.no_grad():
        pair.weight.copy_(head.weight[1:3])
        pair.bias.copy_(head.bias[1:3])
    assert torch.equal(pair(x[1:3]), y[1:3])  # exact: a member does not see how many share the layer
    params = (x.detach().requires_grad_(), head.weight.detach().requires_grad_(), head.bias.detach().requires_grad_())
    assert torch.autograd.gradcheck(_EnsembleHeadFn.apply, params)
    assert torch.autograd.gradgradcheck(_EnsembleHeadFn.apply, params)


def test_ensemble_mlp_equals_separate_mlps_and_members_differ():
    torch.manual_seed(1)
    ens = EnsembleMLP(6, (16, 16), 1, ensemble_size=3)
    x = torch.randn(11, 6)
    out = ens(x)
    assert out.shape == (3, 11, 1)
    for k in range(3):
        h = x
        for i, layer in enumerate(ens.layers):
            h = h @ layer.weight[k] + layer.bias[k, 0]
            if i < len(ens.layers) - 1:
                h = torch.relu(h)
        torch.testing.assert_close(out[k], h)
        torch.testing.assert_close(ens.member_forward(x, k), h)
    assert not torch.allclose(out[0], out[1])  # members are initialised independently
    # nn.Linear's init bound 1/sqrt(fan_in) holds per member
    assert ens.layers[0].weight.abs().max() <= 1 / math.sqrt(6) + 1e-6


# ------------------------------------------------------------ IQL exactness
def test_iql_fused_update_equals_three_separate_corl_updates():
    """One backward over the summed losses gives the same step as CORL's V, Q, actor updates in sequence."""
    torch.manual_seed(0)
    cfg = IQLConfig(hidden=(16, 16))
    agent = IQL(6, 2, config=cfg, num_updates=100)
    v, q, q_t, actor = (copy.deepcopy(m) for m in (agent.v, agent.q, agent.q_target, agent.actor))
    opts = [torch.optim.Adam(m.parameters(), lr=3e-4) for m in (v, q, actor)]
    buf = ReplayBuffer(chain_dataset(), fit_state_normalizer(chain_dataset()), seed=0)
    b = buf.sample(64)
    agent.update(b)
    # CORL order: next_v with the old V; V step; Q step; target update; actor step with the old advantage
    sa = torch.cat([b.obs, b.act], -1)
    with torch.no_grad():
        next_v = v(b.next_obs).squeeze(-1)
        target_q = q_t(sa).amin(0).squeeze(-1)
    adv = target_q - v(b.obs).squeeze(-1)
    v_loss = (torch.abs(cfg.iql_tau - (adv < 0).float()) * adv**2).mean()
    opts[0].zero_grad(); v_loss.backward(); opts[0].step()
    targets = b.rew + (1 - b.done) * cfg.discount * next_v
    qs = q(sa).squeeze(-1)
    q_loss = sum(nn.functional.mse_loss(qk, targets) for qk in qs) / 2
    opts[1].zero_grad(); q_loss.backward(); opts[1].step()
    exp_adv = torch.exp(cfg.beta * adv.detach()).clamp(max=cfg.exp_adv_max)
    dist = torch.distributions.Normal(actor.net(b.obs), actor.log_std.clamp(-20, 2).exp())
    pi_loss = (exp_adv * -dist.log_prob(b.act).sum(-1)).mean()
    opts[2].zero_grad(); pi_loss.backward(); opts[2].step()
    for ours, ref in ((agent.v, v), (agent.q, q), (agent.actor, actor)):
        for p1, p2 in zip(ours.parameters(), ref.parameters()):
            torch.testing.assert_close(p1, p2, rtol=1e-5, atol=1e-6)
    # Polyak on the target after the Q step
    for pt, p, p0 in zip(agent.q_target.parameters(), agent.q.parameters(), q_t.parameters()):
        torch.testing.assert_close(pt, 0.995 * p0 + 0.005 * p, rtol=1e-5, atol=1e-6)


# -------------------------------------------------------- learning signal
@pytest.mark.parametrize("name", ["iql", "td3bc", "edac"])
def test_update_reduces_critic_loss(name):
    torch.manual_seed(0)
    data = chain_dataset()
    cfg = TINY[name]
    agent = LEARNERS[name](data.obs_dim, data.act_dim, config=cfg, num_updates=400)
    buf = ReplayBuffer(data, fit_state_normalizer(data), seed=0)
    key = {"iql": "q_loss", "td3bc": "critic_loss", "edac": "td_loss"}[name]
    losses = [float(agent.update(buf.sample(128))[key]) for _ in range(400)]
    first, last = np.mean(losses[:30]), np.mean(losses[-30:])
    assert np.isfinite(losses).all()
    assert last < 0.5 * first, (first, last)


# ------------------------------------------------------------ normaliser
def test_normaliser_comes_from_training_data_and_is_used_in_training_and_evaluation():
    train = chain_dataset(offset=5.0, name="synthetic")
    norm = fit_state_normalizer(train)
    np.testing.assert_allclose(norm.mean.numpy(), train.observations.mean(0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(norm.std.numpy(), train.observations.std(0) + 1e-3, rtol=1e-4)
    assert norm.source == "training-data:synthetic"
    # the buffer hands out normalised states
    buf = ReplayBuffer(train, norm, seed=3)
    gen = torch.Generator().manual_seed(3)
    idx = torch.randint(train.n_transitions, (50,), generator=gen).numpy()
    b = buf.sample(50)
    np.testing.assert_allclose(b.obs.numpy(), (train.observations[idx] - norm.mean.numpy()) / norm.std.numpy(),
                               rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b.next_obs.numpy(),
                               (train.next_observations[idx] - norm.mean.numpy()) / norm.std.numpy(),
                               rtol=1e-5, atol=1e-5)
    # the policy normalises raw observations with the same statistics before its actor sees them
    seen = []
    policy = Policy(lambda o: (seen.append(o.clone()), torch.zeros(len(o), 2))[1], norm, -np.ones(2), np.ones(2))
    raw = torch.as_tensor(train.observations[:4])
    policy(raw)
    torch.testing.assert_close(seen[0], (raw - norm.mean) / norm.std)
    # and train_agent uses the training data's statistics, never the evaluation dataset's
    run = train_agent(train, pointmaze_info(), "td3bc", num_updates=4, eval_every=4, eval_episodes=1,
                      max_episode_steps=3, config=TD3BCConfig(hidden=(8, 8)), progress=False)
    assert run.normalizer_source == "training-data:synthetic"
    torch.testing.assert_close(run.policy.normalizer.mean, norm.mean)


def test_dataset_arrays_are_shared_not_copied():
    data = chain_dataset()
    buf = ReplayBuffer(data, None)
    assert np.shares_memory(buf.obs.numpy(), data.observations)
    assert np.shares_memory(buf.act.numpy(), data.actions)
    assert np.shares_memory(buf.next_obs.numpy(), data.next_observations)


# ------------------------------------------------------------- evaluation
def test_normalized_score_formula():
    info = DatasetInfo(ref_min_score=10.0, ref_max_score=110.0)
    assert normalized_score(info, 60.0) == pytest.approx(50.0)
    assert normalized_score(info, 10.0) == pytest.approx(0.0)
    with pytest.raises(InvalidData):
        normalized_score(DatasetInfo(name="x"), 1.0)


def test_evaluation_in_real_pointmaze_gives_finite_repeatable_score():
    info = pointmaze_info(lo=0.0, hi=20.0)
    ev = Evaluator(info, episodes=2, seed=0, max_episode_steps=15)
    data = make_toy_dataset(lengths=(20, 20), obs_dim=6, act_dim=2)
    ev.check_compatible(data)
    norm = fit_state_normalizer(data)
    policy = Policy(lambda o: torch.tanh(o[:, :2]), norm, ev.action_low, ev.action_high)
    r1, r2 = ev(policy), ev(policy)
    assert r1.returns.shape == (2,) and np.isfinite(r1.score)
    assert r1.score == pytest.approx(100.0 * r1.returns.mean() / 20.0)
    np.testing.assert_array_equal(r1.returns, r2.returns)  # same start states every evaluation (CORL re-seeds)
    assert r1.returns.max() > 0  # dense reward exp(-distance) is positive
    ev.close()


def test_train_agent_rejects_mismatched_spaces_unknown_agents_and_missing_reference_scores():
    data = make_toy_dataset(lengths=(10,), obs_dim=4, act_dim=2)
    with pytest.raises(SpaceMismatch):
        train_agent(data, pointmaze_info(), "iql", num_updates=2, eval_every=2, eval_episodes=1, progress=False)
    with pytest.raises(InvalidData):
        train_agent(data, pointmaze_info(), "cql", num_updates=2, progress=False)
    no_ref = DatasetInfo(name="noref", env_id="PointMaze_UMazeDense-v3", obs_keys=list(POINTMAZE_OBS_KEYS))
    with pytest.raises(InvalidData):
        train_agent(make_toy_dataset(lengths=(10,), obs_dim=6), no_ref, "iql", num_updates=2, progress=False)


# ----------------------------------------------------------------- seeding
@pytest.mark.parametrize("name", ["iql", "td3bc", "edac"])
def test_same_seed_same_run_and_different_seed_differs(name):
    data = chain_dataset()
    kw = dict(num_updates=40, eval_every=20, eval_episodes=1, max_episode_steps=10, log_every=10,
              config=TINY[name], progress=False)
    a = train_agent(data, pointmaze_info(), name, seed=1, **kw)
    b = train_agent(data, pointmaze_info(), name, seed=1, **kw)
    c = train_agent(data, pointmaze_info(), name, seed=2, **kw)
    assert a.curve == b.curve and a.losses == b.losses
    assert a.losses != c.losses
    assert len(a.curve) == 2 and a.final_k == 10
    assert a.final_score == pytest.approx(np.mean([s for _, s in a.curve]))
    assert a.best_score == max(s for _, s in a.curve)
    assert a.updates_per_s > 0 and a.to_dict()["final_score"] == a.final_score
    state = a.policy.state_dict()  # the trained policy is saveable: actor weights + normaliser statistics
    assert "normalizer.mean" in state and any(k.startswith("actor.") for k in state)


def test_run_seeds_summarises_final_and_best():
    data = chain_dataset()
    summary = run_seeds(data, pointmaze_info(), "td3bc", seeds=(0, 1), num_updates=6, eval_every=3,
                        eval_episodes=1, max_episode_steps=5, final_k=1, config=TD3BCConfig(hidden=(8, 8)),
                        progress=False)
    finals = [r.curve[-1][1] for r in summary.runs]
    assert summary.final_mean == pytest.approx(np.mean(finals))
    assert summary.final_std == pytest.approx(np.std(finals))
    assert summary.best_mean == pytest.approx(np.mean([r.best_score for r in summary.runs]))
    assert "td3bc" in str(summary)


# ---------------------------------------------------------- d3rlpy export
def _d3rlpy_transitions(arrays):
    """Re-implementation of d3rlpy 2.x's episode split + BasicTransitionPicker, to check the prepared rows."""
    out, start = [], 0
    term, tout = arrays["terminals"], arrays["timeouts"]
    for i in range(len(term)):
        if term[i] or tout[i]:
            terminated = bool(term[i])
            sl = slice(start, i + 1)
            obs, act, rew = arrays["observations"][sl], arrays["actions"][sl], arrays["rewards"][sl]
            count = len(obs) if terminated else len(obs) - 1
            for t in range(count):
                last = terminated and t == len(obs) - 1
                nxt = np.zeros_like(obs[t]) if last else obs[t + 1]
                out.append((obs[t], act[t], rew[t], nxt, float(last)))
            start = i + 1
    return out


def _check_exact(data, arrays, check_terminal_next=True):
    got = _d3rlpy_transitions(arrays)
    assert len(got) == data.n_transitions
    assert not np.any((arrays["terminals"] > 0) & (arrays["timeouts"] > 0))
    for t, (o, a, r, nxt, d) in enumerate(got):
        np.testing.assert_array_equal(o, data.observations[t])
        np.testing.assert_array_equal(a, data.actions[t])
        assert r == data.rewards[t] and d == float(data.terminals[t])
        if not d:
            np.testing.assert_array_equal(nxt, data.next_observations[t])


def test_d3rlpy_episode_layout_keeps_every_transition():
    data = chain_dataset(n_eps=3, length=5)
    # make the second episode end in a terminal
    term = data.terminals.copy(); term[9] = True
    tout = data.timeouts.copy(); tout[9] = False
    data = OfflineDataset(data.observations, data.actions, data.rewards, data.next_observations, term, tout,
                          data.episode_ids, info=data.info)
    assert episodes_layout_valid(data)
    arrays = d3rlpy_arrays(data)
    assert len(arrays["observations"]) == data.n_transitions + 2  # one closing row per non-terminal episode
    _check_exact(data, arrays)


def test_d3rlpy_transition_layout_for_independent_synthetic_transitions():
    data = make_toy_dataset(lengths=(5, 3, 7))  # next_obs does not chain; one terminal
    assert not episodes_layout_valid(data)
    with pytest.raises(InvalidData):
        d3rlpy_arrays(data, "episodes")
    arrays = d3rlpy_arrays(data)  # auto -> transitions
    assert len(arrays["observations"]) == 2 * data.n_transitions - int(data.terminals.sum())
    _check_exact(data, arrays)


def test_to_d3rlpy_builds_dataset_or_explains_missing_extra():
    data = chain_dataset(n_eps=2, length=4)
    try:
        import d3rlpy  # noqa: F401
    except ImportError:
        with pytest.raises(PrivsynthError, match=r"privsynth\[d3rlpy\]"):
            to_d3rlpy(data)
        return
    ds = to_d3rlpy(data)
    assert ds.transition_count == data.n_transitions
