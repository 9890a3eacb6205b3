"""DP-SGD with Opacus' clipping (ghost, hooks): a unit whose gradient or norm is not finite is dropped, not spread.

One finite but extreme sensitive record (1e20-1e30 after normalisation) overflows the float32 norm computation; the
clip factor 0 · inf gave NaN in every weight, so D and D plus that record gave finite against all-NaN weights (an
unbounded change by one unit). The engine now drops such units and redoes the step on the others. Also: an
over-target ε found after the loop rolls the weights back like any other failure.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from privsynth.errors import PrivacyError
from privsynth.privacy import dpsgd
from privsynth.privacy.dpsgd import DPSGDConfig, _Engine, dp_train


class PerUnitLoss(nn.Module):
    """A deterministic per-unit loss [B] of a small MLP (no loss randomness, so steps can be compared exactly)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(3, 8), nn.Tanh(), nn.Linear(8, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x).squeeze(-1).pow(2) + x.pow(2).sum(-1) * 0.0


def _one_step(mode: str, x: torch.Tensor) -> list[torch.Tensor]:
    torch.manual_seed(0)
    module = PerUnitLoss()
    optimizer = torch.optim.SGD(module.parameters(), lr=1.0)
    engine = _Engine(module, optimizer, mode, sigma=0.0, max_grad_norm=1.0, expected_batch=8,
                     gen=torch.Generator().manual_seed(0))
    engine.step((x,), len(x))
    engine.close()
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
@pytest.mark.parametrize("magnitude", [1e20, 1e30, float("1e38")])
def test_an_extreme_unit_contributes_nothing_and_the_others_as_without_it(mode, magnitude):
    torch.manual_seed(1)
    x = torch.randn(6, 3)
    extreme = x.clone()
    extreme[2, 0] = magnitude
    with_it = _one_step(mode, extreme)
    without = _one_step(mode, torch.cat([x[:2], x[3:]]))
    assert all(torch.isfinite(p).all() for p in with_it)
    for a, b in zip(with_it, without):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


@pytest.mark.parametrize("mode", ["ghost", "hooks"])
def test_ordinary_units_are_untouched(mode):
    torch.manual_seed(2)
    x = torch.randn(6, 3)
    torch.manual_seed(0)
    module = PerUnitLoss()
    before = [p.detach().clone() for p in module.parameters()]
    after = _one_step(mode, x)
    assert any(not torch.equal(a, b) for a, b in zip(before, after))  # the step did train


@pytest.mark.parametrize("mode", ["ghost", "hooks", "bk"])
def test_dp_train_keeps_the_denoiser_finite_with_an_extreme_record(mode):
    from privsynth.synth.config import DenoiserConfig, cpu_config
    from privsynth.synth.denoiser import ResidualMLPDenoiser
    from privsynth.synth.edm import EDM
    from privsynth.synth.transition import UnitLoss

    torch.manual_seed(1)
    loss = UnitLoss(EDM(ResidualMLPDenoiser(5, DenoiserConfig(width=16, depth=1, cond_dim=8)), cpu_config().edm))
    x = torch.randn(40, 5)
    x[3, 1] = 1e25  # one sensitive transition with an extreme finite value; q = 1, so it is in every step
    dp_train(loss, (x,), DPSGDConfig(target_epsilon=10, delta=1e-3, epochs=2, batch_size=40, grad_sample_mode=mode))
    assert all(torch.isfinite(p).all() for p in loss.parameters())


def test_an_over_target_epsilon_rolls_the_weights_back(monkeypatch):
    torch.manual_seed(3)
    module = PerUnitLoss()
    before = [p.detach().clone() for p in module.parameters()]
    # a calibration that undershoots σ: the accountant then reads back far more than the target after the loop
    monkeypatch.setattr(dpsgd.acc, "calibrate_noise_multiplier", lambda *a, **k: 0.05)
    with pytest.raises(PrivacyError, match="above the target"):
        dp_train(module, (torch.randn(50, 3),),
                 DPSGDConfig(target_epsilon=5, delta=1e-3, epochs=1, batch_size=10, grad_sample_mode="bk"))
    for a, b in zip(before, module.parameters()):
        assert torch.equal(a, b.detach())
