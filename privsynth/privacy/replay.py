"""The replay attack: regenerate DP-SGD's noise from what a reader of the card knows, subtract it, audit what is left.

If a run's privacy noise were drawn from a seed written on its card (as privsynth did before its noise moved to
OS entropy, :mod:`privsynth.privacy.noise`), anyone with the card could rebuild the generator, redraw the Poisson
masks and every noise vector in the engine's order, and subtract the noise from the released weights: the run is
then no more private than one without noise. This module is that attacker, on the gradient canaries of
:func:`privsynth.privacy.audit.audit_dp_train` (white-box, Nasr et al. 2023): the update of a linear model under
SGD with learning rate 1 is Σₜ(C·Σ sampled uₖ − noiseₜ)/B (the canary loss −⟨w, uₖ⟩ has gradient −uₖ), so adding the
replayed noise back leaves the clipped sums,
and projecting on each canary direction separates included canaries from excluded ones. The one-run bound of
Steinke, Nasr & Jagielski (2023) turns the guesses into an ε lower bound to hold against the claimed ε.

The attacker replays the ``bk`` engine's draw order (per step: one uniform per unit for the mask, then one normal
vector per parameter); against a secure source every replayed vector is independent of the real noise, so
subtracting it only adds noise, and the bound stays below the claim.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch

from privsynth.errors import PrivacyError
from privsynth.privacy.audit import AuditResult, _GradientCanaryLoss, audit_scores
from privsynth.privacy.dpsgd import DPSGDConfig, DPTrainResult, dp_train

__all__ = ["replayed_noise", "replay_attack"]


def replayed_noise(generator: torch.Generator, *, n_units: int, steps: int,
                   shapes: list[torch.Size], std: float) -> list[torch.Tensor]:
    """Σₜ noiseₜ per parameter as the ``bk`` engine would have drawn it from ``generator`` (mask first, then noise)."""
    total = [torch.zeros(s) for s in shapes]
    for _ in range(steps):
        torch.rand(n_units, generator=generator)  # the step's Poisson mask
        for acc_, s in zip(total, shapes):
            acc_.add_(torch.randn(s, generator=generator), alpha=std)
    return total


def replay_attack(
    cfg: DPSGDConfig,
    guess_generator: Callable[[], torch.Generator],
    *,
    canaries: int = 1000,
    dim: int = 5000,
    guesses: int = 100,
    claimed_epsilon: float | None = None,
    confidence: float = 0.95,
    seed: int = 0,
) -> tuple[AuditResult, DPTrainResult]:
    """Run DP-SGD on gradient canaries, subtract the noise replayed from ``guess_generator()``, audit the rest.

    ``guess_generator`` is the attacker's best reconstruction of the engine's generator from the card (for example a
    generator seeded with a seed printed on it). ``seed`` picks the canaries (not private: it is the auditor's).
    """
    if cfg.grad_sample_mode != "bk":
        raise PrivacyError("the replay attack reproduces the bk engine's draw order; use grad_sample_mode='bk'")
    rng = np.random.default_rng(seed)
    directions = rng.normal(size=(canaries, dim)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    included = rng.random(canaries) < 0.5
    items = torch.tensor(directions[included] * 2 * cfg.max_grad_norm, dtype=torch.float32)
    model = _GradientCanaryLoss(dim)
    start = model.lin.weight.detach().clone()
    # the canaries' count is the auditor's design, not a secret: the run uses q = B/N exactly
    run = dp_train(model, (items,), cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0),
                   n_units_noisy=int(items.shape[0]))
    update = (model.lin.weight.detach() - start).double()
    (noise,) = replayed_noise(guess_generator(), n_units=len(items), steps=run.steps,
                              shapes=[model.lin.weight.shape], std=run.noise_multiplier * cfg.max_grad_norm)
    clipped_sum = update * cfg.batch_size + noise.double()  # Σₜ C·Σ sampled uₖ if the replay is right
    scores = directions @ clipped_sum.numpy().reshape(-1)
    audit = audit_scores(scores, included, k_pos=guesses, k_neg=guesses, delta=cfg.delta,
                         claimed_epsilon=run.epsilon if claimed_epsilon is None else claimed_epsilon,
                         confidence=confidence)
    return audit, run
