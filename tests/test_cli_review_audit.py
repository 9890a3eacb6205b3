"""``privsynth audit``: options for attacks that will not run are refused in one line (they were silently ignored:
``--attacks pia`` with only ``--release`` audited with dcr alone, ``--reference DATA`` with only ``--checkpoint`` ran
no calibrated attack), before any data is read."""
from __future__ import annotations

import pytest

from privsynth.cli import main

CANDIDATES = ["--members", "nope-m", "--non-members", "nope-n"]


@pytest.mark.parametrize("target, extra, message", [
    (["--release", "nope-r"], ["--attacks", "pia"], "--attacks chooses the white-box attacks"),
    (["--release", "nope-r"], ["--reference-model", "pub.pt"], "--reference-model calibrates the white-box"),
    (["--checkpoint", "nope.pt"], ["--data-attacks", "dcr"], "--data-attacks chooses the data-only attacks"),
    (["--checkpoint", "nope.pt"], ["--reference", "public-v0"], "--reference public-v0 is reference data"),
])
def test_audit_refuses_options_of_attacks_that_do_not_run(target, extra, message, tmp_path, capsys):
    assert main(["audit", *target, *CANDIDATES, "--out", str(tmp_path / "a.json"), *extra]) == 2
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_audit_reference_pt_with_checkpoint_is_still_the_reference_model(tmp_path, capsys):
    # documented back-compatible form: a .pt given to --reference is --reference-model; it gets past the new check
    assert main(["audit", "--checkpoint", "nope.pt", *CANDIDATES, "--out", str(tmp_path / "a.json"),
                 "--reference", "pub.pt"]) == 2
    assert "no local dataset 'nope-m'" in capsys.readouterr().err


def test_audit_out_folder_gets_audit_json_inside(tmp_path):
    from privsynth.evaluation.mia.report import report_paths

    for out in (tmp_path / "new-folder", tmp_path):  # a path with no suffix, and an existing folder
        j, md, png = report_paths(out)
        assert (j, md, png) == (out / "audit.json", out / "audit.md", out / "audit-roc.png")
    assert report_paths(tmp_path / "x.json")[0] == tmp_path / "x.json"


@pytest.mark.parametrize("existing", ["audit.json", "audit.md", "audit-roc.png"])
def test_audit_refuses_an_earlier_audit_unless_overwrite(existing, tmp_path, capsys):
    """An earlier audit's JSON, report or plot is not silently replaced: refused before any data is read, accepted
    with --overwrite (which then gets as far as the missing data)."""
    (tmp_path / existing).write_text("earlier")
    argv = ["audit", "--release", "nope-r", *CANDIDATES, "--out", str(tmp_path)]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "exists (an earlier audit?)" in err and existing in err and "--overwrite" in err
    assert (tmp_path / existing).read_text() == "earlier"
    assert main(argv + ["--overwrite"]) == 2
    assert "earlier audit" not in capsys.readouterr().err
