"""Requests that cannot succeed are refused before the work they would waste.

* An unsupported ``--postprocess`` is refused from the environment's public facts before any training; it used to
  fail only after the DP fine-tune had spent the budget (and read the sensitive rows) for a release it then refused.
* ``evaluate`` with agents checks the real set's reference scores before the fidelity work; ``audit --out`` takes a
  .json path or a folder, as ``evaluate --out`` does (it wrote JSON into any suffix).
"""
from __future__ import annotations

import dataclasses

import pytest

from conftest import make_toy_dataset
from privsynth.errors import InvalidData, PrivsynthError
from privsynth.release import synthesize
from privsynth.release.postprocess import check_supported


def _on(env_id: str, obs_dim: int, act_dim: int, **kw):
    ds = make_toy_dataset(lengths=(9, 8, 10, 9), obs_dim=obs_dim, act_dim=act_dim, **kw)
    return dataclasses.replace(ds, info=dataclasses.replace(ds.info, env_id=env_id))


def test_unsupported_environment_is_refused_before_training(monkeypatch):
    from privsynth.synth import TransitionSynthesizer

    def no_training(*a, **k):
        raise AssertionError("trained before the post-processing request was checked")

    monkeypatch.setattr(TransitionSynthesizer, "pretrain", no_training)
    monkeypatch.setattr(TransitionSynthesizer, "finetune", no_training)
    sens = _on("Pendulum-v1", 3, 1, seed=2, sensitive=True, name="sens")
    pub = _on("Pendulum-v1", 3, 1, seed=1, name="pub")
    with pytest.raises(PrivsynthError, match="no post-processing for environment 'Pendulum-v1'"):
        synthesize(sens, public=[pub], epsilon=5.0, delta=1e-3, n=8, postprocess=True, progress=False)
    with pytest.raises(PrivsynthError, match="no post-processing"):  # the registered path too
        synthesize(sens, public=[pub], synth="privsyn", epsilon=5.0, delta=1e-3, n=8, postprocess="walls",
                   progress=False)


def test_goals_step_is_pointmaze_only():
    info = _on("Hopper-v5", 11, 3, name="hop").info
    with pytest.raises(InvalidData, match="PointMaze only"):
        check_supported(info, "goals")
    check_supported(info, "reward,clip")  # MuJoCo steps are fine
    check_supported(info, True)  # "all" applies the steps that fit


def test_evaluate_with_agents_checks_reference_scores_before_any_work(tmp_path, monkeypatch):
    """``evaluate --agents`` on a real set without reference scores failed only after fidelity, RL checks and t-SNE,
    leaving a plot behind that then blocked the rerun."""
    from privsynth.evaluation import report

    monkeypatch.setattr(report, "tabular_fidelity", lambda *a, **k: pytest.fail("computed before the check"))
    real = make_toy_dataset(lengths=(9, 8, 10), seed=1, name="real")
    real = dataclasses.replace(real, info=dataclasses.replace(real.info, ref_min_score=None, ref_max_score=None))
    synthetic = make_toy_dataset(lengths=(9, 8), seed=2, name="syn")
    with pytest.raises(InvalidData, match="no reference scores"):
        report.evaluate_synthetic(synthetic, real, agents=["iql"], out=tmp_path / "r.json")
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["a.txt", "a.md", "a.csv"])
def test_audit_out_takes_a_json_path_or_a_folder_only(tmp_path, name):
    from privsynth.evaluation.mia.report import report_paths

    with pytest.raises(InvalidData, match="give a .json path"):
        report_paths(tmp_path / name)
    assert report_paths(tmp_path / "a.JSON")[0].name == "a.JSON"
    assert report_paths(tmp_path)[0] == tmp_path / "audit.json"
