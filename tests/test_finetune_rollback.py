"""A DP fine-tune that fails part-way leaves the synthesizer exactly as before: parameters, EMA and ledger.

``dp_train`` restores the parameters it trained when it stops early, but the EMA (what is sampled and released) had
already averaged the unaccounted steps; the transition synthesizer now snapshots and restores the EMA and the ledger
too, on any exception up to and including the ledger append.
"""
from __future__ import annotations

import copy

import pytest
import torch

from privsynth.errors import PrivacyError
from privsynth.synth import TransitionSynthesizer
from test_transition_synth import public_data, sensitive_data, tiny_config

EPS, DELTA = 5.0, 1e-3


@pytest.fixture(scope="module")
def pretrained() -> TransitionSynthesizer:
    torch.manual_seed(0)
    cfg = tiny_config()
    cfg.finetune.ema_every = 1  # every DP step moves the EMA
    return TransitionSynthesizer(cfg).pretrain(public_data(), progress=False)


def _state(synth: TransitionSynthesizer) -> dict:
    ema = synth.ema
    return {
        "model": {k: v.clone() for k, v in synth.model.state_dict().items()},
        "grads": [None if p.grad is None else p.grad.clone() for p in synth.model.parameters()],
        "requires_grad": [p.requires_grad for p in synth.model.parameters()],
        "training": synth.model.training,
        "ema": {k: v.clone() for k, v in ema.shadow.state_dict().items()},
        "ema_counters": (ema.decay, ema.every, ema.warmup, ema.updates, ema.calls),
        "ledger": synth._ledger,
        "ledger_dict": synth._ledger.to_dict() if synth._ledger is not None else None,
        "history": len(synth.history),
    }


def _assert_same(before: dict, after: dict) -> None:
    assert before["model"].keys() == after["model"].keys()
    for k in before["model"]:
        assert torch.equal(before["model"][k], after["model"][k]), k  # bit-identical
    for k in before["ema"]:
        assert torch.equal(before["ema"][k], after["ema"][k]), k
    for a, b in zip(before["grads"], after["grads"]):
        assert (a is None and b is None) or torch.equal(a, b)
    assert before["requires_grad"] == after["requires_grad"] and before["training"] == after["training"]
    assert before["ema_counters"] == after["ema_counters"]
    assert after["ledger"] is before["ledger"] and after["ledger_dict"] == before["ledger_dict"]
    assert after["history"] == before["history"]


def _raise_after(synth: TransitionSynthesizer, monkeypatch, n: int, exc: BaseException) -> list[int]:
    """Make the fine-tune's EMA update raise on its (n+1)-th call, i.e. after n DP-SGD steps moved the EMA."""
    calls = []
    real_step = synth.ema.step

    def step(model):
        if len(calls) == n:
            raise exc
        calls.append(1)
        real_step(model)

    monkeypatch.setattr(synth.ema, "step", step)
    return calls


@pytest.mark.parametrize("exc", [RuntimeError("disk full"), KeyboardInterrupt()])
def test_failed_first_finetune_leaves_no_trace(pretrained, monkeypatch, exc):
    synth = copy.deepcopy(pretrained)
    before = _state(synth)
    assert before["ledger"] is None
    calls = _raise_after(synth, monkeypatch, 2, exc)
    with pytest.raises(type(exc)):
        synth.finetune(sensitive_data(), EPS, DELTA, progress=False)
    assert len(calls) == 2  # two steps really ran and moved the EMA before the failure
    _assert_same(before, _state(synth))
    assert synth.ledger is None


def test_failed_second_finetune_keeps_the_first_one(pretrained, monkeypatch):
    synth = copy.deepcopy(pretrained).finetune(sensitive_data(), EPS, DELTA, progress=False)
    before = _state(synth)
    assert len(before["ledger_dict"]["events"]) == 2  # the DP count of the units, then DP-SGD
    _raise_after(synth, monkeypatch, 2, RuntimeError("interrupted"))
    with pytest.raises(RuntimeError, match="interrupted"):
        synth.finetune(sensitive_data(), EPS, DELTA, progress=False)
    _assert_same(before, _state(synth))
    monkeypatch.undo()
    # and the synthesizer still works: a later fine-tune trains and is accounted as usual
    synth.finetune(sensitive_data(), EPS, DELTA, progress=False)
    assert len(synth.ledger.events) == 4  # each fine-tune: its DP count of the units, then DP-SGD


def test_refused_ledger_event_rolls_back_the_whole_run(pretrained):
    """A run that completes but whose event the ledger refuses (here: another privacy unit) is undone too."""
    synth = copy.deepcopy(pretrained).finetune(sensitive_data(), EPS, DELTA, progress=False)
    before = _state(synth)
    with pytest.raises(PrivacyError, match="unit"):
        synth.finetune(sensitive_data(), EPS, DELTA, unit="trajectory", progress=False)
    _assert_same(before, _state(synth))
