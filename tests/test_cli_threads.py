"""The CLI's global ``--threads``: the command runs with that many torch threads, and they are restored after."""
from __future__ import annotations

import pytest
import torch

from privsynth import cli, threads


@pytest.fixture(autouse=True)
def two_threads():
    """Start from 2 torch threads (the suite may run with OMP_NUM_THREADS=1) so a restore is visible."""
    old = torch.get_num_threads()
    torch.set_num_threads(2)
    yield
    torch.set_num_threads(old)


def _with_probe(monkeypatch, seen: dict) -> None:
    real = cli.build_parser

    def build():
        parser = real()
        sub = next(a for a in parser._actions if a.dest == "command")
        p = sub.add_parser("probe")
        p.add_argument("--threads", type=int, default=None)  # as the demo's own option

        def func(args):
            seen["torch"] = torch.get_num_threads()
            seen["own"] = args.threads
            return 0

        p.set_defaults(func=func)
        return parser

    monkeypatch.setattr(cli, "build_parser", build)


def test_threads_count_applies_and_restores(monkeypatch):
    seen: dict = {}
    _with_probe(monkeypatch, seen)
    assert cli.main(["--threads", "1", "probe"]) == 0
    assert seen == {"torch": 1, "own": 1}
    assert torch.get_num_threads() == 2


def test_threads_auto_uses_idle_cores(monkeypatch):
    seen: dict = {}
    _with_probe(monkeypatch, seen)
    monkeypatch.setattr(threads, "idle_cores", lambda: 1)
    assert cli.main(["--threads", "auto", "probe"]) == 0
    assert seen["torch"] == 1


def test_command_option_wins_and_default_untouched(monkeypatch):
    seen: dict = {}
    _with_probe(monkeypatch, seen)
    assert cli.main(["--threads", "1", "probe", "--threads", "2"]) == 0
    assert seen["own"] == 2
    assert cli.main(["probe"]) == 0
    assert seen == {"torch": 2, "own": None}


@pytest.mark.parametrize("bad", ["0", "-1", "many"])
def test_threads_refuses_bad_values(bad, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--threads", bad, "demo", "--help"])
    assert e.value.code == 2
    assert "positive count or 'auto'" in capsys.readouterr().err


def test_busy_cores_stays_within_the_machine_when_iowait_steps_back(monkeypatch):
    """proc(5): iowait can go backwards; a step back read as idle < 0 and reported more busy cores than exist."""
    import io

    from privsynth import threads

    # user nice system idle iowait; 2 cpus. Second sample: total +100 ticks, idle +0, iowait -50 (a step back)
    stats = iter(["cpu 100 0 100 1000 500\ncpu0 x\ncpu1 x\n", "cpu 200 0 100 1000 450\ncpu0 x\ncpu1 x\n"])
    monkeypatch.setattr("builtins.open", lambda *a, **k: io.StringIO(next(stats)))
    monkeypatch.setattr(threads.time, "sleep", lambda s: None)
    assert threads.busy_cores(0.1) == 2.0
