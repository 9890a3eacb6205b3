"""Samplers for an EDM denoiser on vectors.

* :func:`sample_dpm`: diffusers' ``EDMDPMSolverMultistepScheduler`` (DPM-Solver++(3M) for transitions, 2M for
  trajectories; Karras schedule), 16-20 network evaluations, each through the folded one-noise-level forward of the
  residual MLP (:func:`sampling_net`). The scheduler's ``prediction_type="epsilon"`` *is* EDM's F-parametrisation: it
  feeds ``c_in·x`` and ``c_noise = ln(σ)/4`` to the network and forms ``c_skip·x + c_out·F`` itself with the same
  ``sigma_data`` (checked against :mod:`privsynth.synth.edm` in tests/test_edm.py).
* :func:`sample_heun`: the EDM stochastic sampler (Karras et al. 2022, Algorithm 2) with churn, the paper's reference
  (128 steps, S_churn 80, S_tmin 0.05, S_tmax 50, S_noise 1.003). Our own code because diffusers has no
  stochastic-churn Heun for EDM with these settings.

Both return rows in the model's (normalised) space; un-normalising, thresholding and clipping happen in the
synthesizer, before release.

:func:`sample_rows` runs the sampler on at most :data:`CHUNK_ROWS` rows at a time, whatever the config's
``batch_size``: the activations of 2048 rows stay in a core's 1 MB L2 cache, while 50k-row batches stream every
elementwise op through memory. ``scripts/bench_synth.py --sampling`` chose 2048 with two processes sampling at once
(docs/synthesizers.md).
"""
from __future__ import annotations

import math
from typing import Callable

import torch

from privsynth.synth.config import SamplerConfig
from privsynth.synth.edm import EDM, heun_gamma, karras_sigmas

__all__ = ["CHUNK_ROWS", "sample_dpm", "sample_heun", "sample_rows", "make_dpm_scheduler", "sampling_net"]

#: rows per sampler call (cache-sized; chosen with ``scripts/bench_synth.py --sampling``)
CHUNK_ROWS = 2048


def make_dpm_scheduler(edm: EDM, steps: int, order: int = 2):
    """A DPM-Solver++ multistep scheduler of ``order`` (2M or 3M) whose preconditioning matches ``edm`` (same
    σ_data, σ range and ρ)."""
    from diffusers import EDMDPMSolverMultistepScheduler

    c = edm.cfg
    sched = EDMDPMSolverMultistepScheduler(
        sigma_min=c.sigma_min,
        sigma_max=c.sigma_max,
        sigma_data=c.sigma_data,
        rho=c.rho,
        prediction_type="epsilon",
        algorithm_type="dpmsolver++",
        solver_order=int(order),
        final_sigmas_type="zero",
    )
    sched.set_timesteps(steps)
    return sched


def sampling_net(edm: EDM) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The network as a sampler calls it: the folded one-noise-level forward where the denoiser has one
    (:meth:`~privsynth.synth.denoiser.ResidualMLPDenoiser.folded`) and can fold (no adapters), else the module."""
    folded = getattr(edm.net, "folded", None)
    return folded() if callable(folded) and getattr(edm.net, "foldable", True) else edm.net


@torch.no_grad()
def sample_dpm(
    edm: EDM,
    n: int,
    dim: int,
    steps: int = 20,
    generator: torch.Generator | None = None,
    *,
    order: int = 2,
    net: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] | None = None,
) -> torch.Tensor:
    """``n`` rows from DPM-Solver++(``order``M) with ``steps`` steps (``steps`` network evaluations). ``net``
    (default :func:`sampling_net` of ``edm``) lets a caller that draws many chunks fold the network once."""
    net = sampling_net(edm) if net is None else net
    sched = make_dpm_scheduler(edm, steps, order)
    x = torch.randn(n, dim, generator=generator) * sched.sigmas[0]
    for t in sched.timesteps:
        f = net(sched.scale_model_input(x, t), t.expand(n))
        x = sched.step(f, t, x).prev_sample
    return x


@torch.no_grad()
def sample_heun(
    edm: EDM,
    n: int,
    dim: int,
    steps: int = 128,
    *,
    s_churn: float = 80.0,
    s_tmin: float = 0.05,
    s_tmax: float = 50.0,
    s_noise: float = 1.003,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """EDM Algorithm 2: stochastic Heun with churn, ``2·steps − 1`` network evaluations."""
    c = edm.cfg
    sigmas = karras_sigmas(steps, c.sigma_min, c.sigma_max, c.rho)
    x = torch.randn(n, dim, generator=generator) * sigmas[0]
    ones = torch.ones(n)
    for i in range(steps):
        s_cur, s_next = float(sigmas[i]), float(sigmas[i + 1])
        gamma = heun_gamma(s_cur, steps, s_churn, s_tmin, s_tmax)
        s_hat = s_cur * (1 + gamma)
        if gamma > 0:
            x = x + math.sqrt(s_hat**2 - s_cur**2) * s_noise * torch.randn(x.shape, generator=generator)
        d = (x - edm.denoise(x, ones * s_hat)) / s_hat
        x_next = x + (s_next - s_hat) * d
        if s_next > 0:  # second-order correction
            d2 = (x_next - edm.denoise(x_next, ones * s_next)) / s_next
            x_next = x + (s_next - s_hat) * 0.5 * (d + d2)
        x = x_next
    return x


def sample_rows(
    edm: EDM,
    n: int,
    dim: int,
    cfg: SamplerConfig,
    *,
    generator: torch.Generator | None = None,
    progress: Callable[[int], None] | None = None,
) -> torch.Tensor:
    """``n`` normalised rows in batches of ``min(cfg.batch_size, CHUNK_ROWS)`` with the configured method."""
    out = []
    done = 0
    net = sampling_net(edm) if cfg.method == "dpm" else None
    while done < n:
        b = min(cfg.batch_size, CHUNK_ROWS, n - done)
        if cfg.method == "dpm":
            out.append(sample_dpm(edm, b, dim, cfg.steps, generator, order=cfg.solver_order, net=net))
        elif cfg.method == "heun":
            out.append(
                sample_heun(
                    edm, b, dim, cfg.heun_steps, s_churn=cfg.s_churn, s_tmin=cfg.s_tmin, s_tmax=cfg.s_tmax,
                    s_noise=cfg.s_noise, generator=generator,
                )
            )
        else:
            raise ValueError(f"unknown sampler '{cfg.method}' (expected 'dpm' or 'heun')")
        done += b
        if progress is not None:
            progress(b)
    return torch.cat(out) if out else torch.zeros(0, dim)
