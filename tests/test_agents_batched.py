"""Batched agents (issue 17): K agents as one stacked model reproduce K separate runs; the runner groups agent cells."""
from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import yaml

from test_agents import LEARNERS, TINY, chain_dataset, pointmaze_info
from privsynth.errors import InvalidData
from privsynth.evaluation.agents import (
    AgentJob,
    ReplayBuffer,
    fit_state_normalizer,
    run_seeds,
    train_agent,
    train_batched,
)
from privsynth.evaluation.agents.batched import stack_batches, stack_learners
from privsynth.evaluation.runner import Stage, _group_payloads, load_suite, register_group, run_suite

RUN = dict(num_updates=30, eval_every=15, eval_episodes=2, max_episode_steps=8, log_every=5, progress=False)


def _learners(name, seeds, obs_dim=6, act_dim=2):
    out = []
    for s in seeds:
        torch.manual_seed(s)
        x = LEARNERS[name](obs_dim, act_dim, config=TINY[name], num_updates=100)
        x.generator = torch.Generator().manual_seed(100 + s)
        out.append(x)
    return out


@pytest.mark.parametrize("name", ["iql", "td3bc", "edac"])
def test_k1_reproduces_train_agent_exactly(name):
    """Same seed: the batched trainer at K = 1 gives bit-identical losses, evaluation returns and weights."""
    data = chain_dataset()
    single = train_agent(data, pointmaze_info(), name, seed=3, config=TINY[name], **RUN)
    (batched,) = train_batched([AgentJob(data, pointmaze_info(), 3)], name, config=TINY[name], **RUN)
    assert batched.losses == single.losses and len(single.losses) == 6
    assert batched.eval_returns == single.eval_returns and batched.curve == single.curve
    for (k1, p1), (k2, p2) in zip(single.policy.state_dict().items(), batched.policy.state_dict().items()):
        assert k1 == k2 and (not torch.is_tensor(p1) or torch.equal(p1, p2)), k1
    assert batched.batched_with == 1 and batched.config == single.config


@pytest.mark.parametrize("name", ["iql", "td3bc", "edac"])
def test_each_slice_of_a_k4_update_is_its_own_agents_update(name):
    """Updates of 4 stacked agents, each with its own minibatch from its own dataset, move every agent's weights
    exactly as its own unbatched updates do (bit for bit on this torch build)."""
    datasets = [chain_dataset(seed=j, offset=0.5 * j) for j in range(4)]
    singles = _learners(name, range(4))
    model = stack_learners(copy.deepcopy(singles))
    bufs = [ReplayBuffer(d, fit_state_normalizer(d), seed=j) for j, d in enumerate(datasets)]
    for _ in range(3):  # TD3+BC updates its actor every second step
        batches = [b.sample(32) for b in bufs]
        got = model.update(stack_batches(batches))
        want = [x.update(b) for x, b in zip(singles, batches)]
        for key, values in got.items():
            assert values.shape == (4,)
            assert torch.equal(values, torch.stack([w[key] for w in want]).reshape(4)), key
    model.write_back()
    for x, y in zip(model.learners, singles):
        for (n, p), q in zip(x.named_parameters(), y.parameters()):
            assert torch.equal(p, q), n


def test_run_seeds_batched_gives_the_sequential_summary():
    data = chain_dataset()
    kw = dict(seeds=(0, 1), num_updates=6, eval_every=3, eval_episodes=1, max_episode_steps=5, final_k=1,
              config=TINY["td3bc"], progress=False)
    seq = run_seeds(data, pointmaze_info(), "td3bc", **kw)
    bat = run_seeds(data, pointmaze_info(), "td3bc", batched=True, **kw)
    assert [r.curve for r in bat.runs] == [r.curve for r in seq.runs] and bat.final_mean == seq.final_mean
    assert [r.batched_with for r in bat.runs] == [2, 2]


def test_stack_refuses_mixed_or_trained_learners():
    iql, td3 = _learners("iql", [0])[0], _learners("td3bc", [0])[0]
    with pytest.raises(ValueError, match="different learner kinds"):
        stack_learners([iql, td3])
    other = LEARNERS["iql"](6, 2, config=TINY["iql"], num_updates=7)
    with pytest.raises(ValueError, match="share their config"):
        stack_learners([iql, other])
    data = chain_dataset()
    iql.update(ReplayBuffer(data, seed=0).sample(8))
    with pytest.raises(ValueError, match="fresh"):
        stack_learners([iql])
    with pytest.raises(InvalidData, match="widths"):
        train_batched([AgentJob(data, pointmaze_info()), AgentJob(chain_dataset(obs_dim=5), pointmaze_info())], "iql",
                      config=TINY["iql"], **RUN)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["iql", "td3bc"])
def test_k4_matches_four_separate_runs_in_distribution(name):
    """K = 4 on seeds 0-3 against 4 separate runs: the same seeds give the same runs (losses and scores); other
    seeds (4-7) give losses whose mean agrees within the spread over seeds (Welch t below 4)."""
    data = chain_dataset()
    run = dict(RUN, num_updates=200, eval_every=200, log_every=50)
    batched = train_batched([AgentJob(data, pointmaze_info(), s) for s in range(4)], name, config=TINY[name], **run)
    same = [train_agent(data, pointmaze_info(), name, seed=s, config=TINY[name], **run) for s in range(4)]
    other = [train_agent(data, pointmaze_info(), name, seed=s, config=TINY[name], **run) for s in range(4, 8)]
    key = {"iql": "q_loss", "td3bc": "critic_loss"}[name]
    b = np.array([r.losses[-1][1][key] for r in batched])
    assert [r.losses for r in batched] == [r.losses for r in same]
    assert [r.curve for r in batched] == [r.curve for r in same]
    o = np.array([r.losses[-1][1][key] for r in other])
    t = (b.mean() - o.mean()) / np.sqrt(b.var(ddof=1) / 4 + o.var(ddof=1) / 4)
    assert abs(t) < 4, (b, o)
    assert len({round(float(x), 6) for x in b}) == 4  # the four agents really are different runs


# ---------------------------------------------------------------------------------------------- runner grouping
def test_group_payloads_splits_compatible_cells_over_workers():
    register_group("grouptest", key=lambda p: p["agent"])(lambda params, ctxs: [{} for _ in params])
    payloads = [{"params": {"agent": a, "seed": s}, "kind": "grouptest"} for a in ("iql", "td3bc") for s in range(5)]
    stage = Stage(kind="grouptest", group=4)
    jobs = _group_payloads(payloads, stage, workers=2)
    assert sorted(len(j) for j in jobs) == [2, 2, 3, 3]  # 5 cells of each agent over 2 workers
    assert all(len({p["params"]["agent"] for p in j}) == 1 for j in jobs)
    assert [len(j) for j in _group_payloads(payloads, Stage(kind="grouptest", group=1), workers=2)] == [1] * 10
    assert sorted(len(j) for j in _group_payloads(payloads, stage, workers=1)) == [2, 2, 3, 3]  # balanced, <= 4


@pytest.mark.slow
def test_runner_trains_compatible_agent_cells_as_one_batched_model(tmp_path):
    suite_file = tmp_path / "s.yaml"
    suite_file.write_text(yaml.safe_dump({
        "name": "batched", "workers": 1,
        "datasets": {"umaze": {"source": "pointmaze", "maze": "umaze", "steps": 400, "seed": 0, "dense": True,
                               "ref_episodes": 1}},
        "stages": [{"name": "agent", "kind": "agent", "grid": {"agent": ["td3bc", "iql"], "seed": [0, 1, 2]},
                    "params": {"synthesizer": "real", "data": {"sensitive": "umaze"}, "num_updates": 4,
                               "eval_every": 4, "eval_episodes": 1, "final_k": 1}}],
    }))
    suite = load_suite(suite_file, results_dir=tmp_path / "res")
    logs = []
    summary = run_suite(suite, progress=False, log=logs.append)
    assert summary["ran"] == 6 and summary["failed"] == 0
    assert any("6 cells in 2 jobs" in line for line in logs)
    from privsynth.evaluation.runner import collect_records, load_dataset_file, _dataset_path

    recs = collect_records(suite, kind="agent")
    assert {r["result"]["batched_with"] for r in recs} == {3}
    # a batched cell gets the score its own unbatched run gets
    data = load_dataset_file(_dataset_path(suite.out, "umaze", suite.datasets))
    rec = next(r for r in recs if r["params"]["agent"] == "td3bc" and r["params"]["seed"] == 1)
    alone = train_agent(data, data.info, "td3bc", seed=1, num_updates=4, eval_every=4, eval_episodes=1, final_k=1,
                        progress=False)
    assert rec["result"]["curve"] == [list(c) for c in alone.curve]
