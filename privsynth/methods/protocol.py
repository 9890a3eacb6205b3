"""One protocol for every DP offline-RL method: ``run(sensitive, config) -> MethodResult`` (docs/methods.md).

A method takes an :class:`~privsynth.data.dataset.OfflineDataset` marked sensitive and a typed config dataclass (one
per method, defaults from its paper) and returns a :class:`MethodResult`: the privacy :class:`Ledger` of everything
it computed from the sensitive data, and what it learned (a policy with ``act(obs) -> action``, a DP dataset, or
both), with reporting metrics measured in the public environment. The budget the run must fit is the config's
``epsilon`` at ``delta``; :func:`finish` checks the ledger against it with the release guard before returning, so a
result that leaves a method fits its budget and carries secure noise unless the config asked for reproducible noise
(``noise_seed``: tests and benchmarks only, the ledger then says "NOT DP" and the guard refuses it).

The registry (:mod:`privsynth.methods.registry`) names the methods; adapters live in :mod:`privsynth.methods.adapters`.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

from privsynth.data.units import DATA_UNITS, count_units
from privsynth.data.dataset import OfflineDataset
from privsynth.errors import BudgetExceeded, InvalidData, PrivacyError
from privsynth.privacy.guard import check_budget
from privsynth.privacy.ledger import Ledger

__all__ = ["Policy", "MethodResult", "Method", "MethodAdapter", "require_sensitive", "finish", "check_budget_request"]


@runtime_checkable
class Policy(Protocol):
    """Anything that maps one observation to one action."""

    def act(self, obs: Any) -> Any: ...


@dataclass
class MethodResult:
    """What a method returns: its ledger, and a policy and/or a DP dataset, plus metrics and a card.

    ``metrics`` are floats measured in the public environment (returns, suboptimality gaps, sizes of DP outputs);
    never statistics of the sensitive data. ``card`` is the privacy card of the ledger plus the method's public
    settings."""

    ledger: Ledger
    policy: Policy | None = None
    dataset: OfflineDataset | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    card: dict[str, Any] = field(default_factory=dict)

    @property
    def epsilon(self) -> float:
        """ε of the ledger at its δ (∞ for an empty ledger)."""
        return self.ledger.epsilon() if self.ledger.events else math.inf

    @property
    def private(self) -> bool:
        """True if the ledger describes a DP release (events, secure noise, finite ε)."""
        return self.ledger.private


class Method(Protocol):
    """A registered method: a name, its config class and ``run``."""

    name: ClassVar[str]
    config_class: ClassVar[type]

    def run(self, sensitive: OfflineDataset, config: Any = None) -> MethodResult: ...


class MethodAdapter:
    """Base of the adapters: validates the input at the door, then calls :meth:`_run` with a typed config."""

    name: ClassVar[str] = ""
    config_class: ClassVar[type] = object

    def __init__(self, config: Any = None, *, unit: str | None = None) -> None:
        self.config = config if config is not None else self.config_class()
        self.unit = unit  # the registered privacy unit (methods.make sets it): δ < 1/N is checked at the door

    def run(self, sensitive: OfflineDataset, config: Any = None) -> MethodResult:
        cfg = self.config if config is None else config
        if not isinstance(cfg, self.config_class):
            raise InvalidData(f"{self.name} takes a {self.config_class.__name__}, got {type(cfg).__name__}")
        require_sensitive(sensitive, self.name)
        check_budget_request(cfg.epsilon, cfg.delta, self.name)
        check_delta_for_unit(cfg.delta, sensitive, self.name, self.unit)
        return self._run(sensitive, cfg)

    def _run(self, sensitive: OfflineDataset, cfg: Any) -> MethodResult:
        raise NotImplementedError


def require_sensitive(sensitive: Any, method: str) -> OfflineDataset:
    """The door of every method: an OfflineDataset marked sensitive, else one line saying what is wrong."""
    if not isinstance(sensitive, OfflineDataset):
        raise InvalidData(f"{method} takes an OfflineDataset marked sensitive, got {type(sensitive).__name__}")
    if not sensitive.info.sensitive:
        raise InvalidData(f"{method} runs on sensitive data only: dataset '{sensitive.info.name}' is not marked "
                          "sensitive (set info.sensitive = True; public or DP data needs no private method)")
    if len(sensitive) == 0:
        raise InvalidData(f"{method}: dataset '{sensitive.info.name}' is empty")
    return sensitive


def check_delta_for_unit(delta: float, sensitive: OfflineDataset, method: str, unit: str | None) -> None:
    """δ below 1/N for the N privacy units of the method's registered unit (trajectories or transitions; an
    expert-level method checks its number of experts itself): δ ≥ 1/N allows publishing one unit's data."""
    n = count_units(sensitive, unit) if unit in DATA_UNITS else None
    if n and delta >= 1.0 / n:
        raise PrivacyError(f"{method}: delta must be below 1/N = {1.0 / n:.3g} for the N = {n} privacy units "
                           f"({unit}s) of '{sensitive.info.name}', got {delta:g}")


def check_budget_request(epsilon: float, delta: float, method: str) -> tuple[float, float]:
    """A finite positive ε and a δ in (0, 1), or one line."""
    if isinstance(epsilon, bool) or not isinstance(epsilon, (int, float)) or not (epsilon > 0 and math.isfinite(epsilon)):
        raise PrivacyError(f"{method}: epsilon must be a positive finite number, got {epsilon!r}")
    if isinstance(delta, bool) or not isinstance(delta, (int, float)) or not 0 < delta < 1:
        raise PrivacyError(f"{method}: delta must lie strictly between 0 and 1, got {delta!r}")
    return float(epsilon), float(delta)


def finish(ledger: Ledger, epsilon: float, *, settings: dict[str, Any], policy: Policy | None = None,
           dataset: OfflineDataset | None = None, metrics: dict[str, float] | None = None) -> MethodResult:
    """The common exit: the guard checks a secure-noise ledger against ``epsilon`` (raises
    :class:`~privsynth.errors.BudgetExceeded` over budget). A reproducible-noise ledger (tests and benchmarks) is
    returned marked not DP on its card, which the guard refuses wherever it is released; its ε must still fit."""
    if not ledger.reproducible_noise:
        check_budget(ledger, epsilon)
    elif ledger.epsilon() > epsilon * (1 + 1e-9):
        raise BudgetExceeded(f"the ledger spends epsilon {ledger.epsilon():.4g}, over the budget of {epsilon:g}")
    card = {**ledger.card(), "settings": settings}
    out = {k: float(v) for k, v in (metrics or {}).items()}
    return MethodResult(ledger=ledger, policy=policy, dataset=dataset, metrics=out, card=card)
