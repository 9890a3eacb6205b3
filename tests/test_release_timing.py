"""How long a phase that read sensitive data took is measured outside any mechanism (review F5): a released checkpoint
(``guarded_save_model``, invariant 3) carries no ``seconds*`` entry of its private phases, as the card does not. The
in-memory history keeps them for reports, public phases keep theirs, and the released model still loads, cards and
samples."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.privacy.guard import guarded_save_model
from privsynth.release.guarded import release_dataset
from privsynth.synth import registry
from privsynth.synth.checkpoint import load_weights_only

EPS, DELTA = 5.0, 1e-3


def _timings(phases: list[dict]) -> list[str]:
    """``phase/key`` of every timing entry of a phase that read sensitive data (marked private, or a fine-tune)."""
    return [f"{ph.get('phase')}/{k}" for ph in phases if ph.get("private") or ph.get("phase") == "finetune"
            for k in ph if "seconds" in k]


def _privorl_n():
    from privsynth.synth import TransitionSynthesizer
    from test_transition_synth import public_data, sensitive_data, tiny_config

    torch.manual_seed(0)
    synth = TransitionSynthesizer(tiny_config()).pretrain(public_data(), progress=False)
    return synth.finetune(sensitive_data(), EPS, DELTA, "transition", progress=False)


def test_guarded_checkpoint_of_a_dp_finetune_has_no_private_timings(tmp_path):
    synth = _privorl_n()
    assert _timings(synth.history)  # the synthesizer's own history keeps them (reports)
    path = guarded_save_model(synth, tmp_path / "released.pt", EPS, DELTA)
    state = load_weights_only(path)
    assert [ph["phase"] for ph in state["history"]] == ["pretrain", "finetune"]
    assert _timings(state["history"]) == []
    assert any("seconds" in k for k in state["history"][0])  # public pre-training keeps its timings
    assert state["history"][1]["steps"] == synth.history[-1]["steps"]  # only timings are dropped

    loaded = type(synth).load(path)
    card = loaded.card()
    assert card["private"] and card["ledger"] == synth.ledger.to_dict() and _timings(card["phases"]) == []
    ds = loaded.sample(32, seed=1)
    np.testing.assert_array_equal(ds.transition_matrix(), synth.sample(32, seed=1).transition_matrix())
    assert release_dataset(ds, loaded.ledger, None, epsilon_budget=EPS, delta=DELTA) <= EPS * (1 + 1e-9)


def test_baseline_finetune_timings_stay_out_of_card_and_checkpoint(tmp_path):
    """A baseline's fine-tune phase is not flagged ``private`` but read the sensitive data all the same."""
    synth = registry.make("privsyn", preset="tiny")
    pub = make_toy_dataset(lengths=(100, 100), seed=1, name="pub")
    sens = make_toy_dataset(lengths=(30,) * 12, seed=2, sensitive=True, name="sens")
    registry.fit(synth, sens, public=pub, epsilon=EPS, delta=DELTA, unit="transition")
    assert _timings(synth.history)
    path = guarded_save_model(synth, tmp_path / "privsyn.json", EPS, DELTA)
    loaded = type(synth).load(path)
    assert _timings(loaded.history) == [] and _timings(synth.card()["phases"]) == []
    assert loaded.sample(16, seed=0).n_transitions == 16
