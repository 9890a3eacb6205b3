"""Privacy accounting: ε of the mechanisms privsynth uses, noise calibration, and composition.

Every DP-SGD run is the event ``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)`` (Abadi et al. 2016; the sampled
Gaussian mechanism of Mironov et al. 2019). Three accountants:

* ``"rdp"``: Rényi DP (dp-accounting's :class:`RdpAccountant`, default orders); fast, a few % pessimistic.
* ``"pld"``: privacy loss distributions (dp-accounting's :class:`PLDAccountant`, value discretisation 1e-4, tight
  up to discretisation; a 1e-3 grid measured visibly pessimistic at small q).
* ``"prv"``: privacy random variables (Gopi et al. 2021) through Opacus' :class:`PRVAccountant`, upper bound of the
  ε estimate with ``eps_error=0.01``.

Statistics use the Gaussian mechanism (analytic calibration of Balle & Wang 2018) or the Laplace mechanism; DP-APVI
style releases are zCDP (Bun & Steinke 2016) and convert through RDP. Calibration is our own bisection on log σ so
the same procedure serves all three accountants and the returned σ always satisfies ε(σ) ≤ target.

Why this module is long: it is the one place where ε is computed (every accountant, every calibration and the
one zCDP implementation), so that no second accounting anywhere in privsynth can disagree with it.
"""
from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from functools import lru_cache

import dp_accounting as dpa
import numpy as np
from dp_accounting.pld import pld_privacy_accountant
from absl import logging as absl_logging
from dp_accounting.rdp import rdp_privacy_accountant

from privsynth.errors import PrivacyError

# dp-accounting logs a warning for every RDP order whose series does not converge (it then drops that order, which
# only makes ε more conservative); during calibration that is hundreds of lines.
absl_logging.set_verbosity(absl_logging.ERROR)

__all__ = [
    "ACCOUNTANTS",
    "PLD_DISCRETIZATION",
    "dpsgd_event",
    "dpsgd_epsilon",
    "events_epsilon",
    "calibrate_noise_multiplier",
    "smallest_sigma",
    "gaussian_sigma",
    "gaussian_epsilon",
    "laplace_scale",
    "calibrate_gaussian_multiplier",
    "gaussian_zcdp_rho",
    "zcdp_epsilon",
    "zcdp_gaussian_sigma",
    "pure_dp_to_zcdp",
    "zcdp_to_epsilon",
    "epsilon_to_zcdp",
    "zcdp_rho_for",
    "gaussian_sigma_for_rho",
    "check_rho",
    "check_epsilon",
    "check_delta",
    "supports",
]

ACCOUNTANTS = ("rdp", "pld", "prv")
PLD_DISCRETIZATION = 1e-4  # value_discretization_interval for reported numbers (1e-3: pessimistic at small q)
PRV_EPS_ERROR = 0.01


# ----------------------------------------------------------------------------------------------------------- checks
def check_accountant(accountant: str) -> str:
    if accountant not in ACCOUNTANTS:
        raise PrivacyError(f"unknown accountant '{accountant}': choose one of {', '.join(ACCOUNTANTS)}")
    return accountant


def check_epsilon(epsilon: float, what: str = "epsilon") -> float:
    if not (isinstance(epsilon, (int, float)) and math.isfinite(epsilon) and epsilon > 0):
        raise PrivacyError(f"{what} must be a positive finite number, got {epsilon}")
    return float(epsilon)


def check_delta(delta: float, n: int | None = None) -> float:
    """δ must lie in (0, 1), and below 1/N when the number of privacy units N is known."""
    if not (isinstance(delta, (int, float)) and 0 < delta < 1):
        raise PrivacyError(f"delta must lie strictly between 0 and 1, got {delta}")
    if n is not None and delta >= 1.0 / n:
        raise PrivacyError(f"delta={delta:g} must be below 1/N = {1.0 / n:.3g} for N={n} privacy units")
    return float(delta)


def _check_dpsgd(noise_multiplier: float, sample_rate: float, steps: int) -> None:
    if not (noise_multiplier > 0 and math.isfinite(noise_multiplier)):
        raise PrivacyError(f"noise multiplier must be positive and finite, got {noise_multiplier}")
    if not 0 < sample_rate <= 1:
        raise PrivacyError(f"sample rate must lie in (0, 1], got {sample_rate}")
    if steps < 0 or int(steps) != steps:
        raise PrivacyError(f"steps must be a non-negative integer, got {steps}")


# ----------------------------------------------------------------------------------------------------------- events
def dpsgd_event(noise_multiplier: float, sample_rate: float, steps: int, *, count_scale: float = 0.0) -> dpa.DpEvent:
    """``SelfComposed(PoissonSampled(q, Gaussian(σ)), T)``: T steps of Poisson-subsampled Gaussian noise; with
    ``count_scale`` > 0 composed after the Laplace count of the units that set q and T (privsynth.privacy.count)."""
    _check_dpsgd(noise_multiplier, sample_rate, steps)
    inner: dpa.DpEvent = dpa.GaussianDpEvent(float(noise_multiplier))
    if sample_rate < 1:
        inner = dpa.PoissonSampledDpEvent(float(sample_rate), inner)
    run: dpa.DpEvent = dpa.SelfComposedDpEvent(inner, int(steps))
    if count_scale:
        if not (count_scale > 0 and math.isfinite(count_scale)):
            raise PrivacyError(f"the unit count's Laplace scale must be positive and finite, got {count_scale}")
        run = dpa.ComposedDpEvent([dpa.LaplaceDpEvent(float(count_scale)), run])
    return run


def _prv_history(event: dpa.DpEvent, count: int = 1) -> list[tuple[float, float, int]] | None:
    """Flatten an event into Opacus' PRV history [(σ, q, steps)], or None if PRV cannot express it."""
    if isinstance(event, dpa.NoOpDpEvent):
        return []
    if isinstance(event, dpa.SelfComposedDpEvent):
        return _prv_history(event.event, count * event.count)
    if isinstance(event, dpa.ComposedDpEvent):
        out: list[tuple[float, float, int]] = []
        for ev in event.events:
            sub = _prv_history(ev, count)
            if sub is None:
                return None
            out.extend(sub)
        return out
    if isinstance(event, dpa.PoissonSampledDpEvent) and isinstance(event.event, dpa.GaussianDpEvent):
        return [(event.event.noise_multiplier, event.sampling_probability, count)]
    if isinstance(event, dpa.GaussianDpEvent):
        return [(event.noise_multiplier, 1.0, count)]
    return None


def _make_accountant(accountant: str) -> dpa.PrivacyAccountant:
    if accountant == "rdp":
        return rdp_privacy_accountant.RdpAccountant()
    if accountant == "pld":
        return pld_privacy_accountant.PLDAccountant(value_discretization_interval=PLD_DISCRETIZATION)
    raise ValueError(accountant)


def supports(accountant: str, event: dpa.DpEvent) -> bool:
    """Whether ``accountant`` can compose ``event`` exactly (otherwise the ledger falls back, see ledger.py)."""
    check_accountant(accountant)
    if accountant == "prv":
        return _prv_history(event) is not None
    return _make_accountant(accountant).supports(event)


def events_epsilon(events: Sequence[dpa.DpEvent], delta: float, accountant: str = "rdp", *,
                   count_scale: float = 0.0) -> float:
    """ε at ``delta`` of the composition of ``events`` under one accountant (raises if it cannot take one).

    ``count_scale`` > 0 adds the Laplace unit count of a DP-SGD run (privsynth.privacy.count): composed by RDP and
    PLD; PRV cannot take a Laplace event, so there its ε (1/scale) is added (basic composition).
    """
    check_accountant(accountant)
    check_delta(delta)
    events = list(events)
    if count_scale:
        if accountant == "prv":
            return 1.0 / count_scale + events_epsilon(events, delta, accountant)
        events = [dpa.LaplaceDpEvent(float(count_scale)), *events]
    if not events:
        return 0.0
    if accountant == "prv":
        history: list[tuple[float, float, int]] = []
        for ev in events:
            sub = _prv_history(ev)
            if sub is None:
                raise PrivacyError(f"the PRV accountant cannot account {type(ev).__name__}; use rdp or pld")
            history.extend(sub)
        history = [h for h in history if h[2] > 0]
        if not history:
            return 0.0
        return _prv_epsilon(tuple(history), float(delta))
    acc = _make_accountant(accountant)
    for ev in events:
        if not acc.supports(ev):
            raise PrivacyError(f"the {accountant} accountant cannot account {type(ev).__name__}")
        acc.compose(ev)
    return float(acc.get_epsilon(delta))


@lru_cache(maxsize=256)
def _prv_epsilon(history: tuple[tuple[float, float, int], ...], delta: float) -> float:
    from opacus.accountants import PRVAccountant

    acc = PRVAccountant()
    acc.history = list(history)
    return float(acc.get_epsilon(delta, eps_error=PRV_EPS_ERROR))


def dpsgd_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, accountant: str = "rdp",
                  *, count_scale: float = 0.0) -> float:
    """ε at δ of ``steps`` Poisson-subsampled Gaussian steps (DP-SGD) under ``accountant``, with the Laplace count
    of its units when ``count_scale`` > 0."""
    if steps == 0:
        return 1.0 / count_scale if count_scale else 0.0
    return events_epsilon([dpsgd_event(noise_multiplier, sample_rate, steps)], delta, accountant,
                          count_scale=count_scale)


# ------------------------------------------------------------------------------------------------------ calibration
@lru_cache(maxsize=128)
def calibrate_noise_multiplier(
    target_epsilon: float,
    delta: float,
    sample_rate: float,
    steps: int,
    accountant: str = "rdp",
    *,
    rtol: float = 1e-3,
    count_scale: float = 0.0,
) -> float:
    """Smallest σ (up to relative ``rtol``) whose DP-SGD run has ε ≤ ``target_epsilon`` at ``delta``
    (:func:`smallest_sigma`; for pld/prv starting from the cheap RDP answer: RDP's ε is never below theirs)."""
    check_epsilon(target_epsilon, "target epsilon")
    check_delta(delta)
    check_accountant(accountant)
    _check_dpsgd(1.0, sample_rate, steps)
    if steps == 0:
        raise PrivacyError("cannot calibrate noise for zero steps")

    if count_scale and not 1.0 / count_scale < target_epsilon:
        raise PrivacyError(f"the unit count alone spends epsilon {1.0 / count_scale:.4g} of the target {target_epsilon:g}")

    start = None if accountant == "rdp" else calibrate_noise_multiplier(
        target_epsilon, delta, sample_rate, steps, "rdp", rtol=1e-2, count_scale=count_scale)
    return smallest_sigma(
        lambda sigma: dpsgd_epsilon(sigma, sample_rate, steps, delta, accountant, count_scale=count_scale),
        target_epsilon, start=start, rtol=rtol, what=f"epsilon {target_epsilon} at delta {delta}")


def smallest_sigma(epsilon_of: Callable[[float], float], target: float, *, start: float | None = None,
                   rtol: float = 1e-3, what: str = "the target") -> float:
    """Smallest noise multiplier σ (up to relative ``rtol``) with ``epsilon_of(σ)`` ≤ ``target``, for any ε that falls
    as σ grows: one DP-SGD run (:func:`calibrate_noise_multiplier`) or a run composed with a ledger's earlier events.

    The returned σ is the upper end of a final bracket [σ/(1+rtol), σ] with ε(σ) ≤ target < ε(σ/(1+rtol)). The
    bracket is found geometrically from ``start`` (steps of 10%; without it from σ = 1 in steps of 2x) and closed by a
    safeguarded secant search in log σ, where ε is nearly linear: about 5 accountant calls instead of the 10-12 of
    plain bisection, which matters for PLD and PRV (0.3-4 s per call).
    """
    def excess(log_sigma: float) -> float:
        return epsilon_of(math.exp(log_sigma)) - target

    if start is None:
        hi, step = 0.0, math.log(2.0)
    else:
        hi, step = math.log(start), math.log(1.1)
    f_hi = excess(hi)
    while f_hi > 0:  # move up until ε(σ_hi) ≤ target
        hi += step
        f_hi = excess(hi)
        if hi > math.log(1e6):
            raise PrivacyError(f"no noise multiplier reaches {what}")
    lo = hi - step
    f_lo = excess(lo)
    while f_lo <= 0:  # move down until ε(σ_lo) > target
        hi, f_hi = lo, f_lo
        lo -= step
        if lo < math.log(1e-4):
            return math.exp(hi)
        f_lo = excess(lo)
    width = math.log1p(rtol)
    guard = width / 2
    while hi - lo > width:
        x = lo + (hi - lo) * f_lo / (f_lo - f_hi)  # secant in log σ (f_lo > 0 >= f_hi)
        x = min(max(x, lo + guard), hi - guard)  # every step shrinks the bracket by at least rtol/2
        if hi - lo < 2 * guard + 1e-12:
            x = (lo + hi) / 2
        f = excess(x)
        if f > 0:
            lo, f_lo = x, f
        else:
            hi, f_hi = x, f
    return math.exp(hi)


# ------------------------------------------------------------------------------------- mechanisms for statistics
def gaussian_sigma(epsilon: float, delta: float, sensitivity: float = 1.0) -> float:
    """Noise std of the Gaussian mechanism giving (ε, δ)-DP for L2 ``sensitivity`` (analytic; Balle & Wang 2018)."""
    check_epsilon(epsilon)
    check_delta(delta)
    return float(sensitivity) * float(dpa.get_sigma_gaussian(epsilon, delta))


def gaussian_epsilon(sigma: float, delta: float, sensitivity: float = 1.0) -> float:
    """ε at δ of one Gaussian mechanism with noise std ``sigma`` for L2 ``sensitivity``."""
    check_delta(delta)
    return float(dpa.get_epsilon_gaussian(sigma / sensitivity, delta))


def calibrate_gaussian_multiplier(epsilon: float, delta: float, count: int = 1, accountant: str = "pld") -> float:
    """Noise multiplier z such that ``count`` Gaussian mechanisms with multiplier z are (ε, δ)-DP under ``accountant``.

    ``count`` Gaussian mechanisms with multiplier z are exactly one with z/√count, so for the tight accountants
    (pld, prv) this is √count times the analytic σ; RDP is looser and gets its own bisection.
    """
    check_epsilon(epsilon)
    check_delta(delta)
    check_accountant(accountant)
    z = math.sqrt(count) * float(dpa.get_sigma_gaussian(epsilon, delta))
    if accountant != "rdp":
        return z

    def eps(zz: float) -> float:
        return events_epsilon([dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(zz), count)], delta, "rdp")

    lo, hi = z, z
    while eps(hi) > epsilon:
        lo, hi = hi, hi * 1.5
    while hi / lo > 1 + 1e-4:
        mid = math.sqrt(lo * hi)
        lo, hi = (lo, mid) if eps(mid) <= epsilon else (mid, hi)
    return hi


def laplace_scale(epsilon: float, sensitivity: float = 1.0) -> float:
    """Scale b = Δ₁/ε of the Laplace mechanism giving pure ε-DP for L1 ``sensitivity``."""
    check_epsilon(epsilon)
    return float(sensitivity) / float(epsilon)


def gaussian_zcdp_rho(sigma: float, sensitivity: float = 1.0) -> float:
    """ρ = Δ²/(2σ²): the Gaussian mechanism is ρ-zCDP (Bun & Steinke 2016, Prop. 1.6)."""
    return float(sensitivity) ** 2 / (2.0 * float(sigma) ** 2)


def zcdp_epsilon(rho: float, delta: float, *, xi: float = 0.0) -> float:
    """ε at δ of a (ξ, ρ)-zCDP mechanism, through its RDP curve (tighter than ρ + 2√(ρ log 1/δ))."""
    check_delta(delta)
    if rho < 0:
        raise PrivacyError(f"rho must be non-negative, got {rho}")
    return events_epsilon([dpa.ZCDpEvent(rho, xi)], delta, "rdp")


# ------------------------------------------------------------------------------------------------------ zCDP
# The one zCDP implementation of privsynth (Bun & Steinke 2016). DP-APVI / DP-VAPVI (privsynth.methods) and the
# marginal baselines (privsynth.synth.baselines) import from here.
#
# ρ → (ε, δ) conversions (:func:`zcdp_to_epsilon`):
# * ``standard``: ε = ρ + 2√(ρ log 1/δ) (Bun & Steinke 2016, Prop. 1.3), valid for every δ > 0;
# * ``rdp``: the Canonne-Kamath-Steinke (2020) optimisation over continuous Rényi orders;
# * ``gdp``: exact for releases made only of Gaussian mechanisms: such a ρ-zCDP composition is μ-GDP with μ = √(2ρ),
#   and δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018);
# * ``ledger``: dp-accounting's RDP curve of a ZCDpEvent, what :class:`privsynth.privacy.ledger.Ledger` composes
#   (same as :func:`zcdp_epsilon`).
def check_rho(rho: float) -> float:
    """Validate a zCDP budget at the door (finite, positive)."""
    if isinstance(rho, bool) or not (isinstance(rho, (int, float, np.floating)) and math.isfinite(rho) and rho > 0):
        raise PrivacyError(f"the zCDP budget rho must be a positive finite number, got {rho}")
    return float(rho)


def zcdp_gaussian_sigma(l2_sensitivity: float, rho: float) -> float:
    """Noise std of the Gaussian mechanism that is ρ-zCDP: σ² = Δ₂²/(2ρ) (Bun & Steinke 2016, Prop. 1.6)."""
    if not rho > 0:
        raise PrivacyError(f"the zCDP budget rho must be positive, got {rho}")
    return float(l2_sensitivity) / math.sqrt(2.0 * rho)


def gaussian_sigma_for_rho(rho: float, count: int, sensitivity: float = 1.0) -> float:
    """Noise std giving ``count`` Gaussian measurements of L2 ``sensitivity`` a total of ρ-zCDP (ρ = count·Δ²/(2σ²))."""
    if rho <= 0 or count < 1:
        raise PrivacyError(f"cannot split a zCDP budget of {rho} over {count} measurement(s)")
    return float(sensitivity) * math.sqrt(count / (2.0 * rho))


def pure_dp_to_zcdp(epsilon: float) -> float:
    """An ε-DP mechanism is (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    return 0.5 * float(epsilon) ** 2


def _log_delta_gdp(eps: float, mu: float) -> float:
    """log δ(ε) of μ-GDP, computed in log space (Balle & Wang 2018, Thm 8)."""
    from scipy import special

    a = special.log_ndtr(-eps / mu + mu / 2.0)
    b = eps + special.log_ndtr(-eps / mu - mu / 2.0)
    if b >= a:
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


def zcdp_to_epsilon(rho: float, delta: float, method: str = "gdp") -> float:
    """ε such that a ρ-zCDP release is (ε, δ)-DP; ``method``: ``standard``, ``rdp`` (CKS), ``gdp`` (exact for
    Gaussian-only releases) or ``ledger`` (dp-accounting's RDP, as the ledger composes)."""
    from scipy import optimize

    if rho < 0:
        raise PrivacyError(f"rho must be non-negative, got {rho}")
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must lie in (0, 1), got {delta}")
    if rho == 0:
        return 0.0
    if method == "standard":
        return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
    if method == "ledger":
        return zcdp_epsilon(rho, delta)
    if method == "rdp":
        def eps_at(alpha: float) -> float:
            return alpha * rho + (math.log(1.0 / delta) + (alpha - 1.0) * math.log(1.0 - 1.0 / alpha) - math.log(alpha)) / (alpha - 1.0)

        res = optimize.minimize_scalar(lambda la: eps_at(1.0 + math.exp(la)), bounds=(-12.0, 12.0), method="bounded",
                                       options={"xatol": 1e-10})
        return max(0.0, float(res.fun))
    if method == "gdp":
        mu = math.sqrt(2.0 * rho)
        log_delta = math.log(delta)
        if _log_delta_gdp(0.0, mu) <= log_delta:
            return 0.0
        hi = 1.0
        while _log_delta_gdp(hi, mu) > log_delta:
            hi *= 2.0
        return float(optimize.brentq(lambda e: _log_delta_gdp(e, mu) - log_delta, 0.0, hi, xtol=1e-12))
    raise PrivacyError(f"unknown zCDP conversion '{method}' (use standard, rdp, gdp or ledger)")


def epsilon_to_zcdp(epsilon: float, delta: float, method: str = "gdp") -> float:
    """Largest ρ whose (ε, δ) conversion is at most ``epsilon`` (inverse of :func:`zcdp_to_epsilon`)."""
    from scipy import optimize

    if not epsilon > 0:
        raise PrivacyError(f"epsilon must be positive, got {epsilon}")
    hi = 1.0
    while zcdp_to_epsilon(hi, delta, method) < epsilon:
        hi *= 2.0
    return float(optimize.brentq(lambda r: zcdp_to_epsilon(r, delta, method) - epsilon, 0.0, hi, xtol=1e-14))


def zcdp_rho_for(epsilon: float, delta: float) -> float:
    """Largest ρ (to 1e-6 relative) whose ρ-zCDP guarantee converts to at most ``epsilon`` at ``delta`` through the
    conversion the ledger uses (dp-accounting's RDP curve of a zCDP event), so a ledger holding events whose ρ add
    up to this value reports ε ≤ ``epsilon``. Bisection from below: the result never overshoots."""
    check_epsilon(epsilon)
    check_delta(delta)
    lo, hi = 0.0, max(epsilon, 1e-3)
    while zcdp_epsilon(hi, delta) <= epsilon:
        lo, hi = hi, hi * 2
    while hi - lo > 1e-6 * hi:
        mid = (lo + hi) / 2
        if zcdp_epsilon(mid, delta) <= epsilon:
            lo = mid
        else:
            hi = mid
    if lo <= 0:
        raise PrivacyError(f"no positive zCDP budget reaches epsilon {epsilon} at delta {delta}")
    return lo
