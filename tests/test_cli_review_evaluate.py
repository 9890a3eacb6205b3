"""``privsynth evaluate``: counts below 1 are refused in one line before any dataset is read (``--max-transitions 0``
was a ValueError traceback from the RL checks, exit status 1), and ``--seeds 0`` says why it is refused."""
from __future__ import annotations

import pytest

from privsynth.cli import main
from privsynth.commands._types import seed_list
from privsynth.errors import InvalidData


@pytest.mark.parametrize("flag", ["--max-transitions", "--max-rows", "--updates", "--eval-every", "--eval-episodes"])
def test_evaluate_refuses_counts_below_one_before_loading(flag, capsys):
    # the datasets do not exist: a check after loading would report them missing instead
    assert main(["evaluate", "--synthetic", "nope-a", "--real", "nope-b", flag, "0", "--no-tsne", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert f"privsynth: error: {flag} must be positive, got 0" in err
    assert "Traceback" not in err


def test_evaluate_seed_count_zero_names_the_count_rule():
    with pytest.raises(InvalidData, match="count of at least 1") as exc:
        seed_list("0", count=True)
    assert "'0,'" in str(exc.value)  # how to ask for seed 0 alone
    assert seed_list("0,", count=True) == [0]


@pytest.mark.parametrize("existing", ["report.json", "report.md", "report_tsne.png"])
def test_evaluate_refuses_an_earlier_report_unless_overwrite(existing, tmp_path, capsys):
    """An earlier run's report (or its markdown / t-SNE plot) is not silently replaced: refused before any dataset is
    read (the datasets here do not exist), accepted with --overwrite (which then fails on the missing data)."""
    (tmp_path / existing).write_text("earlier")
    argv = ["evaluate", "--synthetic", "nope-a", "--real", "nope-b", "--out", str(tmp_path), "--quiet"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "earlier report" in err and existing in err and "--overwrite" in err
    assert (tmp_path / existing).read_text() == "earlier"
    assert main(argv + ["--overwrite"]) == 2
    assert "earlier report" not in capsys.readouterr().err
