"""Typed results of the benchmark: one finished cell (:class:`CellRecord`) and one run (:class:`RunSummary`).

A cell's record is stored as ``<results>/<suite>/cells/<id>.json`` (``.failed.json`` for a failure) in the layout
:meth:`CellRecord.to_json` writes; records committed under ``evaluation/results`` load with :meth:`CellRecord.from_json`
and regenerate their tables unchanged. Both types are also read-only mappings (``record["result"]``), the form cell
functions and scripts used before the records were typed.
"""
from __future__ import annotations

import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from privsynth.data.safe_files import read_json_object
from privsynth.errors import InvalidData

__all__ = ["CellRecord", "CellFailure", "RunSummary", "write_json", "read_record", "HOLDER_ONLY", "holder_only",
           "result_value"]

# A cell result's section for what a run on the sensitive set measured about itself outside any DP mechanism (its
# fine-tune / fit time, the worker's peak memory): the data holder's own figures, never published with a release
# (docs/benchmarks.md, "Holder-only figures"). Tables still show them: a suite's tables are the holder's too.
HOLDER_ONLY = "holder_only"


def holder_only(result: dict[str, Any], *keys: str) -> dict[str, Any]:
    """``result`` with ``keys`` (those present) moved into its :data:`HOLDER_ONLY` section; returns ``result``."""
    moved = {k: result.pop(k) for k in keys if k in result}
    if moved:
        result[HOLDER_ONLY] = {**result.get(HOLDER_ONLY, {}), **moved}
    return result


def result_value(result: Mapping[str, Any] | None, key: str, default: Any = None) -> Any:
    """``key`` of a cell result, from its top level or its :data:`HOLDER_ONLY` section (records written before the
    section existed keep such figures at the top)."""
    result = result or {}
    if key in result:
        return result[key]
    section = result.get(HOLDER_ONLY)
    return section.get(key, default) if isinstance(section, Mapping) else default


class _FieldView(Mapping):
    """``obj["name"]`` reads the dataclass field ``name``: the old dict access keeps working."""

    def _names(self) -> list[str]:
        return [f.name for f in fields(self) if f.name != "extra"]  # type: ignore[arg-type]

    def __getitem__(self, key: str) -> Any:
        if key in self._names():
            return getattr(self, key)
        raise KeyError(key)

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __len__(self) -> int:
        return len(self._names())


_OPTIONAL = ("upstream_finished_at", "config_fingerprint")


@dataclass
class CellRecord(_FieldView):
    """One cell's outcome: what it was (kind, stage, params, upstream id) and what it gave (result or error)."""

    id: str
    kind: str
    stage: str
    params: dict[str, Any]
    upstream: str | None = None  # id of the upstream cell
    status: str = "done"  # "done" or "failed"
    error: str | None = None  # the exception (with traceback unless it was a one-line PrivsynthError)
    result: dict[str, Any] | None = None  # what the cell function returned
    seconds: float = 0.0  # wall time (a grouped cell: its share of the group's job)
    finished_at: str = ""
    # what the cell was made from (records since 2026-11-28; older ones have neither and are written without them):
    upstream_finished_at: str | None = None  # the upstream record's finished_at when this cell ran
    config_fingerprint: str | None = None  # the configuration a PrivORL-n pretrain/synthesize cell resolved to
    extra: dict[str, Any] = field(default_factory=dict)  # keys of records written by other versions

    @property
    def done(self) -> bool:
        return self.status == "done"

    @property
    def first_error_line(self) -> str:
        return (self.error or "").splitlines()[0] if self.error else ""

    def to_json(self) -> dict[str, Any]:
        """The stored layout (key order as written since the first benchmark results; the stamps only when set)."""
        out = {name: getattr(self, name) for name in self._names()
               if not (name in _OPTIONAL and getattr(self, name) is None)}
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "CellRecord":
        names = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: v for k, v in obj.items() if k in names},
                   extra={k: v for k, v in obj.items() if k not in names})


@dataclass
class CellFailure(_FieldView):
    id: str
    error: str  # first line of the error


@dataclass
class RunSummary(_FieldView):
    """What one ``run_suite`` did: counts of cells ran, skipped (finished before), failed and blocked (waiting on a
    missing upstream), the failures, and the tables and plots written."""

    suite: str
    ran: int = 0
    skipped: int = 0
    failed: int = 0
    blocked: int = 0
    failures: list[CellFailure] = field(default_factory=list)
    tables: list[str] = field(default_factory=list)
    plots: list[str] = field(default_factory=list)
    table_error: str | None = None  # why some tables were refused (the others and the plots are written)


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def write_json(path: Path, obj: Any) -> None:
    """``obj`` as indented JSON (numpy values as numbers), written to a temporary sibling and renamed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj, indent=1, default=_json_default))
    os.replace(tmp, path)


def read_record(path: Path) -> CellRecord:
    """A cell's stored record; a damaged one (truncated, not a mapping, missing keys) is one line naming it."""
    try:
        return CellRecord.from_json(read_json_object(path, "it"))
    except (InvalidData, TypeError) as exc:  # TypeError: keys missing or unexpected for a CellRecord
        why = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise InvalidData(f"cell record {path} is damaged ({why}): delete it and the cell runs again") from None
