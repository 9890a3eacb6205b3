"""argparse value types shared by the commands (a bad value: one line and exit status 2, never a later traceback)."""
from __future__ import annotations

import argparse
from collections.abc import Iterable
from pathlib import Path

from privsynth.errors import InvalidData


def positive_int(value: str, *, expected: str = "a positive count") -> int:
    """A count of at least 1."""
    try:
        n = int(value)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected {expected}, got '{value}'")
    return n


def float_list(text: str) -> list[float]:
    """``"1,10,0.5"`` -> [1.0, 10.0, 0.5]."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of numbers, got '{text}'") from None


def int_list(text: str) -> list[int]:
    """``"20,40,1e3"`` -> [20, 40, 1000] (counts may be written as floats, as 1e3)."""
    try:
        return [int(float(x)) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a comma list of counts, got '{text}'") from None


def require_counts(counts: Iterable[tuple[str, int | None]], *, must: str = "at least 1") -> None:
    """Refuse, before any data is read, a given count below 1 (``None``: not given, left to the default)."""
    for flag, value in counts:
        if value is not None and value < 1:
            raise InvalidData(f"{flag} must be {must}, got {value}")


def seed_list(text: str, *, count: bool) -> list[int]:
    """Agent seeds: a comma list of distinct seeds (``"0,4,7"``, ``"5,"``); with ``count`` a bare number N means
    seeds 0..N-1 (``evaluate``), without it the one seed N (``agents train``)."""
    try:
        if count and "," not in text:
            n = int(text)
        else:
            seeds = [int(s) for s in text.split(",") if s.strip()]
    except ValueError:  # InvalidData is a ValueError too: raised outside this block, so its message survives
        what = "a count or a comma list of integers" if count else "a comma list of integers"
        raise InvalidData(f"--seeds must be {what}, got '{text}'") from None
    if count and "," not in text:
        if n < 1:
            raise InvalidData(f"--seeds must be a count of at least 1 (seeds 0..N-1) or a comma list such as "
                              f"'{text},' for that one seed, got '{text}'")
        return list(range(n))
    if not seeds or len(set(seeds)) != len(seeds):  # a repeated seed would count one run twice in mean ± std
        raise InvalidData(f"--seeds must list distinct seeds, got '{text}'")
    return seeds


def refuse_existing(path: str | Path, overwrite: bool, *, label: str = "", what: str = "") -> None:
    """One-line refusal of an output ``path`` that already exists unless ``--overwrite`` was given (checked before any
    data is read); ``label`` names the option (``"--out "``), ``what`` says what the file probably is."""
    if Path(path).exists() and not overwrite:
        raise InvalidData(f"{label}{path} exists{what}; pass --overwrite to replace it")


def budget_from_args(args: argparse.Namespace, default_unit: str | None = None):
    """The one place a command builds its privacy request: a :class:`privsynth.privacy.Budget` from ``--epsilon``,
    ``--delta`` and ``--unit`` (``default_unit`` when ``--unit`` was not given), validated once (issue 38)."""
    from privsynth.privacy.budget import Budget

    unit = getattr(args, "unit", None) or default_unit or "transition"
    return Budget(args.epsilon, args.delta, unit)
