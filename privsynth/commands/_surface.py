"""Shared helpers of the command surface: hidden deprecated aliases, hidden old option spellings, examples.

The visible tree is one verb per job (``privsynth --help``); an old command stays for one release as a hidden parser
(``help=SUPPRESS``) whose run prints one deprecation line naming the new command (:func:`privsynth.cli.main` prints it).
"""
from __future__ import annotations

import argparse
from typing import Any

DEPRECATED = "_deprecated"  # Namespace attribute: the new spelling of a hidden alias, printed once to stderr


def hidden_parser(subparsers: Any, name: str, new: str, *, old: str | None = None,
                  **kwargs: Any) -> argparse.ArgumentParser:
    """A subcommand kept for one release, not listed in ``--help``; running it warns that ``new`` replaces it.

    Added without ``help``: argparse lists only the subcommands given one (``help=SUPPRESS`` still prints the name
    with ``==SUPPRESS==`` before Python 3.13)."""
    p = subparsers.add_parser(name, **kwargs)
    p.set_defaults(**{DEPRECATED: (old or name, new)})
    return p


def hidden_option(parser: argparse.ArgumentParser, *flags: str, dest: str, **kwargs: Any) -> None:
    """An old option spelling that still works (same ``dest``), not listed in ``--help``."""
    kwargs.setdefault("default", argparse.SUPPRESS)
    parser.add_argument(*flags, dest=dest, help=argparse.SUPPRESS, **kwargs)


def example(*lines: str) -> str:
    """The epilog every visible leaf ends with: ``example: privsynth ...``, one command continued over ``lines``
    (each under 100 columns)."""
    head = ["example: privsynth " + lines[0]] + ["           " + line for line in lines[1:]]
    return " \\\n".join(head)


def overrides(items: list[str] | None) -> dict[str, Any]:
    """``--set KEY=VALUE`` items as a nested dict for :func:`privsynth.config_io.override`: ``finetune.epochs=3``
    -> ``{"finetune": {"epochs": 3}}``; a value is read as JSON where it parses (numbers, true, [1, 2]), else a
    string."""
    import json

    from privsynth.errors import InvalidData

    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or any(not part for part in key.split(".")):
            raise InvalidData(f"--set expects KEY=VALUE (KEY may be dotted: finetune.epochs=3), got '{item}'")
        try:
            parsed: Any = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        node = out
        *parents, leaf = key.strip().split(".")
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise InvalidData(f"--set {key}: '{part}' was already set to a value")
            node = child
        node[leaf] = parsed
    return out


def add_set(parser: argparse.ArgumentParser, what: str = "config") -> None:
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help=f"set a {what} field (section.field=value); repeatable")
