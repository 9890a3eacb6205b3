"""The ``method`` benchmark cell: any registered method runs through the runner from a suite, its ledger's ε is
recorded next to its metrics, and a DP dataset it returns feeds a downstream cell."""
from __future__ import annotations

import json
import textwrap

import pytest

import privsynth.evaluation.method_cells  # noqa: F401  registers the 'method' kind (the runner will import it itself)
from privsynth.evaluation.runner import collect_records, load_suite, load_dataset_file, run_suite
from privsynth.privacy.ledger import Ledger

SUITE = """
name: method_cell
workers: 1
datasets:
  grid:   {source: method_example, method: dp-apvi, episodes: 1500, sensitive: true}
  linear: {source: method_example, method: dp-vapvi, episodes: 100, env: {H: 5, A: 10}, sensitive: true}
stages:
  - name: tabular
    kind: method
    grid: {name: [dp-apvi], epsilon: [2.0, 20.0], seed: [0]}
    params: {config: {preset: tiny}, data: {sensitive: grid}}
  - name: linear
    kind: method
    grid: {name: [dp-vapvi], epsilon: [5.0], seed: [1]}
    params: {config: {preset: tiny, dp-vapvi: {env: {H: 5, A: 10}}}, data: {sensitive: linear}}
  - name: echo
    kind: echo
    needs: {stage: tabular, match: [epsilon]}
    grid: {epsilon: [20.0], value: [1]}
tables:
  - {name: gaps, kind: method, rows: [name, epsilon], values: [dp_epsilon, gap]}
"""


def test_methods_run_through_the_runner_and_record_their_ledger(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SUITE))
    suite = load_suite(path, results_dir=tmp_path / "results")
    summary = run_suite(suite, progress=False, log=lambda _: None)
    assert summary["failed"] == 0 and summary["ran"] == 4
    recs = {(r["stage"], r["params"].get("epsilon"), r["params"].get("seed")): r for r in collect_records(suite)}
    for (stage, eps, _), r in recs.items():
        if stage == "echo":
            continue
        res = r["result"]
        assert res["dp_epsilon"] == pytest.approx(eps, rel=1e-4) and res["dp_epsilon"] <= eps * (1 + 1e-6)
        assert res["private"] is True and res["unit"] == "trajectory" and 0 <= res["gap"] <= res["v_star"] + 1e-9
        art = suite.out / "artifacts" / r["id"]
        ledger = Ledger.from_json((art / "ledger.json").read_text())
        assert ledger.epsilon() == pytest.approx(res["dp_epsilon"])
        assert json.loads((art / "card.json").read_text())["settings"]["epsilon"] == eps
    syn = load_dataset_file(suite.out / "artifacts" / recs[("tabular", 20.0, 0)]["id"] / "synthetic.npz")
    assert not syn.info.sensitive and syn.info.privacy_card["unit"] == "trajectory"
    assert recs[("echo", 20.0, None)]["upstream"] == recs[("tabular", 20.0, 0)]["id"]
    assert (suite.out / "tables" / "gaps.md").exists()
    again = run_suite(suite, progress=False, log=lambda _: None)  # cached: nothing re-runs
    assert again["ran"] == 0 and again["skipped"] == 4


def test_a_bad_method_cell_fails_in_one_line(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SUITE.replace("name: [dp-apvi]", "name: [nope]")))
    suite = load_suite(path, results_dir=tmp_path / "results")
    summary = run_suite(suite, progress=False, log=lambda _: None, only=["tabular"])
    assert summary["failed"] == 2
    assert all("InvalidData: cell" in f["error"] and "unknown method 'nope'" in f["error"]
               for f in summary["failures"])
