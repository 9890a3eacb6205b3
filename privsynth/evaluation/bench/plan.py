"""Planning: the cells a stage defines (each linked to its upstream cell), which of them are finished, and which
run together as one job (docs/benchmarks.md)."""
from __future__ import annotations

import math
from typing import Any, Callable, Iterator, Sequence, TypeVar

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.kinds import group_runner, known_sources, resolve_kind, resolve_source
from privsynth.evaluation.bench.records import CellRecord, read_record
from privsynth.evaluation.bench.sources import resolved_spec, source_keys
from privsynth.evaluation.bench.suite import Cell, Stage, Suite, canonical, cell_id, dataset_names, expand_stage

__all__ = ["validate_suite", "plan_stage", "collect_records", "current_records", "records_for", "selections",
           "group_jobs"]

Job = TypeVar("Job")


def validate_suite(suite: Suite) -> None:
    """What a suite names must exist before any work starts (``load_suite`` checked its shape): every stage's
    ``kind``, every dataset's ``source`` and the keys of its spec. Raises :class:`InvalidData` naming the place."""
    for stage in suite.stages:
        try:
            resolve_kind(stage.kind)
        except InvalidData as exc:
            raise InvalidData(f"stage '{stage.name}': {exc}") from None
    _check_names(suite)
    _check_privacy_values(suite)
    for name, spec in suite.datasets.items():
        if "split_of" in spec:
            continue
        source = spec.get("source")
        if not isinstance(source, str) or resolve_source(source) is None:
            raise InvalidData(f"dataset '{name}' has unknown source '{source}': use one of "
                              f"{', '.join(known_sources())} or split_of")
        keys = source_keys(source)
        unknown = sorted(set(spec) - keys) if keys is not None else []
        if unknown:
            raise InvalidData(f"dataset '{name}' (source {source}): unknown key {', '.join(map(repr, unknown))} "
                              f"(known: {', '.join(sorted(keys))})")


def _check_privacy_values(suite: Suite) -> None:
    """``epsilon`` (null for no DP, else a number >= 0; 0 is the public model alone) and ``delta`` (in (0, 1)) of
    every cell, before any work: a bad value used to fail only when its first synthesize cell ran, after the
    pre-training and the real-data agents."""
    for stage in suite.stages:
        for params in expand_stage(stage):
            eps, delta = params.get("epsilon"), params.get("delta")
            if eps is not None and (isinstance(eps, bool) or not isinstance(eps, (int, float)) or not eps >= 0):
                raise InvalidData(f"stage '{stage.name}': epsilon must be a number >= 0 (or null: no DP), got {eps!r}")
            if delta is not None and (isinstance(delta, bool) or not isinstance(delta, (int, float))
                                      or not 0 < delta < 1):
                raise InvalidData(f"stage '{stage.name}': delta must be a number in (0, 1), got {delta!r}")


# kinds whose ``synthesizer`` param names a synthesizer (downstream kinds also take "real": the sensitive data)
_SYNTH_KINDS = {"pretrain": (), "synthesize": (), "agent": ("real",), "fidelity": ("real",), "mia": ("real",)}


def _check_names(suite: Suite) -> None:
    """``synthesizer`` and ``agent`` names of the built-in kinds, against the names the runner knows (a kind
    module that does not list them is not checked here; its cells report unknown names)."""
    import importlib

    synths = getattr(importlib.import_module("privsynth.evaluation.cells"), "SYNTHESIZERS", None)
    agents = None
    for stage in suite.stages:
        for params in expand_stage(stage):
            name = params.get("synthesizer")
            if stage.kind in _SYNTH_KINDS and synths and isinstance(name, str) \
                    and name not in (*synths, *_SYNTH_KINDS[stage.kind]):
                raise InvalidData(f"stage '{stage.name}': unknown synthesizer '{name}' (known: "
                                  f"{', '.join((*synths, *_SYNTH_KINDS[stage.kind]))})")
            if stage.kind == "agent" and isinstance(params.get("agent"), str):
                if agents is None:
                    agents = tuple(getattr(importlib.import_module("privsynth.evaluation.agents.train"), "AGENTS", ()))
                key = params["agent"].lower().replace("+", "").replace("_", "").replace("-", "")  # as train_agent
                if agents and key not in agents:
                    raise InvalidData(f"stage '{stage.name}': unknown agent '{params['agent']}' (known: "
                                      f"{', '.join(agents)})")
                precisions = getattr(importlib.import_module("privsynth.evaluation.agents.nets"), "MATMUL_PRECISIONS",
                                     ())
                if precisions and params.get("precision", "fp32") not in precisions:
                    raise InvalidData(f"stage '{stage.name}': unknown agent precision '{params['precision']}' "
                                      f"(known: {', '.join(precisions)})")


def plan_stage(suite: Suite, stage: Stage, finished: dict[str, list[CellRecord]]) -> tuple[list[Cell], int]:
    """Cells of a stage, each linked to its upstream among the ``finished`` records of earlier stages; returns
    (cells, number blocked by a missing upstream)."""
    cells, blocked = [], 0
    for params in expand_stage(stage):
        upstream = None
        if stage.needs:
            match, where = stage.needs.get("match", []), stage.needs.get("where", {})
            cands = [r for r in finished.get(stage.needs["stage"], [])
                     if all(r.params.get(k) == params.get(k) for k in match)
                     and all(r.params.get(k) == v for k, v in where.items())]
            if not cands and not stage.needs.get("optional", False):
                blocked += 1
                continue
            if len(cands) > 1:
                raise InvalidData(f"stage '{stage.name}': {len(cands)} upstream cells match {({k: params.get(k) for k in match})}; add keys to 'match'")
            upstream = cands[0].id if cands else None
        names = dataset_names(params, suite.datasets)
        specs = {n: resolved_spec(n, suite.datasets) for n in sorted(names)}
        cell = Cell(kind=stage.kind, params=params, stage=stage.name, upstream=upstream, datasets=specs)
        cell.id = cell_id(cell.kind, params, upstream, specs)
        cells.append(cell)
    return cells, blocked


def collect_records(suite: Suite, kind: str | None = None, stage: str | None = None) -> list[CellRecord]:
    """Finished cell records of the suite (optionally of one kind or stage), in file-name order, including cells of
    older configs still on disk."""
    d = suite.cells_dir
    paths = sorted(p for p in d.glob("*.json") if not p.name.endswith(".failed.json")) if d.exists() else []
    recs = [read_record(p) for p in paths]
    return [r for r in recs if (kind is None or r.kind == kind) and (stage is None or r.stage == stage)]


def current_records(suite: Suite) -> dict[str, list[CellRecord]]:
    """Finished records of the cells the suite defines *now*, per stage (cells of older configs are left out)."""
    finished: dict[str, list[CellRecord]] = {}
    for stage in suite.stages:
        cells, _ = plan_stage(suite, stage, finished)
        finished[stage.name] = [read_record(p) for c in cells if (p := suite.cells_dir / f"{c.id}.json").exists()]
    return finished


def records_for(suite: Suite, spec: dict[str, Any]) -> list[CellRecord]:
    """Current records a table or plot ``spec`` selects (by ``stage`` and/or ``kind``, and ``where``: params equal
    to the given values, e.g. ``where: {synthesizer: privorl-n}``; a list value also keeps a param equal to any of
    its items, ``null`` for a param the cell does not have: ``where: {release: [null, public, all-100]}``)."""
    if suite.current is None:
        suite.current = current_records(suite)
    where = spec.get("where") or {}
    return [r for name, recs in suite.current.items() for r in recs
            if (spec.get("stage") in (None, name)) and (spec.get("kind") in (None, r.kind))
            and all(_matches(r.params.get(k), v) for k, v in where.items())]


def _matches(value: Any, wanted: Any) -> bool:
    """``where``'s test of one param: equal, or (``wanted`` a list) equal to one of its items."""
    return value == wanted or (isinstance(wanted, list) and any(value == w for w in wanted))


def selections(suite: Suite, specs: list[dict[str, Any]]) -> Iterator[tuple[dict[str, Any], list[CellRecord]]]:
    """``(spec, records)`` of every table or plot spec that selects at least one current record."""
    for spec in specs:
        recs = records_for(suite, spec)
        if recs:
            yield spec, recs


def group_jobs(items: Sequence[Job], stage: Stage, workers: int,
               params_of: Callable[[Job], dict[str, Any]]) -> list[list[Job]]:
    """Jobs of a stage: compatible cells (equal group key of their params) in groups of at most ``stage.group``,
    split so that the ``workers`` stay busy (8 compatible cells on 2 workers: two jobs of 4); other cells one per
    job."""
    runner = group_runner(stage.kind) if stage.group > 1 else None
    if runner is None:
        return [[item] for item in items]
    key_fn = runner[0]
    by_key: dict[str, list[Job]] = {}
    for item in items:
        by_key.setdefault(canonical(key_fn(params_of(item))), []).append(item)
    jobs = []
    for members in by_key.values():
        n_jobs = max(math.ceil(len(members) / stage.group), min(workers, len(members)))
        size = math.ceil(len(members) / n_jobs)
        jobs += [members[i:i + size] for i in range(0, len(members), size)]
    return jobs
