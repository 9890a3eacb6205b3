"""Config dataclasses to and from plain dicts: the one deserialiser for every saved or user-given config.

``config_from_dict(TrajSynthConfig, d)`` rebuilds nested sections from nested dicts and turns JSON lists back into
tuples where the field is a tuple; a missing key takes its default (configs saved before a field existed still load),
an unknown key is refused in one line naming it and the known ones (docs/DESIGN.md, invariant 5: bad input is one
line), so a misspelt setting never passes silently. :func:`override` applies user overrides to a config object with
the same check.
"""
from __future__ import annotations

import dataclasses
import numbers
import types
import typing
from typing import Any, TypeVar

import numpy as np

from privsynth.errors import InvalidData

__all__ = ["config_to_dict", "config_from_dict", "override"]

T = TypeVar("T")


def config_to_dict(cfg: Any) -> dict[str, Any]:
    """A config dataclass as nested plain dicts (``dataclasses.asdict``)."""
    return dataclasses.asdict(cfg)


def _options(hint: Any) -> tuple[Any, ...]:
    """The alternatives of ``A | B | None`` (a single type for anything else)."""
    if typing.get_origin(hint) in (typing.Union, types.UnionType):
        return typing.get_args(hint)
    return (hint,)


def _fits(option: Any, value: Any) -> bool:
    """Whether ``value`` (as read from JSON, YAML or a checkpoint) may fill a field annotated ``option``.

    Plain types are checked (an int where an int is wanted, any real number for a float, a bool for a bool, a
    string for a string or a Literal of strings; tuples element by element); other annotations are not checked."""
    if option is type(None):
        return value is None
    if option is bool:
        return isinstance(value, (bool, np.bool_))
    if option is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, (bool, np.bool_))
    if option is float:
        return isinstance(value, numbers.Real) and not isinstance(value, (bool, np.bool_))
    if option is str:
        return isinstance(value, str)
    origin, args = typing.get_origin(option), typing.get_args(option)
    if origin is typing.Literal:
        return any(type(value) is type(a) for a in args)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            return False
        if len(args) == 2 and args[1] is Ellipsis:
            return all(_fits(args[0], v) for v in value)
        return not args or (len(args) == len(value) and all(_fits(a, v) for a, v in zip(args, value)))
    if isinstance(option, type) and dataclasses.is_dataclass(option):
        return isinstance(value, option)
    return True


def _type_name(hint: Any) -> str:
    names = []
    for option in _options(hint):
        if option is type(None):
            names.append("null")
        elif typing.get_origin(option) is typing.Literal:
            names.append(" or ".join(repr(a) for a in typing.get_args(option)))
        elif isinstance(option, type) and dataclasses.is_dataclass(option):
            names.append("a mapping of settings")
        else:
            names.append(getattr(option, "__name__", None) or str(option))
    return " or ".join(names)


def _value(hint: Any, value: Any, where: str) -> Any:
    for option in _options(hint):
        if isinstance(option, type) and dataclasses.is_dataclass(option) and isinstance(value, dict):
            return config_from_dict(option, value, where=where)
        if typing.get_origin(option) is tuple and isinstance(value, list) and _fits(option, value):
            return tuple(value)
    if not any(_fits(option, value) for option in _options(hint)):
        shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
        raise InvalidData(f"setting '{where}' must be {_type_name(hint)}, got {shown}")
    return value


def _unknown(cls: type, keys: Any, where: str) -> None:
    known = {f.name for f in dataclasses.fields(cls)}
    bad = sorted(set(keys) - known)
    if bad:
        raise InvalidData(f"unknown setting{'s' if len(bad) > 1 else ''} {', '.join(repr(f'{where}.{k}') for k in bad)} "
                          f"for {cls.__name__}: choose from {', '.join(sorted(known))}")


def config_from_dict(cls: type[T], data: dict[str, Any], *, where: str = "config") -> T:
    """Inverse of :func:`config_to_dict`: missing keys take defaults, unknown keys raise :class:`InvalidData`."""
    if not isinstance(data, dict):
        raise InvalidData(f"{where} must be a mapping of settings for {cls.__name__}, not {type(data).__name__}")
    _unknown(cls, data, where)
    hints = typing.get_type_hints(cls)
    return cls(**{k: _value(hints[k], v, f"{where}.{k}") for k, v in data.items()})


def override(cfg: T, overrides: dict[str, Any], *, where: str = "config") -> T:
    """Set fields of the dataclass ``cfg`` in place; a dict for a nested section updates that section's fields."""
    _unknown(type(cfg), overrides, where)
    hints = typing.get_type_hints(type(cfg))
    for key, value in overrides.items():
        current = getattr(cfg, key)
        if isinstance(value, dict) and dataclasses.is_dataclass(current):
            override(current, value, where=f"{where}.{key}")
        else:
            setattr(cfg, key, _value(hints[key], value, f"{where}.{key}"))
    return cfg
