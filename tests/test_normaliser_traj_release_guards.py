"""Guards of the DP normalisers, the trajectory path and the release pipeline (from an adversarial review).

* A DP normaliser fitted on sensitive data after a synthesizer's ledger exists (a refit before sampling
  or before a second fine-tune) was never charged: ``_open_ledger`` appends the normaliser's event only when it
  creates the ledger, so the samples were shaped by an ε the card, the ledger and the guard never saw.
* ``release.synthesize(workdir=...)`` wrote the DP fine-tuned stage checkpoint (``finetuned.pt``, a release: the
  weights were trained on the sensitive data) with a plain ``save``: over the budget (a ``pretrained`` synthesizer
  that had already spent part of it) or not DP at all (reproducible noise), it stayed on disk after the dataset was
  refused.
* ``OfflineDataset.concatenate`` cleared the sensitive flag when a public part came first, so a normaliser or
  pre-training on [public, sensitive] passed as public; ``synthesize-traj`` took a copy of the sensitive set as
  ``--public`` (``synthesize`` refused it).
"""
from __future__ import annotations

import dataclasses

import pytest
import torch

from conftest import make_toy_dataset
from privsynth.errors import BudgetExceeded, PrivacyError
from privsynth.release import release_dataset, synthesize
from privsynth.synth import TransitionSynthesizer
from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config as traj_tiny_config
from test_transition_synth import public_data, sensitive_data, tiny_config


def _traj_sens():
    return make_toy_dataset(lengths=(9, 8, 10, 9, 8, 10, 9, 8), seed=2, sensitive=True, name="sens")


def _traj_synth() -> TrajectorySynthesizer:
    cfg = traj_tiny_config()
    cfg.pretrain_curiosity = False
    cfg.dp.accountant = "rdp"
    return TrajectorySynthesizer(cfg)


def _traj_fine_tuned() -> tuple:
    """A PrivORL-j synthesizer with a DP normaliser (ε 1) and a DP fine-tune (ε 3): its ledger is open."""
    torch.manual_seed(0)
    sens = _traj_sens()
    synth = _traj_synth()
    synth.fit_dp_normalizer(sens, low=-10, high=10, epsilon=1.0, delta=1e-3, unit="trajectory", accountant="rdp")
    synth.finetune(sens, 3.0, 1e-3, "trajectory", progress=False)
    return sens, synth


def test_traj_dp_normaliser_refit_after_the_ledger_exists_is_charged():
    sens, synth = _traj_fine_tuned()
    before = synth.ledger.epsilon()
    assert len(synth.ledger.events) == 2
    # refit on the sensitive data with a large budget, then sample: the release depends on the new statistics
    synth.fit_dp_normalizer(sens, low=-10, high=10, epsilon=50.0, delta=1e-3, unit="trajectory", accountant="rdp")
    assert len(synth.ledger.events) == 3 and synth.ledger.epsilon() > 50.0 > before
    ds = synth.sample(3)
    with pytest.raises(BudgetExceeded):
        release_dataset(ds, synth.ledger, None, epsilon_budget=4.0, delta=1e-3)
    # a second fine-tune does not charge it twice
    synth.finetune(sens, 1.0, 1e-3, "trajectory", progress=False)
    assert sum(ev is synth.normalizer_event for ev in synth.ledger.events) == 1


def test_traj_dp_normaliser_refused_by_the_ledger_leaves_the_old_normaliser():
    sens, synth = _traj_fine_tuned()
    kept = synth.normalizer
    with pytest.raises(PrivacyError):  # a transition-unit event cannot enter a trajectory ledger
        synth.fit_dp_normalizer(sens, low=-10, high=10, epsilon=1.0, delta=1e-3, unit="transition")
    assert synth.normalizer is kept and len(synth.ledger.events) == 2


@pytest.mark.parametrize("case", ["over budget", "reproducible noise"])
def test_workdir_stage_checkpoint_goes_through_the_guard(case, tmp_path):
    torch.manual_seed(0)
    sens = sensitive_data()
    cfg = tiny_config(noise_seed=7) if case == "reproducible noise" else tiny_config()
    pre = TransitionSynthesizer(cfg).pretrain(public_data(), progress=False)
    if case == "over budget":  # this model already spent eps 4 on the data: fine-tuning at 5 more exceeds 5
        pre.finetune(sens, 4.0, 1e-3, "transition", progress=False)
    with pytest.raises(PrivacyError):  # BudgetExceeded is a PrivacyError
        synthesize(sens, epsilon=5.0, delta=1e-3, pretrained=pre, n=16, workdir=tmp_path / "work", progress=False,
                   out_dataset="privsynth/stage-guard-v0", overwrite=True)
    assert not (tmp_path / "work" / "finetuned.pt").exists()
    work = tmp_path / "work"
    assert not work.exists() or not [p for p in work.iterdir() if p.name.startswith(".")]  # no temporary left


def test_workdir_stage_checkpoint_within_budget_is_written(tmp_path):
    torch.manual_seed(0)
    pre = TransitionSynthesizer(tiny_config()).pretrain(public_data(), progress=False)
    res = synthesize(sensitive_data(), epsilon=5.0, delta=1e-3, pretrained=pre, n=16, workdir=tmp_path / "work",
                     progress=False)
    back = TransitionSynthesizer.load(tmp_path / "work" / "finetuned.pt")
    assert back.ledger.to_dict() == res.ledger.to_dict() and back.ledger.epsilon() <= 5.0 + 1e-9


def test_transition_dp_normaliser_refit_after_the_ledger_exists_is_charged():
    """The same refit on PrivORL-n (the base class charges it, not only the trajectory synthesizer)."""
    torch.manual_seed(0)
    sens = sensitive_data()
    synth = TransitionSynthesizer(tiny_config())
    synth.fit_dp_normalizer(sens, low=-10, high=10, epsilon=1.0, delta=1e-3, unit="transition", accountant="rdp")
    synth.finetune(sens, 3.0, 1e-3, "transition", progress=False)
    n_events = len(synth.ledger.events)
    synth.fit_dp_normalizer(sens, low=-10, high=10, epsilon=50.0, delta=1e-3, unit="transition", accountant="rdp")
    assert len(synth.ledger.events) == n_events + 1 and synth.ledger.epsilon() > 50.0
    with pytest.raises(BudgetExceeded):
        release_dataset(synth.sample(8), synth.ledger, None, epsilon_budget=4.0, delta=1e-3)


def test_concatenating_a_sensitive_part_keeps_the_flag():
    from privsynth.data import OfflineDataset
    from privsynth.data.normalize import Normalizer

    pub = make_toy_dataset(lengths=(5, 5), seed=1, name="pub")
    sens = make_toy_dataset(lengths=(5, 5), seed=2, sensitive=True, name="sens")
    both = OfflineDataset.concatenate([pub, sens])
    assert both.info.sensitive
    assert OfflineDataset.concatenate([pub, sens], info=pub.info).info.sensitive  # not cleared by a public info
    assert not OfflineDataset.concatenate([pub, pub]).info.sensitive
    with pytest.raises(PrivacyError):
        Normalizer.fit_public(both)


def test_synthesize_traj_refuses_a_copy_of_the_sensitive_set_as_public(capsys):
    from privsynth.cli import main
    from privsynth.data import minari_io

    sens = make_toy_dataset(lengths=(9, 8, 10, 9, 8, 10, 9, 8), seed=2, name="sens")
    minari_io.write_dataset(sens, "privsynth/sens-v0")
    copy = dataclasses.replace(sens, info=dataclasses.replace(sens.info, name="privsynth/copy-v0"))
    minari_io.write_dataset(copy, "privsynth/copy-v0")
    rc = main(["synthesize-traj", "--sensitive", "privsynth/sens-v0", "--public", "privsynth/copy-v0", "--config",
               "tiny", "--epsilon", "5", "--delta", "1e-3", "--out", "privsynth/out-v0", "--quiet"])
    assert rc == 2 and "shares" in capsys.readouterr().err
    assert "privsynth/out-v0" not in minari_io.list_datasets()


@pytest.mark.parametrize("option", [{"normalizer_epsilon": 1.0}, {"obs_bounds": (-5.0, 5.0)},
                                    {"reward_bounds": (0.0, 1.0)}])
def test_privorl_n_only_options_are_refused_for_other_synthesizers(option):
    from privsynth.errors import InvalidData

    with pytest.raises(InvalidData, match="privorl-n only"):
        synthesize(_traj_sens(), public=[make_toy_dataset(lengths=(9, 8), seed=1, name="pub")], synth="privorl-j",
                   preset="tiny", epsilon=5.0, delta=1e-3, unit="trajectory", n=4, progress=False, **option)
