"""The number of privacy units, counted with DP: the one quantity of the sensitive data every mechanism needs.

The neighbouring relation of every privsynth release is **add/remove one unit** (the relation Opacus' and
dp-accounting's accountants analyse for Poisson-sampled DP-SGD, and the one a membership-inference audit tests). Under
it the exact number of units N is itself private: two neighbours differ in N by one. So N is never used as such.
A release first spends a small share of its ε on a Laplace count (sensitivity 1 under add/remove; Dwork & Roth 2014,
Thm 3.6), and everything that needs a size is derived from that noisy count Ñ: DP-SGD's sample rate q = B/Ñ and its
step count, the curiosity refresh period, the DP normaliser's divisor. Ñ is a DP output and the card shows it as
such (``n_units_noisy``); the exact N appears nowhere in a release.

Why a share of ε (2%, :data:`COUNT_SHARE`) and Laplace: the count's error is then 1/(0.02 ε) units in expectation
(5 at ε = 10, 50 at ε = 1), which moves q and the number of steps by well under a percent for the transition-level
sets the synthesizers see and by a few percent for a few hundred trajectories, while the rest of the budget is
calibrated as before. The Laplace event composes under the RDP and PLD accountants with the DP-SGD event (tight);
PRV cannot take it and the ledger then composes it with RDP.
"""
from __future__ import annotations

from privsynth.errors import PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.events import LedgerEvent
from privsynth.privacy.noise import NoiseSource, as_noise_source

__all__ = ["COUNT_SHARE", "count_epsilon", "noisy_unit_count"]

COUNT_SHARE = 0.02  # share of a mechanism's ε spent on counting its privacy units


def count_epsilon(epsilon: float) -> float:
    """ε spent on the unit count of a mechanism whose whole budget is ``epsilon``."""
    return COUNT_SHARE * acc.check_epsilon(epsilon)


def noisy_unit_count(
    n_units: int,
    *,
    epsilon: float,
    unit: str,
    source: NoiseSource | None = None,
    name: str = "number of privacy units (Laplace count)",
) -> tuple[int, LedgerEvent]:
    """``(Ñ, event)``: N plus Laplace noise of scale 1/ε, rounded and floored at 1 (post-processing).

    The caller appends ``event`` to the ledger of whatever uses Ñ (``privsynth.privacy.dpsgd.dp_train`` folds it
    into its own event when it counts by itself).
    """
    if not (isinstance(n_units, int) and n_units >= 0):
        raise PrivacyError(f"the number of privacy units must be a non-negative integer, got {n_units!r}")
    acc.check_epsilon(epsilon, "the count's epsilon")
    src = as_noise_source(source)
    scale = 1.0 / float(epsilon)
    noisy = float(n_units) + float(src.numpy_rng().laplace(0.0, scale))
    estimate = max(1, int(round(noisy)))
    event = LedgerEvent.laplace(name, scale=scale, sensitivity=1.0, unit=unit, noise=src.kind,
                                n_units_noisy=estimate)
    return estimate, event
