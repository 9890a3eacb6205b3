"""The Ray executor: a two-cell suite on a local Ray instance gives the local executor's table; cells run in Ray
workers. Skips cleanly without Ray (CI installs only ``.[dev]``); the executor-choice checks run everywhere."""
from __future__ import annotations

import os
import textwrap

import pytest

from privsynth.cli import main
from privsynth.errors import InvalidData
from privsynth.evaluation.executors import LocalExecutor, make_executor
from privsynth.evaluation.runner import collect_records, load_suite, run_suite

SUITE = """
name: two
datasets:
  base: {source: random, episodes: 4, length: 5, seed: 1}
stages:
  - name: cells
    kind: echo
    cpus: 1
    grid: {synthesizer: [a, b]}
    cases: [{value: 1.5, score: 0.25}]
    params: {data: base}
tables:
  - {name: scores, stage: cells, rows: [synthesizer], values: [value, score]}
"""


def _suite(tmp_path, results: str):
    path = tmp_path / "two.yaml"
    path.write_text(textwrap.dedent(SUITE))
    return load_suite(path, results_dir=tmp_path / results)


@pytest.fixture(scope="module")
def local_ray():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()


def test_two_cell_suite_on_ray_matches_local_table(tmp_path, local_ray):
    local = _suite(tmp_path, "local")
    assert local.stages[0].cpus == 1.0
    res_local = run_suite(local, progress=False, log=lambda _: None)
    on_ray = _suite(tmp_path, "ray")
    res_ray = run_suite(on_ray, progress=False, log=lambda _: None, executor="ray")
    assert res_local["ran"] == res_ray["ran"] == 2 and res_ray["failed"] == 0
    table_local = (local.out / "tables" / "scores.md").read_text()
    table_ray = (on_ray.out / "tables" / "scores.md").read_text()
    assert "1.500" in table_ray and "0.250" in table_ray
    assert table_ray == table_local
    # the same cell ids (the executor is not part of a cell's identity), computed in Ray worker processes
    recs = collect_records(on_ray)
    assert sorted(r["id"] for r in recs) == sorted(r["id"] for r in collect_records(local))
    assert all(r["result"]["pid"] != os.getpid() for r in recs)
    assert local_ray.is_initialized()  # an instance the caller started is left running


def test_bench_cli_runs_on_ray(tmp_path, local_ray, capsys):
    path = tmp_path / "two.yaml"
    path.write_text(textwrap.dedent(SUITE))
    code = main(["bench", str(path), "--executor", "ray", "--results-dir", str(tmp_path / "cli"), "--no-progress"])
    assert code == 0
    assert "2 ran, 0 skipped, 0 failed" in capsys.readouterr().out
    assert (tmp_path / "cli" / "two" / "tables" / "scores.md").exists()


def test_executor_choice_is_checked(tmp_path):
    assert isinstance(make_executor("local", workers=2), LocalExecutor)
    with pytest.raises(InvalidData, match="unknown executor"):
        make_executor("dask")
    with pytest.raises(InvalidData, match="--address is for the ray executor"):
        make_executor("local", address="auto")
    with pytest.raises(InvalidData, match="unknown executor"):
        run_suite(_suite(tmp_path, "x"), progress=False, log=lambda _: None, executor="slurm")


def test_missing_ray_is_one_sentence(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ray", None)  # import ray -> ImportError
    with pytest.raises(InvalidData, match=r"pip install 'privsynth\[ray\]'"):
        make_executor("ray")
