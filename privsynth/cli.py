"""The ``privsynth`` command.

Subcommands are thin: each lives in a module of :mod:`privsynth.commands` that defines
``register(subparsers)`` and sets ``func`` on its parser; the logic lives in the library.
Any :class:`~privsynth.errors.PrivsynthError` is printed as one line and the exit status is 2.
Global options: ``--store DIR`` (the Minari store) and ``--threads N|auto`` (torch, OpenMP and BLAS threads for the
command; ``auto`` measures the idle cores as the demo does).
"""
from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys
from collections.abc import Sequence
from pathlib import Path

from privsynth import __version__
from privsynth.errors import PrivsynthError


class _DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows each option's default after its help text, unless the help text already states it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        if ("default" in text.lower() or action.default in (None, False, argparse.SUPPRESS) or action.default == []
                or not action.option_strings):
            return action.help
        return super()._get_help_string(action)

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        """Each line of a description or epilog is its own paragraph; the example's lines stay as written."""
        return "\n".join(indent + line if line.startswith(("example:", " ")) else
                         super(_DefaultsFormatter, self)._fill_text(line, width, indent)
                         for line in text.splitlines())

    def _get_default_metavar_for_optional(self, action: argparse.Action) -> str:
        """Short metavars keep the usage on a few lines: N for a count, X for a number."""
        if action.type is int or getattr(action.type, "__name__", "") == "positive_int":
            return "N"
        if action.type is float:
            return "X"
        return super()._get_default_metavar_for_optional(action)


class _Parser(argparse.ArgumentParser):
    """Every (sub)command parser shows option defaults in ``--help``."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", _DefaultsFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]


def _threads(value: str) -> int | str:
    from privsynth.commands._types import positive_int

    return value if value == "auto" else positive_int(value, expected="a positive count or 'auto'")


def build_parser() -> argparse.ArgumentParser:
    """Build the parser from every module in :mod:`privsynth.commands` (sorted by name)."""
    import privsynth.commands as commands

    parser = _Parser(
        prog="privsynth",
        description="Differentially private synthetic offline-RL datasets, and audits of what they leak.",
    )
    parser.add_argument("--version", action="version", version=f"privsynth {__version__}")
    parser.add_argument("--store", default=None, metavar="DIR",
                        help="Minari dataset store to read and write (default: $MINARI_DATASETS_PATH, else "
                             "~/.minari/datasets)")
    parser.add_argument("--threads", dest="torch_threads", default=None, type=_threads, metavar="N|auto",
                        help="torch (and OpenMP / BLAS) threads for the command: a count, or 'auto' for the cores "
                             "other jobs leave idle, measured at start (default: torch's own choice, every core; "
                             "on a shared machine a thread per busy core slows every step)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    found = {m.name for m in pkgutil.iter_modules(commands.__path__) if not m.name.startswith("_")}
    # the visible verbs in the order a newcomer meets them; the other modules only add hidden deprecated aliases
    for name in [m for m in _ORDER if m in found] + sorted(found - set(_ORDER)):
        importlib.import_module(f"privsynth.commands.{name}").register(sub)
    return parser


_ORDER = ("datasets", "synth", "model", "evaluate", "agents", "audit", "privacy", "bench", "method", "demo")
_GLOBAL_VALUED = ("--store", "--threads")


def _legacy_argv(argv: list[str]) -> list[str]:
    """The flat ``privsynth audit --release ...`` of the previous release: ``audit`` took its options directly;
    now it takes a mode (membership, canary, engine). Routed to the hidden ``audit legacy`` parser, which warns."""
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        i += 2 if argv[i] in _GLOBAL_VALUED else 1
    if i < len(argv) - 1 and argv[i] == "audit" and argv[i + 1].startswith("-") and argv[i + 1] not in ("-h", "--help"):
        return argv[:i + 1] + ["legacy"] + argv[i + 1:]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    from privsynth.commands._surface import DEPRECATED

    parser = build_parser()
    args = parser.parse_args(_legacy_argv(list(sys.argv[1:] if argv is None else argv)))
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    if getattr(args, DEPRECATED, None):
        old, new = getattr(args, DEPRECATED)
        print(f"privsynth: warning: '{old}' is deprecated and will be removed in the next release; use "
              f"'privsynth {new}' (see CHANGELOG.md)", file=sys.stderr)
    old_store = os.environ.get("MINARI_DATASETS_PATH")
    if getattr(args, "store", None):
        os.environ["MINARI_DATASETS_PATH"] = str(Path(args.store).expanduser().resolve())
    try:
        if args.torch_threads is None:
            result = args.func(args)
        else:
            from privsynth.threads import idle_cores, torch_threads

            threads = idle_cores() if args.torch_threads == "auto" else int(args.torch_threads)
            if getattr(args, "threads", False) is None:  # the demo's own --threads, unset: the global one decides
                args.threads = threads
            with torch_threads(threads, native_pools=True):
                result = args.func(args)
    except PrivsynthError as exc:
        print(f"privsynth: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("privsynth: interrupted", file=sys.stderr)
        return 130
    finally:
        if getattr(args, "store", None):  # main() may run inside a longer process (tests, notebooks)
            if old_store is None:
                os.environ.pop("MINARI_DATASETS_PATH", None)
            else:
                os.environ["MINARI_DATASETS_PATH"] = old_store
    return int(result or 0)


if __name__ == "__main__":
    sys.exit(main())
