"""Ledger: JSON round trip, composition against dp-accounting, mixed composition, the card, the release guard."""
from __future__ import annotations

import json
import math

import dp_accounting as dpa
import pytest
import torch
from dp_accounting.rdp import rdp_privacy_accountant

from privsynth.errors import BudgetExceeded, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy.dpsgd import DPSGDConfig, dp_train
from privsynth.privacy.guard import check_budget, guarded_write
from privsynth.privacy.ledger import Ledger, LedgerEvent

TAGS = dict(unit="trajectory", noise="secure")  # every event entering a ledger says its unit and noise source


def _ledger(accountant="rdp") -> Ledger:
    led = Ledger(unit="trajectory", accountant=accountant, delta=1e-5, public_data=["pointmaze/open-v0"])
    led.append(LedgerEvent.dpsgd("fine-tune", noise_multiplier=1.0, sample_rate=0.01, steps=500, max_grad_norm=1.0,
                                 unit="trajectory", noise="secure"))
    led.append(LedgerEvent.gaussian("normaliser", sigma=4.0, sensitivity=1.0, count=2, **TAGS))
    return led


def test_json_round_trip():
    led = _ledger()
    led.append(LedgerEvent.zcdp("apvi", rho=0.05, **TAGS))
    led.append(LedgerEvent.laplace("counts", scale=10.0, sensitivity=1.0, **TAGS))
    led.append(LedgerEvent.approx_dp("svt", epsilon=0.3, delta=1e-7, **TAGS))
    text = led.to_json()
    json.loads(text)  # plain JSON
    back = Ledger.from_json(text)
    assert back.to_dict() == led.to_dict()
    assert back.epsilon() == pytest.approx(led.epsilon())
    assert [type(e.dp_event) for e in back.events] == [type(e.dp_event) for e in led.events]


def test_composition_matches_dp_accounting():
    led = _ledger()
    ref = rdp_privacy_accountant.RdpAccountant()
    ref.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(1.0)), 500))
    ref.compose(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(4.0), 2))
    assert led.epsilon() == pytest.approx(ref.get_epsilon(1e-5), rel=1e-6)
    # composing costs more than either event alone
    alone = acc.dpsgd_epsilon(1.0, 0.01, 500, 1e-5)
    assert led.epsilon() > alone


def test_mixed_composition_rules():
    led = _ledger("pld")
    led.append(LedgerEvent.zcdp("apvi", rho=0.02, **TAGS))  # PLD cannot take zCDP: RDP group
    led.append(LedgerEvent.approx_dp("svt", epsilon=0.5, delta=1e-6, **TAGS))  # basic composition
    eps, rule = led.compose()
    assert "pld" in rule and "rdp" in rule and "basic" in rule
    share = (1e-5 - 1e-6) / 2
    expected = (
        acc.events_epsilon([led.events[0].dp_event, led.events[1].dp_event], share, "pld")
        + acc.events_epsilon([led.events[2].dp_event], share, "rdp")
        + 0.5
    )
    assert eps == pytest.approx(expected, rel=1e-9)


def test_card_fields_and_markdown():
    card = _ledger().card()
    for key in ("unit", "neighbouring_relation", "accountant", "epsilon", "delta", "noise_multiplier",
                "max_grad_norm", "sample_rate", "steps", "public_data", "treated_as_public", "composition"):
        assert key in card
    assert card["unit"] == "trajectory" and "trajectory" in card["neighbouring_relation"]
    json.dumps(card)
    md = _ledger().render_markdown()
    assert "Privacy card" in md and "trajectory" in md


def test_unit_mismatch_is_refused():
    led = Ledger(unit="transition")
    with pytest.raises(PrivacyError):
        led.append(LedgerEvent.dpsgd("x", noise_multiplier=1.0, sample_rate=0.1, steps=10, max_grad_norm=1.0,
                                     unit="trajectory", noise="secure"))


def test_guard_refuses_over_budget_and_writes_nothing(tmp_path):
    led = _ledger()
    spent = led.epsilon()
    dest = tmp_path / "release" / "synthetic.npz"
    calls = []

    def write(p):
        calls.append(p)
        p.write_bytes(b"data")

    with pytest.raises(BudgetExceeded):
        guarded_write(dest, write, led, epsilon_budget=spent * 0.9)
    assert not dest.exists() and calls == []
    assert not any(tmp_path.rglob("*synthetic*"))
    assert guarded_write(dest, write, led, epsilon_budget=spent * 1.1) == dest
    assert dest.read_bytes() == b"data"
    with pytest.raises(BudgetExceeded):
        check_budget(led, spent * 0.99)


def test_guard_keeps_old_artifact_on_failure_and_attaches_ledger(tmp_path):
    led = _ledger()
    dest = tmp_path / "dataset"

    def write_dir(p):
        p.mkdir()
        (p / "data.txt").write_text("new")

    guarded_write(dest, write_dir, led, epsilon_budget=100.0)
    assert (dest / "data.txt").read_text() == "new"
    assert Ledger.from_json((dest / "privacy_ledger.json").read_text()).epsilon() == pytest.approx(led.epsilon())

    def failing(p):
        p.mkdir()
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError):
        guarded_write(dest, failing, led, epsilon_budget=100.0)
    assert (dest / "data.txt").read_text() == "new"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["dataset"]


class _SquareLoss(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).squeeze(-1) ** 2


def test_noise_free_training_can_never_be_released(tmp_path):
    res = dp_train(_SquareLoss(), (torch.randn(100, 3),),
                   DPSGDConfig(delta=1e-3, batch_size=10, epochs=0.2, noise_multiplier=0.0, grad_sample_mode="bk"))
    led = Ledger(delta=1e-3).append(res.event)
    assert math.isinf(led.epsilon())
    assert math.isinf(Ledger.from_json(led.to_json()).epsilon())
    with pytest.raises(BudgetExceeded):
        guarded_write(tmp_path / "x.bin", lambda p: p.write_bytes(b"x"), led, epsilon_budget=1e6)
    assert not any(tmp_path.iterdir())
