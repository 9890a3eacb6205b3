"""The ledger fails closed: every event entering it carries its noise-source tag and privacy unit, and an event
whose noise is not known to be secure (reproducible, missing or unknown tag) makes the ledger not private."""
from __future__ import annotations

import json
import math

import pytest

from privsynth.errors import BudgetExceeded, PrivacyError
from privsynth.privacy.guard import check_budget
from privsynth.privacy.ledger import Ledger, LedgerEvent
from privsynth.privacy.noise import NOT_DP_NOTE


def _gauss(**params) -> LedgerEvent:
    return LedgerEvent.gaussian("counts", sigma=5.0, sensitivity=1.0, **params)


def test_append_refuses_an_event_without_noise_tag():
    with pytest.raises(PrivacyError, match="noise-source tag"):
        Ledger(unit="transition").append(_gauss(unit="transition"))


def test_append_refuses_an_unknown_noise_tag():
    with pytest.raises(PrivacyError, match="unknown noise-source tag"):
        Ledger(unit="transition").append(_gauss(unit="transition", noise="os-entropy"))


def test_append_refuses_an_event_without_unit():
    with pytest.raises(PrivacyError, match="privacy unit"):
        Ledger(unit="transition").append(_gauss(noise="secure"))


def test_constructor_checks_its_events_too():
    with pytest.raises(PrivacyError):
        Ledger(unit="transition", events=[_gauss(unit="transition")])
    assert Ledger(unit="transition", events=[_gauss(unit="transition", noise="secure")]).private


def test_no_noise_tag_only_on_an_infinite_event():
    with pytest.raises(PrivacyError, match="finite epsilon"):
        Ledger(unit="expert").append(LedgerEvent.approx_dp("x", epsilon=1.0, unit="expert", noise="none"))
    led = Ledger(unit="expert").append(LedgerEvent.approx_dp("x", epsilon=math.inf, unit="expert", noise="none"))
    assert not led.private and not led.reproducible_noise  # not DP because ε = ∞ ...
    with pytest.raises(BudgetExceeded):  # ... which the guard reports as over budget
        check_budget(led, 1e6)


def test_secure_tagged_ledger_is_private_and_passes_the_guard():
    led = Ledger(unit="trajectory").append(_gauss(unit="trajectory", noise="secure"))
    assert led.private and not led.reproducible_noise and "not_dp" not in led.card()
    assert check_budget(led, 100.0) == pytest.approx(led.epsilon())


def test_reproducible_tag_is_not_private():
    led = Ledger(unit="trajectory").append(_gauss(unit="trajectory", noise="reproducible"))
    assert not led.private and led.reproducible_noise and led.card()["not_dp"] == NOT_DP_NOTE
    with pytest.raises(PrivacyError):
        check_budget(led, 100.0)


def _untagged_on_disk() -> str:
    """A ledger as written before every event carried a noise tag (same shape as committed old ledgers)."""
    good = Ledger(unit="transition").append(_gauss(unit="transition", noise="secure"))
    data = good.to_dict()
    del data["events"][0]["params"]["noise"]
    return json.dumps(data)


def test_old_untagged_ledger_loads_but_fails_closed():
    led = Ledger.from_json(_untagged_on_disk())
    assert len(led) == 1 and math.isfinite(led.epsilon())  # readable, ε recomputable
    assert not led.private and led.reproducible_noise
    assert led.untagged_events == ["counts"]
    card = led.card()
    assert "not recorded" in card["not_dp"] and "'counts'" in card["not_dp"]
    assert "not recorded" in led.render_markdown()
    with pytest.raises(PrivacyError):
        check_budget(led, 100.0)
    with pytest.raises(PrivacyError):  # and cannot be copied onto a fresh ledger either
        Ledger(unit="transition").extend(led.events)


def test_unknown_tag_read_from_disk_fails_closed():
    data = json.loads(_untagged_on_disk())
    data["events"][0]["params"]["noise"] = "Secure"
    led = Ledger.from_dict(data)
    assert not led.private and led.reproducible_noise


def test_tagged_ledger_round_trips_private():
    led = Ledger(unit="transition").append(_gauss(unit="transition", noise="secure"))
    back = Ledger.from_json(led.to_json())
    assert back.private and back.to_dict() == led.to_dict()
