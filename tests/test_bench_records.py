"""The benchmark package's typed records and kind loading: committed cell records load and re-serialise byte for
byte; records still read as the dicts they were; the built-in kind modules (including ``method_cells`` once it
exists) are imported on first use, also inside a fresh worker before a group of cells runs."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from privsynth.evaluation.bench import kinds, registry
from privsynth.evaluation.bench.execute import CellJob, execute_group
from privsynth.evaluation.bench.records import CellRecord, RunSummary, read_record, write_json

ROOT = Path(__file__).resolve().parents[1]
COMMITTED = sorted((ROOT / "evaluation" / "results").glob("*/cells/*.json"))


def test_committed_records_round_trip_byte_for_byte(tmp_path):
    assert COMMITTED, "no committed cell records found under evaluation/results"
    for path in COMMITTED:
        rec = read_record(path)
        assert rec.extra == {} and rec.to_json() == json.loads(path.read_text())
        assert list(rec.to_json()) == list(json.loads(path.read_text()))  # same key order on disk
        write_json(tmp_path / path.name, rec.to_json())
        assert (tmp_path / path.name).read_bytes() == path.read_bytes(), path


def test_records_read_as_mappings_and_keep_unknown_keys():
    stored = {"id": "echo-1", "kind": "echo", "stage": "s", "params": {"seed": 0}, "upstream": None,
              "status": "done", "error": None, "result": {"value": 3}, "seconds": 0.5, "finished_at": "t",
              "note": "from a later version"}
    rec = CellRecord.from_json(stored)
    assert rec["result"] is rec.result and rec.get("upstream") is None and rec["params"]["seed"] == 0
    assert rec.extra == {"note": "from a later version"} and rec.to_json() == stored
    assert "note" not in dict(rec) and dict(rec)["seconds"] == 0.5
    with pytest.raises(KeyError):
        rec["note"]
    summary = RunSummary(suite="x", ran=2)
    assert summary["ran"] == 2 and summary.get("tables", None) == [] and summary["failures"] == []


def _fake_kind_module(tmp_path: Path, monkeypatch, name: str) -> str:
    (tmp_path / f"{name}.py").write_text(
        "from privsynth.evaluation.bench.registry import register_cell, register_group\n"
        f"@register_cell('{name}')\n"
        "def one(params, ctx):\n    return {'alone': True}\n"
        f"@register_group('{name}', key=lambda p: 0)\n"
        "def many(params_list, ctxs):\n    return [{'grouped': len(params_list)} for _ in params_list]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kinds, "BUILTIN_KIND_MODULES", ("no_such_module_yet_xyz", name))
    return name


def test_builtin_kind_modules_are_imported_on_first_use_and_missing_ones_skipped(tmp_path, monkeypatch):
    assert kinds.BUILTIN_KIND_MODULES == ("privsynth.evaluation.cells", "privsynth.evaluation.method_cells")
    name = _fake_kind_module(tmp_path, monkeypatch, "fake_kinds_first_use")
    assert registry.cell_kind(name) is None and name not in sys.modules
    fn = kinds.resolve_kind(name)  # the missing module is skipped, the existing one imported
    assert fn({}, None) == {"alone": True} and name in sys.modules


def test_group_runs_as_one_job_in_a_process_that_has_not_loaded_the_kinds(tmp_path, monkeypatch):
    """A fresh worker receives a group before any lookup has imported the kind modules: the group runner must still
    be found (it used to run such a group cell by cell)."""
    name = _fake_kind_module(tmp_path, monkeypatch, "fake_kinds_worker")
    assert registry.group_kind(name) is None
    jobs = [CellJob(id=f"{name}-{i}", kind=name, stage="s", params={"seed": i}, upstream=None, upstream_record=None,
                    datasets={}, suite_dir=str(tmp_path)) for i in range(3)]
    recs = execute_group(jobs)
    assert [r.result for r in recs] == [{"grouped": 3}] * 3 and all(r.done for r in recs)


def test_epsilon_labels_of_tables():
    from privsynth.evaluation.bench.tables import eps_label, label

    assert eps_label(None) == "no DP" and eps_label(float("inf")) == "no DP"
    assert eps_label(0.0) == "0 (public only)" and eps_label(0) == "0 (public only)"
    assert eps_label(1.0) == 1.0 and eps_label(False) is False
    assert label("epsilon", 0.0) == "ε=0" and label("epsilon", None) == "no DP"
