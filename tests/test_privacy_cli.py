"""`privsynth privacy epsilon|noise|card`: JSON output agrees with the library; bad input exits 2 in one line."""
from __future__ import annotations

import json

import pytest

from privsynth.cli import main
from privsynth.privacy import accounting as acc
from privsynth.privacy.ledger import Ledger, LedgerEvent


def test_epsilon_and_noise_json(capsys):
    assert main(["privacy", "epsilon", "--noise-multiplier", "1.1", "--sample-rate", "0.01", "--steps", "1000",
                 "--delta", "1e-5", "--accountant", "rdp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"epsilon", "delta", "noise_multiplier", "sample_rate", "steps", "accountant"}
    assert out["epsilon"] == pytest.approx(acc.dpsgd_epsilon(1.1, 0.01, 1000, 1e-5, "rdp"))
    assert main(["privacy", "noise", "--epsilon", "10", "--delta", "1e-5", "--sample-rate", "0.01", "--steps", "1000",
                 "--accountant", "rdp", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["epsilon"] <= 10 < acc.dpsgd_epsilon(out["noise_multiplier"] * 0.98, 0.01, 1000, 1e-5)


def test_bad_input_exits_2(capsys):
    code = main(["privacy", "epsilon", "--noise-multiplier", "1.1", "--sample-rate", "2", "--steps", "10",
                 "--delta", "1e-5"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "sample rate" in err


def test_card(tmp_path, capsys):
    led = Ledger(unit="trajectory").append(LedgerEvent.gaussian("stats", sigma=3.0, sensitivity=1.0,
                                                                unit="trajectory", noise="secure"))
    (tmp_path / "privacy_ledger.json").write_text(led.to_json())
    assert main(["privacy", "card", str(tmp_path), "--json"]) == 0
    card = json.loads(capsys.readouterr().out)
    assert card["unit"] == "trajectory" and card["epsilon"] == pytest.approx(led.epsilon())


def test_card_of_a_minari_dataset_folder(capsys):
    """`privacy card` takes the folder a release was written to (as its help says), not only its id."""
    from conftest import make_toy_dataset
    from privsynth.data import minari_io

    ds = make_toy_dataset()
    ds.info.privacy_card = {"epsilon": 4.0, "delta": 1e-5, "unit": "trajectory"}
    minari_io.write_dataset(ds, "carded-dir")
    folder = minari_io.target_path("carded-dir")
    assert main(["privacy", "card", str(folder), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == ds.info.privacy_card
    assert main(["privacy", "card", str(folder)]) == 0 and "(4, 1e-05)-DP" in capsys.readouterr().out
    minari_io.write_dataset(make_toy_dataset(), "plain-dir")
    assert main(["privacy", "card", str(minari_io.target_path("plain-dir"))]) == 2
    assert "carries no privacy card" in capsys.readouterr().err
