"""Review of privsynth.methods (adversarial privacy review): regressions for the defects it reproduced.

1. PriMORL (Alg. 1/2): a sampled trajectory's clipped local update must not depend on which other trajectories were
   sampled in the same round. With local_epochs > 1 the shared local-Adam clock and moment decay of idle clones made
   it depend on the longest co-sampled trajectory, so adding one trajectory moved the others' clipped updates and the
   summed update's sensitivity exceeded C.
2. Expert-level SVT release: D_stable must not carry the logged episode index (the log is stored expert by expert,
   so the index tells which expert produced a released prefix) nor the log order.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsynth.methods.primorl.dynamics import EnsembleConfig, GaussianEnsemble, TDPConfig, TrajectoryTensors, local_updates


def _tiny_trajectories() -> tuple[GaussianEnsemble, TrajectoryTensors]:
    torch.manual_seed(0)
    model = GaussianEnsemble(3, 1, EnsembleConfig(members=2, hidden=(8,), weight_decay=(0.0, 0.0)), seed=0)
    lengths = torch.tensor([8, 40, 8])  # trajectory 1 is much longer than 0 and 2
    x, y = torch.randn(3, 40, 4), torch.randn(3, 40, 4)
    for i, n in enumerate(lengths):
        x[i, n:], y[i, n:] = 0, 0
    return model, TrajectoryTensors(x, y, lengths)


@pytest.mark.parametrize("epochs", [1, 2, 3])
@pytest.mark.parametrize("optimizer", ["adam", "sgd"])
def test_primorl_local_update_does_not_depend_on_co_sampled_trajectories(epochs, optimizer):
    torch.set_num_threads(1)
    model, data = _tiny_trajectories()
    cfg = TDPConfig(local_epochs=epochs, local_batch=8, clip_norm=10.0, local_lr=1e-2, local_optimizer=optimizer)
    alone = local_updates(model, data, torch.tensor([0]), cfg, torch.Generator().manual_seed(1))
    together = local_updates(model, data, torch.tensor([0, 1]), cfg, torch.Generator().manual_seed(1))
    for k in alone:
        assert torch.equal(alone[k][0], together[k][0]), k
    # and every clone's update stays in the clip ball
    norms = torch.sqrt(sum(v.flatten(1).pow(2).sum(1) for v in together.values()))
    assert (norms <= cfg.clip_norm * (1 + 1e-5)).all()


@pytest.fixture(scope="module")
def pool(expert_pool):
    return expert_pool


def _release(pool):
    from privsynth.methods.expert_svt import DataReleaseConfig, data_release

    ex, data = pool
    for seed in range(20):  # a release with at least two released prefixes (reproducible noise: a test)
        rel = data_release(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20, noise_seed=seed))
        if sum(r["k"] > 0 for r in rel.rounds) >= 2:
            return rel
    pytest.skip("no release with two stable prefixes")


def test_expert_svt_adapter_dataset_hides_logged_episode_index(pool):
    from privsynth.methods.adapters.expert_svt import _stable_dataset

    ex, data = pool
    rel = _release(pool)
    ds = _stable_dataset(data, rel, ledger_card={}, env="cartpole")
    released = [r for r in rel.rounds if r["k"] > 0]
    # episodes numbered 0..n-1 in round order, not by logged index (logged index // N = the expert)
    assert np.array_equal(np.unique(ds.episode_ids), np.arange(len(released)))
    assert not set(np.unique(ds.episode_ids)) & {r["episode"] for r in released if r["episode"] >= len(released)}
    first = released[0]
    s = int(data.ep_start[first["episode"]])
    assert np.array_equal(ds.observations[: first["k"]], data.obs[s: s + first["k"]])
    assert len(ds) == rel.n_stable


def test_expert_svt_release_outputs_in_round_order_not_log_order(pool):
    from privsynth.methods.expert_svt import release_order

    ex, data = pool
    rel = _release(pool)
    idx = release_order(data, rel)
    assert np.array_equal(np.sort(idx), rel.stable_idx)
    released = [r for r in rel.rounds if r["k"] > 0]
    s = int(data.ep_start[released[0]["episode"]])
    assert idx[0] == s  # starts with the first round's prefix, wherever it sits in the log
