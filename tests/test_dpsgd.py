"""The DP-SGD engine: exact per-unit clipping in every mode, trajectory units clipped once, accounting read back."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from privsynth.errors import PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.dpsgd import DPSGDConfig, dp_train
from privsynth.privacy.ledger import Ledger

MODES = ["ghost", "hooks", "bk"]


class StepLoss(nn.Module):
    """Per-unit loss of a small residual MLP; with a [B, L, D] input and mask, the SUM over the unit's steps."""

    def __init__(self, d: int = 6, w: int = 16) -> None:
        super().__init__()
        self.inp = nn.Linear(d, w)
        self.norm = nn.LayerNorm(w)
        self.out = nn.Linear(w, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        h = self.inp(x)
        h = h + torch.tanh(self.norm(h))
        per_step = (self.out(h) - x.flip(-1)).pow(2).mean(-1)
        if mask is None:
            return per_step
        return (per_step * mask).sum(-1)


def _clipped_mean_update(model: nn.Module, items, clip: float) -> list[torch.Tensor]:
    """Brute force: each unit's gradient alone, clipped once, averaged over all units."""
    n = items[0].shape[0]
    total = [torch.zeros_like(p) for p in model.parameters()]
    for i in range(n):
        model.zero_grad()
        model(*(t[i : i + 1] for t in items)).sum().backward()
        grads = [p.grad.clone() for p in model.parameters()]
        norm = torch.sqrt(sum(g.pow(2).sum() for g in grads))
        c = min(1.0, clip / (float(norm) + 1e-6))
        for acc_g, g in zip(total, grads):
            acc_g += c * g
    return [t / n for t in total]


def _run_one_full_step(model, items, mode, clip, unit="transition"):
    """q = 1, one step, no noise, plain SGD with lr 1: the update is minus the clipped mean."""
    before = [p.detach().clone() for p in model.parameters()]
    n = items[0].shape[0]
    cfg = DPSGDConfig(delta=1e-3 / n, epochs=1, batch_size=n, max_grad_norm=clip, unit=unit, grad_sample_mode=mode,
                      noise_multiplier=0.0)
    res = dp_train(model, items, cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0), n_units_noisy=n)
    assert res.steps == 1 and res.batch_sizes == [n]
    return [b - p.detach() for b, p in zip(before, model.parameters())], res


@pytest.mark.parametrize("mode", MODES)
def test_transition_unit_clipping_is_exact(mode):
    torch.manual_seed(0)
    x = torch.randn(12, 6) * 3
    model = StepLoss()
    ref_model = StepLoss()
    ref_model.load_state_dict(model.state_dict())
    ref = _clipped_mean_update(ref_model, (x,), 0.05)
    update, res = _run_one_full_step(model, (x,), mode, 0.05)
    for u, r in zip(update, ref):
        torch.testing.assert_close(u, r, rtol=1e-4, atol=1e-6)
    assert math.isinf(res.epsilon)  # no noise: nothing is private, and the ledger says so


@pytest.mark.parametrize("mode", MODES)
def test_trajectory_unit_clips_the_summed_gradient_once(mode):
    torch.manual_seed(1)
    n, length, d = 5, 40, 6
    x = torch.randn(n, length, d) * 2
    mask = torch.ones(n, length)
    mask[0, 25:] = 0  # a shorter trajectory, padded
    mask[3, 10:] = 0
    model = StepLoss(d)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    ref_model = StepLoss(d)
    ref_model.load_state_dict(state)
    ref = _clipped_mean_update(ref_model, (x, mask), 0.1)
    # the per-transition alternative is different: clipping each of 40 steps would move weights far more
    per_transition_model = StepLoss(d)
    per_transition_model.load_state_dict(state)
    flat = x[mask.bool()]
    wrong = _clipped_mean_update(per_transition_model, (flat,), 0.1)
    update, res = _run_one_full_step(model, (x, mask), mode, 0.1, unit="trajectory")
    for u, r in zip(update, ref):
        torch.testing.assert_close(u, r, rtol=1e-4, atol=1e-6)
    total = torch.sqrt(sum(u.pow(2).sum() for u in update))
    assert total <= 0.1 + 1e-5  # mean of 5 clipped trajectory gradients
    assert torch.sqrt(sum(w.pow(2).sum() for w in wrong)) * flat.shape[0] / n > 2 * total
    assert res.event.params["unit"] == "trajectory"


@pytest.mark.parametrize("mode", MODES)
def test_spent_epsilon_matches_accountant_and_module_is_left_plain(mode):
    torch.manual_seed(2)
    x = torch.randn(400, 6)
    model = StepLoss()
    keys = list(model.state_dict())
    cfg = DPSGDConfig(target_epsilon=3.0, delta=1e-4, epochs=2, batch_size=20, grad_sample_mode=mode, noise_seed=3)
    steps_seen = []
    res = dp_train(model, (x,), cfg, on_step=lambda s, loss: steps_seen.append(s))
    # N is private (add/remove): q and the steps come from the Laplace count Ñ, which the run charges itself
    n_noisy = res.event.params["n_units_noisy"]
    assert "n_units" not in res.event.params
    q = 20 / n_noisy
    assert res.sample_rate == q and res.steps == round(2 / q) == len(res.losses) == len(steps_seen)
    scale = 1 / (0.02 * 3.0)
    sigma = acc.calibrate_noise_multiplier(3.0, 1e-4, q, res.steps, "rdp", count_scale=scale)
    assert res.noise_multiplier == pytest.approx(sigma)
    # independent dp-accounting composition of the Laplace count and the Poisson-sampled Gaussian run
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    indep = rdp.RdpAccountant()
    indep.compose(dpa.LaplaceDpEvent(scale))
    indep.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), res.steps))
    assert res.epsilon == pytest.approx(indep.get_epsilon(1e-4), rel=1e-9)
    assert res.epsilon <= 3.0
    # the event composes back to the same ε in a ledger
    led = Ledger(unit="transition", delta=1e-4).append(res.event)
    assert led.epsilon() == pytest.approx(res.epsilon, rel=1e-9)
    assert list(model.state_dict()) == keys
    assert all(p.grad is None and not hasattr(p, "grad_sample") for p in model.parameters())
    assert not model._forward_hooks and not any(m._forward_hooks or m._backward_hooks for m in model.modules())


def test_noise_is_added():
    torch.manual_seed(3)
    x = torch.zeros(50, 6)
    model = StepLoss()
    model.out.weight.data.zero_()
    model.out.bias.data.zero_()
    model.inp.weight.data.zero_()
    model.inp.bias.data.zero_()
    before = [p.detach().clone() for p in model.parameters()]
    cfg = DPSGDConfig(delta=1e-3, epochs=1, batch_size=50, noise_multiplier=1.0, grad_sample_mode="bk")
    res = dp_train(model, (x,), cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0))
    # zero data, zero weights: any change to the output layer comes from the noise, std σC/B per step over the
    # run's steps; B = q·Ñ and the steps follow the DP unit count Ñ (about 50 here, noisy: 0.02 per step at Ñ = 50)
    per_step = res.noise_multiplier * cfg.max_grad_norm / (res.sample_rate * res.n_units_noisy)
    delta_w = (model.out.weight - before[4]).detach()
    assert res.steps >= 1 and 0.5 < float(delta_w.std()) / (per_step * math.sqrt(res.steps)) < 1.5


@pytest.mark.parametrize("mode", MODES)
def test_empty_batches_take_a_noise_step(mode):
    x = torch.randn(1000, 6)
    model = StepLoss()
    # q = 1/1000 with a secure (unseeded) Poisson mask: a step is empty w.p. 0.999^1000 = 0.368, so 100 steps have
    # none with probability (1 - 0.368)^100 = 1e-20 (20 steps: 1e-4)
    cfg = DPSGDConfig(delta=1e-5, epochs=0.1, batch_size=1, noise_multiplier=1.0, grad_sample_mode=mode)
    res = dp_train(model, (x,), cfg, n_units_noisy=1000)  # the caller's count: q = 1/1000 exactly
    assert res.steps == 100 and 0 in res.batch_sizes
    assert all(math.isnan(l) for l, b in zip(res.losses, res.batch_sizes) if b == 0)


def test_bad_inputs():
    model = StepLoss()
    with pytest.raises(PrivacyError):  # δ ≥ 1/N
        dp_train(model, (torch.randn(10, 6),), DPSGDConfig(delta=0.2, batch_size=2))
    with pytest.raises(PrivacyError):  # batch larger than the data
        dp_train(model, (torch.randn(10, 6),), DPSGDConfig(delta=1e-3, batch_size=20), n_units_noisy=10)
    with pytest.raises(PrivacyError):  # a count that is not a positive integer
        dp_train(model, (torch.randn(10, 6),), DPSGDConfig(delta=1e-3, batch_size=2), n_units_noisy=0)

    class Mean(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(6, 1)

        def forward(self, x):
            return self.lin(x).mean()

    with pytest.raises(PrivacyError):  # a batch-mean loss would silently break per-unit clipping
        dp_train(Mean(), (torch.randn(100, 6),), DPSGDConfig(delta=1e-3, batch_size=10, epochs=0.1,
                                                             grad_sample_mode="bk"))


class FragmentLoss(nn.Module):
    """Fragments grouped per trajectory [B, F, H, D] with a mask [B, F]; one layer is applied twice per forward."""

    def __init__(self, d: int = 5, w: int = 8) -> None:
        super().__init__()
        self.inp = nn.Linear(d, w)
        self.shared = nn.Linear(w, w)
        self.norm = nn.LayerNorm(w)
        self.out = nn.Linear(w, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        h = h + torch.tanh(self.shared(self.norm(h)))
        h = h + torch.tanh(self.shared(h))  # the same weights again: per-unit gradient sums both calls
        per_fragment = (self.out(h) - x).pow(2).mean((-1, -2))
        return (per_fragment * mask).sum(-1)


@pytest.mark.parametrize("mode", MODES)
def test_fragments_and_reused_layers(mode):
    torch.manual_seed(4)
    x = torch.randn(6, 3, 4, 5) * 2
    mask = torch.ones(6, 3)
    mask[2, 1:] = 0
    model = FragmentLoss()
    ref_model = FragmentLoss()
    ref_model.load_state_dict(model.state_dict())
    ref = _clipped_mean_update(ref_model, (x, mask), 0.2)
    if mode == "ghost":  # Opacus ghost clipping refuses parameter reuse; the error says what to use instead
        with pytest.raises(PrivacyError, match="grad_sample_mode='bk'"):
            _run_one_full_step(model, (x, mask), mode, 0.2, unit="trajectory")
        return
    update, _ = _run_one_full_step(model, (x, mask), mode, 0.2, unit="trajectory")
    for u, r in zip(update, ref):
        torch.testing.assert_close(u, r, rtol=1e-4, atol=1e-6)


def test_bk_refuses_unsupported_layers_and_auto_falls_back():
    class WithEmbedding(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.lin = nn.Linear(4, 1)

        def forward(self, idx):
            return self.lin(self.emb(idx)).squeeze(-1)

    idx = torch.randint(0, 10, (200,))
    with pytest.raises(PrivacyError, match="ghost"):
        dp_train(WithEmbedding(), (idx,), DPSGDConfig(delta=1e-3, batch_size=10, epochs=0.1, noise_multiplier=1.0,
                                                       grad_sample_mode="bk"))
    res = dp_train(WithEmbedding(), (idx,), DPSGDConfig(delta=1e-3, batch_size=10, epochs=0.1, noise_multiplier=1.0,
                                                         grad_sample_mode="auto"))
    assert res.grad_sample_mode == "ghost"
    assert dp_train(StepLoss(), (torch.randn(200, 6),), DPSGDConfig(delta=1e-3, batch_size=10, epochs=0.1,
                                                                    noise_multiplier=1.0, grad_sample_mode="auto")
                    ).grad_sample_mode == "bk"


@pytest.mark.parametrize("length,d,w", [(3, 32, 64), (60, 4, 8)])  # Gram route, then materialised route
def test_bk_sequence_norm_routes_are_exact(length, d, w):
    torch.manual_seed(5)
    x = torch.randn(7, length, d)
    mask = torch.ones(7, length)
    model = StepLoss(d, w)
    ref_model = StepLoss(d, w)
    ref_model.load_state_dict(model.state_dict())
    ref = _clipped_mean_update(ref_model, (x, mask), 0.3)
    update, _ = _run_one_full_step(model, (x, mask), "bk", 0.3, unit="trajectory")
    for u, r in zip(update, ref):
        torch.testing.assert_close(u, r, rtol=1e-4, atol=1e-6)


class EncoderLoss(nn.Module):
    """A tiny nn.TransformerEncoder (optionally passed through Opacus' ModuleValidator.fix); loss summed over steps."""

    def __init__(self, fix: bool) -> None:
        super().__init__()
        from opacus.validators import ModuleValidator

        enc = nn.TransformerEncoder(nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True), 1)
        self.enc = ModuleValidator.fix(enc) if fix else enc
        self.inp = nn.Linear(4, 16)
        self.out = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.out(self.enc(self.inp(x))) - x).pow(2).mean(-1).sum(-1)


def test_transformer_encoder_needs_fix_then_is_exact():
    torch.manual_seed(6)
    x = torch.randn(5, 6, 4) * 2
    with pytest.raises(PrivacyError, match="ModuleValidator.fix"):
        _run_one_full_step(EncoderLoss(fix=False), (x,), "ghost", 0.05, unit="trajectory")
    for mode in ("ghost", "bk"):
        torch.manual_seed(7)
        model = EncoderLoss(fix=True)
        ref_model = EncoderLoss(fix=True)
        ref_model.load_state_dict(model.state_dict())
        ref = _clipped_mean_update(ref_model, (x,), 0.05)
        update, _ = _run_one_full_step(model, (x,), mode, 0.05, unit="trajectory")
        scale = max(float(r.abs().max()) for r in ref)
        assert max(float((u - r).abs().max()) for u, r in zip(update, ref)) < 1e-4 * scale


def test_failed_training_leaves_no_sensitive_update():
    torch.manual_seed(8)
    model = StepLoss()
    before = {k: v.clone() for k, v in model.state_dict().items()}

    def stop(step, loss):
        if step == 3:
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        dp_train(model, (torch.randn(100, 6),), DPSGDConfig(delta=1e-3, batch_size=10, epochs=1, noise_multiplier=1.0,
                                                            grad_sample_mode="bk"), on_step=stop)
    for k, v in model.state_dict().items():
        torch.testing.assert_close(v, before[k], rtol=0, atol=0)


def test_draw_ahead_gives_the_sequential_draws_and_weights():
    """bk on one process draws the next step's mask and noise on a helper thread: with a reproducible generator the
    batches and the trained weights equal the sequential loop's bit for bit, and a secure run is not repeatable."""
    x = torch.randn(200, 6, generator=torch.Generator().manual_seed(0))

    def run(ahead: bool, seed: int | None):
        torch.manual_seed(1)
        model = StepLoss()
        cfg = DPSGDConfig(delta=1e-3, batch_size=20, epochs=2, noise_multiplier=1.0, grad_sample_mode="bk",
                          noise_seed=seed, draw_ahead=ahead)
        res = dp_train(model, (x,), cfg)
        assert all(p.grad is None for p in model.parameters())
        return res, [p.detach().clone() for p in model.parameters()]

    import privsynth.privacy.dpsgd as dpsgd_module

    started = []
    real_init = dpsgd_module._DrawAhead.__init__

    def counting_init(self, *args, **kwargs):
        started.append(1)
        real_init(self, *args, **kwargs)

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # leaves a core for the helper thread on any machine with two
    expected = 1 if dpsgd_module._spare_core() else 0
    try:
        dpsgd_module._DrawAhead.__init__ = counting_init
        (seq, w_seq), (ahd, w_ahd) = run(False, 5), run(True, 5)
    finally:
        dpsgd_module._DrawAhead.__init__ = real_init
        torch.set_num_threads(threads)
    assert len(started) == expected
    assert seq.batch_sizes == ahd.batch_sizes and seq.steps == ahd.steps == 20
    assert all(torch.equal(a, b) for a, b in zip(w_seq, w_ahd))
    (_, w1), (_, w2) = run(True, None), run(True, None)
    assert not all(torch.equal(a, b) for a, b in zip(w1, w2))
