"""``privsynth demo``: bad option values are refused in one line before any work (no traceback after the data is made,
no older report removed)."""
from __future__ import annotations

import pytest

from privsynth import demo as demo_mod
from privsynth.cli import main


@pytest.mark.parametrize("bad", ["0", "-1", "two"])
def test_demo_threads_must_be_positive(bad, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(demo_mod, "run_demo", lambda cfg, progress=True: pytest.fail("the demo must not start"))
    with pytest.raises(SystemExit) as exc:
        main(["demo", "--out", str(tmp_path / "o"), "--threads", bad, "--quiet"])
    assert exc.value.code == 2
    assert "--threads: expected a positive count" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["--epsilon", "0"], "epsilon must be a positive finite number"),
    (["--epsilon", "nan"], "epsilon must be a positive finite number"),
    (["--delta", "1"], "delta must lie strictly between 0 and 1"),
    (["-n", "0"], "-n/--samples must be at least 1"),
    (["--sensitive-steps", "-5"], "--sensitive-steps must be at least 1"),
    (["--public-steps", "0"], "--public-steps must be at least 1"),
    (["--agent-updates", "0"], "--agent-updates must be at least 1"),
    (["--agents", "td3bc,dqn"], "unknown agent(s) dqn"),
])
def test_demo_refuses_bad_values_before_any_work(args, message, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(demo_mod, "run_demo", lambda cfg, progress=True: pytest.fail("the demo must not start"))
    old = tmp_path / "o" / "report.md"
    old.parent.mkdir()
    old.write_text("an older run's report")
    assert main(["demo", "--out", str(tmp_path / "o"), "--quiet", *args]) == 2
    assert message in capsys.readouterr().err
    assert old.exists() and not (tmp_path / "o" / "minari").exists()


def test_demo_accepts_agent_spellings_the_library_accepts(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(demo_mod, "run_demo", lambda cfg, progress=True: seen.setdefault("cfg", cfg))
    assert main(["demo", "--out", str(tmp_path / "o"), "--quiet", "--agents", "TD3+BC, iql", "--threads", "1"]) == 0
    assert seen["cfg"].agents == ("TD3+BC", "iql") and seen["cfg"].threads == 1
