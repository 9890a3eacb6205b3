"""Fail fast and recover (issue 22, items 9-12): cheap checks run before any sensitive data is read or any training
starts; public data that is (or overlaps) the sensitive data is refused; damaged checkpoints and resume files give one
line naming the file, and --overwrite recovers; --store; help texts with defaults."""
from __future__ import annotations

import dataclasses

import pytest

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.synth import TransitionSynthesizer
from test_transition_synth import public_data, sensitive_data, tiny_config


@pytest.fixture
def no_training(monkeypatch):
    """Any training step fails the test: the checks under test must fire before."""

    def boom(*args, **kwargs):
        raise AssertionError("training started before a cheap check")

    monkeypatch.setattr(TransitionSynthesizer, "pretrain", boom)
    monkeypatch.setattr(TransitionSynthesizer, "finetune", boom)
    monkeypatch.setattr(TransitionSynthesizer, "fit_public_stats", boom)


@pytest.fixture
def stored():
    minari_io.write_dataset(public_data(), "pub")
    minari_io.write_dataset(sensitive_data(), "sens")


def synth_cli(*extra: str) -> list[str]:
    return ["synthesize", "--sensitive", "sens", "--public", "pub", "--epsilon", "5", "--delta", "1e-3",
            "--out-dataset", "out", "--config", "demo", "--quiet", *extra]


def test_output_exists_and_bad_n_fail_before_sensitive_data_is_read(stored, no_training, monkeypatch, capsys):
    minari_io.write_dataset(make_toy_dataset(), "out")

    def no_reads(*args, **kwargs):
        raise AssertionError("a dataset was read before the cheap checks")

    monkeypatch.setattr(minari_io, "load_dataset", no_reads)
    assert main(synth_cli()) == 2
    assert "already exists; pass --overwrite" in capsys.readouterr().err
    assert main(synth_cli("-n", "0", "--overwrite")) == 2
    assert "-n must be at least 1" in capsys.readouterr().err
    assert main(synth_cli("--overwrite", "--epsilon", "0")) == 2
    assert "epsilon" in capsys.readouterr().err


def test_budget_and_space_mismatches_fail_before_training(stored, no_training, capsys):
    assert main(synth_cli("--delta", "0.5")) == 2  # delta >= 1/N
    assert "delta" in capsys.readouterr().err
    wide = make_toy_dataset(obs_dim=5, name="wide")
    minari_io.write_dataset(wide, "wide")
    assert main(synth_cli("--public", "wide")) == 2
    assert "mismatched spaces" in capsys.readouterr().err


def test_sensitive_data_passed_as_public_is_refused(stored, no_training, capsys):
    assert main(synth_cli("--public", "sens")) == 2  # the same id
    assert "both public and sensitive" in capsys.readouterr().err
    copy = sensitive_data().mark_sensitive(False)
    minari_io.write_dataset(dataclasses.replace(copy, info=dataclasses.replace(copy.info, name="copy")), "copy")
    assert main(synth_cli("--public", "copy")) == 2  # the same content under another id
    assert "shares 360 transitions" in capsys.readouterr().err
    part = sensitive_data().select_episodes([3], name="part").mark_sensitive(False)  # partial overlap
    mixed = type(part).concatenate([public_data(), part])
    minari_io.write_dataset(dataclasses.replace(mixed, info=dataclasses.replace(mixed.info, name="mixed")), "mixed")
    assert main(synth_cli("--public", "pub,mixed")) == 2
    assert "shares 30 transitions" in capsys.readouterr().err


def test_corrupted_checkpoints_name_the_file_and_overwrite_recovers(stored, tmp_path, capsys):
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"\x80\x04not a checkpoint")
    assert main(["model", "finetune", "--model", str(bad), "--sensitive", "sens", "--out", str(tmp_path / "f.pt"),
                 "--epsilon", "5", "--delta", "1e-3", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert str(bad) in err and "corrupted or truncated" in err and len(err.strip().splitlines()) == 1
    existing = tmp_path / "exists.pt"
    existing.write_bytes(b"keep me")
    assert main(["model", "pretrain", "--public", "pub", "--out", str(existing), "--quiet"]) == 2
    assert "exists; pass --overwrite" in capsys.readouterr().err and existing.read_bytes() == b"keep me"
    work = tmp_path / "work"
    work.mkdir()
    (work / "finetuned.pt").write_bytes(b"truncated")
    assert main(synth_cli("--workdir", str(work))) == 2
    err = capsys.readouterr().err
    assert "finetuned.pt" in err and "corrupted or truncated" in err


@pytest.mark.slow
def test_resume_says_so_and_overwrite_discards_a_damaged_resume_file(stored, tmp_path, capsys):
    from privsynth.release import synthesize

    work = tmp_path / "work"
    work.mkdir()
    (work / "finetuned.pt").write_bytes(b"truncated")
    res = synthesize("sens", public=["pub"], epsilon=5.0, delta=1e-3, n=50, config=tiny_config(), out_dataset="o",
                     workdir=work, overwrite=True, progress=False)
    assert "discarded unreadable resume file" in capsys.readouterr().out and res.epsilon <= 5.0
    again = synthesize("sens", public=["pub"], epsilon=5.0, delta=1e-3, n=50, config=tiny_config(), out_dataset="o",
                       workdir=work, overwrite=True, progress=False)
    assert "resuming from" in capsys.readouterr().out
    assert again.ledger.to_dict() == res.ledger.to_dict()


def test_store_option_and_help_defaults(tmp_path, capsys):
    store = tmp_path / "store"
    minari_io.write_dataset(make_toy_dataset(), "elsewhere")  # in the default (test) store, not in --store
    assert main(["--store", str(store), "datasets", "list"]) == 0
    assert "elsewhere" not in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["synthesize", "--help"])
    out = capsys.readouterr().out
    assert "(default: 100000)" in out and "installed:" in out
    with pytest.raises(SystemExit):
        main(["datasets", "import", "--help"])
    assert "(default: npz)" not in capsys.readouterr().out  # import has no --format
    with pytest.raises(SystemExit):
        main(["datasets", "export", "--help"])
    assert "(default: npz)" in capsys.readouterr().out


def test_every_option_of_the_release_commands_has_help():
    import argparse

    from privsynth.cli import build_parser

    def parsers(parser, path=()):
        yield path, parser
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from parsers(sub, (*path, name))

    owned = {("synthesize",), ("sample",), ("pretrain",), ("finetune",), ("datasets", "import"),
             ("datasets", "export"), ("datasets", "make", "pointmaze"), ("datasets", "make", "locomotion"),
             ("privacy", "card"), ()}
    missing = [
        (" ".join(path), a.option_strings[-1])
        for path, p in parsers(build_parser()) if path in owned
        for a in p._actions
        if a.option_strings and not a.help and not isinstance(a, (argparse._HelpAction, argparse._VersionAction))
    ]
    assert not missing
