"""Issue 21 for PriMORL: privacy randomness from a NoiseSource, released metadata from public facts only, public data
that is really public, and checkpoints loaded without unpickling code."""
from __future__ import annotations

import json
import pickle

import numpy as np
import pytest
import torch

from privsynth.cli import main
from privsynth.errors import InvalidData, PrivacyError
from privsynth.methods.primorl import pipeline as pl
from privsynth.methods.primorl.data import PendulumDataConfig, make_pendulum_dataset
from privsynth.methods.primorl.dynamics import GaussianEnsemble, TDPConfig, TrajectoryTensors, train_tdp_ensemble
from privsynth.methods.primorl.sac import SACConfig
from privsynth.privacy.guard import check_budget
from privsynth.privacy.ledger import Ledger


def _toy(k: int = 12, length: int = 5) -> TrajectoryTensors:
    g = torch.Generator().manual_seed(0)
    return TrajectoryTensors(torch.randn(k, length, 3, generator=g), torch.randn(k, length, 3, generator=g),
                             torch.full((k,), length))


def _tiny_cfg(**kw) -> pl.PriMORLConfig:
    return pl.PriMORLConfig(tdp=TDPConfig(noise_multiplier=1.0, sample_rate=0.25, rounds=2, local_batch=64,
                                          eval_every=1, **kw),
                            sac=SACConfig(epochs=1, steps_per_epoch=2, rollout_batch=8, horizon=3), eval_episodes=1,
                            public_episodes=2)


@pytest.fixture(scope="module")
def pendulum():
    return make_pendulum_dataset(PendulumDataConfig(episodes=16, seed=1), name="test/sens-v0")


def test_tdp_noise_and_masks_are_not_replayable_from_the_seed():
    data = _toy()
    cfg = TDPConfig(noise_multiplier=1.0, sample_rate=0.5, rounds=2, local_batch=4, seed=3)
    a = train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg)
    b = train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg)
    assert not all(torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters()))
    ledger = Ledger(unit="trajectory", delta=1e-3).append(a.event)
    assert a.event.params["noise"] == "secure" and check_budget(ledger, 1e6) > 0
    cfg_r = TDPConfig(noise_multiplier=1.0, sample_rate=0.5, rounds=2, local_batch=4, seed=3, noise_seed=9)
    c = train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg_r)
    d = train_tdp_ensemble(data, GaussianEnsemble(2, 1, seed=0), cfg_r)
    assert all(torch.equal(p, q) for p, q in zip(c.model.parameters(), d.model.parameters()))
    ledger_r = Ledger(unit="trajectory", delta=1e-3).append(c.event)
    assert ledger_r.reproducible_noise and "not_dp" in ledger_r.card()
    with pytest.raises(PrivacyError):
        check_budget(ledger_r, 1e6)


@pytest.mark.slow
def test_release_metadata_holds_nothing_from_the_sensitive_info_extra(pendulum):
    """The bundled Pendulum data's info.extra holds its generator's seed and settings (enough to regenerate it)."""
    secret = pendulum.info.extra
    assert {"seed", "max_noise", "random_fraction"} <= set(secret)
    syn, ledger = pl.generate_outputs(pendulum, _tiny_cfg(), synthetic_id="test/syn-v0", episodes=3, horizon=4)
    out = pl.train_outputs(pendulum, _tiny_cfg(), dataset_id="test/sens-v0")
    assert ledger is not None and ledger.private
    released = {"info": syn.info.to_dict(), "config": out["config"], "history": out["history"],
                "card": ledger.card(), "ledger": ledger.to_dict()}
    text = json.dumps(released, default=str)
    for key in secret:
        if key != "behaviour":  # the generator's own "behaviour" key describes the DP generator
            assert f'"{key}"' not in json.dumps(syn.info.extra) and f'"{key}"' not in json.dumps(out["config"]["env"])
    assert secret["behaviour"] not in text
    assert syn.info.env_id == "Pendulum-v1" and syn.info.ref_max_score == pendulum.info.ref_max_score
    assert out["config"]["env"]["extra"] == {} and syn.info.name == "test/syn-v0" and not syn.info.sensitive
    assert all("sampled" not in h for h in out["history"]["model"])  # the realised Poisson batch size is not DP


def test_public_data_is_simulator_rollouts_not_sensitive_trajectories(pendulum, monkeypatch):
    seen = {}
    build = pl.build_model

    def spy(info, public, cfg, seed):
        seen["public"] = public
        return build(info, public, cfg, seed)

    real_train = pl.train_tdp_ensemble

    def spy_train(data, model, cfg, **kw):
        seen["k"] = len(data)
        return real_train(data, model, cfg, **kw)

    monkeypatch.setattr(pl, "build_model", spy)
    monkeypatch.setattr(pl, "train_tdp_ensemble", spy_train)
    run = pl.run_primorl(pendulum, _tiny_cfg())
    pub = seen["public"]
    sens_rows = {tuple(np.round(r, 5)) for r in pendulum.observations}
    assert not any(tuple(np.round(r, 5)) in sens_rows for r in pub.observations)  # nothing of D in the public data
    assert seen["k"] == pendulum.n_episodes  # every sensitive trajectory is protected by the accountant
    assert "public rollouts of Pendulum-v1" in run.ledger.public_data[0]
    split = pl.run_primorl(pendulum, pl.dataclasses.replace(_tiny_cfg(), public_source="split", public_fraction=0.25))
    assert any("covers only" in n for n in split.ledger.notes) and "NOT protected" in split.ledger.public_data[0]
    assert "covers only" in split.ledger.render_markdown()


def _evil(path):
    class Boom:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(path, "wb") as f:
        pickle.dump({"w0": Boom()}, f)


def test_loading_a_checkpoint_with_a_pickled_object_is_refused(tmp_path, capsys):
    from privsynth.methods.checkpoint import load_state_dict_file

    good = tmp_path / "good.pt"
    torch.save({"w": torch.ones(2)}, good)
    assert torch.equal(load_state_dict_file(good)["w"], torch.ones(2))
    bad = tmp_path / "model.pt"
    _evil(bad)
    with pytest.raises(InvalidData) as err:
        load_state_dict_file(bad)
    msg = str(err.value)
    assert str(bad) in msg and "\n" not in msg
    assert "pwned" not in capsys.readouterr().out
    # through the CLI: a run directory whose model.pt carries a pickled callable
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps({"ensemble": {"hidden": [4], "weight_decay": [0.0, 0.0]}, "obs_dim": 3,
                                                 "act_dim": 1, "env": {"env_id": "Pendulum-v1"},
                                                 "pessimism": {}, "sac": {"hidden": [4]}}))
    _evil(run / "model.pt")
    code = main(["primorl", "generate", "x", "test/evil-v0", "--from", str(run), "--epsilon-budget", "5"])
    out = capsys.readouterr()
    assert code == 2 and "pwned" not in out.out and str(run / "model.pt") in out.err


def test_kickstart_teacher_checkpoint_with_a_pickled_object_is_refused(tmp_path, capsys):
    from privsynth.methods.kickstart.experiments import SuiteConfig, load_teacher

    _evil(tmp_path / "teacher.pt")
    (tmp_path / "teacher.json").write_text("{}")
    with pytest.raises(InvalidData) as err:
        load_teacher(tmp_path, SuiteConfig(env_id="CartPole-v1"))
    assert str(tmp_path / "teacher.pt") in str(err.value) and "pwned" not in capsys.readouterr().out
