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
