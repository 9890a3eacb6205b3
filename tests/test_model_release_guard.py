"""A DP fine-tuned model is a release too: checkpoints go through the guard, and `privsynth sample` never takes its
budget from the ledger it is checking."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from privsynth.errors import BudgetExceeded
from privsynth.privacy.guard import guarded_save_model
from privsynth.privacy.ledger import Ledger, LedgerEvent


def _ledger(sigma: float) -> Ledger:
    led = Ledger(unit="transition", accountant="pld", delta=1e-5, public_data=["public"])
    return led.append(LedgerEvent.gaussian("stats", sigma=sigma, sensitivity=1.0, unit="transition", noise="secure"))


class StubModel:
    """What the CLI needs of a synthesizer; sampling must never be reached when the budget is refused."""

    def __init__(self, ledger: Ledger, history: list[dict]):
        self.ledger, self.history, self.template = ledger, history, None

    def save(self, path):
        Path(path).write_text("weights")
        return Path(path)

    def sample(self, *a, **k):  # pragma: no cover - reaching it is the failure
        raise AssertionError("sampled although the budget was refused")


def test_checkpoint_is_written_only_within_budget(tmp_path):
    model = StubModel(_ledger(sigma=1.0), [])
    spent = model.ledger.epsilon()
    with pytest.raises(BudgetExceeded):
        guarded_save_model(model, tmp_path / "m.pt", epsilon_budget=spent / 2)
    assert list(tmp_path.iterdir()) == []  # nothing written, not even a temporary file
    assert guarded_save_model(model, tmp_path / "m.pt", epsilon_budget=spent * 1.01).read_text() == "weights"


@pytest.mark.parametrize("history, needle", [
    ([{"phase": "finetune", "private": True}], "--budget"),  # no target recorded: the budget must be given
    ([{"phase": "finetune", "private": True, "target_epsilon": 0.1}], "over the budget"),  # ledger spends more
])
def test_sample_refuses_before_sampling(monkeypatch, capsys, history, needle):
    import privsynth.release
    import privsynth.synth.pretrained
    from privsynth.cli import main

    stub = StubModel(_ledger(sigma=1.0), history)
    monkeypatch.setattr(privsynth.synth.pretrained, "resolve_pretrained", lambda m: m)
    monkeypatch.setattr(privsynth.release, "load_synthesizer", lambda path: stub)
    code = main(["sample", "--model", "stub.pt", "-n", "10", "--out-dataset", "stub-release", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
