"""bf16 matrix products for the agents (issue 17): only the wide layers switch, the products really run in bf16, the
results stay close to fp32, batched and unbatched agents agree, EDAC's double backward still works."""
from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

from test_agents import chain_dataset, pointmaze_info
from privsynth.errors import InvalidData
from privsynth.evaluation.agents import ReplayBuffer, fit_state_normalizer, make_agent, train_agent
from privsynth.evaluation.agents import nets
from privsynth.evaluation.agents.batched import stack_batches, stack_learners
from privsynth.evaluation.agents.edac import EDACConfig
from privsynth.evaluation.agents.iql import IQLConfig
from privsynth.evaluation.agents.nets import Bf16Linear, EnsembleMLP, set_matmul_precision
from privsynth.evaluation.agents.td3bc import TD3BCConfig

WIDE = {"iql": IQLConfig(hidden=(64, 64)), "td3bc": TD3BCConfig(hidden=(64, 64)),
        "edac": EDACConfig(hidden=(64, 64), num_critics=3)}


@pytest.fixture(autouse=True)
def _quiet_on_cpus_without_bf16():
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="this CPU has no native bf16", category=RuntimeWarning)
        yield


def _agent(name, seed, precision):
    torch.manual_seed(seed)
    x = make_agent(name, 6, 2, config=WIDE[name], num_updates=100, precision=precision)
    x.generator = torch.Generator().manual_seed(100 + seed)
    return x


def test_only_wide_layers_switch_and_the_state_dict_is_unchanged():
    net = nn.Sequential(nn.Linear(6, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    ens = EnsembleMLP(6, (64, 64), 1, ensemble_size=2)
    keys = list(net.state_dict())
    set_matmul_precision(net, "bf16")
    set_matmul_precision(ens, "bf16")
    assert [type(m) for m in net if isinstance(m, nn.Linear)] == [nn.Linear, Bf16Linear, nn.Linear]
    assert [layer.bf16 for layer in ens.layers] == [False, True, False]
    assert list(net.state_dict()) == keys
    set_matmul_precision(net, "fp32")
    set_matmul_precision(ens, "fp32")
    assert all(type(m) is nn.Linear for m in net if isinstance(m, nn.Linear))
    assert not any(layer.bf16 for layer in ens.layers)
    with pytest.raises(ValueError, match="unknown matmul precision"):
        set_matmul_precision(net, "fp16")


def test_bf16_product_is_really_bf16_and_close_to_fp32():
    torch.manual_seed(0)
    layer = nn.Linear(128, 96)
    x = torch.randn(64, 128)
    exact = layer(x)
    set_matmul_precision(layer, "bf16")
    got = layer(x)
    manual = (x.bfloat16() @ layer.weight.t().bfloat16()).float() + layer.bias
    assert torch.equal(got, manual)
    assert not torch.equal(got, exact)  # rounded to bf16's 8 mantissa bits ...
    assert torch.allclose(got, exact, rtol=0.02, atol=0.02)  # ... and no further from fp32
    got.square().sum().backward()  # gradients flow to the fp32 parameters
    assert layer.weight.grad.dtype == torch.float32 and layer.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("name", ["iql", "td3bc", "edac"])
def test_bf16_updates_stay_close_to_fp32_and_batched_matches_unbatched(name):
    """Same seed: a few bf16 updates give losses within a few per cent of fp32; two bf16 agents stacked follow their
    own unbatched bf16 runs (to bf16 rounding: the batched and plain GEMMs may round differently)."""
    data = chain_dataset()
    buf = lambda s: ReplayBuffer(data, fit_state_normalizer(data), seed=s)  # noqa: E731
    runs = {}
    for precision in ("fp32", "bf16"):
        agent, b = _agent(name, 0, precision), buf(0)
        runs[precision] = [agent.update(b.sample(32)) for _ in range(4)]
    for fp, bf in zip(runs["fp32"], runs["bf16"]):
        for key in fp:
            assert torch.allclose(bf[key], fp[key], rtol=0.05, atol=1e-3), (key, bf[key], fp[key])
    assert any(not torch.equal(bf[k], fp[k]) for fp, bf in zip(runs["fp32"], runs["bf16"]) for k in fp)

    singles = [_agent(name, s, "bf16") for s in (0, 1)]
    model = stack_learners(copy.deepcopy(singles))
    assert model.matmul_precision == "bf16"
    bufs_a, bufs_b = [buf(0), buf(1)], [buf(0), buf(1)]
    for _ in range(3):
        got = model.update(stack_batches([b.sample(32) for b in bufs_a]))
        want = [s.update(b.sample(32)) for s, b in zip(singles, bufs_b)]
        for j in range(2):
            for key in want[j]:
                assert torch.allclose(got[key][j], want[j][key], rtol=0.02, atol=1e-4), (key, j)


def test_edac_diversity_gradient_survives_bf16():
    """EDAC's ensemble-diversity term differentiates through the critics' input gradient (double backward): the
    critic's bf16 gradient must agree in direction with the fp32 one, not lose that term."""
    grads = {}
    for precision in ("fp32", "bf16"):
        agent = _agent("edac", 0, precision)
        data = chain_dataset()
        batch = ReplayBuffer(data, fit_state_normalizer(data), seed=0).sample(64)
        agent.critic_opt.step = lambda: None  # keep the gradient, skip the step
        agent.actor_opt.step = lambda: None
        agent.alpha_opt.step = lambda: None
        agent.update(batch)
        grads[precision] = torch.cat([p.grad.flatten() for p in agent.critic.parameters()])
    cos = torch.nn.functional.cosine_similarity(grads["fp32"], grads["bf16"], dim=0)
    assert cos > 0.99, float(cos)


def test_unknown_precision_is_refused_and_recorded_precision_is_in_the_run():
    data = chain_dataset(n_eps=2, length=10)
    with pytest.raises(InvalidData, match="unknown matmul precision"):
        make_agent("iql", 6, 2, precision="fp8")
    run = train_agent(data, pointmaze_info(), "td3bc", seed=0, config=WIDE["td3bc"], num_updates=4, eval_every=4,
                      eval_episodes=1, max_episode_steps=3, final_k=1, progress=False, precision="bf16")
    assert run.config["precision"] == "bf16"
    assert any(isinstance(m, Bf16Linear) for m in run.policy.modules())


def test_stack_refuses_mixed_precisions():
    with pytest.raises(ValueError, match="matmul precision"):
        stack_learners([_agent("iql", 0, "fp32"), _agent("iql", 1, "bf16")])


def test_warns_where_the_cpu_has_no_native_bf16(monkeypatch):
    monkeypatch.setattr(nets, "native_bf16", lambda: False)
    with pytest.warns(RuntimeWarning, match="no native bf16"):
        set_matmul_precision(nn.Linear(64, 64), "bf16")
