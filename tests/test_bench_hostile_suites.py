"""Names in a suite become file names in its results folder, and records are read back from it: a name that is not
one plain path component (a table called '../../victim' deleted files outside the folder) and a damaged record or a
mistyped number are one line each, never a write elsewhere or a traceback."""
from __future__ import annotations

import json

import pytest

from test_bench_validation import GOOD, check, suite_from
from privsynth.cli import main
from privsynth.errors import InvalidData
from privsynth.evaluation.bench.execute import run_suite
from privsynth.evaluation.bench.records import read_record


@pytest.mark.parametrize("old, new, message", [
    ("name: v\n", "name: ../../../escaped\n", r"the name of suite 'v.yaml' must be a plain name"),
    ("{name: t, stage: use", "{name: ../../victim/victim, stage: use", r"the name of a table must be a plain name"),
    ("{name: pu, type:", "{name: a/b, type:", r"the name of a plot must be a plain name"),
    ("  base: {source", "  ../base: {source", r"dataset name must be a plain name"),
    ("name: v\n", "name: v\nworkers: abc\n", r"'workers' of suite 'v.yaml' must be a whole number, got 'abc'"),
    ("name: v\n", "name: v\ndefaults: [1]\n", r"'defaults' of suite 'v.yaml' must be a mapping"),
    ("    kind: echo\n    grid: {epsilon", "    kind: echo\n    cpus: many\n    grid: {epsilon",
     r"stage 'make': 'cpus' must be a number, got 'many'"),
])
def test_names_that_leave_the_folder_and_mistyped_numbers_are_one_line(tmp_path, old, new, message):
    assert old in GOOD
    body = GOOD.replace(old, new, 1).replace("sensitive: members, public: [base]", "sensitive: members, public: [base]"
                                             if "../base" not in new else "sensitive: members, public: [../base]")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "victim.md").write_text("keep me")
    with pytest.raises(InvalidData, match=message):
        check(tmp_path, body)
    assert (victim / "victim.md").read_text() == "keep me" and not (tmp_path.parent / "escaped").exists()


@pytest.mark.parametrize("content", ["{\"id\": \"x\", \"kind\"", "[1, 2]", "{\"unexpected\": 1}", "\udcff"])
def test_a_damaged_record_is_one_line_naming_it(tmp_path, content):
    path = tmp_path / "cell.json"
    path.write_bytes(content.encode("utf-8", "surrogateescape"))
    with pytest.raises(InvalidData, match=r"cell record .*cell.json is damaged .*delete it"):
        read_record(path)


def test_tables_only_with_a_damaged_record_is_one_line(tmp_path, capsys):
    suite = suite_from(tmp_path, GOOD)
    run_suite(suite, progress=False, log=lambda _: None)
    victim = next(suite.cells_dir.glob("*.json"))
    json.loads(victim.read_text())  # a real record first
    victim.write_text("{truncated")
    code = main(["bench", str(suite.path), "--tables-only", "--results-dir", str(tmp_path / "results")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and f"{victim.name} is damaged" in err[0], err
