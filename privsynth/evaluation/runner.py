"""The benchmark runner's former single module, kept so that ``privsynth.evaluation.runner.NAME`` keeps working.

The runner is the package :mod:`privsynth.evaluation.bench`, one module per job (registry, records, suite, sources,
context, kinds, plan, tables, plots, execute); new code imports from there. Importing this module loads only the
registry, the dataset sources and the suite model, so a cell module may import ``register_cell`` from here without
loading the runner that imports cell modules; every other name is loaded on first access (PEP 562).
"""
from __future__ import annotations

import importlib
from typing import Any

from privsynth.evaluation.bench.registry import (_CELL_KINDS, _DATASET_SOURCES, _GROUP_KINDS, register_cell,
                                                 register_dataset_source, register_group)
from privsynth.evaluation.bench.sources import (dataset_path, load_dataset_file, random_dataset, save_dataset,
                                                split_transitions)
from privsynth.evaluation.bench.suite import Cell, Stage, Suite, cell_id, deep_merge, expand_stage, load_suite

__all__ = [
    "Suite", "Stage", "Cell", "CellContext", "register_cell", "resolve_kind", "load_suite", "run_suite",
    "cell_id", "expand_stage", "collect_records", "write_tables", "write_plots", "save_dataset", "load_dataset_file",
    "register_dataset_source", "register_group", "deep_merge", "CellRecord", "RunSummary", "split_transitions",
    "prepare_datasets", "current_records", "records_frame", "summary_table",
]

# former private names that scripts and tests import
_random_dataset = random_dataset
_dataset_path = dataset_path

_BENCH = "privsynth.evaluation.bench"
_LAZY: dict[str, tuple[str, str]] = {
    "CellContext": (f"{_BENCH}.context", "CellContext"),
    "CellRecord": (f"{_BENCH}.records", "CellRecord"),
    "RunSummary": (f"{_BENCH}.records", "RunSummary"),
    "resolve_kind": (f"{_BENCH}.kinds", "resolve_kind"),
    "prepare_datasets": (f"{_BENCH}.kinds", "prepare_suite_datasets"),  # every built-in source registered
    "_echo_cell": (f"{_BENCH}.kinds", "echo_cell"),  # kind "privsynth.evaluation.runner:_echo_cell"
    "collect_records": (f"{_BENCH}.plan", "collect_records"),
    "current_records": (f"{_BENCH}.plan", "current_records"),
    "records_frame": (f"{_BENCH}.tables", "records_frame"),
    "summary_table": (f"{_BENCH}.tables", "summary_table"),
    "write_tables": (f"{_BENCH}.tables", "write_tables"),
    "write_plots": (f"{_BENCH}.plots", "write_plots"),
    "run_suite": (f"{_BENCH}.execute", "run_suite"),
    "_init_worker": ("privsynth.evaluation.executors", "init_worker"),
}


def __getattr__(name: str) -> Any:
    if name not in _LAZY:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module, attr = _LAZY[name]
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def _group_payloads(payloads: list[dict[str, Any]], stage: Stage, workers: int) -> list[list[dict[str, Any]]]:
    """:func:`privsynth.evaluation.bench.plan.group_jobs` on payload dicts (``{"params": ..., ...}``)."""
    from privsynth.evaluation.bench.plan import group_jobs

    return group_jobs(payloads, stage, workers, params_of=lambda p: p["params"])
