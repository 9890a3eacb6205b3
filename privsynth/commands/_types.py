"""argparse value types shared by the commands (a bad value: one line and exit status 2, never a later traceback)."""
from __future__ import annotations

import argparse


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
