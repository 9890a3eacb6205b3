"""The benchmark runner on the trivial ``echo`` cell kind: grid expansion, stable ids, skip on re-run, parallel
processes, upstream linking, failures, tables and plots."""
from __future__ import annotations

import textwrap

import numpy as np
import pytest

from privsynth.cli import main
from privsynth.errors import InvalidData
from privsynth.evaluation.runner import cell_id, collect_records, expand_stage, load_suite, run_suite


def write_suite(tmp_path, body: str, name: str = "t"):
    path = tmp_path / f"{name}.yaml"
    path.write_text(textwrap.dedent(body))
    return load_suite(path, results_dir=tmp_path / "results")


SUITE = """
name: t
workers: 1
datasets:
  base: {source: random, episodes: 6, length: 5, seed: 1}
  members: {split_of: base, fraction: 0.5, part: first, sensitive: true}
stages:
  - name: make
    kind: echo
    grid: {synthesizer: [a, b], epsilon: [1.0, null]}
    params: {value: 3, data: members}
  - name: use
    kind: echo
    needs: {stage: make, match: [synthesizer, epsilon]}
    grid: {synthesizer: [a, b], epsilon: [1.0, null], seed: [0, 1]}
    params: {score: 0.5}
tables:
  - {name: scores, stage: use, rows: [synthesizer], cols: [epsilon], values: [upstream_value]}
  - {name: flat, stage: use, rows: [synthesizer, epsilon], values: [score, upstream_value]}
plots:
  - {name: pu, type: privacy_utility, stage: use, y: upstream_value, series: synthesizer}
  - {name: bars, type: bars, stage: use, rows: [synthesizer, epsilon], series: seed, y: score,
     reference: {synthesizer: a}}
"""


def test_grid_expands_and_ids_are_stable(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    cells = expand_stage(suite.stages[1])
    assert len(cells) == 8 and cells[0] == {"score": 0.5, "synthesizer": "a", "epsilon": 1.0, "seed": 0}
    a = cell_id("echo", {"x": 1, "y": [1, 2]}, None, {})
    assert a == cell_id("echo", {"y": [1, 2], "x": 1}, None, {})  # key order does not matter
    assert a != cell_id("echo", {"x": 2, "y": [1, 2]}, None, {})
    assert a != cell_id("echo", {"x": 1, "y": [1, 2]}, "echo-upstream", {})


def test_run_skips_finished_cells_and_writes_tables(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    first = run_suite(suite, progress=False, log=lambda _: None)
    assert first["ran"] == 12 and first["skipped"] == 0 and first["failed"] == 0
    recs = collect_records(suite, stage="use")
    assert len(recs) == 8 and all(r["result"]["upstream_value"] == 3 for r in recs)
    again = run_suite(suite, progress=False, log=lambda _: None)
    assert again["ran"] == 0 and again["skipped"] == 12
    md = (suite.out / "tables" / "flat.md").read_text()
    assert "0.500" in md and "| a | no DP |" in md
    assert (suite.out / "tables" / "scores.html").exists() and (suite.out / "plots" / "pu.png").exists()
    assert (suite.out / "plots" / "bars.png").stat().st_size > 1000
    # the datasets were prepared once, and the split is flagged sensitive
    from privsynth.evaluation.runner import CellContext

    ctx = CellContext(suite.out, "x", suite.datasets)
    assert ctx.dataset("members").info.sensitive and ctx.dataset("members").n_episodes == 3


def test_only_runs_the_named_stage_and_says_what_it_left_out(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    lines = []
    summary = run_suite(suite, progress=False, log=lines.append, only=["make"])
    assert summary["ran"] == 4 and not collect_records(suite, stage="use")
    assert any("stage make: 4 cells, 0 finished, 4 to run" in x for x in lines)
    assert any("stage use: 8 cells, 0 finished, 8 left out by --only" in x for x in lines)  # not "8 finished"


def test_changing_a_param_reruns_only_what_it_changes(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    run_suite(suite, progress=False, log=lambda _: None)
    changed = write_suite(tmp_path, SUITE.replace("score: 0.5", "score: 0.7"))
    res = run_suite(changed, progress=False, log=lambda _: None)
    assert res["ran"] == 8 and res["skipped"] == 4
    changed_data = write_suite(tmp_path, SUITE.replace("seed: 1}", "seed: 2}"))
    res = run_suite(changed_data, progress=False, log=lambda _: None)
    assert res["ran"] == 12  # new dataset spec -> new upstream ids -> new downstream ids


def test_cells_run_in_parallel_processes(tmp_path):
    suite = write_suite(tmp_path, """
        name: par
        workers: 2
        stages:
          - {kind: echo, grid: {seed: [0, 1, 2, 3]}, params: {sleep: 3.0}}
        """)
    res = run_suite(suite, progress=False, log=lambda _: None)
    results = [r["result"] for r in collect_records(suite)]
    assert res["ran"] == 4 and len({r["pid"] for r in results}) == 2
    # two cells of different processes overlapped in time
    assert any(a["pid"] != b["pid"] and a["started"] < b["ended"] and b["started"] < a["ended"]
               for a in results for b in results)


def test_failed_cells_are_recorded_and_retried(tmp_path):
    body = """
        name: f
        stages:
          - {name: a, kind: echo, grid: {fail: [false, true]}}
          - {name: b, kind: echo, needs: {stage: a, match: [fail]}, grid: {fail: [false, true]}, params: {x: 1}}
        """
    suite = write_suite(tmp_path, body)
    res = run_suite(suite, progress=False, log=lambda _: None)
    assert res["ran"] == 2 and res["failed"] == 1 and res["blocked"] == 1
    assert "asked to fail" in res["failures"][0]["error"]
    assert len(list((suite.out / "cells").glob("*.failed.json"))) == 1
    res = run_suite(suite, progress=False, log=lambda _: None)
    assert res["skipped"] == 2 and res["failed"] == 1  # the failure is retried, the finished cells are not


def test_bad_suites_fail_with_one_line(tmp_path):
    with pytest.raises(InvalidData, match="no stages"):
        write_suite(tmp_path, "name: x\n")
    with pytest.raises(InvalidData, match="not an earlier stage"):
        write_suite(tmp_path, "stages:\n  - {kind: echo, needs: {stage: nope}}\n")
    with pytest.raises(InvalidData, match="non-empty list"):
        write_suite(tmp_path, "stages:\n  - {kind: echo, grid: {seed: 3}}\n")
    suite = write_suite(tmp_path, "stages:\n  - {kind: no_such_kind}\n")
    with pytest.raises(InvalidData, match="stage 'no_such_kind': unknown cell kind"):  # refused before any work
        run_suite(suite, progress=False, log=lambda _: None)
    assert not (suite.cells_dir).exists()


def test_bench_cli(tmp_path, capsys):
    path = tmp_path / "cli.yaml"
    path.write_text("name: cli\nstages:\n  - {kind: echo, grid: {seed: [0, 1]}, params: {value: 2}}\n"
                    "tables:\n  - {name: t, kind: echo, values: [value]}\n")
    out = tmp_path / "res"
    assert main(["bench", str(path), "--results-dir", str(out), "--no-progress"]) == 0
    assert main(["bench", str(path), "--results-dir", str(out), "--no-progress"]) == 0
    text = capsys.readouterr().out
    assert "2 skipped" in text
    assert "2.000" in (out / "cli" / "tables" / "t.md").read_text()
    assert main(["bench", str(tmp_path / "missing.yaml")]) == 2


def test_cases_cross_the_grid_and_optional_upstream(tmp_path):
    suite = write_suite(tmp_path, """
        name: c
        stages:
          - {name: pre, kind: echo, grid: {pretrain: [yes_]}, params: {value: 7}}
          - name: syn
            kind: echo
            needs: {stage: pre, match: [pretrain], optional: true}
            params: {cfg: {a: 1, b: 2}}
            cases:
              - {pretrain: yes_, cfg: {b: 3}}
              - {pretrain: none}
            grid: {seed: [0, 1]}
        """)
    cells = expand_stage(suite.stages[1])
    assert len(cells) == 4 and cells[0]["cfg"] == {"a": 1, "b": 3} and cells[2]["cfg"] == {"a": 1, "b": 2}
    res = run_suite(suite, progress=False, log=lambda _: None)
    assert res["ran"] == 5 and res["blocked"] == 0
    recs = collect_records(suite, stage="syn")
    linked = [r["result"].get("upstream_value") for r in sorted(recs, key=lambda r: r["params"]["pretrain"])]
    assert linked == [None, None, 7, 7]


def test_transition_split_partitions_rows(tmp_path):
    from privsynth.evaluation.runner import _random_dataset, split_transitions

    ds = _random_dataset(episodes=5, length=8, seed=3)
    a, b = split_transitions(ds, 0.25, seed=1)
    assert a.n_transitions == 10 and b.n_transitions == 30
    rows = np.concatenate([a.transition_matrix(), b.transition_matrix()])
    assert np.allclose(np.sort(rows, axis=0), np.sort(ds.transition_matrix(), axis=0))
    assert not set(map(tuple, a.transition_matrix())) & set(map(tuple, b.transition_matrix()))


def test_renamed_stage_adopts_finished_cells(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    run_suite(suite, progress=False, log=lambda _: None)
    renamed = write_suite(tmp_path, SUITE.replace("name: make", "name: build").replace("stage: make", "stage: build"))
    res = run_suite(renamed, progress=False, log=lambda _: None)
    assert res["ran"] == 0 and res["skipped"] == 12 and res["blocked"] == 0
    assert len(collect_records(renamed, stage="build")) == 4


def test_tables_show_only_cells_of_the_current_config(tmp_path):
    suite = write_suite(tmp_path, SUITE)
    run_suite(suite, progress=False, log=lambda _: None)
    changed = write_suite(tmp_path, SUITE.replace("score: 0.5", "score: 0.7"))
    run_suite(changed, progress=False, log=lambda _: None)
    md = (changed.out / "tables" / "flat.md").read_text()
    assert "0.700" in md and "0.500" not in md
    assert len(collect_records(changed, stage="use")) == 16  # the old cells stay on disk, out of the tables


def test_cost_kind_reads_its_upstream(tmp_path):
    suite = write_suite(tmp_path, """
        name: cost
        stages:
          - {name: syn, kind: echo, grid: {epsilon: [1.0, null]}, params: {finetune_seconds: 6.0, dp_steps: 3}}
          - {name: cost, kind: cost, needs: {stage: syn, match: [epsilon]}, grid: {epsilon: [1.0, null]}}
        """)
    run_suite(suite, progress=False, log=lambda _: None)
    recs = {r["params"]["epsilon"]: r["result"] for r in collect_records(suite, stage="cost")}
    # derived from the timing of a run on the sensitive set: the holder's own section (issue 36)
    assert recs[1.0]["holder_only"]["seconds_per_step"] == 2.0 and recs[1.0]["private"] and not recs[None]["private"]


def test_kind_may_be_an_importable_function(tmp_path):
    suite = write_suite(tmp_path, """
        name: dotted
        stages:
          - {kind: "privsynth.evaluation.runner:_echo_cell", grid: {seed: [0]}, params: {value: 5}}
        """)
    res = run_suite(suite, progress=False, log=lambda _: None)
    assert res["ran"] == 1 and collect_records(suite)[0]["result"]["value"] == 5
    bad = write_suite(tmp_path, """
        name: dotted_bad
        stages:
          - {kind: "privsynth.evaluation.runner:_echo_cell", grid: {seed: [0]}, params: {value: 5}}
          - {name: bad, kind: "privsynth.nope:fn"}
        """, name="bad")
    with pytest.raises(InvalidData, match="stage 'bad': cannot import"):  # refused before the first stage runs
        run_suite(bad, progress=False, log=lambda _: None)
    assert not bad.cells_dir.exists()


def test_needs_where_fixes_upstream_keys(tmp_path):
    """Several upstream cells agree on ``match``: ``where`` picks one by fixed values, else the plan refuses."""
    body = """
    name: w
    workers: 1
    datasets: {}
    stages:
      - name: make
        kind: echo
        grid: {epsilon: [1.0], seed: [0, 1]}
        params: {value: 3}
      - name: use
        kind: echo
        needs: {stage: make, match: [epsilon]%s}
        grid: {epsilon: [1.0], seed: [0, 1, 2]}
    """
    ok = write_suite(tmp_path, body % ", where: {seed: 1}", name="w")
    out = run_suite(ok, progress=False, log=lambda _: None)
    assert out["ran"] == 5 and out["failed"] == 0
    make = {r["id"]: r["params"]["seed"] for r in collect_records(ok, stage="make")}
    assert {make[r["upstream"]] for r in collect_records(ok, stage="use")} == {1}
    (tmp_path / "bad").mkdir()
    bad = write_suite(tmp_path / "bad", body % "", name="w")
    with pytest.raises(InvalidData, match="add keys to 'match'"):
        run_suite(bad, progress=False, log=lambda _: None)


def test_table_where_keeps_only_matching_cells(tmp_path):
    body = SUITE.replace(
        "  - {name: flat, stage: use,",
        "  - {name: only_a, stage: use, where: {synthesizer: a}, rows: [synthesizer, epsilon], values: [score]}\n"
        "  - {name: flat, stage: use,")
    suite = write_suite(tmp_path, body)
    run_suite(suite, progress=False, log=lambda _: None)
    only_a = (suite.out / "tables" / "only_a.md").read_text()
    flat = (suite.out / "tables" / "flat.md").read_text()
    assert "| a |" in only_a and "| b |" not in only_a
    assert "| a |" in flat and "| b |" in flat


def test_epsilon_positions_place_no_dp_right_and_public_only_left():
    from privsynth.evaluation.bench.plots import epsilon_positions

    pos, names = epsilon_positions([1.0, 10.0, "no DP", "0 (public only)", 10.0])
    assert list(pos) == [1.0, 10.0, 30.0, 1.0 / 3, 10.0]
    assert names == {30.0: "no DP", 1.0 / 3: "public only"}
    pos, names = epsilon_positions([1.0, 10.0])
    assert list(pos) == [1.0, 10.0] and names == {}


def test_tables_mark_groups_with_fewer_seeds():
    from privsynth.evaluation.bench.tables import summary_table

    recs = [{"id": f"{s}{i}", "seconds": 1.0, "params": {"synthesizer": s, "seed": i}, "result": {"score": float(i)}}
            for s, seeds in (("a", 3), ("b", 2)) for i in range(seeds)]
    t = summary_table(recs, rows=["synthesizer"], values=["score"], digits=1)
    assert list(t["score"]) == ["1.0 ± 1.0", "0.5 ± 0.7 (n=2)"]
    recs.append({"id": "c0", "seconds": 1.0, "params": {"synthesizer": "c", "agent": "iql", "seed": 0},
                 "result": {"score": 1.0}})
    wide = summary_table(recs, rows=["synthesizer"], cols=["agent"], values=["score"], digits=1)
    assert list(wide["iql"]) == ["–", "–", "1.0 (n=1)"]  # a cell no record fills shows a dash, not nan
