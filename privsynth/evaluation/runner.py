"""The benchmark runner's former single module, kept so that ``privsynth.evaluation.runner.NAME`` keeps working.

The runner is the package :mod:`privsynth.evaluation.bench`, one module per job (registry, records, suite, sources,
context, kinds, plan, tables, plots, execute); new code imports from there. Cell modules register their kinds with
:func:`privsynth.evaluation.bench.registry.register_cell`, re-exported here.
"""
from __future__ import annotations

from typing import Any

from privsynth.evaluation.bench.context import CellContext
from privsynth.evaluation.bench.execute import run_suite
from privsynth.evaluation.bench.kinds import echo_cell, resolve_kind
from privsynth.evaluation.bench.plan import collect_records, current_records, group_jobs
from privsynth.evaluation.bench.plots import write_plots
from privsynth.evaluation.bench.records import CellRecord, RunSummary
from privsynth.evaluation.bench.registry import (_CELL_KINDS, _DATASET_SOURCES, _GROUP_KINDS, register_cell,
                                                 register_dataset_source, register_group)
from privsynth.evaluation.bench.sources import (dataset_path, load_dataset_file, prepare_datasets, random_dataset,
                                                save_dataset, split_transitions)
from privsynth.evaluation.bench.suite import Cell, Stage, Suite, cell_id, deep_merge, expand_stage, load_suite
from privsynth.evaluation.bench.tables import records_frame, summary_table, write_tables
from privsynth.evaluation.executors import init_worker

__all__ = [
    "Suite", "Stage", "Cell", "CellContext", "register_cell", "resolve_kind", "load_suite", "run_suite",
    "cell_id", "expand_stage", "collect_records", "write_tables", "write_plots", "save_dataset", "load_dataset_file",
    "register_dataset_source", "register_group", "deep_merge", "CellRecord", "RunSummary", "split_transitions",
    "prepare_datasets", "current_records", "records_frame", "summary_table",
]

# former private names that scripts and tests import
_init_worker = init_worker
_echo_cell = echo_cell  # kind "privsynth.evaluation.runner:_echo_cell"
_random_dataset = random_dataset
_dataset_path = dataset_path


def _group_payloads(payloads: list[dict[str, Any]], stage: Stage, workers: int) -> list[list[dict[str, Any]]]:
    """:func:`privsynth.evaluation.bench.plan.group_jobs` on payload dicts (``{"params": ..., ...}``)."""
    return group_jobs(payloads, stage, workers, params_of=lambda p: p["params"])
