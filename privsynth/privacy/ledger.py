"""The privacy ledger: an ordered list of accounted events that composes to (ε, δ) and renders as a privacy card.

Each :class:`LedgerEvent` carries a dp-accounting :class:`~dp_accounting.DpEvent` when the mechanism has one
(DP-SGD, Gaussian and Laplace mechanisms on statistics, zCDP releases), or only an (ε, δ) pair for mechanisms that
are analysed by hand (sparse vector, Dirichlet sampling). :meth:`Ledger.compose` uses the ledger's accountant for every
event it can take, RDP for zCDP events the accountant cannot take, and basic composition (sums of ε and δ) for
(ε, δ)-only events; the δ budget is split between these groups and the card says which rule was used.

Serialisation is plain JSON (``to_json``/``from_json``); DpEvents are written as nested ``{"type": ..., fields}``
dicts, because dp-accounting's own named-tuple form is not JSON.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Any

import attr
import dp_accounting as dpa

from privsynth.errors import PrivacyError
from privsynth.privacy import accounting as acc

__all__ = ["LedgerEvent", "Ledger", "event_to_dict", "event_from_dict", "UNITS"]

UNITS = {
    "transition": "add/remove one transition",
    "trajectory": "add/remove one trajectory (all of its transitions)",
    "expert": "add/remove one expert (behaviour policy) with all of its trajectories",
}


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
        cls, name: str, *, noise_multiplier: float, sample_rate: float, steps: int, max_grad_norm: float, **params: Any
    ) -> "LedgerEvent":
        return cls(
            name=name,
            mechanism="dpsgd",
            dp_event=acc.dpsgd_event(noise_multiplier, sample_rate, steps),
            params=dict(
                noise_multiplier=float(noise_multiplier),
                sample_rate=float(sample_rate),
                steps=int(steps),
                max_grad_norm=float(max_grad_norm),
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


# ----------------------------------------------------------------------------------------------------------- ledger
@dataclass
class Ledger:
    """Ordered accounted events plus what the card must say about the release.

    ``unit``: ``transition`` or ``trajectory``; ``accountant``: the preferred accountant for composition;
    ``delta``: the δ at which ε is reported; ``public_data``: public datasets used (pre-training, normalisers);
    ``treated_as_public``: quantities computed from the sensitive data but not protected (dataset size N used in the
    sample rate, dimensions, ...).
    """

    unit: str = "transition"
    accountant: str = "rdp"
    delta: float = 1e-5
    neighbouring: str | None = None
    public_data: list[str] = field(default_factory=list)
    treated_as_public: list[str] = field(default_factory=lambda: ["number of privacy units N (sets the sample rate)"])
    events: list[LedgerEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise PrivacyError(f"unknown privacy unit '{self.unit}': choose transition or trajectory")
        acc.check_accountant(self.accountant)
        acc.check_delta(self.delta)
        if self.neighbouring is None:
            self.neighbouring = UNITS[self.unit]

    def append(self, event: LedgerEvent) -> "Ledger":
        if not isinstance(event, LedgerEvent):
            raise TypeError("Ledger.append expects a LedgerEvent")
        ev_unit = event.params.get("unit")
        if ev_unit is not None and ev_unit != self.unit:
            raise PrivacyError(f"event '{event.name}' protects a {ev_unit} but the ledger's unit is {self.unit}")
        self.events.append(event)
        return self

    def extend(self, events: list[LedgerEvent]) -> "Ledger":
        for ev in events:
            self.append(ev)
        return self

    def __len__(self) -> int:
        return len(self.events)

    # ------------------------------------------------------------------------------------------------ composition
    def compose(self, delta: float | None = None, accountant: str | None = None) -> tuple[float, str]:
        """(ε at δ, description of the composition rule) of all events together."""
        delta = self.delta if delta is None else acc.check_delta(delta)
        accountant = acc.check_accountant(accountant or self.accountant)
        if not self.events:
            return 0.0, "no events"
        main, fallback, approx = [], [], []
        for ev in self.events:
            if ev.dp_event is None:
                approx.append(ev)
            elif acc.supports(accountant, ev.dp_event):
                main.append(ev.dp_event)
            elif acc.supports("rdp", ev.dp_event):
                fallback.append(ev.dp_event)
            else:
                raise PrivacyError(f"no accountant can compose event '{ev.name}'")
        eps_basic = sum(float(ev.epsilon) for ev in approx)
        delta_basic = sum(ev.delta for ev in approx)
        rest = delta - delta_basic
        groups = [g for g in (main, fallback) if g]
        parts = []
        eps = eps_basic
        if groups:
            if rest <= 0:
                raise PrivacyError(f"the (epsilon, delta)-only events already use delta {delta_basic:g} >= {delta:g}")
            share = rest / len(groups)
            if main:
                eps += acc.events_epsilon(main, share, accountant)
                parts.append(f"{accountant} over {len(main)} event(s)")
            if fallback:
                eps += acc.events_epsilon(fallback, share, "rdp")
                parts.append(f"rdp over {len(fallback)} event(s) the {accountant} accountant cannot take")
        elif delta_basic > delta:
            raise PrivacyError(f"the ledger's events use delta {delta_basic:g} > {delta:g}")
        if approx:
            parts.append(f"basic composition of {len(approx)} (epsilon, delta) event(s)")
        rule = " + ".join(parts)
        if len(parts) > 1:
            rule += " (delta split between groups; epsilons added)"
        return float(eps), rule

    @property
    def reproducible_noise(self) -> bool:
        """True if any event's noise came from a recorded seed (:mod:`privsynth.privacy.noise`): then nothing is DP."""
        from privsynth.privacy.noise import REPRODUCIBLE

        return any(ev.params.get("noise") == REPRODUCIBLE for ev in self.events)

    @property
    def private(self) -> bool:
        """True if the ledger describes a DP release: at least one event, all noise secure, finite ε."""
        return bool(self.events) and not self.reproducible_noise and all(
            ev.dp_event is not None or (ev.epsilon is not None and ev.epsilon < float("inf")) for ev in self.events
        )

    def epsilon(self, delta: float | None = None, accountant: str | None = None) -> float:
        """Composed ε at ``delta`` (default: the ledger's δ)."""
        return self.compose(delta, accountant)[0]

    # -------------------------------------------------------------------------------------------- serialisation
    def to_dict(self) -> dict[str, Any]:
        return {
            "unit": self.unit,
            "accountant": self.accountant,
            "delta": self.delta,
            "neighbouring": self.neighbouring,
            "public_data": list(self.public_data),
            "treated_as_public": list(self.treated_as_public),
            "notes": list(self.notes),
            "events": [ev.to_dict() for ev in self.events],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "Ledger":
        fields = {f.name for f in dataclasses.fields(cls)} - {"events"}
        ledger = cls(**{k: v for k, v in data.items() if k in fields})
        ledger.events = [LedgerEvent.from_dict(ev) for ev in data.get("events", [])]
        return ledger

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "Ledger":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PrivacyError(f"ledger is not valid JSON: {exc.msg}") from None
        return cls.from_dict(data)

    # --------------------------------------------------------------------------------------------------- card
    def card(self) -> dict[str, Any]:
        """The privacy card: a JSON-able summary of what is protected and at what cost."""
        eps, rule = self.compose()
        dpsgd = [ev for ev in self.events if ev.mechanism == "dpsgd"]
        card: dict[str, Any] = {
            "unit": self.unit,
            "neighbouring_relation": self.neighbouring,
            "accountant": self.accountant,
            "epsilon": eps,
            "delta": self.delta,
            "composition": rule,
            "public_data": list(self.public_data),
            "treated_as_public": list(self.treated_as_public),
            "events": [],
        }
        for ev in self.events:
            row: dict[str, Any] = {"name": ev.name, "mechanism": ev.mechanism}
            row.update(_jsonable(ev.params))
            if ev.dp_event is None:
                row["epsilon"], row["delta"] = ev.epsilon, ev.delta
            card["events"].append(row)
        if len(dpsgd) == 1:  # the common case: lift the DP-SGD parameters to the top of the card
            p = dpsgd[0].params
            for key in ("noise_multiplier", "max_grad_norm", "sample_rate", "steps"):
                card[key] = p.get(key)
        notes = list(self.notes)
        if self.reproducible_noise:
            from privsynth.privacy.noise import NOT_DP_NOTE

            card["not_dp"] = NOT_DP_NOTE
            notes.insert(0, NOT_DP_NOTE)
        if notes:
            card["notes"] = notes
        return card

    def render_markdown(self) -> str:
        c = self.card()
        guarantee = f"({c['epsilon']:.3g}, {c['delta']:g})-differential privacy"
        if c.get("not_dp"):
            guarantee = f"none: {c['not_dp']}"
        lines = [
            "## Privacy card",
            "",
            f"- **Guarantee**: {guarantee}",
            f"- **Privacy unit**: {c['unit']} (neighbouring datasets: {c['neighbouring_relation']})",
            f"- **Accountant**: {c['accountant']}; composition: {c['composition']}",
            f"- **Public data used**: {', '.join(c['public_data']) or 'none'}",
            f"- **Treated as public**: {', '.join(c['treated_as_public']) or 'nothing'}",
            "",
            "| # | event | mechanism | details |",
            "|---|---|---|---|",
        ]
        for i, row in enumerate(c["events"], 1):
            details = ", ".join(f"{k}={_fmt(v)}" for k, v in row.items() if k not in ("name", "mechanism"))
            lines.append(f"| {i} | {row['name']} | {row['mechanism']} | {details} |")
        for note in c.get("notes", []):
            if note != c.get("not_dp"):
                lines.append(f"\n{note}")
        return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
