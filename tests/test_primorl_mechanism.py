"""Algorithm 1 mechanics: ensemble clipping, per-trajectory sensitivity ≤ C, Poisson inclusion rate, noise scale."""
from __future__ import annotations

import math

import pytest
import torch

from privsynth.methods.primorl.dynamics import (GaussianEnsemble, TDPConfig, TrajectoryTensors, ensemble_clip,
                                                flat_norm, local_updates, poisson_sample, train_tdp_ensemble)


def _big_delta(model: GaussianEnsemble, scale: float = 10.0, clones: int | None = None) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    shape = (lambda v: (clones, *v.shape)) if clones else (lambda v: v.shape)
    return {k: scale * torch.randn(shape(v), generator=g) for k, v in model.params().items()}


@pytest.mark.parametrize("strategy", ["flat", "per_layer"])
def test_ensemble_clip_bounds(strategy):
    model = GaussianEnsemble(3, 1, seed=0)
    n, n_blocks = model.cfg.members, len(model.params())
    c = 0.7
    clipped = ensemble_clip(_big_delta(model), c, strategy)
    member_sq = sum(v.flatten(1).pow(2).sum(1) for v in clipped.values())  # [N]
    if strategy == "flat":
        assert torch.allclose(member_sq.sqrt(), torch.full((n,), c / math.sqrt(n)), rtol=1e-5)
    else:
        for v in clipped.values():
            assert torch.all(v.flatten(1).norm(dim=1) <= c / math.sqrt(n * n_blocks) * (1 + 1e-5))
    assert float(flat_norm(clipped)) <= c * (1 + 1e-5)
    assert float(flat_norm(clipped)) == pytest.approx(c, rel=1e-4)  # every block saturated by a huge delta


def test_ensemble_clip_leaves_small_deltas_alone():
    model = GaussianEnsemble(3, 1, seed=0)
    small = _big_delta(model, scale=1e-6)
    for strategy in ("flat", "per_layer"):
        out = ensemble_clip(small, 1.0, strategy)
        assert all(torch.equal(out[k], small[k]) for k in small)


def test_ensemble_clip_on_clones():
    model = GaussianEnsemble(3, 1, seed=0)
    clipped = ensemble_clip(_big_delta(model, clones=5), 0.5, "per_layer", member_dim=1)
    assert torch.all(flat_norm(clipped) <= 0.5 * (1 + 1e-5)) and flat_norm(clipped).shape == (5,)


def _toy(k: int = 12, length: int = 9, seed: int = 0) -> TrajectoryTensors:
    g = torch.Generator().manual_seed(seed)
    return TrajectoryTensors(10 * torch.randn(k, length, 3, generator=g), 10 * torch.randn(k, length, 3, generator=g),
                             torch.randint(3, length + 1, (k,), generator=g))


@pytest.mark.parametrize("strategy", ["flat", "per_layer"])
def test_one_trajectory_moves_the_sum_by_at_most_c(strategy):
    """Removing trajectory j from a round changes Σ_k Δ_k by Δ_j, whose norm is ≤ C (large lr forces clipping)."""
    data, model = _toy(), GaussianEnsemble(2, 1, seed=0)
    cfg = TDPConfig(noise_multiplier=0.0, clip_norm=0.3, strategy=strategy, local_lr=0.5, local_batch=2)
    idx = torch.arange(len(data))
    full = local_updates(model, data, idx, cfg, torch.Generator().manual_seed(0))
    norms = flat_norm(full)
    assert torch.all(norms <= 0.3 * (1 + 1e-5)) and float(norms.max()) > 0.25  # clipping was active
    for j in (0, 5):
        rest = local_updates(model, data, idx[idx != j], cfg, torch.Generator().manual_seed(0))
        # the local update of a trajectory depends only on that trajectory (and the minibatch-order randomness)
        diff = {k: full[k].sum(0) - rest[k].sum(0) for k in full}
        assert float(flat_norm(diff)) <= 0.3 * (1 + 1e-4)


def test_local_update_sees_only_its_trajectory():
    data, model = _toy(), GaussianEnsemble(2, 1, seed=0)
    cfg = TDPConfig(noise_multiplier=0.0, local_lr=1e-2, local_batch=4, local_optimizer="sgd")
    a = local_updates(model, data, torch.tensor([0, 1]), cfg, torch.Generator().manual_seed(3))
    data2 = TrajectoryTensors(data.x.clone(), data.y.clone(), data.lengths)
    data2.y[1] += 5.0  # change another trajectory
    b = local_updates(model, data2, torch.tensor([0, 1]), cfg, torch.Generator().manual_seed(3))
    assert all(torch.allclose(a[k][0], b[k][0]) for k in a)
    assert not all(torch.allclose(a[k][1], b[k][1]) for k in a)


def test_poisson_inclusion_rate():
    g = torch.Generator().manual_seed(0)
    q, k, rounds = 0.03, 2000, 200
    counts = torch.zeros(k)
    sizes = []
    for _ in range(rounds):
        idx = poisson_sample(k, q, g)
        counts[idx] += 1
        sizes.append(len(idx))
    rate = float(counts.sum()) / (k * rounds)
    assert rate == pytest.approx(q, rel=0.03)  # 12k expected draws: sd ~ 0.9%
    assert len(set(sizes)) > 5  # the batch size varies (not fixed-size sampling)
    assert float(counts.mean() / rounds) == pytest.approx(q, rel=0.03)


def test_noise_std_is_zc_over_qk():
    """With no trajectories sampled nothing but noise moves the weights: std z·C/(qK~) on every coordinate, K~ the DP
    count of the trajectories (issue 36: the fixed denominator is qK~, never the private K)."""
    k = 50
    data = TrajectoryTensors(torch.zeros(k, 2, 3), torch.zeros(k, 2, 3), torch.full((k,), 2))
    model = GaussianEnsemble(2, 1, seed=0)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    cfg = TDPConfig(noise_multiplier=0.8, clip_norm=2.0, sample_rate=1e-9, rounds=1)
    res = train_tdp_ensemble(data, model, cfg)
    moved = torch.cat([(p.detach() - before[n]).flatten() for n, p in model.named_parameters()])
    expected = 0.8 * 2.0 / (1e-9 * res.trajectories_noisy)
    assert float(moved.std()) == pytest.approx(expected, rel=0.05)
    assert float(moved.mean()) == pytest.approx(0.0, abs=0.1 * expected)


def test_zero_noise_is_deterministic_given_seed():
    data = _toy()
    cfg = TDPConfig(noise_multiplier=0.0, sample_rate=0.5, rounds=3, local_batch=4, noise_seed=0)  # replayable masks
    a = train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg).model
    b = train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg).model
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    assert train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg).event is None


def test_local_minibatch_orders_are_secret_unless_noise_seed(monkeypatch):
    """The local minibatch orders shape each clipped trajectory update and come from one stream over the dataset: with
    cfg.seed (on the card) anyone could replay them, and adding one trajectory would move the others' updates. They
    come from the noise source: different in two secure runs with the same cfg.seed, replayed by noise_seed."""
    from privsynth.methods.primorl import dynamics

    seen: list[torch.Tensor] = []
    real = dynamics.local_updates

    def spy(model, data, idx, cfg, generator):
        copy = torch.Generator()
        copy.set_state(generator.get_state())  # peek at the stream without advancing it
        seen.append(torch.rand(4, generator=copy))
        return real(model, data, idx, cfg, generator)

    monkeypatch.setattr(dynamics, "local_updates", spy)
    data = _toy()
    for noise_seed in (None, None, 3, 3):
        cfg = TDPConfig(noise_multiplier=1.0, sample_rate=0.5, rounds=1, local_batch=4, seed=0, noise_seed=noise_seed)
        train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg)
    assert len(seen) == 4
    assert not torch.equal(seen[0], seen[1])  # secure: fresh OS entropy each run, whatever cfg.seed says
    assert torch.equal(seen[2], seen[3])  # reproducible (NOT DP): replayed from noise_seed
    public = torch.rand(4, generator=torch.Generator().manual_seed(0))
    assert not any(torch.equal(s, public) for s in seen)  # never the card's seed stream
