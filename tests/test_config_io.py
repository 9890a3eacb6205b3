"""The one config deserialiser: nested sections, tuples back from JSON lists, defaults for missing keys, and a
one-line refusal of unknown keys; the shipped pre-trained checkpoints' configs still load."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from privsynth.config_io import config_from_dict, config_to_dict, override
from privsynth.errors import InvalidData
from privsynth.synth.checkpoint import load_weights_only
from privsynth.synth.config import TransitionSynthConfig, config_from_dict as transition_config_from_dict, cpu_config
from privsynth.synth.trajectory.config import PRESETS, TrajSynthConfig, traj_config_from_dict

PRETRAINED = sorted(Path(__file__).resolve().parents[1].glob("pretrained/pointmaze-*/model.pt"))


def test_round_trip_through_json_restores_tuples_and_sections():
    cfg = cpu_config()
    back = config_from_dict(TransitionSynthConfig, json.loads(json.dumps(config_to_dict(cfg))))
    assert back == cfg and isinstance(back.pretrain.betas, tuple) and isinstance(back.curiosity.target_hidden, tuple)
    for name, make in PRESETS.items():
        c = make()
        assert traj_config_from_dict(json.loads(json.dumps(config_to_dict(c)))) == c, name


def test_missing_keys_take_defaults():
    d = config_to_dict(cpu_config())
    del d["dp"]["trainable"], d["seed"]
    back = transition_config_from_dict(d)
    assert back.dp.trainable == TransitionSynthConfig().dp.trainable and back.seed == TransitionSynthConfig().seed


@pytest.mark.parametrize("where", ["top", "nested"])
def test_unknown_key_is_refused_in_one_line_naming_it(where):
    d = config_to_dict(TrajSynthConfig())
    if where == "top":
        d["horizn"] = 3
        name = "config.horizn"
    else:
        d["pretrain"]["lr_typo"] = 1.0
        name = "config.pretrain.lr_typo"
    with pytest.raises(InvalidData) as err:
        traj_config_from_dict(d)
    msg = str(err.value)
    assert "\n" not in msg and name in msg and "choose from" in msg


def test_override_checks_keys_and_converts_lists():
    cfg = override(cpu_config(), {"pretrain": {"betas": [0.8, 0.9], "epochs": 2}})
    assert cfg.pretrain.betas == (0.8, 0.9) and cfg.pretrain.epochs == 2
    with pytest.raises(InvalidData, match="config.pretrain.nope"):
        override(cpu_config(), {"pretrain": {"nope": 1}})


@pytest.mark.skipif(not PRETRAINED, reason="shipped pre-trained synthesizers not present")
@pytest.mark.parametrize("path", PRETRAINED, ids=lambda p: p.parent.name)
def test_shipped_checkpoint_configs_load(path):
    saved = load_weights_only(path)["config"]
    cfg = transition_config_from_dict(saved)
    out = config_to_dict(cfg)
    for section, value in saved.items():  # every stored setting survives; newer fields take their defaults
        if isinstance(value, dict):
            assert {k: out[section][k] for k in value} == value
        else:
            assert out[section] == value
