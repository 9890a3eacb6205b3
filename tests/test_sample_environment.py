"""After DP fine-tuning, a synthesizer's samples carry the sensitive dataset's environment (its public facts), not
the pre-training map's: plain ``synth.sample()`` gives the same environment as the release pipeline."""
from __future__ import annotations

import dataclasses

import torch

from conftest import make_toy_dataset
from privsynth.data.dataset import ENV_FACT_FIELDS, environment_facts
from privsynth.synth import TransitionSynthesizer
from privsynth.synth.config import DenoiserConfig, cpu_config


def _with_env(ds, **facts):
    return dataclasses.replace(ds, info=dataclasses.replace(ds.info, **facts))


PUBLIC_ENV = dict(env_id="PointMaze_Open-v3", env_kwargs={"continuing_task": True}, ref_min_score=1.0,
                  ref_max_score=2.0, action_low=[-1.0, -1.0], action_high=[1.0, 1.0])
SENSITIVE_ENV = dict(env_id="PointMaze_UMaze-v3", env_kwargs={"reward_type": "dense"}, ref_min_score=3.0,
                     ref_max_score=4.0, action_low=[-0.5, -0.5], action_high=[0.5, 0.5])


def _cfg():
    cfg = cpu_config()
    cfg.denoiser = DenoiserConfig(width=16, depth=1, cond_dim=8)
    cfg.pretrain.max_steps, cfg.pretrain.batch_size = 4, 32
    cfg.finetune.batch_size, cfg.finetune.epochs = 16, 0.5
    cfg.curiosity.pool_size, cfg.pretrain_curiosity, cfg.sampler.steps = 16, False, 3
    return cfg


def test_transition_samples_after_finetuning_carry_the_sensitive_environment(tmp_path):
    torch.manual_seed(0)
    pub = _with_env(make_toy_dataset(lengths=(20, 15, 25), seed=1, name="public"), **PUBLIC_ENV)
    sens = _with_env(make_toy_dataset(lengths=(10,) * 8, seed=2, sensitive=True, name="sensitive-name"),
                     **SENSITIVE_ENV)
    synth = TransitionSynthesizer(_cfg()).pretrain(pub, progress=False)
    assert synth.sample(4, seed=0).info.env_id == "PointMaze_Open-v3"  # before: the public map's
    synth.finetune(sens, 5.0, 1e-4, progress=False)
    out = synth.sample(64, seed=0)
    assert environment_facts(out.info) == environment_facts(sens.info)
    assert out.info.name != "sensitive-name" and not out.info.sensitive  # only the environment's facts are taken
    assert out.actions.min() >= -0.5 and out.actions.max() <= 0.5  # clipped to the sensitive env's action box
    synth.save(tmp_path / "m.pt")  # and a saved checkpoint keeps it
    again = TransitionSynthesizer.load(tmp_path / "m.pt").sample(2, seed=0).info
    assert {k: getattr(again, k) for k in ENV_FACT_FIELDS} == environment_facts(sens.info)


def test_trajectory_samples_after_finetuning_carry_the_sensitive_environment():
    from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config

    pub = _with_env(make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=3, act_dim=2, seed=1), **PUBLIC_ENV)
    sens = _with_env(make_toy_dataset(lengths=(7, 5, 10, 4), obs_dim=3, act_dim=2, seed=2, sensitive=True),
                     **SENSITIVE_ENV)
    cfg = tiny_config()
    cfg.pretrain_curiosity = False
    s = TrajectorySynthesizer(cfg).pretrain(pub, progress=False).finetune(sens, 3.0, 1e-3, progress=False)
    assert environment_facts(s.sample(2, seed=0).info) == environment_facts(sens.info)
