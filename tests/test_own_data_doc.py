"""docs/own_data.md is run as written (issue 39 item 8): its bash commands on a small generated cohort, with the
tiny preset and fewer rows so that the walk-through takes seconds."""
from __future__ import annotations

import re
import shlex
from pathlib import Path

import pandas as pd
import pytest

from conftest import load_script
from privsynth.cli import main
from privsynth.data import minari_io

ROOT = Path(__file__).resolve().parents[1]


def doc_commands() -> list[list[str]]:
    text = (ROOT / "docs" / "own_data.md").read_text(encoding="utf-8")
    lines = [ln.strip() for block in re.findall(r"```bash\n(.*?)```", text, flags=re.S) for ln in block.splitlines()]
    return [shlex.split(ln) for ln in lines if ln and not ln.startswith("#")]


@pytest.mark.slow  # about 15-30 s on 2 shared cores
def test_walkthrough_commands_run(tmp_path, monkeypatch, capsys):
    gen = load_script("make_icu_cohort")
    monkeypatch.chdir(tmp_path)
    commands = doc_commands()
    assert [c[:2] for c in commands] == [["python", "scripts/make_icu_cohort.py"], ["privsynth", "datasets"],
                                         ["privsynth", "synthesize"], ["privsynth", "privacy"],
                                         ["privsynth", "datasets"], ["privsynth", "evaluate"]]
    for cmd in commands:
        if cmd[0] == "python":
            assert gen.main(cmd[2:] + ["--patients", "30", "--max-len", "12"]) == 0
            continue
        args = cmd[1:]
        if args[0] == "synthesize":  # seconds, not minutes: the tiny preset and 300 rows
            args = [("300" if a == "5000" else a) for a in args] + ["--config", "tiny", "--quiet"]
        assert main(args) == 0, capsys.readouterr().err
    card = capsys.readouterr().out
    assert "DP normalisation statistics" in card and "trajectory" in card  # 1/16 of epsilon: a DP normaliser
    assert "verdict (for your eyes, never published): " in card  # evaluate's verdict
    syn = pd.read_csv(tmp_path / "icu_syn.csv")
    assert list(syn.columns[:2]) == ["patient_id", "hour"] and set(syn["ward"]) <= {"icu", "hdu", "general"}
    assert minari_io.load_dataset("icu-syn").info.schema is not None
