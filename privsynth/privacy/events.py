"""The events of a privacy ledger: one accounted mechanism each (:class:`LedgerEvent`), its privacy unit and the
source of its noise, and their JSON form (dp-accounting's ``DpEvent`` named tuples are not JSON, so they are written
as nested ``{"type": ..., fields}`` dicts). :mod:`privsynth.privacy.ledger` composes them."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import attr
import dp_accounting as dpa

from privsynth.errors import PrivacyError
from privsynth.privacy import accounting as acc

__all__ = ["LedgerEvent", "event_to_dict", "event_from_dict", "UNITS", "NO_NOISE", "NOISE_TAGS", "UNTAGGED_NOTE"]

# The relation every card states (docs/privacy.md, "The neighbouring relation"): under it the number of units is
# private, so releases use only a DP count of it (privsynth.privacy.count).
UNITS = {
    "transition": "add/remove one transition (the number of transitions is private: DP count)",
    "trajectory": "add/remove one trajectory (all of its transitions; the number of trajectories is private: DP count)",
    "expert": "add/remove one expert (behaviour policy) with all of its trajectories (the number of experts is "
              "private: DP count)",
}

# The ``noise`` tag every event entering a ledger must carry: where its randomness came from. "secure" and
# "reproducible" are :attr:`privsynth.privacy.noise.NoiseSource.kind` (kept as literals here so that this module does
# not import torch); "none" marks an event that drew no privacy noise at all (non-private training, DP-SGD with
# noise disabled), which is only consistent with an infinite epsilon. Only "secure" counts as private: a missing or
# unknown tag fails closed (:attr:`Ledger.reproducible_noise`, :attr:`Ledger.private`).
NO_NOISE = "none"
NOISE_TAGS = ("secure", "reproducible", NO_NOISE)
UNTAGGED_NOTE = (
    "NOT DP: the noise source of {events} is not recorded (missing or unknown noise tag), so nothing shows the "
    "noise could not be regenerated; this ledger cannot be released."
)


# --------------------------------------------------------------------------------------------- DpEvent <-> JSON
def event_to_dict(event: dpa.DpEvent) -> dict[str, Any]:
    """A JSON-able dict of a dp-accounting event (recursive)."""
    out: dict[str, Any] = {"type": type(event).__name__}
    for f in attr.fields(type(event)):
        value = getattr(event, f.name)
        if attr.has(type(value)):
            value = event_to_dict(value)
        elif isinstance(value, (list, tuple)):
            value = [event_to_dict(v) if attr.has(type(v)) else v for v in value]
        elif hasattr(value, "name") and hasattr(value, "value"):  # enums
            value = {"enum": type(value).__name__, "name": value.name}
        out[f.name] = value
    return out


def event_from_dict(data: dict[str, Any]) -> dpa.DpEvent:
    """Inverse of :func:`event_to_dict`."""
    data = dict(data)
    cls = getattr(dpa, data.pop("type"), None)
    if cls is None or not (isinstance(cls, type) and issubclass(cls, dpa.DpEvent)):
        raise PrivacyError("ledger holds an unknown DP event type")
    kwargs = {}
    for name, value in data.items():
        if isinstance(value, dict) and "type" in value:
            value = event_from_dict(value)
        elif isinstance(value, dict) and "enum" in value:
            enum_cls = getattr(dpa, value["enum"], None) or getattr(
                __import__("dp_accounting.dp_event", fromlist=[value["enum"]]), value["enum"]
            )
            value = enum_cls[value["name"]]
        elif isinstance(value, list):
            value = [event_from_dict(v) if isinstance(v, dict) and "type" in v else v for v in value]
        kwargs[name] = value
    return cls(**kwargs)


# ----------------------------------------------------------------------------------------------------------- event
@dataclass
class LedgerEvent:
    """One accounted release of information about the sensitive data.

    ``mechanism`` is one of ``dpsgd``, ``gaussian``, ``laplace``, ``zcdp``, ``approx_dp``. ``dp_event`` is the
    dp-accounting event (None for ``approx_dp``, which carries ``epsilon``/``delta`` instead). ``params`` holds what the
    card shows (σ, clip norm, sample rate, steps, unit, spent ε, ...).
    """

    name: str
    mechanism: str
    dp_event: dpa.DpEvent | None = None
    epsilon: float | None = None  # only for (ε, δ)-only events
    delta: float = 0.0  # only for (ε, δ)-only events
    params: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.dp_event is None:
            if self.epsilon is None or not self.epsilon >= 0:
                raise PrivacyError(f"ledger event '{self.name}' needs either a DP event or an epsilon >= 0")
            if not 0 <= self.delta < 1:
                raise PrivacyError(f"ledger event '{self.name}' has delta {self.delta} outside [0, 1)")

    # constructors for the mechanisms privsynth knows
    @classmethod
    def dpsgd(
        cls, name: str, *, noise_multiplier: float, sample_rate: float, steps: int, max_grad_norm: float,
        count_scale: float = 0.0, **params: Any
    ) -> "LedgerEvent":
        """A DP-SGD run; ``count_scale`` > 0 when the run counted its own units (a Laplace count of that scale,
        :mod:`privsynth.privacy.count`), which the event then composes with the training."""
        return cls(
            name=name,
            mechanism="dpsgd",
            dp_event=acc.dpsgd_event(noise_multiplier, sample_rate, steps, count_scale=count_scale),
            params=dict(
                noise_multiplier=float(noise_multiplier),
                sample_rate=float(sample_rate),
                steps=int(steps),
                max_grad_norm=float(max_grad_norm),
                **({"count_scale": float(count_scale)} if count_scale else {}),
                **params,
            ),
        )

    @classmethod
    def gaussian(cls, name: str, *, sigma: float, sensitivity: float, count: int = 1, **params: Any) -> "LedgerEvent":
        """``count`` Gaussian mechanisms with noise std ``sigma`` on statistics of L2 ``sensitivity``."""
        ev: dpa.DpEvent = dpa.GaussianDpEvent(float(sigma) / float(sensitivity))
        if count != 1:
            ev = dpa.SelfComposedDpEvent(ev, int(count))
        return cls(name, "gaussian", ev, params=dict(sigma=float(sigma), sensitivity=float(sensitivity), count=count, **params))

    @classmethod
    def laplace(cls, name: str, *, scale: float, sensitivity: float, count: int = 1, **params: Any) -> "LedgerEvent":
        """``count`` Laplace mechanisms of scale ``scale`` on statistics of L1 ``sensitivity``."""
        ev: dpa.DpEvent = dpa.LaplaceDpEvent(float(scale) / float(sensitivity))
        if count != 1:
            ev = dpa.SelfComposedDpEvent(ev, int(count))
        return cls(name, "laplace", ev, params=dict(scale=float(scale), sensitivity=float(sensitivity), count=count, **params))

    @classmethod
    def zcdp(cls, name: str, *, rho: float, xi: float = 0.0, **params: Any) -> "LedgerEvent":
        """A (ξ, ρ)-zCDP release (e.g. DP-APVI / DP-VAPVI statistics)."""
        return cls(name, "zcdp", dpa.ZCDpEvent(float(rho), float(xi)), params=dict(rho=float(rho), xi=float(xi), **params))

    @classmethod
    def approx_dp(cls, name: str, *, epsilon: float, delta: float = 0.0, **params: Any) -> "LedgerEvent":
        """A mechanism known only as (ε, δ)-DP (sparse vector, Dirichlet sampling, ...): composed by summing."""
        return cls(name, "approx_dp", None, epsilon=float(epsilon), delta=float(delta), params=dict(params))

    @property
    def noise(self) -> str | None:
        """The event's noise-source tag (``secure``, ``reproducible``, ``none``), None if it carries none."""
        tag = self.params.get("noise")
        return tag if isinstance(tag, str) else None

    @property
    def infinite(self) -> bool:
        """An (ε, δ)-only event with ε = ∞ (no privacy at all)."""
        return self.dp_event is None and self.epsilon is not None and not self.epsilon < float("inf")

    @property
    def secure_noise(self) -> bool:
        """True only when the event says its noise came from the secure (OS-entropy) source."""
        return self.noise == "secure"

    @property
    def noise_accounted(self) -> bool:
        """False when the event's noise is reproducible, untagged or unknown (or tagged ``none`` with a finite ε,
        which contradicts itself): then the ledger it is on is not DP."""
        return self.secure_noise or (self.noise == NO_NOISE and self.infinite)

    def check_tags(self, unit: str | None = None) -> "LedgerEvent":
        """Raise :class:`PrivacyError` unless the event carries a known noise-source tag and a privacy unit (equal
        to ``unit`` when given). Every event that enters a ledger goes through this."""
        tag = self.params.get("noise")
        if tag not in NOISE_TAGS:
            what = "no noise-source tag" if tag is None else f"the unknown noise-source tag {tag!r}"
            raise PrivacyError(
                f"ledger event '{self.name}' has {what}: pass noise=NoiseSource.kind ('secure' or 'reproducible'), "
                "or 'none' for an event that drew no privacy noise"
            )
        if tag == NO_NOISE and not self.infinite:
            raise PrivacyError(
                f"ledger event '{self.name}' says it drew no noise (noise='none') but claims a finite epsilon"
            )
        ev_unit = self.params.get("unit")
        if ev_unit is None:
            raise PrivacyError(f"ledger event '{self.name}' does not say which privacy unit it protects (unit=...)")
        if unit is not None and ev_unit != unit:
            raise PrivacyError(f"event '{self.name}' protects a {ev_unit} but the ledger's unit is {unit}")
        return self

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "mechanism": self.mechanism,
            "dp_event": event_to_dict(self.dp_event) if self.dp_event is not None else None,
            "epsilon": self.epsilon,
            "delta": self.delta,
            "params": _jsonable(self.params),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "LedgerEvent":
        ev = data.get("dp_event")
        return cls(
            name=data["name"],
            mechanism=data["mechanism"],
            dp_event=event_from_dict(ev) if ev is not None else None,
            epsilon=data.get("epsilon"),
            delta=float(data.get("delta", 0.0)),
            params=dict(data.get("params", {})),
        )


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if hasattr(obj, "item") and callable(obj.item):  # numpy / torch scalars
        return obj.item()
    return obj
