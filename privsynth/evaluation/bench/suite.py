"""The suite model: a suite YAML parsed into stages, a stage expanded into cell params, a cell's stable id
(docs/benchmarks.md, "Suite format")."""
from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from privsynth.errors import InvalidData

if TYPE_CHECKING:
    from privsynth.evaluation.bench.records import CellRecord

__all__ = ["Stage", "Suite", "Cell", "load_suite", "deep_merge", "expand_stage", "cell_id", "canonical",
           "dataset_names"]


@dataclass
class Stage:
    """One grid of cells of one kind."""

    kind: str
    grid: dict[str, list[Any]] = field(default_factory=dict)
    params: dict[str, Any] = field(default_factory=dict)
    needs: dict[str, Any] | None = None  # {"stage": NAME, "match": [keys], "where": {key: value}, "optional": bool}
    name: str = ""
    cases: list[dict[str, Any]] = field(default_factory=lambda: [{}])  # zipped settings, crossed with the grid
    cpus: float = 1.0  # CPUs one cell needs (the Ray executor reserves them; not part of the cell id)
    group: int = 4  # at most this many compatible cells run as one job (kinds with a group runner); 1: never group


@dataclass
class Suite:
    name: str
    stages: list[Stage]
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)
    tables: list[dict[str, Any]] = field(default_factory=list)
    plots: list[dict[str, Any]] = field(default_factory=list)
    workers: int = 1
    results_dir: Path = Path("evaluation/results")
    description: str = ""
    current: dict[str, list[CellRecord]] | None = field(default=None, repr=False)  # records of the current plan

    @property
    def out(self) -> Path:
        return Path(self.results_dir) / self.name

    @property
    def cells_dir(self) -> Path:
        """Where the cell records are stored."""
        return self.out / "cells"


@dataclass
class Cell:
    kind: str
    params: dict[str, Any]
    stage: str
    upstream: str | None = None  # id of the upstream cell
    datasets: dict[str, dict[str, Any]] = field(default_factory=dict)  # specs of the datasets the params name
    id: str = ""


def canonical(obj: Any) -> str:
    """Key-sorted compact JSON: equal configs give equal strings (the input of every id and cache key)."""
    return json.dumps(obj, sort_keys=True, default=str, separators=(",", ":"))


def cell_id(kind: str, params: dict[str, Any], upstream: str | None, datasets: dict[str, Any]) -> str:
    """Stable id: kind plus 12 hex digits of SHA-1 over the canonical JSON of everything that defines the cell."""
    digest = hashlib.sha1(canonical({"kind": kind, "params": params, "upstream": upstream, "datasets": datasets}).encode())
    return f"{kind.split(':')[-1]}-{digest.hexdigest()[:12]}"


def load_suite(path: str | Path, results_dir: str | Path | None = None) -> Suite:
    """Parse and validate a suite YAML (see ``evaluation/suites/*.yaml``)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidData(f"suite file '{path}' does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InvalidData(f"suite file '{path}' is not valid YAML: {str(exc).splitlines()[0]}") from exc
    stages_raw = raw.get("stages")
    if not stages_raw:
        raise InvalidData(f"suite '{path.name}' has no stages")
    defaults = raw.get("defaults", {}) or {}
    stages = [_stage(s, i, defaults, path.name) for i, s in enumerate(stages_raw)]
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise InvalidData(f"stage names in suite '{path.name}' must be unique, got {names}")
    for s in stages:
        if s.needs and s.needs.get("stage") not in names[: names.index(s.name)]:
            raise InvalidData(f"stage '{s.name}' needs '{s.needs.get('stage')}', which is not an earlier stage")
    return Suite(
        name=raw.get("name", path.stem), stages=stages, datasets=raw.get("datasets", {}) or {},
        tables=raw.get("tables", []) or [], plots=raw.get("plots", []) or [], workers=int(raw.get("workers", 1)),
        results_dir=Path(results_dir or raw.get("results_dir", "evaluation/results")),
        description=raw.get("description", ""),
    )


def _stage(s: dict[str, Any], i: int, defaults: dict[str, Any], suite_file: str) -> Stage:
    if "kind" not in s:
        raise InvalidData(f"stage {i} of suite '{suite_file}' has no kind")
    grid = s.get("grid", {}) or {}
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise InvalidData(f"grid entry '{k}' of stage '{s.get('name', s['kind'])}' must be a non-empty list")
    cases = s.get("cases") or [{}]
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise InvalidData(f"'cases' of stage '{s.get('name', s['kind'])}' must be a list of mappings")
    return Stage(kind=s["kind"], grid=grid, params=deep_merge(defaults, s.get("params") or {}), needs=s.get("needs"),
                 name=s.get("name", s["kind"]), cases=cases, cpus=float(s.get("cpus", 1)),
                 group=max(1, int(s.get("group", 4))))


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """``over`` on top of ``base``; nested mappings merge key by key, anything else is replaced."""
    out = dict(base)
    for k, v in over.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def expand_stage(stage: Stage) -> list[dict[str, Any]]:
    """Stage params, then each case, then each grid point merged on top (deep merge), in a stable order."""
    keys = list(stage.grid)
    return [deep_merge(deep_merge(stage.params, case), dict(zip(keys, combo)))
            for case in stage.cases for combo in itertools.product(*(stage.grid[k] for k in keys))]


def dataset_names(obj: Any, known: dict[str, Any]) -> set[str]:
    """Every string anywhere in ``obj`` that names a declared dataset (so the cell id covers those datasets)."""
    if isinstance(obj, str):
        return {obj} if obj in known else set()
    if isinstance(obj, dict):
        return set().union(*(dataset_names(v, known) for v in obj.values())) if obj else set()
    if isinstance(obj, list):
        return set().union(*(dataset_names(v, known) for v in obj)) if obj else set()
    return set()
