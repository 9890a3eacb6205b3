"""Every committed suite under evaluation/suites parses, expands, and names only stages, kinds and datasets it has.

A suite that fails here would fail only after hours of earlier stages (or at table time), so check them all at once.
"""
import os
import subprocess
import sys
from pathlib import Path

import pytest

from privsynth.evaluation.bench.suite import expand_stage, load_suite

SUITES = sorted((Path(__file__).resolve().parents[1] / "evaluation" / "suites").glob("*.yaml"))


def test_there_are_suites():
    assert len(SUITES) >= 10


@pytest.mark.parametrize("path", SUITES, ids=[p.stem for p in SUITES])
def test_committed_suite_is_consistent(path):
    suite = load_suite(path)
    names = {s.name for s in suite.stages}
    kinds = {s.kind for s in suite.stages}
    for stage in suite.stages:
        cells = expand_stage(stage)
        assert cells, f"stage {stage.name} expands to no cell"
        for params in cells:
            data = params.get("data") or {}
            used = ([data["sensitive"]] if data.get("sensitive") else []) + list(data.get("public") or [])
            for name in used:
                assert not isinstance(name, str) or name in suite.datasets or not suite.datasets, \
                    f"stage {stage.name} reads dataset '{name}', which the suite does not declare"
        if stage.needs:
            upstream = next(s for s in suite.stages if s.name == stage.needs["stage"])
            upstream_keys = set(upstream.grid) | {k for case in upstream.cases for k in case} | set(upstream.params)
            for key in stage.needs.get("match", []):
                assert key in upstream_keys, f"stage {stage.name} matches '{key}', which {upstream.name} does not set"
    for spec in list(suite.tables) + list(suite.plots):
        if "stage" in spec:
            assert spec["stage"] in names, f"{spec['name']} reads stage '{spec['stage']}', which is not in the suite"
        if "kind" in spec:
            assert spec["kind"] in kinds, f"{spec['name']} reads kind '{spec['kind']}', which no stage has"


def test_committed_suites_pass_the_runner_checks_in_a_fresh_process(tmp_path):
    """A dry run of every committed suite (the checks ``privsynth bench`` makes before any work: kinds, dataset
    sources and their spec keys) in a fresh interpreter: in this test process other tests may already have imported
    the cell modules that register sources such as ``method_example``, which once hid that the runner looked sources
    up before importing them."""
    script = (
        "import sys\n"
        "from privsynth.evaluation.bench.execute import run_suite\n"
        "from privsynth.evaluation.bench.suite import load_suite\n"
        "bad = []\n"
        "for path in sys.argv[2:]:\n"
        "    try:\n"
        "        suite = load_suite(path, results_dir=sys.argv[1])\n"
        "        run_suite(suite, dry_run=True, progress=False, log=lambda _: None)\n"
        "    except Exception as exc:\n"
        "        bad.append(f'{path}: {exc}')\n"
        "print('\\n'.join(bad))\n"
        "sys.exit(1 if bad else 0)\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path), *map(str, SUITES)], capture_output=True,
                         text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert not any(tmp_path.iterdir()), "a dry run wrote files"


def test_method_example_source_resolves_in_a_fresh_process():
    code = ("from privsynth.evaluation.bench.kinds import resolve_source\n"
            "assert resolve_source('method_example') is not None\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
