"""Trajectory-level DP of the trajectory synthesizers: one trajectory = one clipped gradient, q over trajectories,
accounted ε on the ledger, no duplication, no normaliser fitted on sensitive data."""
from __future__ import annotations

import math

import numpy as np
import dp_accounting as dpa
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.errors import PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.dpsgd import _Engine
from privsynth.synth.config import EDMConfig
from privsynth.synth.trajectory import TrajectoryLoss, TrajectorySynthesizer, tiny_config
from privsynth.synth.trajectory.config import ARTransformerConfig, TransformerConfig, UNetConfig
from privsynth.synth.trajectory.dp_transformer import ARTransformer
from privsynth.synth.trajectory.unet import TemporalUNet
from privsynth.synth.trajectory.diffusion import FragmentEDM
from privsynth.synth.trajectory.transformer import DiffusionTransformer

OBS, ACT, H = 3, 2, 4
D = 2 * OBS + ACT + 3


def _cfg():
    cfg = tiny_config()
    cfg.pretrain_curiosity = False  # curiosity has its own test; keep these fast
    return cfg


def _loss_module(k: int, kind: str = "transformer") -> TrajectoryLoss:
    torch.manual_seed(0)
    if kind == "unet":
        return TrajectoryLoss(FragmentEDM(TemporalUNet(D, H, UNetConfig(base=8, mults=(1, 2), kernel=3, fourier_dim=8)), EDMConfig()), k)
    if kind == "dp-transformer":
        return TrajectoryLoss(ARTransformer(OBS, ACT, H, ARTransformerConfig(width=16, depth=1, heads=2)), k)
    net = DiffusionTransformer(OBS, ACT, H, TransformerConfig(width=16, depth=1, heads=2, fourier_dim=8))
    return TrajectoryLoss(FragmentEDM(net, EDMConfig()), k)


def _items(lengths_in_fragments: list[int], fmax: int, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    b = len(lengths_in_fragments)
    data = 3 * torch.randn(b, fmax, H, D, generator=g)
    cond = torch.randn(b, fmax, D + 1, generator=g)
    mask = torch.zeros(b, fmax, H, dtype=torch.bool)
    for i, f in enumerate(lengths_in_fragments):
        mask[i, :f] = True
    return data, cond, mask


def _per_unit_grads(module: TrajectoryLoss, items: tuple[torch.Tensor, ...], seed: int) -> list[torch.Tensor]:
    """Brute force: each trajectory's gradient alone, with the same randomness as one batched forward."""
    params = [p for p in module.parameters() if p.requires_grad]
    torch.manual_seed(seed)
    losses = module(*items)
    out = []
    for i in range(losses.shape[0]):
        g = torch.autograd.grad(losses[i], params, retain_graph=True)
        out.append(torch.cat([x.flatten() for x in g]))
    return out


@pytest.mark.parametrize("mode,kind", [("bk", "transformer"), ("ghost", "transformer"), ("ghost", "unet"),
                                       ("ghost", "dp-transformer"), ("bk", "unet")])
def test_one_trajectory_moves_the_update_by_at_most_the_clip_norm(mode, kind):
    """A trajectory with 12 fragments, all used (K = 12): its summed gradient is clipped once to C (Opacus ghost
    clipping or the privacy core's book-keeping clipping, against brute force)."""
    module = _loss_module(k=12, kind=kind)
    items = _items([12], fmax=12)
    clip = 0.05
    g = _per_unit_grads(module, items, seed=1)[0]
    assert g.norm() > 2 * clip  # clipping is active: the raw summed gradient is far above C
    before = torch.cat([p.detach().flatten().clone() for p in module.parameters()])
    params = [p for p in module.parameters() if p.requires_grad]
    eng = _Engine(module, torch.optim.SGD(params, lr=1.0), mode, 0.0, clip, 1, torch.Generator().manual_seed(0))
    try:
        torch.manual_seed(1)
        eng.step(items, 1)
    finally:
        eng.close()
    after = torch.cat([p.detach().flatten() for p in module.parameters()])
    delta = before - after
    assert delta.norm() <= clip * (1 + 1e-4)
    expected = g * (clip / g.norm())
    torch.testing.assert_close(delta, expected, rtol=2e-3, atol=2e-6)


def test_each_trajectory_is_clipped_separately_whatever_its_fragment_count():
    """Batch of a long (10 fragments) and a short (1 fragment) trajectory: update = sum of per-trajectory clips."""
    module = _loss_module(k=10)
    items = _items([10, 1, 4], fmax=10, seed=3)
    clip = 0.1
    grads = _per_unit_grads(module, items, seed=2)
    expected = sum(g * min(1.0, clip / float(g.norm())) for g in grads)
    params = [p for p in module.parameters() if p.requires_grad]
    before = torch.cat([p.detach().flatten().clone() for p in params])
    eng = _Engine(module, torch.optim.SGD(params, lr=1.0), "bk", 0.0, clip, 1, torch.Generator().manual_seed(0))
    try:
        torch.manual_seed(2)
        eng.step(items, 3)
    finally:
        eng.close()
    delta = before - torch.cat([p.detach().flatten() for p in params])
    torch.testing.assert_close(delta, expected, rtol=2e-3, atol=2e-6)
    assert delta.norm() <= 3 * clip * (1 + 1e-4)


def test_loss_uses_only_valid_fragments_and_at_most_k():
    """Padding fragments never contribute; a trajectory with more than K fragments contributes exactly K."""
    module = _loss_module(k=3)
    calls = []
    inner = module.model.random_loss

    def spy(x, c, m):
        calls.append(m.any(-1).sum(1))
        return inner(x, c, m)

    module.model.random_loss = spy
    data, cond, mask = _items([5, 2], fmax=6)
    module(data, cond, mask)
    assert calls[0].tolist() == [3, 2]


@pytest.fixture
def sensitive():
    lengths = [int(x) for x in np.random.default_rng(0).integers(3, 14, size=40)]
    return make_toy_dataset(lengths=lengths, obs_dim=OBS, act_dim=ACT, seed=4, sensitive=True, name="sens")


@pytest.fixture
def public():
    return make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=OBS, act_dim=ACT, seed=1)


def test_sample_rate_is_over_trajectories_and_epsilon_is_accounted(public, sensitive):
    cfg = _cfg()
    cfg.dp.batch_size = 5
    synth = TrajectorySynthesizer(cfg).pretrain(public, progress=False)
    items = synth.trajectory_items(sensitive)
    assert items[0].shape[0] == sensitive.n_episodes  # one item per trajectory
    assert int(items[2].sum()) == sensitive.n_transitions  # every transition exactly once: nothing duplicated
    synth.finetune(sensitive, epsilon=4.0, delta=1e-3, progress=False)
    h = synth.history[-1]
    # q = B/Ñ over trajectories, Ñ the run's DP count of them (N is private under add/remove)
    n_noisy = h["trajectories_noisy"]
    assert h["sample_rate"] == pytest.approx(min(5, n_noisy) / n_noisy)
    assert "trajectories" not in h
    event = synth.ledger.events[-1]
    assert event.params["unit"] == "trajectory" and event.params["n_units_noisy"] == n_noisy
    assert "n_units" not in event.params
    # independent accountants (Opacus RDP on the same (σ, q, steps); the count's Laplace ε added by basic
    # composition, which the tight composition of the ledger never exceeds)
    from opacus.accountants import RDPAccountant

    rdp = RDPAccountant()
    rdp.history = [(h["noise_multiplier"], h["sample_rate"], h["steps"])]
    eps_opacus = rdp.get_epsilon(1e-3) + 1.0 / event.params["count_scale"]
    assert h["epsilon"] <= 4.0 * (1 + 1e-9)
    assert h["epsilon"] <= eps_opacus * (1 + 1e-6) and h["epsilon"] == pytest.approx(eps_opacus, rel=0.05)
    assert synth.ledger.epsilon() == pytest.approx(h["epsilon"], rel=1e-6)
    assert math.isfinite(h["noise_multiplier"]) and h["noise_multiplier"] > 0
    card = synth.sample(3).info.privacy_card
    assert card["private"] and card["ledger"] == synth.ledger.to_dict()


def test_noise_is_really_added(public, sensitive):
    """Same seed, same data: with σ from the accountant the weights differ from a σ=0 run."""
    outs = []
    for sigma in (None, 0.0):
        cfg = _cfg()
        cfg.dp.noise_multiplier = sigma
        synth = TrajectorySynthesizer(cfg).pretrain(public, progress=False)
        synth.finetune(sensitive, epsilon=2.0, delta=1e-3, progress=False)
        outs.append(torch.cat([p.flatten() for p in synth.model.parameters()]))
    assert (outs[0] - outs[1]).norm() > 1e-3


def test_normaliser_never_sees_sensitive_data(public, sensitive):
    with pytest.raises(PrivacyError):
        TrajectorySynthesizer(_cfg()).pretrain(sensitive, progress=False)
    with pytest.raises(PrivacyError):
        TrajectorySynthesizer(_cfg()).finetune(sensitive, 1.0, 1e-3, progress=False)
    synth = TrajectorySynthesizer(_cfg()).pretrain(public, progress=False)
    mean = synth.normalizer.mean.clone()
    synth.finetune(sensitive, 1.0, 1e-3, progress=False)
    torch.testing.assert_close(synth.normalizer.mean, mean)
    with pytest.raises(PrivacyError):
        synth.finetune(sensitive, 1.0, 1e-3, unit="transition", progress=False)


def test_release_guard_refuses_over_budget(public, sensitive):
    from privsynth.release import release_dataset

    synth = TrajectorySynthesizer(_cfg()).pretrain(public, progress=False)
    synth.finetune(sensitive, 3.0, 1e-3, progress=False)
    ds = synth.sample(2)
    with pytest.raises(PrivacyError):
        release_dataset(ds, synth.ledger, "test/traj-over-v0", epsilon_budget=1.0)
    spent = release_dataset(ds, synth.ledger, None, epsilon_budget=3.0)
    assert spent <= 3.0 * (1 + 1e-9)


def test_accounting_matches_ledger_composition(public, sensitive):
    synth = TrajectorySynthesizer(_cfg()).pretrain(public, progress=False)
    synth.finetune(sensitive, 2.0, 1e-3, progress=False)
    h = synth.history[-1]
    scale = synth.ledger.events[-1].params["count_scale"]
    eps = acc.events_epsilon([dpa.LaplaceDpEvent(scale),
                              acc.dpsgd_event(h["noise_multiplier"], h["sample_rate"], h["steps"])], 1e-3, "rdp")
    assert eps == pytest.approx(h["epsilon"], rel=1e-6) == synth.ledger.epsilon()


def test_failed_finetune_leaves_weights_ema_and_ledger_as_before(public, sensitive, monkeypatch):
    """As for transitions (test_finetune_rollback.py): an error after some DP-SGD steps moved the EMA (what is sampled
    and released) rolls everything back, so no unaccounted step survives."""
    cfg = _cfg()
    cfg.finetune.ema_every = 1
    cfg.finetune.epochs = max(cfg.finetune.epochs, 3.0)  # >= 3 steps whatever the DP count of the units gives q
    synth = TrajectorySynthesizer(cfg).pretrain(public, progress=False)
    before = ({k: v.clone() for k, v in synth.model.state_dict().items()},
              {k: v.clone() for k, v in synth.ema.shadow.state_dict().items()}, len(synth.history))
    real_step, calls = synth.ema.step, []

    def step(model):
        if len(calls) == 2:
            raise KeyboardInterrupt
        calls.append(1)
        real_step(model)

    monkeypatch.setattr(synth.ema, "step", step)
    with pytest.raises(KeyboardInterrupt):
        synth.finetune(sensitive, epsilon=4.0, delta=1e-3, progress=False)
    assert len(calls) == 2 and synth.ledger is None and len(synth.history) == before[2]
    for k, v in synth.model.state_dict().items():
        assert torch.equal(v, before[0][k]), k
    for k, v in synth.ema.shadow.state_dict().items():
        assert torch.equal(v, before[1][k]), k
