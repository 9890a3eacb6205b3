"""A suite is checked before any work: unknown keys, kinds, sources, dataset spec keys, ``needs`` keys, undeclared
datasets, repeated grid values, stages defining the same cells, plot types and ``--only`` names all fail at once with
one line naming the place; a dry run checks too, and plans downstream cells against the upstream cells it would run."""
from __future__ import annotations

import textwrap

import pytest

from privsynth.cli import main
from privsynth.errors import InvalidData
from privsynth.evaluation.bench.execute import run_suite
from privsynth.evaluation.bench.suite import load_suite

GOOD = """
name: v
datasets:
  base: {source: random, episodes: 4, length: 5, seed: 1}
  members: {split_of: base, fraction: 0.5, part: first, sensitive: true}
stages:
  - name: make
    kind: echo
    grid: {epsilon: [1.0, 10.0]}
    params: {value: 3, data: {sensitive: members, public: [base]}}
  - name: use
    kind: echo
    needs: {stage: make, match: [epsilon]}
    grid: {epsilon: [1.0, 10.0], seed: [0, 1]}
tables:
  - {name: t, stage: use, rows: [epsilon], values: [upstream_value]}
plots:
  - {name: pu, type: privacy_utility, stage: use, y: upstream_value}
"""


def suite_from(tmp_path, body: str):
    path = tmp_path / "v.yaml"
    path.write_text(textwrap.dedent(body))
    return load_suite(path, results_dir=tmp_path / "results")


def check(tmp_path, body: str, *, dry_run: bool = True):
    return run_suite(suite_from(tmp_path, body), dry_run=dry_run, progress=False, log=lambda _: None)


def test_good_suite_passes(tmp_path):
    check(tmp_path, GOOD)


@pytest.mark.parametrize("old, new, message", [
    ("name: v\n", "name: v\nworker: 2\n", r"unknown top-level key 'worker'"),
    ("    kind: echo\n    grid: {epsilon: [1.0, 10.0]}\n", "    kind: echo\n    gird: {epsilon: [1.0, 10.0]}\n",
     r"stage 'make': unknown key 'gird'"),
    ("needs: {stage: make, match: [epsilon]}", "needs: {stage: make, mach: [epsilon]}",
     r"stage 'use' needs: unknown key 'mach'"),
    ("match: [epsilon]}", "match: [epsilom]}", r"stage 'use' needs.match key 'epsilom' is not a grid.*'make'"),
    ("match: [epsilon]}", "match: [epsilon], where: {sed: 0}}", r"needs.where key 'sed'"),
    ("sensitive: members,", "sensitive: membres,", r"stage 'make' reads dataset 'membres', which is not declared"),
    ("seed: [0, 1]", "seed: [0, 0, 1]", r"grid entry 'seed' of stage 'use' repeats 0"),
    ("type: privacy_utility", "type: privacy_utilty", r"plot 'pu': unknown plot type 'privacy_utilty'"),
    ("stage: use, rows", "stage: uze, rows", r"table 't' reads stage 'uze'"),
    ("split_of: base", "split_of: bsae", r"dataset 'members' is a split of 'bsae'"),
])
def test_shape_errors_fail_at_load(tmp_path, old, new, message):
    assert old in GOOD
    with pytest.raises(InvalidData, match=message):
        suite_from(tmp_path, GOOD.replace(old, new, 1))


def test_two_stages_defining_the_same_cells_are_refused(tmp_path):
    body = GOOD.replace("tables:", "  - {name: again, kind: echo, needs: {stage: make, match: [epsilon]},\n"
                                   "     grid: {epsilon: [1.0, 10.0], seed: [0, 1]}}\ntables:")
    with pytest.raises(InvalidData, match="stages 'use' and 'again' define identical cells"):
        suite_from(tmp_path, body)


@pytest.mark.parametrize("old, new, message", [
    ("kind: echo\n    grid: {epsilon: [1.0, 10.0]}", "kind: ecoh\n    grid: {epsilon: [1.0, 10.0]}",
     r"stage 'make': unknown cell kind 'ecoh'"),
    ("source: random", "source: randon", r"dataset 'base' has unknown source 'randon'.*method_example"),
    ("episodes: 4", "episodez: 4", r"dataset 'base' \(source random\): unknown key 'episodez'"),
])
@pytest.mark.parametrize("dry_run", [True, False])
def test_registry_errors_fail_before_any_work(tmp_path, old, new, message, dry_run):
    suite = suite_from(tmp_path, GOOD.replace(old, new, 1))
    with pytest.raises(InvalidData, match=message):
        run_suite(suite, dry_run=dry_run, progress=False, log=lambda _: None)
    assert not suite.cells_dir.exists()


def test_a_pointmaze_spec_typo_names_the_key(tmp_path):
    body = GOOD.replace("base: {source: random, episodes: 4, length: 5, seed: 1}",
                        "base: {source: pointmaze, maze: open, stepz: 100, seed: 1}")
    with pytest.raises(InvalidData, match=r"dataset 'base' \(source pointmaze\): unknown key 'stepz'"):
        check(tmp_path, body)


def test_only_with_an_unknown_stage_is_refused(tmp_path, capsys):
    path = tmp_path / "v.yaml"
    path.write_text(textwrap.dedent(GOOD))
    code = main(["bench", str(path), "--results-dir", str(tmp_path / "r"), "--only", "usee", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--only usee: no such stage" in err and "make, use" in err


def test_dry_run_plans_downstream_cells_as_to_run(tmp_path):
    lines: list[str] = []
    suite = suite_from(tmp_path, GOOD)
    run_suite(suite, progress=False, log=lambda _: None)  # everything finished
    suite = suite_from(tmp_path, GOOD.replace("epsilon: [1.0, 10.0]}\n    params", "epsilon: [2.0, 10.0]}\n    params")
                       .replace("grid: {epsilon: [1.0, 10.0], seed", "grid: {epsilon: [2.0, 10.0], seed"))
    summary = run_suite(suite, dry_run=True, progress=False, log=lines.append)
    assert "stage make: 2 cells, 1 finished, 1 to run" in lines[0]
    assert "stage use: 4 cells, 2 finished, 2 to run" in lines[1], lines
    assert summary.blocked == 0 and "blocked" not in " ".join(lines) and "waiting" not in " ".join(lines)
    assert "3 cells would run" in lines[-1]
    # --only use: the new make cell will not run, so the use cells of the new epsilon have no upstream cell
    lines.clear()
    run_suite(suite, dry_run=True, only=["use"], progress=False, log=lines.append)
    assert "1 left out by --only" in lines[0], lines
    assert "0 to run, 2 waiting on no upstream cell (left out by --only" in lines[1], lines


@pytest.mark.parametrize("stages, message", [
    ("  - {name: s, kind: synthesize, grid: {synthesizer: [privsin]}}\n", r"stage 's': unknown synthesizer 'privsin'"),
    ("  - {name: a, kind: agent, grid: {synthesizer: [real], agent: [iql, TD3+BC, iqll]}}\n",
     r"stage 'a': unknown agent 'iqll'"),
])
def test_unknown_synthesizer_and_agent_names_are_refused(tmp_path, stages, message):
    with pytest.raises(InvalidData, match=message):
        check(tmp_path, "name: n\nstages:\n" + stages)


@pytest.mark.parametrize("old, new, message", [
    ("epsilon: [1.0, 10.0]}\n    params: {value: 3", "epsilon: [-1.0, 10.0]}\n    params: {value: 3", "epsilon must be"),
    ("epsilon: [1.0, 10.0]}\n    params: {value: 3", "epsilon: [ten, 10.0]}\n    params: {value: 3", "epsilon must be"),
    ("params: {value: 3,", "params: {value: 3, delta: -1.0e-4,", "delta must be"),
    ("params: {value: 3,", "params: {value: 3, delta: 1.5,", "delta must be"),
])
def test_bad_epsilon_or_delta_fails_before_any_work(tmp_path, old, new, message):
    assert old in GOOD
    suite = suite_from(tmp_path, GOOD.replace(old, new))
    with pytest.raises(InvalidData, match=f"stage 'make': {message}"):
        run_suite(suite, dry_run=True, progress=False, log=lambda _: None)
    assert not (tmp_path / "results").exists()
