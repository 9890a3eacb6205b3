"""An unsupported ``--postprocess`` is refused from the environment's public facts before any training: it used to
fail only after the DP fine-tune had spent the budget (and read the sensitive rows) for a release it then refused."""
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
