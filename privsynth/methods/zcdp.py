"""Zero-concentrated DP (zCDP) arithmetic used by DP-APVI / DP-VAPVI (Bun & Steinke 2016; paper section 2).

Small closed forms only: the Gaussian-mechanism noise scale for a ρ-zCDP release, pure ε-DP → zCDP, and three
ρ-zCDP → (ε, δ) conversions:

* ``standard``: ε = ρ + 2√(ρ log 1/δ) (Bun & Steinke 2016, Prop. 1.3), valid for every δ > 0;
* ``rdp``: the Canonne–Kamath–Steinke (2020) optimisation over Rényi orders, the form dp-accounting's
  ``RdpAccountant`` uses for a :class:`dp_accounting.ZCDpEvent`;
* ``gdp``: exact for releases made only of Gaussian mechanisms (DP-APVI, DP-VAPVI): such a ρ-zCDP composition is
  μ-GDP with μ = √(2ρ), and δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018).

Why our own code: the closed forms are three lines each and tests check them against dp-accounting (RDP and PLD);
the package-wide ledger in :mod:`privsynth.privacy` records the events once it is available. :class:`ZcdpLedger` is a
minimal stand-in that lists every release with its sensitivity, σ and ρ, so a test can assert the total.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
from scipy import optimize, special

from privsynth.errors import PrivacyError

__all__ = [
    "gaussian_sigma",
    "pure_dp_to_zcdp",
    "zcdp_to_epsilon",
    "epsilon_to_zcdp",
    "ZcdpEvent",
    "ZcdpLedger",
    "check_rho",
]


def gaussian_sigma(l2_sensitivity: float, rho: float) -> float:
    """Noise std of the Gaussian mechanism that is ρ-zCDP: σ² = Δ₂² / (2ρ) (paper Lemma 2.6)."""
    if rho <= 0:
        raise PrivacyError(f"the zCDP budget rho must be positive, got {rho}")
    return float(l2_sensitivity) / math.sqrt(2.0 * rho)


def pure_dp_to_zcdp(epsilon: float) -> float:
    """An ε-DP mechanism is (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4)."""
    return 0.5 * float(epsilon) ** 2


def _log_delta_gdp(eps: float, mu: float) -> float:
    """log δ(ε) of μ-GDP, computed in log space (Balle & Wang 2018, Thm 8)."""
    a = special.log_ndtr(-eps / mu + mu / 2.0)
    b = eps + special.log_ndtr(-eps / mu - mu / 2.0)
    if b >= a:
        return -math.inf
    return a + math.log1p(-math.exp(b - a))


def zcdp_to_epsilon(rho: float, delta: float, method: str = "gdp") -> float:
    """ε such that a ρ-zCDP release is (ε, δ)-DP. ``method``: ``standard``, ``rdp`` (CKS) or ``gdp`` (exact for Gaussians)."""
    if rho < 0:
        raise PrivacyError(f"rho must be non-negative, got {rho}")
    if not 0.0 < delta < 1.0:
        raise PrivacyError(f"delta must lie in (0, 1), got {delta}")
    if rho == 0:
        return 0.0
    if method == "standard":
        return rho + 2.0 * math.sqrt(rho * math.log(1.0 / delta))
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
    raise PrivacyError(f"unknown zCDP conversion '{method}' (use standard, rdp or gdp)")


def epsilon_to_zcdp(epsilon: float, delta: float, method: str = "gdp") -> float:
    """Largest ρ whose (ε, δ) conversion is at most ``epsilon`` (inverse of :func:`zcdp_to_epsilon`)."""
    if epsilon <= 0:
        raise PrivacyError(f"epsilon must be positive, got {epsilon}")
    hi = 1.0
    while zcdp_to_epsilon(hi, delta, method) < epsilon:
        hi *= 2.0
    return float(optimize.brentq(lambda r: zcdp_to_epsilon(r, delta, method) - epsilon, 0.0, hi, xtol=1e-14))


@dataclass(frozen=True)
class ZcdpEvent:
    """One accounted release: a Gaussian (or Laplace) mechanism on a statistic of the sensitive data."""

    name: str
    rho: float  # zCDP spent under the stated neighbouring relation
    sensitivity: float  # l2 (Gaussian) or l1 (Laplace) sensitivity of the released statistic
    noise_scale: float  # Gaussian std, or Laplace scale b
    mechanism: str = "gaussian"


@dataclass
class ZcdpLedger:
    """The releases one run made, composed additively (zCDP composition, adaptive allowed)."""

    unit: str = "trajectory"
    neighbouring: str = "replace-one"
    events: list[ZcdpEvent] = field(default_factory=list)

    def record(self, name: str, rho: float, sensitivity: float, noise_scale: float, mechanism: str = "gaussian") -> None:
        self.events.append(ZcdpEvent(name, float(rho), float(sensitivity), float(noise_scale), mechanism))

    @property
    def rho(self) -> float:
        """Total zCDP (sum over events)."""
        return float(sum(e.rho for e in self.events))

    @property
    def pure_epsilon(self) -> float | None:
        """Total pure ε if every event is a Laplace mechanism (basic composition), else None."""
        if not self.events or any(e.mechanism != "laplace" for e in self.events):
            return None
        return float(sum(e.sensitivity / e.noise_scale for e in self.events))

    def epsilon(self, delta: float, method: str = "gdp") -> float:
        """ε at ``delta``; ``gdp`` is exact only when every event is Gaussian, so Laplace events fall back to ``rdp``."""
        if method == "gdp" and any(e.mechanism != "gaussian" for e in self.events):
            method = "rdp"
        return zcdp_to_epsilon(self.rho, delta, method)

    def summary(self, delta: float = 1e-5) -> dict[str, Any]:
        """A JSON-able card: unit, relation, total ρ, ε at δ (two conversions) and the event list."""
        return {
            "unit": self.unit,
            "neighbouring": self.neighbouring,
            "accountant": "zCDP (additive composition)",
            "rho": self.rho,
            "delta": delta,
            "epsilon": self.epsilon(delta) if self.events else 0.0,
            "epsilon_rdp": zcdp_to_epsilon(self.rho, delta, "rdp") if self.events else 0.0,
            "pure_epsilon": self.pure_epsilon,
            "n_events": len(self.events),
            "events": [asdict(e) for e in self.events],
        }

    def to_json(self, delta: float = 1e-5) -> str:
        return json.dumps(self.summary(delta))

    def to_ledger(self, delta: float = 1e-5, treated_as_public: list[str] | None = None):
        """The same releases as a package :class:`privsynth.privacy.ledger.Ledger` (zCDP events, RDP accountant;
        Laplace events as Laplace), for release cards and the release guard."""
        from privsynth.privacy.ledger import Ledger, LedgerEvent

        ledger = Ledger(unit="trajectory", accountant="rdp", delta=delta,
                        neighbouring="replace one trajectory (n fixed); sensitivities are replace-one values",
                        treated_as_public=treated_as_public or ["number of episodes n", "state/action sets, horizon H, feature map"])
        for e in self.events:
            if e.mechanism == "laplace":
                ledger.append(LedgerEvent.laplace(e.name, scale=e.noise_scale, sensitivity=e.sensitivity, unit="trajectory"))
            else:
                ledger.append(LedgerEvent.zcdp(e.name, rho=e.rho, sigma=e.noise_scale, sensitivity=e.sensitivity,
                                               unit="trajectory"))
        return ledger


def check_rho(rho: float) -> float:
    """Validate a zCDP budget at the door (finite, positive)."""
    if not (isinstance(rho, (int, float, np.floating)) and math.isfinite(rho) and rho > 0):
        raise PrivacyError(f"the zCDP budget rho must be a positive finite number, got {rho}")
    return float(rho)

