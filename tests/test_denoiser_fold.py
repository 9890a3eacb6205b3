"""The folded sampling forward of the residual-MLP denoiser equals the module (issue 17: one million rows in 90 s)."""
from __future__ import annotations

import pytest
import torch

from privsynth.synth.config import DenoiserConfig, EDMConfig, SamplerConfig
from privsynth.synth.denoiser import FoldedDenoiser, ResidualMLPDenoiser
from privsynth.synth.edm import EDM
from privsynth.synth.sampling import sample_dpm, sample_rows, sampling_net


def _net(seed: int = 0, width: int = 64, depth: int = 3, dim: int = 7) -> ResidualMLPDenoiser:
    torch.manual_seed(seed)
    net = ResidualMLPDenoiser(dim, DenoiserConfig(width=width, depth=depth, cond_dim=32))
    with torch.no_grad():  # LayerNorm starts as the identity affine map; make it matter
        for m in net.modules():
            if isinstance(m, torch.nn.LayerNorm):
                m.weight.normal_(1.0, 0.3)
                m.bias.normal_(0.0, 0.3)
    return net.eval()


@pytest.mark.parametrize("c", [-1.5, 0.0, 0.7, 2.2])
def test_folded_forward_equals_the_module(c):
    net = _net()
    x = torch.randn(300, 7, generator=torch.Generator().manual_seed(1)) * 3
    with torch.no_grad():
        want = net(x, torch.full((300,), c))
    got = net.folded()(x, torch.full((300,), c))
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    # a scalar noise level gives the same
    torch.testing.assert_close(net.folded()(x, torch.tensor(c)), got)


def test_a_new_fold_sees_new_weights_and_no_autograd_is_recorded():
    net = _net()
    x = torch.randn(5, 7)
    before = net.folded()(x, torch.tensor(0.3))
    with torch.no_grad():
        net.proj.weight.mul_(2.0)  # folded into the input matrix at fold time
        net.out.bias.add_(1.0)
        want = net(x, torch.full((5,), 0.3))
    torch.testing.assert_close(net.folded()(x, torch.tensor(0.3)), want, rtol=1e-4, atol=1e-5)
    assert not torch.allclose(want, before + 1.0)
    assert not before.requires_grad


def test_dpm_samples_with_the_fold_match_the_module():
    """The whole 20-step DPM-Solver path through the fold lands where the module's path does (same noise)."""
    edm = EDM(_net(2), EDMConfig())
    a = sample_dpm(edm, 256, 7, 20, torch.Generator().manual_seed(3))
    b = sample_dpm(edm, 256, 7, 20, torch.Generator().manual_seed(3), net=edm.net)
    assert isinstance(sampling_net(edm), FoldedDenoiser)
    torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)


def test_sample_rows_folds_once_and_chunks_independently_of_the_fold():
    edm = EDM(_net(4), EDMConfig())
    cfg = SamplerConfig(steps=8, batch_size=50)
    a = sample_rows(edm, 120, 7, cfg, generator=torch.Generator().manual_seed(0))
    g = torch.Generator().manual_seed(0)
    b = torch.cat([sample_dpm(edm, k, 7, 8, g, order=cfg.solver_order, net=edm.net) for k in (50, 50, 20)])
    torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)
