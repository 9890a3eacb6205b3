"""Errors that users see.

Every error a user can cause is a :class:`PrivsynthError` whose message is one sentence naming the problem.
The CLI prints it on one line and exits with status 2, without a traceback.
"""
from __future__ import annotations


class PrivsynthError(ValueError):
    """A problem with the user's input or request, reported in one line."""


class DatasetNotFound(PrivsynthError):
    """A dataset id that is not in the local Minari store."""


class InvalidData(PrivsynthError):
    """Data that cannot be used: NaN/inf rows, empty episodes, wrong shapes."""


class SpaceMismatch(PrivsynthError):
    """Public and sensitive data (or a model and data) disagree on observation or action spaces."""


class PrivacyError(PrivsynthError):
    """An invalid privacy request (ε ≤ 0, δ ≥ 1/N, ...)."""


class InvalidUnit(PrivacyError, InvalidData):
    """An unknown privacy unit: one error wherever a unit is read (privsynth.data.units.check_unit), a bad privacy
    request and bad input at once, so callers catching either see it."""


class BudgetExceeded(PrivacyError):
    """The release guard refused an artifact whose ε exceeds the caller's budget."""


class UnsafeCheckpoint(InvalidData):
    """A checkpoint file that holds pickled objects other than tensors and plain data (loading it could run code)."""


def naming_file(exc: PrivsynthError, path: object) -> PrivsynthError:
    """``exc`` with the file it came from named in front (same class), unless its message names it already; for
    readers whose inner checks do not know the path."""
    if str(path) in str(exc):
        return exc
    try:
        return type(exc)(f"cannot load {path}: {exc}")
    except Exception:  # noqa: BLE001 - a subclass with another constructor signature
        return InvalidData(f"cannot load {path}: {exc}")
