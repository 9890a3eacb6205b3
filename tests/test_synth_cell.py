"""One benchmark cell for every registered synthesizer: a suite is a grid over names, written as one table."""
from __future__ import annotations

import textwrap

import pytest

from privsynth.evaluation.runner import collect_records, load_suite, run_suite

SUITE = """
name: synth_cell
workers: 1
datasets:
  public: {{source: pointmaze, maze: open, steps: 1500, seed: 1, dense: true, ref_episodes: 1}}
  sens:   {{source: pointmaze, maze: umaze, steps: 1500, seed: 2, dense: true, ref_episodes: 1, sensitive: true}}
defaults:
  data: {{public: [public], sensitive: sens}}
  config: {{preset: tiny}}
stages:
  - name: synthesize
    kind: synthesize
    grid: {{synthesizer: {names}, epsilon: [10.0], seed: [0]}}
    params: {{delta: 1.0e-4, num_samples: 300}}
  - name: fidelity
    kind: fidelity
    needs: {{stage: synthesize, match: [synthesizer, epsilon]}}
    grid: {{synthesizer: {names}, epsilon: [10.0]}}
tables:
  - {{name: fidelity, stage: fidelity, rows: [synthesizer, epsilon], values: [marginal, correlation]}}
"""


def _run(tmp_path, names):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SUITE.format(names=names)))
    suite = load_suite(path, results_dir=tmp_path / "results")
    res = run_suite(suite, progress=False, log=lambda _: None)
    return res, collect_records(suite)


def _check(records, names):
    synth = {r["params"]["synthesizer"]: r for r in records if r["stage"] == "synthesize"}
    assert set(synth) == set(names)
    for name, r in synth.items():
        assert 0 < r["result"]["dp_epsilon"] <= 10.0 and r["result"]["n_synthetic"] == 300
    fid = [r for r in records if r["stage"] == "fidelity"]
    assert len(fid) == len(names) and all(0 <= r["result"]["marginal"] <= 1 for r in fid)


def test_a_baseline_through_the_generic_cell(tmp_path):
    _, records = _run(tmp_path, "[privsyn]")
    _check(records, ["privsyn"])
    assert any((tmp_path / "results").rglob("fidelity*"))  # the table


@pytest.mark.slow
def test_diffusion_and_gan_synthesizers_through_the_same_cell(tmp_path):
    names = ["privorl-n", "privorl-j", "pategan"]
    _, records = _run(tmp_path, "[" + ", ".join(names) + "]")
    _check(records, names)
