"""zCDP for DP-APVI / DP-VAPVI: thin names over :mod:`privsynth.privacy.accounting` (the one zCDP implementation)
and :class:`ZcdpLedger`, the package :class:`~privsynth.privacy.ledger.Ledger` with zCDP views.

* ``gaussian_sigma(Δ₂, ρ)`` is :func:`privsynth.privacy.accounting.zcdp_gaussian_sigma`; ``pure_dp_to_zcdp``,
  ``zcdp_to_epsilon`` (standard / rdp / gdp / ledger), ``epsilon_to_zcdp`` and ``check_rho`` are the accounting
  module's own functions.
* :class:`ZcdpLedger` *is* a package ledger (trajectory unit, replace-one neighbours, RDP accountant): the methods'
  mechanisms (:mod:`privsynth.privacy.mechanisms`) append their events to it, the release guard checks it, and it
  adds the totals the papers state: ``rho`` (Σρ over events), ``pure_epsilon`` (Laplace-only releases) and
  ``epsilon(δ)`` by the GDP conversion, exact for Gaussian-only releases (the ledger's own :meth:`Ledger.compose`,
  which the guard and the card use, goes through RDP and is a little larger, never smaller).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from privsynth.privacy.accounting import (
    check_rho,
    epsilon_to_zcdp,
    pure_dp_to_zcdp,
    zcdp_to_epsilon,
)
from privsynth.privacy.accounting import zcdp_gaussian_sigma as gaussian_sigma
from privsynth.privacy.ledger import Ledger, LedgerEvent

__all__ = ["gaussian_sigma", "pure_dp_to_zcdp", "zcdp_to_epsilon", "epsilon_to_zcdp", "ZcdpLedger", "check_rho",
           "event_rho"]

REPLACE_ONE = "replace one trajectory (n fixed); sensitivities are replace-one values"


def event_rho(ev: LedgerEvent) -> float:
    """ρ of one ledger event: a zCDP event's ρ, a Gaussian event's count·Δ²/(2σ²), a Laplace event's count·ε²/2."""
    p = ev.params
    if ev.mechanism == "zcdp":
        return float(p["rho"])
    if ev.mechanism == "gaussian":
        return int(p.get("count", 1)) * float(p["sensitivity"]) ** 2 / (2.0 * float(p["sigma"]) ** 2)
    if ev.mechanism == "laplace":
        return int(p.get("count", 1)) * pure_dp_to_zcdp(float(p["sensitivity"]) / float(p["scale"]))
    if ev.mechanism == "approx_dp" and ev.delta == 0:
        return pure_dp_to_zcdp(float(ev.epsilon))
    raise ValueError(f"event '{ev.name}' ({ev.mechanism}) has no zCDP parameter")


@dataclass
class ZcdpLedger(Ledger):
    """A trajectory-unit package ledger with the zCDP totals of DP-APVI / DP-VAPVI (composition is additive in ρ)."""

    unit: str = "trajectory"
    accountant: str = "rdp"
    neighbouring: str | None = REPLACE_ONE
    treated_as_public: list[str] = field(
        default_factory=lambda: ["number of episodes n", "state/action sets, horizon H, feature map"])

    @property
    def rho(self) -> float:
        """Total zCDP (sum over events)."""
        return float(sum(event_rho(ev) for ev in self.events))

    @property
    def pure_epsilon(self) -> float | None:
        """Total pure ε if every event is a Laplace mechanism (basic composition), else None."""
        if not self.events or any(ev.mechanism != "laplace" for ev in self.events):
            return None
        return float(sum(int(ev.params.get("count", 1)) * ev.params["sensitivity"] / ev.params["scale"]
                         for ev in self.events))

    def epsilon(self, delta: float | None = None, method: str = "gdp") -> float:  # type: ignore[override]
        """ε at ``delta`` from the total ρ; ``gdp`` is exact only when every event is Gaussian, so other events fall
        back to ``rdp``. (The guard and the card use :meth:`compose`.)"""
        delta = self.delta if delta is None else delta
        if method == "gdp" and any(ev.mechanism not in ("gaussian", "zcdp") or ev.params.get("sigma") is None
                                   for ev in self.events):
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
            "events": [ev.to_dict() for ev in self.events],
            **({"not_dp": self.card()["not_dp"]} if self.reproducible_noise else {}),
        }

    def to_ledger(self, delta: float = 1e-5, treated_as_public: list[str] | None = None) -> Ledger:
        """The same events on a plain package :class:`Ledger` at ``delta`` (for release cards and the guard)."""
        out = Ledger(unit=self.unit, accountant=self.accountant, delta=delta, neighbouring=self.neighbouring,
                     public_data=list(self.public_data),
                     treated_as_public=list(treated_as_public or self.treated_as_public), notes=list(self.notes))
        return out.extend(list(self.events))
