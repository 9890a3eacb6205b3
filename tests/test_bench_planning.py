"""Planning a suite run.

* Consecutive stages of one groupable kind that do not need each other run as one: their compatible cells share
  batched jobs (table1_small's synthetic and real agent stages), and each record keeps its own stage.
* A finished cell whose upstream ran again since (new DP draws) is stale and runs again; missing upstream artifacts
  (results folders are committed without them) are one line that says how to re-run the upstream; a synthesize
  cell that asks for another network than its pretrain checkpoint is refused, not silently given the checkpoint's;
  one run at a time per results folder; a cell whose preset now resolves to another configuration is stale.
"""
from __future__ import annotations

import json

import pytest

from privsynth.evaluation.bench import kinds
from privsynth.evaluation.bench.execute import LazyExecutor, run
from privsynth.evaluation.bench.suite import Stage, Suite


@pytest.fixture
def fake_kinds(tmp_path, monkeypatch):
    (tmp_path / "fake_stage_kinds.py").write_text(
        "from privsynth.evaluation.bench.registry import register_cell, register_group\n"
        "@register_cell('fake_up')\n"
        "def up(params, ctx):\n    return {'up': params['seed']}\n"
        "@register_cell('fake_train')\n"
        "def one(params, ctx):\n    return {'batch': [params['seed']]}\n"
        "@register_group('fake_train', key=lambda p: p.get('agent'))\n"
        "def many(params_list, ctxs):\n"
        "    ids = sorted(str(p.get('source', 'up')) + str(p['seed']) for p in params_list)\n"
        "    return [{'batch': ids} for _ in params_list]\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(kinds, "BUILTIN_KIND_MODULES", ("fake_stage_kinds",))


def _suite(tmp_path, second_needs_first: bool) -> Suite:
    train = dict(kind="fake_train", group=8)
    stages = [
        Stage(kind="fake_up", name="up", grid={"seed": [0, 1]}),
        Stage(name="train", needs={"stage": "up", "match": ["seed"]}, grid={"seed": [0, 1], "agent": ["a"]}, **train),
        Stage(name="train_real", grid={"seed": [0, 1], "agent": ["a"]}, params={"source": "real"},
              needs={"stage": "train", "match": ["seed"]} if second_needs_first else None, **train),
    ]
    return Suite(name="s", stages=stages, results_dir=tmp_path / "results")


def _batches(suite: Suite) -> dict[str, list[str]]:
    out = {}
    for path in sorted(suite.cells_dir.glob("*.json")):
        rec = json.loads(path.read_text())
        if rec["kind"] == "fake_train":
            out[f"{rec['stage']}:{rec['params']['seed']}"] = rec["result"]["batch"]
    return out


def test_independent_stages_of_one_kind_share_batched_jobs(tmp_path, fake_kinds):
    suite = _suite(tmp_path, second_needs_first=False)
    logs: list[str] = []
    summary = run(suite, LazyExecutor("local", 1, None), progress=False, log=logs.append)
    assert summary.ran == 6 and summary.failed == 0
    batches = _batches(suite)
    assert set(batches) == {"train:0", "train:1", "train_real:0", "train_real:1"}  # each keeps its stage
    # one worker: the four compatible cells of both stages form one job
    assert all(b == ["real0", "real1", "up0", "up1"] for b in batches.values())
    assert any("stage train + train_real: 4 cells in 1 jobs" in line for line in logs)


def test_a_stage_that_needs_the_other_runs_after_it(tmp_path, fake_kinds):
    suite = _suite(tmp_path, second_needs_first=True)
    run(suite, LazyExecutor("local", 1, None), progress=False, log=lambda _: None)
    batches = _batches(suite)
    assert batches["train:0"] == ["up0", "up1"] and batches["train_real:0"] == ["real0", "real1"]


def test_cells_downstream_of_a_rerun_upstream_run_again(tmp_path, fake_kinds):
    """Deleting (or losing) an upstream record re-runs it with new DP draws: the records computed from the old one
    are stale and must run again, not be kept beside the new upstream."""
    suite = _suite(tmp_path, second_needs_first=False)
    quiet = dict(progress=False, log=lambda _: None)
    run(suite, LazyExecutor("local", 1, None), **quiet)
    up = sorted(suite.cells_dir.glob("fake_up-*.json"))[0]
    downstream = [p for p in suite.cells_dir.glob("fake_train-*.json")
                  if json.loads(p.read_text())["upstream"] == up.stem]
    assert len(downstream) == 1
    before = json.loads(downstream[0].read_text())
    assert before["upstream_finished_at"] == json.loads(up.read_text())["finished_at"]
    rec = json.loads(up.read_text())
    rec["finished_at"] = "2000-01-01T00:00:00"  # as if the upstream had run again
    up.write_text(json.dumps(rec))
    logs: list[str] = []
    summary = run(suite, LazyExecutor("local", 1, None), progress=False, log=logs.append)
    assert summary.ran == 1  # the stale downstream cell only
    assert json.loads(downstream[0].read_text())["upstream_finished_at"] == "2000-01-01T00:00:00"
    assert any("1 finished cells are stale" in line for line in logs)
    assert run(suite, LazyExecutor("local", 1, None), **quiet).ran == 0  # and then it is current


def test_missing_upstream_artifacts_are_one_line_with_the_way_out(tmp_path):
    from privsynth.errors import InvalidData
    from privsynth.evaluation import cells
    from privsynth.evaluation.bench.context import CellContext
    from privsynth.evaluation.bench.records import CellRecord

    up = CellRecord(id="synthesize-abc", kind="synthesize", stage="synthesize", params={})
    ctx = CellContext(tmp_path, "agent-xyz", {}, up)
    with pytest.raises(InvalidData, match=r"delete cells/synthesize-abc.json to re-run it"):
        cells._source_data({"data": {"sensitive": "umaze"}}, ctx)


def test_a_synthesize_cell_cannot_silently_change_what_the_checkpoint_fixed():
    from privsynth.errors import InvalidData
    from privsynth.evaluation import cells

    config = cells.synth_config({"preset": "tiny"}, 0)
    width = config.denoiser.width
    cells._check_fixed_sections(config, {"denoiser": {"width": width}, "next_state": config.next_state}, "c")  # same
    with pytest.raises(InvalidData, match="config.denoiser is fixed by the pretrain cell's checkpoint"):
        cells._check_fixed_sections(config, {"denoiser": {"width": width * 2}}, "c")
    assert config.denoiser.width == width  # the check changes nothing


def test_a_second_run_on_the_same_results_folder_is_refused(tmp_path, fake_kinds):
    import fcntl

    from privsynth.errors import InvalidData

    suite = _suite(tmp_path, second_needs_first=False)
    suite.cells_dir.mkdir(parents=True)
    with open(suite.out / ".lock", "w") as held:  # as a run in another process holds it
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        with pytest.raises(InvalidData, match="another privsynth bench is running"):
            run(suite, LazyExecutor("local", 1, None), progress=False, log=lambda _: None)
        assert not list(suite.cells_dir.iterdir())
    assert run(suite, LazyExecutor("local", 1, None), progress=False, log=lambda _: None).ran == 6  # released


def test_a_cell_made_under_another_preset_is_stale(tmp_path):
    """A cell is keyed by its suite parameters, so a preset that now expands to another configuration left old cells
    counted as finished; the record's fingerprint of the resolved configuration catches it."""
    from privsynth.evaluation import cells
    from privsynth.evaluation.bench.execute import _stale
    from privsynth.evaluation.bench.records import CellRecord, write_json
    from privsynth.evaluation.bench.suite import Cell

    params = {"synthesizer": "privorl_n", "config": {"preset": "tiny"}, "seed": 0}
    cell = Cell(kind="pretrain", params=params, stage="pretrain", id="pretrain-x")
    now = cells.config_fingerprint("pretrain", params)
    assert now and now == cells.config_fingerprint("pretrain", {**params, "seed": 3})  # seeds are not configuration
    assert now != cells.config_fingerprint("pretrain", {**params, "config": {"preset": "tiny",
                                                                             "pretrain": {"epochs": 99.0}}})
    assert cells.config_fingerprint("agent", params) is None
    for stored, stale in ((now, False), ("0123456789abcdef", True), (None, False)):
        rec = CellRecord(id=cell.id, kind="pretrain", stage="pretrain", params=params,
                         extra={"config_fingerprint": stored} if stored else {})
        write_json(tmp_path / f"{cell.id}.json", rec.to_json())
        assert _stale(cell, tmp_path, {}) is stale


def test_a_finetune_default_leaves_a_pretrained_checkpoint_fresh(tmp_path):
    """A pre-training cell (and the public model alone) hashes only what pre-training reads: a changed DP fine-tune
    setting leaves it finished, while a DP cell re-runs. A record from before the fingerprint was scoped (it hashed
    the whole configuration) is vouched for by its checkpoint when that holds today's pre-training configuration."""
    from privsynth.evaluation import cells
    from privsynth.evaluation.bench.execute import _stale
    from privsynth.evaluation.bench.records import CellRecord, write_json
    from privsynth.evaluation.bench.suite import Cell
    from privsynth.synth import registry

    from conftest import make_toy_dataset

    base = {"synthesizer": "privorl-n", "config": {"preset": "tiny"}, "seed": 0}
    other_dp = {**base, "config": {"preset": "tiny", "dp": {"max_grad_norm": 0.5}, "finetune": {"epochs": 7.0}}}
    pre = cells.config_fingerprint("pretrain", base)
    assert pre.startswith(cells.SCOPED) and pre == cells.config_fingerprint("pretrain", other_dp)
    public = {**base, "finetune": "none", "epsilon": 0.0}
    assert cells.config_fingerprint("synthesize", public) == pre
    dp = {**base, "epsilon": 10.0}
    assert cells.config_fingerprint("synthesize", dp) != cells.config_fingerprint("synthesize", {**other_dp,
                                                                                                 "epsilon": 10.0})
    longer = {**base, "config": {"preset": "tiny", "pretrain": {"epochs": 9.0}}}
    assert cells.config_fingerprint("pretrain", longer) != pre

    cells_dir = tmp_path / "cells"
    cells_dir.mkdir()
    cell = Cell(kind="pretrain", params=base, stage="pretrain", id="pretrain-x")
    up = Cell(kind="synthesize", params=public, stage="synthesize_public", id="synthesize-p", upstream="pretrain-x")
    for c in (cell, up):  # recorded under an older, unscoped fingerprint
        write_json(cells_dir / f"{c.id}.json", CellRecord(id=c.id, kind=c.kind, stage=c.stage, params=c.params,
                                                          extra={"config_fingerprint": "0123456789abcdef"}).to_json())
    assert _stale(cell, cells_dir, {}) and _stale(up, cells_dir, {})  # no checkpoint to vouch
    model = tmp_path / "artifacts" / "pretrain-x" / "model.pt"
    model.parent.mkdir(parents=True)
    synth = registry.make("privorl-n", preset="tiny").pretrain(make_toy_dataset(), progress=False)
    synth.save(model)
    assert cells.checkpoint_fingerprint(model) == pre
    assert not _stale(cell, cells_dir, {}) and not _stale(up, cells_dir, {})
    synth.config.pretrain.epochs = 9.0  # a checkpoint made under another pre-training schedule vouches for nothing
    synth.save(model)
    assert _stale(cell, cells_dir, {}) and _stale(up, cells_dir, {})


def test_a_dry_run_counts_a_stale_cell_once(tmp_path, fake_kinds):
    suite = _suite(tmp_path, second_needs_first=True)  # train_real needs train: a stale train cell must plan once
    quiet = dict(progress=False, log=lambda _: None)
    run(suite, LazyExecutor("local", 1, None), **quiet)
    up = sorted(suite.cells_dir.glob("fake_up-*.json"))[0]
    rec = json.loads(up.read_text())
    rec["finished_at"] = "2000-01-01T00:00:00"
    up.write_text(json.dumps(rec))
    logs: list[str] = []
    run(suite, LazyExecutor("local", 1, None), dry_run=True, progress=False, log=logs.append)
    assert any("dry run: 2 cells would run" in line for line in logs)  # the stale train cell and its train_real
