"""Command-line options that sit between commands: the global --store reaching the demo, the demo's member fraction,
and evaluate's --seeds as a count or a list."""
from __future__ import annotations

import pytest

from privsynth import demo as demo_mod
from privsynth.cli import build_parser, main
from privsynth.commands._types import seed_list
from privsynth.errors import InvalidData


def test_global_store_reaches_the_demo(monkeypatch, tmp_path):
    seen = {}
    monkeypatch.setattr(demo_mod, "run_demo", lambda cfg, progress=True: seen.setdefault("cfg", cfg))
    assert main(["--store", str(tmp_path / "s"), "demo", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert seen["cfg"].store == str(tmp_path / "s")  # an unset demo --store no longer masks the global one
    seen.clear()
    assert main(["demo", "--out", str(tmp_path / "o"), "--store", str(tmp_path / "own"), "--quiet",
                 "--member-fraction", "0.6"]) == 0
    assert seen["cfg"].store == str(tmp_path / "own") and seen["cfg"].member_fraction == 0.6
    seen.clear()
    assert main(["demo", "--out", str(tmp_path / "o"), "--quiet"]) == 0
    assert seen["cfg"].store is None and seen["cfg"].member_fraction == demo_mod.DemoConfig().member_fraction


@pytest.mark.parametrize("fraction", ["0", "1", "1.5", "nan"])
def test_demo_refuses_bad_member_fraction_before_any_work(fraction, tmp_path, capsys):
    old = tmp_path / "o" / "report.md"
    old.parent.mkdir()
    old.write_text("an older run's report")
    assert main(["demo", "--out", str(tmp_path / "o"), "--quiet", "--member-fraction", fraction]) == 2
    assert "split fraction must be in (0, 1)" in capsys.readouterr().err
    assert old.exists() and not (tmp_path / "o" / "minari").exists()  # nothing removed, nothing generated


def test_evaluate_seeds_count_or_list():
    assert seed_list("3", count=True) == [0, 1, 2]
    assert seed_list("0,4,7", count=True) == [0, 4, 7]
    assert seed_list("5,", count=True) == [5]
    for bad in ("0", "-2", "a", "1,1", ","):
        with pytest.raises(InvalidData, match="--seeds"):
            seed_list(bad, count=True)
    assert build_parser().parse_args(["evaluate", "--synthetic", "a", "--real", "b"]).seeds == "3"
