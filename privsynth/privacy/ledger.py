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

from privsynth.data.units import ALL_UNITS, check_unit
from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.events import (  # events live in their own module; re-exported here, where callers look
    NO_NOISE,
    NOISE_TAGS,
    UNITS,
    UNTAGGED_NOTE,
    LedgerEvent,
    _jsonable,
    event_from_dict,
    event_to_dict,
)

__all__ = ["LedgerEvent", "Ledger", "event_to_dict", "event_from_dict", "UNITS", "NO_NOISE", "NOISE_TAGS"]


# ----------------------------------------------------------------------------------------------------------- ledger
@dataclass
class Ledger:
    """Ordered accounted events plus what the card must say about the release.

    ``unit``: ``transition`` or ``trajectory``; ``accountant``: the preferred accountant for composition;
    ``delta``: the δ at which ε is reported; ``public_data``: public datasets used (pre-training, normalisers);
    ``treated_as_public``: public facts the release takes as given (dimensions, a horizon cap); the number of units
    N is not one of them: it is counted with DP (privsynth.privacy.count).
    """

    unit: str = "transition"
    accountant: str = "rdp"
    delta: float = 1e-5
    neighbouring: str | None = None
    public_data: list[str] = field(default_factory=list)
    # Nothing by default: the number of units N is private under add/remove and is counted with DP
    # (privsynth.privacy.count). Methods list here the public facts they truly take as given (e.g. a horizon cap).
    treated_as_public: list[str] = field(default_factory=list)
    events: list[LedgerEvent] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        check_unit(self.unit, ALL_UNITS)
        acc.check_accountant(self.accountant)
        acc.check_delta(self.delta)
        if self.neighbouring is None:
            self.neighbouring = UNITS[self.unit]
        for ev in self.events:  # events passed to the constructor enter the ledger too
            self._check_event(ev)

    def _check_event(self, event: LedgerEvent) -> None:
        if not isinstance(event, LedgerEvent):
            raise TypeError("Ledger.append expects a LedgerEvent")
        event.check_tags(self.unit)

    def append(self, event: LedgerEvent) -> "Ledger":
        """Add an event; it must carry its noise-source tag and the ledger's privacy unit
        (:meth:`LedgerEvent.check_tags`)."""
        self._check_event(event)
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
        """True if any event's noise is not known to be secure: it came from a recorded seed
        (:mod:`privsynth.privacy.noise`), or the event has no or an unknown noise tag (ledgers written before the tag
        existed, or hand-made events). Then nothing is DP, the card says so and the guard refuses the ledger. Fails
        closed: only ``secure`` (and ``none`` on an ε = ∞ event, which is not private anyway) passes."""
        return any(not ev.noise_accounted for ev in self.events)

    @property
    def untagged_events(self) -> list[str]:
        """Names of the events whose noise is neither secure nor reproducible, and not the 'none' of an ε = ∞ event:
        tag missing or unknown (only possible for ledgers read from disk)."""
        return [ev.name for ev in self.events if not ev.noise_accounted and ev.noise != "reproducible"]

    @property
    def private(self) -> bool:
        """True if the ledger describes a DP release: at least one event, every event's noise tagged secure,
        finite ε."""
        return bool(self.events) and all(ev.secure_noise for ev in self.events) and all(
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
        """Read a ledger back. Events are not re-checked (:meth:`append`), so ledgers written before every event
        carried a noise tag still load; such an event makes the ledger not private (:attr:`reproducible_noise`).

        ``data`` is read from a file: a part of the wrong type is one :class:`InvalidData` line naming it."""
        if not isinstance(data, dict):
            raise InvalidData(f"a ledger must be a JSON object, not {type(data).__name__}")
        for key, kind in _LEDGER_FIELDS.items():
            if key in data and not kind(data[key]):
                raise InvalidData(f"ledger field '{key}' has a value of the wrong type: {_short(data[key])}")
        fields = {f.name for f in dataclasses.fields(cls)} - {"events"}
        ledger = cls(**{k: v for k, v in data.items() if k in fields})
        ledger.events = [_event(ev, i) for i, ev in enumerate(data.get("events", []))]
        return ledger

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> "Ledger":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise PrivacyError(f"ledger is not valid JSON: {exc.msg}") from None
        except (RecursionError, TypeError, ValueError) as exc:  # nested past Python's limit, or not text
            raise InvalidData(f"ledger is not readable JSON ({type(exc).__name__})") from None
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
            from privsynth.privacy.noise import NOT_DP_NOTE, REPRODUCIBLE

            untagged = self.untagged_events
            if not any(ev.noise == REPRODUCIBLE for ev in self.events):
                note = UNTAGGED_NOTE.format(events=", ".join(f"'{n}'" for n in untagged))
            else:
                note = NOT_DP_NOTE
            card["not_dp"] = note
            notes.insert(0, note)
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


# ------------------------------------------------------------------------------------------ reading from files
def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _strings(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


_LEDGER_FIELDS = {"unit": lambda v: isinstance(v, str), "accountant": lambda v: isinstance(v, str), "delta": _number,
                  "neighbouring": lambda v: v is None or isinstance(v, str), "public_data": _strings,
                  "treated_as_public": _strings, "notes": _strings,
                  "events": lambda v: isinstance(v, list) and all(isinstance(e, dict) for e in v)}
_EVENT_FIELDS = {"name": lambda v: isinstance(v, str), "mechanism": lambda v: isinstance(v, str),
                 "epsilon": lambda v: v is None or _number(v), "delta": _number,
                 "params": lambda v: isinstance(v, dict), "dp_event": lambda v: v is None or isinstance(v, dict)}


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_dp_event(ev: Any) -> None:
    """Every field of a dp-accounting event read from a file is a number of the field's kind (a whole number where
    it counts, a probability at most 1, none negative or NaN) or a nested event: the accountants take it as given."""
    import attr
    import dp_accounting as dpa

    for f in attr.fields(type(ev)):
        value = getattr(ev, f.name)
        items = value if isinstance(value, list) else [value]
        for item in items:
            if isinstance(item, dpa.DpEvent):
                _check_dp_event(item)
            elif not _number(item) or not item >= 0 or (f.type is int and not isinstance(item, int)) or (
                    "probability" in f.name and item > 1):
                raise InvalidData(f"its dp_event's '{f.name}' is not a valid value: {_short(item)}")


def _event(data: dict[str, Any], i: int) -> LedgerEvent:
    """Event ``i`` of a ledger read from a file, or one :class:`InvalidData` line naming what is wrong."""
    where = f"ledger event {i}"
    for key, kind in _EVENT_FIELDS.items():
        if (key in data or key in ("name", "mechanism")) and not kind(data.get(key)):
            raise InvalidData(f"{where}: field '{key}' is missing or of the wrong type: {_short(data.get(key))}")
    try:
        event = LedgerEvent.from_dict(data)
        if event.dp_event is not None:
            _check_dp_event(event.dp_event)
    except InvalidData as exc:
        raise InvalidData(f"{where}: {exc}") from None
    except PrivacyError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, RecursionError) as exc:
        raise InvalidData(f"{where} has a malformed dp_event ({type(exc).__name__}: {_short(str(exc))})") from None
    return event


def _fmt(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:.4g}"
    return str(v)
