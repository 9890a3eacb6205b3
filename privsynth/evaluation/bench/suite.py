"""The suite model: a suite YAML parsed into stages, a stage expanded into cell params, a cell's stable id
(docs/benchmarks.md, "Suite format")."""
from __future__ import annotations

import hashlib
import itertools
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from privsynth.errors import InvalidData

if TYPE_CHECKING:
    from privsynth.evaluation.bench.records import CellRecord

__all__ = ["Stage", "Suite", "Cell", "load_suite", "deep_merge", "expand_stage", "cell_id", "canonical",
           "dataset_names", "check_suite", "SUITE_KEYS", "STAGE_KEYS", "NEEDS_KEYS", "PLOT_TYPES"]

SUITE_KEYS = ("name", "description", "workers", "results_dir", "datasets", "defaults", "stages", "tables", "plots")
STAGE_KEYS = ("name", "kind", "grid", "params", "needs", "cases", "cpus", "group")
NEEDS_KEYS = ("stage", "match", "where", "optional")
PLOT_TYPES = ("privacy_utility", "bars", "roc")  # what privsynth.evaluation.bench.plots draws


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
    path: Path | None = None  # the YAML it was loaded from (tables name the command that made them)

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


# names that become file names (the suite's folder, tables, plots, cached datasets): one path component, no '..'
_PLAIN_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.+=-]{0,119}")


def _plain_name(name: Any, what: str) -> str:
    """``name`` if it can be a file name inside the results folder; one line naming ``what`` otherwise."""
    if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name) or ".." in name:
        raise InvalidData(f"{what} must be a plain name (letters, digits and _ . + = -, starting with a letter or "
                          f"digit; no '/' or '..'): it names files in the results folder, got {name!r}")
    return name


def _number(raw: Any, what: str, kind: type) -> Any:
    """An int or float setting of a suite, as YAML gave it; one line when it is not a number."""
    if isinstance(raw, bool) or not isinstance(raw, (int, float)) or (kind is int and not float(raw).is_integer()):
        raise InvalidData(f"{what} must be {'a whole number' if kind is int else 'a number'}, got {raw!r}")
    return kind(raw)


def load_suite(path: str | Path, results_dir: str | Path | None = None) -> Suite:
    """Parse and validate a suite YAML (see ``evaluation/suites/*.yaml``)."""
    path = Path(path)
    if not path.is_file():
        raise InvalidData(f"suite file '{path}' does not exist")
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise InvalidData(f"suite file '{path}' is not valid YAML: {str(exc).splitlines()[0]}") from exc
    if not isinstance(raw, dict):
        raise InvalidData(f"suite file '{path}' must be a mapping with 'stages'")
    _unknown_keys(raw, SUITE_KEYS, f"suite '{path.name}'", "top-level key")
    stages_raw = raw.get("stages")
    if not stages_raw:
        raise InvalidData(f"suite '{path.name}' has no stages")
    if not isinstance(stages_raw, list) or not all(isinstance(s, dict) for s in stages_raw):
        raise InvalidData(f"'stages' of suite '{path.name}' must be a list of mappings")
    defaults = raw.get("defaults", {}) or {}
    if not isinstance(defaults, dict):
        raise InvalidData(f"'defaults' of suite '{path.name}' must be a mapping of cell params")
    stages = [_stage(s, i, defaults, path.name) for i, s in enumerate(stages_raw)]
    names = [s.name for s in stages]
    if len(set(names)) != len(names):
        raise InvalidData(f"stage names in suite '{path.name}' must be unique, got {names}")
    for s in stages:
        if s.needs and s.needs.get("stage") not in names[: names.index(s.name)]:
            raise InvalidData(f"stage '{s.name}' needs '{s.needs.get('stage')}', which is not an earlier stage")
    suite = Suite(
        name=_plain_name(raw.get("name", path.stem), f"the name of suite '{path.name}'"), stages=stages,
        datasets=raw.get("datasets", {}) or {}, tables=raw.get("tables", []) or [], plots=raw.get("plots", []) or [],
        workers=_number(raw.get("workers", 1), f"'workers' of suite '{path.name}'", int),
        results_dir=Path(results_dir or raw.get("results_dir", "evaluation/results")),
        description=raw.get("description", ""), path=path,
    )
    check_suite(suite, path.name)
    return suite


def _unknown_keys(obj: dict[str, Any], known: tuple[str, ...], where: str, what: str) -> None:
    unknown = [k for k in obj if k not in known]
    if unknown:
        raise InvalidData(f"{where}: unknown {what} {', '.join(repr(k) for k in unknown)} (known: {', '.join(known)})")


def check_suite(suite: Suite, suite_file: str = "") -> None:
    """The suite-level checks that need no registry (``load_suite`` runs them): ``needs`` keys and ``match``/``where``
    keys the upstream stage sets, declared datasets, no stage defining a cell twice or another stage's cells, known
    plot types, tables and plots naming existing stages and kinds. Raises :class:`InvalidData` naming the place."""
    where_suite = f"suite '{suite_file or suite.name}'"
    if not isinstance(suite.datasets, dict) or not all(isinstance(v, dict) for v in suite.datasets.values()):
        raise InvalidData(f"{where_suite}: 'datasets' must map names to specs (mappings)")
    for name, spec in suite.datasets.items():
        _plain_name(name, f"{where_suite}: dataset name")
        if "split_of" in spec:
            if spec["split_of"] not in suite.datasets:
                raise InvalidData(f"dataset '{name}' is a split of '{spec['split_of']}', which is not declared")
            _unknown_keys(spec, ("split_of", "fraction", "part", "seed", "by", "sensitive"), f"dataset '{name}'",
                          "split key")
    by_name = {s.name: s for s in suite.stages}
    seen: dict[str, str] = {}  # canonical cell definition -> stage that defines it
    for stage in suite.stages:
        cells = expand_stage(stage)
        if stage.needs is not None:
            up = by_name[stage.needs["stage"]]
            up_keys = set(up.grid) | {k for case in up.cases for k in case} | set(up.params)
            match = stage.needs.get("match", []) or []
            wh = stage.needs.get("where", {}) or {}
            if not isinstance(match, list) or not isinstance(wh, dict):
                raise InvalidData(f"stage '{stage.name}': needs.match must be a list and needs.where a mapping")
            for key in list(match) + list(wh):
                if key not in up_keys:
                    raise InvalidData(f"stage '{stage.name}' needs.{'match' if key in match else 'where'} key "
                                      f"'{key}' is not a grid, cases or params key of stage '{up.name}' "
                                      f"(it sets: {', '.join(sorted(map(str, up_keys))) or 'nothing'})")
        if suite.datasets:
            for params in cells:
                data = params.get("data")
                if isinstance(data, dict):
                    sens, pub = data.get("sensitive"), data.get("public") or []
                    pub = pub if isinstance(pub, list) else [pub]
                    used = [n for n in [sens, *pub] if isinstance(n, str)]
                    for name in used:
                        if name not in suite.datasets:
                            raise InvalidData(f"stage '{stage.name}' reads dataset '{name}', which is not declared "
                                              f"(datasets: {', '.join(suite.datasets)})")
        upstream = stage.needs and (stage.needs.get("stage"), canonical(stage.needs))
        keys = [canonical({"kind": stage.kind, "params": p, "needs": upstream}) for p in cells]
        if len(set(keys)) != len(keys):
            raise InvalidData(f"stage '{stage.name}' defines the same cell twice (repeated 'cases' entries?)")
        for key in keys:
            if key in seen:
                raise InvalidData(f"stages '{seen[key]}' and '{stage.name}' define identical cells (their records "
                                  f"would be counted twice); drop one or make their params differ")
            seen[key] = stage.name
    kinds = {s.kind for s in suite.stages}
    for what, specs in (("table", suite.tables), ("plot", suite.plots)):
        if not isinstance(specs, list) or not all(isinstance(x, dict) for x in specs):
            raise InvalidData(f"{where_suite}: '{what}s' must be a list of mappings")
        for spec in specs:
            label = f"{what} '{spec.get('name', '?')}'"
            _plain_name(spec.get("name"), f"{where_suite}: the name of a {what}")
            if what == "plot" and spec.get("type") not in PLOT_TYPES:
                raise InvalidData(f"{label}: unknown plot type '{spec.get('type')}': use {', '.join(PLOT_TYPES)}")
            if "stage" in spec and spec["stage"] not in by_name:
                raise InvalidData(f"{label} reads stage '{spec['stage']}', which is not in the suite "
                                  f"(stages: {', '.join(by_name)})")
            if "kind" in spec and spec["kind"] not in kinds:
                raise InvalidData(f"{label} reads kind '{spec['kind']}', which no stage has")


def _stage(s: dict[str, Any], i: int, defaults: dict[str, Any], suite_file: str) -> Stage:
    if "kind" not in s:
        raise InvalidData(f"stage {i} of suite '{suite_file}' has no kind")
    label = f"stage '{s.get('name', s['kind'])}'"
    _unknown_keys(s, STAGE_KEYS, label, "key")
    needs = s.get("needs")
    if needs is not None:
        if not isinstance(needs, dict) or "stage" not in needs:
            raise InvalidData(f"{label}: 'needs' must be a mapping with 'stage'")
        _unknown_keys(needs, NEEDS_KEYS, f"{label} needs", "key")
    grid = s.get("grid", {}) or {}
    if not isinstance(grid, dict):
        raise InvalidData(f"{label}: 'grid' must map keys to lists")
    for k, v in grid.items():
        if not isinstance(v, list) or not v:
            raise InvalidData(f"grid entry '{k}' of {label} must be a non-empty list")
        values = [canonical(x) for x in v]
        dups = sorted({x for x in values if values.count(x) > 1})
        if dups:
            raise InvalidData(f"grid entry '{k}' of {label} repeats {', '.join(dups)}: each value once")
    cases = s.get("cases") or [{}]
    if not isinstance(cases, list) or not all(isinstance(c, dict) for c in cases):
        raise InvalidData(f"'cases' of stage '{s.get('name', s['kind'])}' must be a list of mappings")
    return Stage(kind=s["kind"], grid=grid, params=deep_merge(defaults, s.get("params") or {}), needs=s.get("needs"),
                 name=s.get("name", s["kind"]), cases=cases,
                 cpus=_number(s.get("cpus", 1), f"{label}: 'cpus'", float),
                 group=max(1, _number(s.get("group", 4), f"{label}: 'group'", int)))


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
