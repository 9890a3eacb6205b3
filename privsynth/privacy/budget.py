"""The privacy request: a :class:`Budget` of (ε, δ) at a privacy unit, built and validated once, then passed on.

As Opacus' ``make_private(noise_multiplier=..., max_grad_norm=...)`` takes its request in one call, every privsynth
entry point that spends privacy (``privsynth.release.synthesize``, ``privsynth.synth.registry.fit``, the CLI's one
helper) takes a ``Budget`` or builds exactly one from ``epsilon``, ``delta`` and ``unit`` at its door; nothing below
re-parses them. The unit's vocabulary and its data-side helpers live in :mod:`privsynth.data.units`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from privsynth.data.units import ALL_UNITS, DATA_UNITS, check_unit, count_units
from privsynth.errors import PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.events import UNITS as RELATIONS

__all__ = ["Budget", "as_budget"]


@dataclass(frozen=True)
class Budget:
    """(ε, δ)-DP at ``unit``: ε positive and finite, 0 < δ < 1, a known unit (checked when made)."""

    epsilon: float
    delta: float
    unit: str = "transition"

    def __post_init__(self) -> None:
        object.__setattr__(self, "epsilon", acc.check_epsilon(self.epsilon))
        object.__setattr__(self, "delta", acc.check_delta(self.delta))
        object.__setattr__(self, "unit", check_unit(self.unit, ALL_UNITS))

    @property
    def neighbouring_relation(self) -> str:
        """The relation the card states for this unit (add/remove one unit; the number of units is private)."""
        return RELATIONS[self.unit]

    def check_dataset(self, dataset: Any) -> "Budget":
        """Refuse δ ≥ 1/N for the N units of ``dataset`` (a refusal for the operator, who holds the data: N itself is
        never released; docs/privacy.md). Returns the budget, for chaining."""
        if self.unit not in DATA_UNITS:
            raise PrivacyError(f"a {self.unit}-level budget cannot be checked against a dataset of transitions")
        acc.check_delta(self.delta, count_units(dataset, self.unit))
        return self


def as_budget(budget: Budget | None = None, *, epsilon: float | None = None, delta: float | None = None,
              unit: str | None = None, default_unit: str = "transition") -> Budget:
    """The one door for a privacy request: a :class:`Budget` as given, or one built from its three parts (not both)."""
    if budget is not None:
        if not isinstance(budget, Budget):
            raise PrivacyError(f"budget must be a privsynth.privacy.Budget, not {type(budget).__name__}")
        if epsilon is not None or delta is not None or (unit is not None and unit != budget.unit):
            raise PrivacyError("give either a Budget or epsilon / delta / unit, not both")
        return budget
    if epsilon is None or delta is None:
        raise PrivacyError("a privacy request needs epsilon and delta (or a Budget)")
    return Budget(epsilon, delta, unit or default_unit)
