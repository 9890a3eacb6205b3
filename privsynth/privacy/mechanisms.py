"""One door for noise: each mechanism draws its noise from a :class:`NoiseSource` and records its event, in one call.

As Opacus couples the noise to its accountant, these functions take the ledger: a caller cannot add noise without
the event landing on the ledger, nor record an event whose noise came from a seed someone can read without the card
saying so (the event's ``noise`` parameter is the source's kind; see :mod:`privsynth.privacy.noise`).

* :func:`gaussian_mechanism`: ``value + N(0, σ²)`` on a statistic of L2 sensitivity Δ₂ (Dwork & Roth 2014, App. A);
  recorded as a Gaussian event with noise multiplier σ/Δ₂ (or, with ``rho_event=True``, as the ρ = Δ₂²/(2σ²) zCDP
  event it also is, Bun & Steinke 2016 Prop. 1.6).
* :func:`laplace_mechanism`: ``value + Lap(b)`` on a statistic of L1 sensitivity Δ₁ (ε = Δ₁/b).
* :func:`exponential_mechanism`: picks an index with probability ∝ exp(ε·score/(2Δ)) by the Gumbel-max trick
  (McSherry & Talwar 2007); recorded as ε-DP, or, with ``bounded_range=True``, as the ε²/8-zCDP it is
  (Cesar & Rogers 2021), as MST/AIM account it.

``ledger=None`` returns the event without recording it (for callers that assemble a ledger later); everything else
is identical.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from privsynth.errors import PrivacyError
from privsynth.privacy.ledger import Ledger, LedgerEvent
from privsynth.privacy.noise import NoiseSource, as_noise_source

__all__ = ["gaussian_mechanism", "laplace_mechanism", "exponential_mechanism"]


def _record(ledger: Ledger | None, event: LedgerEvent) -> LedgerEvent:
    if ledger is not None:
        ledger.append(event)
    return event


def gaussian_mechanism(
    value: np.ndarray | float,
    *,
    sigma: float,
    sensitivity: float,
    name: str,
    ledger: Ledger | None = None,
    source: NoiseSource | None = None,
    rho_event: bool = False,
    **params: Any,
) -> tuple[np.ndarray, LedgerEvent]:
    """``value`` plus Gaussian noise of std ``sigma``; the event (one release of the whole vector) is recorded."""
    if not (sigma > 0 and sensitivity > 0):
        raise PrivacyError(f"{name}: the Gaussian mechanism needs sigma > 0 and sensitivity > 0")
    src = as_noise_source(source)
    x = np.asarray(value, dtype=np.float64)
    noisy = x + src.numpy_rng().normal(0.0, float(sigma), size=x.shape)
    if rho_event:
        event = LedgerEvent.zcdp(name, rho=float(sensitivity) ** 2 / (2.0 * float(sigma) ** 2), sigma=float(sigma),
                                 sensitivity=float(sensitivity), noise=src.kind, **params)
    else:
        event = LedgerEvent.gaussian(name, sigma=float(sigma), sensitivity=float(sensitivity), noise=src.kind, **params)
    return noisy, _record(ledger, event)


def laplace_mechanism(
    value: np.ndarray | float,
    *,
    scale: float,
    sensitivity: float,
    name: str,
    ledger: Ledger | None = None,
    source: NoiseSource | None = None,
    **params: Any,
) -> tuple[np.ndarray, LedgerEvent]:
    """``value`` plus Laplace noise of scale ``scale`` (ε = sensitivity / scale); the event is recorded."""
    if not (scale > 0 and sensitivity > 0):
        raise PrivacyError(f"{name}: the Laplace mechanism needs scale > 0 and sensitivity > 0")
    src = as_noise_source(source)
    x = np.asarray(value, dtype=np.float64)
    noisy = x + src.numpy_rng().laplace(0.0, float(scale), size=x.shape)
    event = LedgerEvent.laplace(name, scale=float(scale), sensitivity=float(sensitivity), noise=src.kind, **params)
    return noisy, _record(ledger, event)


def exponential_mechanism(
    scores: np.ndarray,
    *,
    epsilon: float,
    sensitivity: float,
    name: str,
    ledger: Ledger | None = None,
    source: NoiseSource | None = None,
    bounded_range: bool = True,
    **params: Any,
) -> tuple[int, LedgerEvent]:
    """Index ``argmax(ε·score/(2Δ) + Gumbel)``: ε-DP for scores of sensitivity Δ; the event is recorded."""
    s = np.asarray(scores, dtype=np.float64)
    if s.ndim != 1 or s.size == 0 or not np.isfinite(s).all():
        raise PrivacyError(f"{name}: the exponential mechanism needs a non-empty vector of finite scores")
    if not (epsilon > 0 and sensitivity > 0):
        raise PrivacyError(f"{name}: the exponential mechanism needs epsilon > 0 and sensitivity > 0")
    src = as_noise_source(source)
    pick = int(np.argmax(float(epsilon) * s / (2.0 * float(sensitivity)) + src.numpy_rng().gumbel(size=s.shape)))
    common = dict(selection_epsilon=float(epsilon), sensitivity=float(sensitivity), candidates=int(s.size),
                  noise=src.kind, **params)
    if bounded_range:
        event = LedgerEvent.zcdp(name, rho=float(epsilon) ** 2 / 8.0, **common)
    else:
        event = LedgerEvent.approx_dp(name, epsilon=float(epsilon), **common)
    return pick, _record(ledger, event)
