"""The privacy unit: one vocabulary for what one person's data is, and the data-side helpers that depend on it.

A unit is ``"transition"`` (one row) or ``"trajectory"`` (one whole episode, all of its transitions); expert-level
methods protect ``"expert"`` (a behaviour policy with all its trajectories). Every privacy request names one of these
(:class:`privsynth.privacy.budget.Budget`), and every place that counts units in a dataset or splits a dataset by
unit calls this module, so the words and the errors are the same everywhere. ``"episode"`` is accepted as an old
name of ``"trajectory"`` (``datasets split --by episode``, split records written before issue 38).
"""
from __future__ import annotations

from typing import Any, Literal

from privsynth.errors import InvalidUnit

__all__ = ["Unit", "DataUnit", "DATA_UNITS", "ALL_UNITS", "check_unit", "count_units"]

Unit = Literal["transition", "trajectory", "expert"]
DataUnit = Literal["transition", "trajectory"]  # what a synthesizer of transitions and episodes can protect
DATA_UNITS: tuple[str, ...] = ("transition", "trajectory")  # the units of a dataset of transitions and episodes
ALL_UNITS: tuple[str, ...] = (*DATA_UNITS, "expert")
_ALIASES = {"episode": "trajectory"}


def check_unit(unit: Any, allowed: tuple[str, ...] = DATA_UNITS, *, what: str = "privacy unit",
               aliases: bool = False) -> str:
    """``unit`` as one of ``allowed`` (with ``aliases``, old names mapped: ``episode``), or one :class:`InvalidUnit`
    line naming the choices."""
    name = _ALIASES.get(unit, unit) if aliases and isinstance(unit, str) else unit
    if name not in allowed:
        raise InvalidUnit(f"unknown {what} {unit!r}: choose {' or '.join(repr(u) for u in allowed)}")
    return name


def count_units(dataset: Any, unit: str) -> int:
    """How many units of kind ``unit`` the dataset holds (transitions or episodes): for refusals shown to the
    operator only, never for anything released (the count is private under add/remove; privsynth.privacy.count)."""
    unit = check_unit(unit)
    return int(dataset.n_transitions if unit == "transition" else dataset.n_episodes)
