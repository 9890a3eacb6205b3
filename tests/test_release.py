"""Release: the synthetic dataset carries its privacy card and ledger; the guard refuses over-budget or
non-private output and writes nothing then."""
from __future__ import annotations

import dataclasses
import json

import dp_accounting as dpa
import pytest
from dp_accounting.rdp import rdp_privacy_accountant

pytest.importorskip("privsynth.privacy.dpsgd")
minari_io = pytest.importorskip("privsynth.data.minari_io")

from privsynth.errors import BudgetExceeded, PrivacyError  # noqa: E402
from privsynth.privacy.ledger import Ledger  # noqa: E402
from privsynth.release import release_dataset, synthesize  # noqa: E402
from test_transition_synth import public_data, sensitive_data, tiny_config  # noqa: E402


@pytest.fixture(scope="module")
def result():
    return synthesize(
        sensitive_data(), public=[public_data()], epsilon=5.0, delta=1e-3, n=200, config=tiny_config(), progress=False
    )


def test_synthesize_writes_a_dataset_that_carries_its_card(tmp_path):
    res = synthesize(
        sensitive_data(),
        public=[public_data()],
        epsilon=5.0,
        delta=1e-3,
        n=300,
        config=tiny_config(),
        out_dataset="privsynth/toy-synthetic-v0",
        workdir=tmp_path / "work",
        progress=False,
    )
    back = minari_io.load_dataset("privsynth/toy-synthetic-v0")
    card = back.info.privacy_card
    assert card is not None and card["private"] is True and back.info.sensitive is False
    assert back.n_transitions == res.dataset.n_transitions
    assert card["epsilon"] <= 5.0 + 1e-9 and card["epsilon"] == pytest.approx(res.epsilon)
    # the stored ledger recomposes to the stated epsilon, and its fields recompute it independently
    ledger = Ledger.from_dict(card["ledger"])
    assert ledger.epsilon() == pytest.approx(card["epsilon"])
    ev = dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(card["sample_rate"], dpa.GaussianDpEvent(card["noise_multiplier"])), card["steps"]
    )
    # with the Laplace count of the units that set q and the steps (N is private under add/remove)
    count = next(e for e in card["events"] if e["mechanism"] == "laplace")
    assert count["sensitivity"] == 1.0 and '"n_units"' not in json.dumps(card)  # only the noisy count
    indep = rdp_privacy_accountant.RdpAccountant().compose(dpa.LaplaceDpEvent(count["scale"])).compose(ev)
    assert indep.get_epsilon(card["delta"]) == pytest.approx(card["epsilon"])
    assert card["public_data"] and card["normalizer"].startswith("public:")
    assert (tmp_path / "work" / "finetuned.pt").exists()
    dp = card["config"]["dp"]  # the config on the card is the run's, not the preset's defaults
    assert (dp["epsilon"], dp["delta"], dp["unit"]) == (5.0, 1e-3, "transition")


def test_guard_refuses_over_budget_and_writes_nothing(result):
    spent = result.ledger.epsilon()
    with pytest.raises(BudgetExceeded):
        release_dataset(result.dataset, result.ledger, "privsynth/over-budget-v0", epsilon_budget=spent / 2)
    assert not minari_io.dataset_exists("privsynth/over-budget-v0")


def test_release_refuses_missing_or_mismatched_card(result):
    bare = dataclasses.replace(result.dataset, info=dataclasses.replace(result.dataset.info, privacy_card=None))
    with pytest.raises(PrivacyError, match="no privacy card"):
        release_dataset(bare, result.ledger, None, epsilon_budget=100.0)
    other = Ledger(unit="transition", delta=1e-3)
    with pytest.raises(PrivacyError, match="does not match"):
        release_dataset(result.dataset, other, None, epsilon_budget=100.0)


def test_nonprivate_ablation_cannot_be_released():
    cfg = tiny_config(private=False)
    cfg.finetune.max_steps = 2
    with pytest.raises(PrivacyError, match="no-privacy"):
        synthesize(
            sensitive_data(), public=[public_data()], epsilon=5.0, delta=1e-3, n=50, config=cfg,
            out_dataset="privsynth/nonprivate-v0", progress=False,
        )
    assert not minari_io.dataset_exists("privsynth/nonprivate-v0")


def test_cli_synthesize_writes_a_carded_dataset(capsys):
    from privsynth.cli import main

    minari_io.write_dataset(public_data(), "privsynth/toy-public-v0")
    minari_io.write_dataset(sensitive_data(), "privsynth/toy-sensitive-v0")
    rc = main([
        "synthesize", "--public", "privsynth/toy-public-v0", "--sensitive", "privsynth/toy-sensitive-v0",
        "--epsilon", "8", "--delta", "1e-3", "-n", "100", "--out-dataset", "toy-cli",
        "--config", "demo", "--pretrain-epochs", "1", "--finetune-epochs", "1", "--quiet",
    ])
    assert rc == 0
    card = minari_io.load_dataset("privsynth/toy-cli-v0").info.privacy_card
    assert card["private"] and card["epsilon"] <= 8.0 + 1e-9 and card["delta"] == 1e-3
    assert "to privsynth/toy-cli-v0:" in capsys.readouterr().out  # the stored id, not the short name typed
    rc = main([
        "synthesize", "--public", "privsynth/toy-public-v0", "--sensitive", "privsynth/toy-sensitive-v0",
        "--epsilon", "8", "--delta", "0.5", "-n", "10", "--out-dataset", "privsynth/toy-cli-bad-v0", "--quiet",
    ])
    assert rc == 2 and "delta" in capsys.readouterr().err  # one-line error, nothing written
    assert not minari_io.dataset_exists("privsynth/toy-cli-bad-v0")
