"""Smaller CLI defects: the global ``--threads`` reaching ``bench``'s inline cells, ``agents train --seeds`` with a
repeated seed, and ``datasets import`` reference scores that would flip or divide the normalised score."""
from __future__ import annotations

import types

import pytest
import torch

from privsynth.cli import main
from privsynth.evaluation.bench import execute, suite


@pytest.fixture
def bench_probe(monkeypatch):
    """``bench`` with the suite and its run replaced by a probe of the torch threads the cells would see."""
    old = torch.get_num_threads()
    seen: dict = {}
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # init_worker writes these; restored after the test
    monkeypatch.setenv("MKL_NUM_THREADS", "1")
    monkeypatch.setattr(suite, "load_suite", lambda path, results_dir=None: types.SimpleNamespace(name="s"))

    def run_suite(s, **kwargs):
        seen["threads"] = torch.get_num_threads()
        return types.SimpleNamespace(ran=0, skipped=0, failed=0, blocked=0, tables=[], plots=[])

    monkeypatch.setattr(execute, "run_suite", run_suite)
    torch.set_num_threads(2)
    yield seen
    torch.set_num_threads(old)


def test_global_threads_reach_bench_inline_cells(bench_probe):
    assert main(["--threads", "2", "bench", "suite.yaml", "--dry-run"]) == 0
    assert bench_probe["threads"] == 2  # was 1: bench's init_worker overrode the global option
    assert main(["bench", "suite.yaml", "--dry-run"]) == 0
    assert bench_probe["threads"] == 1  # without it, one thread per inline cell as in the pool workers


@pytest.mark.parametrize("seeds", ["0,0", "1,2,1", ","])
def test_agents_train_refuses_repeated_or_no_seeds(seeds, capsys):
    assert main(["agents", "train", "--data", "nope", "--seeds", seeds, "--quiet"]) == 2
    assert "--seeds must list distinct seeds" in capsys.readouterr().err  # before the data is read


@pytest.mark.parametrize("refs, message", [
    (["--ref-min", "5", "--ref-max", "1"], "--ref-max (1, expert) must exceed --ref-min (5"),
    (["--ref-min", "3", "--ref-max", "3"], "must exceed --ref-min"),
    (["--ref-min", "nan"], "--ref-min must be a finite return"),
    (["--ref-max", "inf"], "--ref-max must be a finite return"),
])
def test_import_refuses_bad_reference_scores_before_reading(refs, message, tmp_path, capsys):
    from privsynth.data import minari_io

    f = tmp_path / "d.csv"
    f.write_text("obs_0,act_0,reward\n0.1,0.2,1.0\n0.2,0.1,0.0\n0.3,0.0,1.0\n")
    assert main(["datasets", "import", str(f), "--name", "d", *refs]) == 2
    assert message in capsys.readouterr().err
    assert not minari_io.dataset_exists("privsynth/d-v0")
    assert main(["datasets", "import", str(f), "--name", "d", "--ref-min", "0", "--ref-max", "2"]) == 0


@pytest.mark.parametrize("extra", [["--obs-cols", "a,b"], ["--map", "reward=r"], ["--act-cols", "x"]])
def test_import_npz_refuses_table_column_options(extra, tmp_path, capsys):
    f = tmp_path / "d.npz"
    f.write_bytes(b"not read: refused before")
    assert main(["datasets", "import", str(f), "--name", "d", *extra]) == 2
    assert "takes none" in capsys.readouterr().err


def test_import_refuses_env_kwargs_without_env_id(tmp_path, capsys):
    f = tmp_path / "d.csv"
    f.write_text("obs_0,act_0,reward\n0.1,0.2,1.0\n")
    assert main(["datasets", "import", str(f), "--name", "d", "--env-kwargs", '{"a": 1}']) == 2
    assert "give --env-id too" in capsys.readouterr().err


@pytest.mark.parametrize("noise", ["nan", "inf", "-0.1"])
def test_pointmaze_refuses_bad_action_noise_before_collecting(noise, capsys):
    assert main(["datasets", "make", "pointmaze", "--steps", "50", "--action-noise", noise, "--quiet"]) == 2
    assert "finite non-negative std" in capsys.readouterr().err


def test_list_options_name_what_they_expect(capsys):
    with pytest.raises(SystemExit) as e:
        main(["methods", "dp-vapvi", "--ks", "20,x"])
    assert e.value.code == 2
    assert "expected a comma list of counts, got '20,x'" in capsys.readouterr().err
