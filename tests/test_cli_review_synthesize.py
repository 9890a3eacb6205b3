"""``privsynth synthesize --save-model FILE``: an existing FILE is refused unless --overwrite, before any data is read
(it was silently replaced after the release had been written)."""
from __future__ import annotations

from privsynth.cli import main

BASE = ["synthesize", "--config", "tiny", "--sensitive", "nope-sensitive", "--epsilon", "10", "-n", "10",
        "--out-dataset", "rel", "--quiet"]


def test_save_model_refuses_an_existing_file_before_any_work(tmp_path, capsys):
    model = tmp_path / "ft.pt"
    model.write_bytes(b"an earlier model")
    assert main([*BASE, "--save-model", str(model)]) == 2
    err = capsys.readouterr().err
    assert f"{model} exists; pass --overwrite to replace it" in err
    assert model.read_bytes() == b"an earlier model"


def test_save_model_refuses_a_directory(tmp_path, capsys):
    assert main([*BASE, "--save-model", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_save_model_with_overwrite_gets_past_the_check(tmp_path, capsys):
    model = tmp_path / "ft.pt"
    model.write_bytes(b"an earlier model")
    assert main([*BASE, "--save-model", str(model), "--overwrite"]) == 2
    assert "nope-sensitive" in capsys.readouterr().err  # the next refusal: the dataset is missing
