"""EDM preconditioning, loss and samplers against Karras et al. (2022) Table 1 and diffusers' EDM schedulers."""
from __future__ import annotations

import math

import pytest
import torch

from privsynth.synth.config import DenoiserConfig, EDMConfig
from privsynth.synth.denoiser import ResidualMLPDenoiser
from privsynth.synth.edm import EDM, karras_sigmas, loss_weight, precondition
from privsynth.synth.sampling import make_dpm_scheduler, sample_dpm, sample_heun


def _edm(d=5, sigma_data=1.0, seed=0):
    torch.manual_seed(seed)
    return EDM(ResidualMLPDenoiser(d, DenoiserConfig(width=32, depth=2, cond_dim=16)), EDMConfig(sigma_data=sigma_data))


@pytest.mark.parametrize("sigma_data", [0.5, 1.0])
def test_preconditioning_matches_table_1(sigma_data):
    for s in [0.002, 0.1, 1.0, 7.3, 80.0]:
        c_skip, c_out, c_in, c_noise = precondition(torch.tensor(s, dtype=torch.float64), sigma_data)
        assert float(c_skip) == pytest.approx(sigma_data**2 / (s**2 + sigma_data**2), rel=1e-12)
        assert float(c_out) == pytest.approx(s * sigma_data / math.sqrt(s**2 + sigma_data**2), rel=1e-12)
        assert float(c_in) == pytest.approx(1 / math.sqrt(s**2 + sigma_data**2), rel=1e-12)
        assert float(c_noise) == pytest.approx(math.log(s) / 4, rel=1e-12)
        assert float(loss_weight(torch.tensor(s, dtype=torch.float64), sigma_data)) == pytest.approx(
            (s**2 + sigma_data**2) / (s * sigma_data) ** 2, rel=1e-12
        )


def test_denoiser_and_loss_follow_the_formulas():
    edm = _edm(sigma_data=0.7)
    x0, noise = torch.randn(6, 5), torch.randn(6, 5)
    sigma = torch.tensor([0.01, 0.1, 0.5, 1.0, 3.0, 40.0])
    xn = x0 + sigma[:, None] * noise
    s2 = sigma**2 + 0.7**2
    f = edm.net(xn / s2.sqrt()[:, None], sigma.log() / 4)
    d_ref = (0.7**2 / s2)[:, None] * xn + (sigma * 0.7 / s2.sqrt())[:, None] * f
    torch.testing.assert_close(edm.denoise(xn, sigma), d_ref)
    loss_ref = (s2 / (sigma * 0.7) ** 2) * ((d_ref - x0) ** 2).mean(1)
    torch.testing.assert_close(edm.loss(x0, sigma, noise), loss_ref)
    # F-parametrisation: λ(σ)·c_out² = 1, so the loss is the plain MSE of F against its effective target
    target = (x0 - (0.7**2 / s2)[:, None] * xn) / (sigma * 0.7 / s2.sqrt())[:, None]
    torch.testing.assert_close(edm.loss(x0, sigma, noise), ((f - target) ** 2).mean(1), rtol=1e-4, atol=1e-4)


def test_loss_is_per_sample_and_accepts_leading_dims():
    edm = _edm()
    x0 = torch.randn(3, 4, 5)
    sigma, noise = torch.rand(3, 4) + 0.1, torch.randn(3, 4, 5)
    out = edm.loss(x0, sigma, noise)
    assert out.shape == (3, 4)
    torch.testing.assert_close(out[1], edm.loss(x0[1], sigma[1], noise[1]))


def test_training_sigma_distribution():
    edm = _edm()
    ln = edm.sample_sigma((200_000,), torch.Generator().manual_seed(0)).log()
    assert float(ln.mean()) == pytest.approx(-1.2, abs=0.02)
    assert float(ln.std()) == pytest.approx(1.2, abs=0.02)


def test_karras_schedule_endpoints():
    s = karras_sigmas(128, 0.002, 80.0, 7.0)
    assert s.shape == (129,)
    assert float(s[0]) == pytest.approx(80.0, rel=1e-5) and float(s[-2]) == pytest.approx(0.002, rel=1e-4)
    assert float(s[-1]) == 0.0 and torch.all(s[:-1] > s[1:])


def test_diffusers_scheduler_uses_our_preconditioning():
    edm = _edm(sigma_data=1.0)
    sched = make_dpm_scheduler(edm, 20)
    assert sched.config.sigma_data == edm.cfg.sigma_data and sched.config.rho == edm.cfg.rho
    torch.testing.assert_close(sched.sigmas[:-1], karras_sigmas(20, 0.002, 80.0, 7.0)[:-1], rtol=1e-5, atol=1e-6)
    x = torch.randn(4, 5)
    for sigma in [0.05, 1.0, 20.0]:
        s = torch.tensor(sigma)
        c_skip, c_out, c_in, c_noise = precondition(s, 1.0)
        torch.testing.assert_close(sched.precondition_inputs(x, s), x * c_in)
        torch.testing.assert_close(sched.precondition_noise(s).reshape(-1), c_noise.reshape(-1))
        f = edm.net(x * c_in, c_noise.expand(4))
        torch.testing.assert_close(sched.precondition_outputs(x, f, s), edm.denoise(x, s.expand(4)))


class _GaussianDenoiser(torch.nn.Module):
    """Exact F for data N(0, v·I): D(x;σ) = v/(v+σ²)·x, written in EDM F-form so samplers can be checked."""

    def __init__(self, v: float, sigma_data: float) -> None:
        super().__init__()
        self.v, self.sd = v, sigma_data

    def forward(self, x_in, c_noise):
        sigma = (4 * c_noise).exp()[..., None]
        s2 = sigma**2 + self.sd**2
        x = x_in * s2.sqrt()
        d = self.v / (self.v + sigma**2) * x
        return (d - self.sd**2 / s2 * x) / (sigma * self.sd / s2.sqrt())


@pytest.mark.parametrize("sampler", ["dpm", "dpm3", "heun"])
def test_samplers_recover_a_gaussian(sampler):
    edm = EDM(_GaussianDenoiser(v=0.25, sigma_data=1.0), EDMConfig())
    gen = torch.Generator().manual_seed(0)
    if sampler == "dpm":
        x = sample_dpm(edm, 4000, 3, steps=50, generator=gen)
    elif sampler == "dpm3":  # the transition default: DPM-Solver++(3M), 16 steps
        x = sample_dpm(edm, 4000, 3, steps=16, generator=gen, order=3)
    else:
        x = sample_heun(edm, 4000, 3, steps=128, generator=gen)
    assert float(x.std()) == pytest.approx(0.5, rel=0.03)
    assert abs(float(x.mean())) < 0.03
