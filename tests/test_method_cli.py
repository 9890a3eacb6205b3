"""``privsynth method list | data | run``: the methods registry from one command (issue 38)."""
from __future__ import annotations

import json

from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.methods.registry import names


def test_list_names_every_registered_method(capsys):
    assert main(["method", "list", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [r["name"] for r in rows] == names() and all(r["unit"] for r in rows)


def test_data_then_run_releases_through_the_guard(tmp_path, capsys):
    assert main(["method", "data", "dp-apvi", "test/apvi-sensitive-v0", "--episodes", "50"]) == 0
    assert minari_io.load_dataset("test/apvi-sensitive-v0").info.sensitive
    out = tmp_path / "run"
    assert main(["method", "run", "dp-apvi", "--config", "tiny", "--sensitive", "test/apvi-sensitive-v0",
                 "--epsilon", "2", "--out", str(out), "--out-dataset", "test/apvi-dp-v0"]) == 0
    result = json.loads((out / "result.json").read_text())
    assert result["method"] == "dp-apvi" and result["private"] and result["epsilon"] <= 2.0
    released = minari_io.load_dataset("test/apvi-dp-v0")
    assert released.info.privacy_card["epsilon"] <= 2.0
    # outputs are refused before any data is read, unless --overwrite
    capsys.readouterr()
    assert main(["method", "run", "dp-apvi", "--config", "tiny", "--sensitive", "test/apvi-sensitive-v0",
                 "--epsilon", "2", "--out", str(out)]) == 2
    assert "pass --overwrite" in capsys.readouterr().err


def test_data_and_run_refuse_unknown_settings_in_one_line(capsys):
    assert main(["method", "data", "expert-svt", "test/x-v0", "--episodes", "3"]) == 2
    assert "takes no --episodes" in capsys.readouterr().err
    assert main(["method", "run", "dp-apvi", "--sensitive", "test/none-v0", "--set", "no_such=1"]) == 2
    err = capsys.readouterr().err
    assert "no_such" in err and err.count("\n") == 1
