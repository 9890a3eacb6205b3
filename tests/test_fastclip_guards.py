"""Guards of book-keeping clipping (privsynth.privacy.fastclip) and the bk DP-SGD step, from an adversarial review.

* One unit whose gradient norm overflows float32 (a finite but extreme sensitive record) must not turn the whole
  clipped sum into NaN (a data-dependent, unbounded change of the output): it is dropped (clip factor 0).
* A layer call whose dim 0 is not the privacy unit (a computation shared across the batch, or units flattened
  K-major into dim 0) must be refused, not regrouped into pseudo-units that clip one unit's gradient several times.
* The real synthesizer networks (trajectory backbones, partial fine-tuning) give exact per-unit norms.
"""
from __future__ import annotations

import pytest
import torch
from torch import nn

from privsynth.errors import PrivacyError
from privsynth.privacy.dpsgd import DPSGDConfig, dp_train
from privsynth.privacy.fastclip import BookKeepingClipper


class Small(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(4, 8)
        self.n = nn.LayerNorm(8)
        self.b = nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # [B, D] or [B, T, D] -> [B]
        out = self.b(torch.tanh(self.n(self.a(x)))).squeeze(-1)
        return out if x.ndim == 2 else out.sum(-1)


def _clipped(model: nn.Module, x: torch.Tensor, clip: float, accumulate: bool = False) -> list[torch.Tensor]:
    clipper = BookKeepingClipper(model, clip)
    if accumulate:
        for p in model.parameters():
            p.grad = torch.zeros_like(p)
    clipper.backward(clipper.forward(x), accumulate=accumulate)
    clipper.close()
    grads = [p.grad.clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    return grads


@pytest.mark.parametrize("shape", [(6, 4), (6, 3, 4)])
@pytest.mark.parametrize("accumulate", [False, True])
def test_a_unit_with_an_overflowing_norm_is_dropped_not_spread(shape, accumulate):
    torch.manual_seed(0)
    model = Small()
    x = torch.randn(*shape)
    x[0] = x[0] * 1e25  # finite, but ‖a‖²·‖g‖² overflows float32
    grads = _clipped(model, x, 1.0, accumulate)
    assert all(torch.isfinite(g).all() for g in grads)
    rest = _clipped(model, x[1:], 1.0, accumulate)
    for g, r in zip(grads, rest):  # unit 0 contributes nothing (factor 0), the others as without it
        torch.testing.assert_close(g, r)


def test_dp_train_bk_keeps_the_denoiser_finite_with_an_extreme_record():
    from privsynth.synth.config import DenoiserConfig, cpu_config
    from privsynth.synth.denoiser import ResidualMLPDenoiser
    from privsynth.synth.edm import EDM
    from privsynth.synth.transition import UnitLoss

    cfg = cpu_config()
    torch.manual_seed(1)
    loss = UnitLoss(EDM(ResidualMLPDenoiser(5, DenoiserConfig(width=16, depth=1, cond_dim=8)), cfg.edm))
    x = torch.randn(40, 5)
    x[3, 1] = 1e25  # one sensitive transition with an extreme (finite) value; q = 1, so it is in the step
    dp_train(loss, (x,), DPSGDConfig(target_epsilon=10, delta=1e-3, epochs=1, batch_size=40, grad_sample_mode="bk"))
    assert all(torch.isfinite(p).all() for p in loss.parameters())


class SharedTable(nn.Module):
    """A position table run once on [T, n] and broadcast over the batch (dim 0 of the call is not the unit)."""

    def __init__(self, length: int = 12, width: int = 4) -> None:
        super().__init__()
        self.table = nn.Linear(length, width, bias=False)
        self.register_buffer("eye", torch.eye(length))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, T, W]
        return self.head(x + self.table(self.eye)).squeeze(-1).pow(2).sum(-1)


class KMajor(nn.Module):
    """Noise multiplicity written as ``x.repeat(K, 1)``: rows K-major in dim 0 ([K·B, D])."""

    def __init__(self, k: int = 4) -> None:
        super().__init__()
        self.k = k
        self.lin = nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x.repeat(self.k, 1)).squeeze(-1).pow(2).view(self.k, -1).mean(0)


@pytest.mark.parametrize("make, shape", [(SharedTable, (4, 12, 4)), (KMajor, (4, 3))])
def test_layer_calls_must_keep_the_unit_on_dim_0(make, shape):
    torch.manual_seed(0)
    model = make()
    x = torch.randn(*shape)
    clipper = BookKeepingClipper(model, 1.0)
    with pytest.raises(PrivacyError, match="dim 0"):
        clipper.backward(clipper.forward(x))
    clipper.close()
    with pytest.raises(PrivacyError, match="dim 0"):  # q = 1 (a given count of 4): no step's Poisson batch is empty
        dp_train(model, (x,), DPSGDConfig(target_epsilon=10, delta=1e-2, epochs=1, batch_size=4, grad_sample_mode="bk"),
                 n_units_noisy=shape[0])


@pytest.mark.parametrize("backbone", ["transformer", "unet", "dp-transformer"])
@pytest.mark.parametrize("bias_norm", [False, True])
def test_real_trajectory_networks_have_exact_per_unit_norms(backbone, bias_norm):
    from privsynth.synth.trajectory.config import tiny_config
    from privsynth.synth.trajectory.diffusion import FragmentEDM
    from privsynth.synth.trajectory.dp_transformer import ARTransformer
    from privsynth.synth.trajectory.synthesizer import TrajectoryLoss
    from privsynth.synth.trajectory.transformer import DiffusionTransformer
    from privsynth.synth.trajectory.unet import TemporalUNet

    obs, act = 3, 2
    dim = 2 * obs + act + 3
    cfg = tiny_config(backbone)
    torch.manual_seed(2)
    if backbone == "transformer":
        net = FragmentEDM(DiffusionTransformer(obs, act, cfg.horizon, cfg.transformer), cfg.edm)
    elif backbone == "unet":
        net = FragmentEDM(TemporalUNet(dim, cfg.horizon, cfg.unet), cfg.edm)
    else:
        net = ARTransformer(obs, act, cfg.horizon, cfg.ar)
    if bias_norm:
        for name, p in net.named_parameters():
            p.requires_grad_(name.endswith("bias") or "norm" in name)
    module = TrajectoryLoss(net, 3)
    b, f, h = 3, 4, cfg.horizon
    batch = (torch.randn(b, f, h, dim), torch.randn(b, f, dim + 1), torch.ones(b, f, h, dtype=torch.bool))
    params = [p for p in module.parameters() if p.requires_grad]
    torch.manual_seed(5)
    losses = module(*batch)
    ref = []
    for i in range(b):  # brute force: one backward per unit on the same draws
        grads = torch.autograd.grad(losses[i], params, retain_graph=True, allow_unused=True)
        ref.append(torch.sqrt(sum(g.double().pow(2).sum() for g in grads if g is not None)))
    clipper = BookKeepingClipper(module, 1.0)
    torch.manual_seed(5)
    norms = clipper.backward(clipper.forward(*batch))
    clipper.close()
    torch.testing.assert_close(norms.double(), torch.stack(ref), rtol=1e-4, atol=1e-6)


def test_layer_norm_over_several_dims_is_refused_with_a_clear_error():
    from privsynth.privacy.fastclip import supported

    model = nn.Sequential(nn.LayerNorm((3, 4)), nn.Linear(4, 1))
    assert not supported(model)
    with pytest.raises(PrivacyError, match="last dimension"):
        BookKeepingClipper(model, 1.0)
