"""Which values of a dataset's rows break its schema: a check on the rows and the public schema only.

On a release this is post-processing of DP outputs (free): ``privsynth synthesize`` warns with
:func:`schema_warnings` and records them in the release's metadata (``extra["schema_check"]``); ``privsynth
evaluate`` reports :func:`column_validity` per column in the holder's verdict (privsynth.evaluation.verdict).
Observations and next observations are pooled under the column's name (they hold the same column).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["ColumnValidity", "check_release", "column_validity", "schema_warnings", "share_text"]


@dataclass(frozen=True)
class ColumnValidity:
    """How many of ``total`` values of column ``name`` break its declaration (``rule`` says how)."""

    name: str
    rule: str
    invalid: int
    total: int

    @property
    def share(self) -> float:
        return self.invalid / self.total if self.total else 0.0

    def text(self) -> str:
        """E.g. ``3% of heart_rate outside [20, 250]``."""
        return f"{share_text(self.share)} of {self.name} {self.rule}"

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.rule, "invalid": self.invalid, "total": self.total, "share": self.share}


def share_text(share: float) -> str:
    """A share as a percentage a reader can act on: whole percents, one decimal below 1%, "<0.1%" above 0."""
    if share == 0 or share >= 0.01:
        return f"{share:.0%}"
    return f"{share:.1%}" if share >= 0.001 else "<0.1%"


def _shown(values: Any) -> str:
    return "[" + ", ".join(str(v) for v in values) + "]"


def _checks(col: Any, v: np.ndarray, *, stored_values: bool) -> list[tuple[str, np.ndarray]]:
    """(rule, bad mask) pairs of column ``col``'s stored numbers ``v``. ``stored_values``: a discrete reward is stored
    as its value, every other discrete column as a value index."""
    finite = np.isfinite(v)
    if col.discrete:
        if stored_values:
            bad = ~np.isin(v, np.asarray(col.values, dtype=v.dtype))
        else:
            bad = ~finite | (v < 0) | (v > len(col.levels) - 1) | (v != np.round(v))
        return [(f"not one of its declared values {_shown(col.levels)}", bad)]
    out = [(f"outside [{col.low:g}, {col.high:g}]", ~finite | (v < col.low) | (v > col.high))]
    if col.kind == "integer":
        out.append(("not a whole number", finite & (v != np.round(v))))
    return out


def column_validity(ds: Any) -> list[ColumnValidity]:
    """One entry per schema column and rule (observations, actions, reward), in the schema's order; empty without a
    schema."""
    from privsynth.data.schema import Schema

    if not ds.info.schema:
        return []
    schema = Schema.from_dict(ds.info.schema)
    out = []
    for j, c in enumerate(schema.observations):
        v = np.concatenate([ds.observations[:, j], ds.next_observations[:, j]])
        out += [ColumnValidity(c.name, rule, int(bad.sum()), len(v)) for rule, bad in _checks(c, v, stored_values=False)]
    for j, c in enumerate(schema.actions):
        v = ds.actions[:, j]
        out += [ColumnValidity(c.name, rule, int(bad.sum()), len(v)) for rule, bad in _checks(c, v, stored_values=False)]
    v = np.asarray(ds.rewards).reshape(-1)
    out += [ColumnValidity(schema.reward.name, rule, int(bad.sum()), len(v))
            for rule, bad in _checks(schema.reward, v, stored_values=True)]
    return out


def schema_warnings(ds: Any) -> list[str]:
    """One line per column and rule that any value breaks, e.g. ``3% of heart_rate outside [20, 250]``; empty when
    every value is valid or there is no schema."""
    return [c.text() for c in column_validity(ds) if c.invalid]


def check_release(ds: Any) -> list[str]:
    """Problems of ``ds``'s rows against its schema (empty: every value valid), one per column and rule, each leading
    with its count (e.g. ``12 values of 'gcs' not a whole number``); the rules of :func:`column_validity`."""
    return [f"{c.invalid} values of '{c.name}' {c.rule}" for c in column_validity(ds) if c.invalid]
