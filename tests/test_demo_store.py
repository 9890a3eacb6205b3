"""What the demo leaves in its Minari store: the sensitive set flagged sensitive (also after a re-run on a store of an
older demo), and the members / non-members split saved for a CLI audit."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.data import minari_io
from privsynth.data.pointmaze import PointMazeConfig
from privsynth.demo import DemoConfig, _datasets, _split_sensitive, _store_part
from privsynth.demo_report import render_report

JOBS = [(f"privsynth/t-{maze}-v0", PointMazeConfig(maze=maze, steps=300, seed=i, ref_episodes=1))
        for i, maze in enumerate(("open", "umaze"))]
SENSITIVE = frozenset({"privsynth/t-umaze-v0"})


@pytest.mark.parametrize("workers", [1, 2])
def test_sensitive_set_is_stored_flagged_and_reused(workers):
    lines: list[str] = []
    public, sensitive = _datasets(JOBS, workers, False, lines.append, sensitive=SENSITIVE)
    assert public.info.sensitive is False and sensitive.info.sensitive is True
    assert not minari_io.describe("privsynth/t-open-v0")["sensitive"]
    assert minari_io.describe("privsynth/t-umaze-v0")["sensitive"]
    assert minari_io.load_dataset("privsynth/t-umaze-v0").info.sensitive is True  # read back with its flag
    lines = []
    again = _datasets(JOBS, workers, False, lines.append, sensitive=SENSITIVE)
    assert lines == [f"  reusing {i}" for i, _ in JOBS]
    assert again[1].info.sensitive is True
    np.testing.assert_array_equal(again[1].observations, sensitive.observations)


def test_rerun_on_an_older_store_flags_the_sensitive_set():
    _, sensitive = _datasets(JOBS, 1, False, lambda _: None)  # as the demo wrote it before: unflagged
    assert not minari_io.describe("privsynth/t-umaze-v0")["sensitive"]
    lines: list[str] = []
    _, again = _datasets(JOBS, 1, False, lines.append, sensitive=SENSITIVE)
    assert "  flagged privsynth/t-umaze-v0 sensitive in the store" in lines
    assert again.info.sensitive and minari_io.describe("privsynth/t-umaze-v0")["sensitive"]
    np.testing.assert_array_equal(again.observations, sensitive.observations)


def split_and_store(sensitive, ids, cfg, log):
    """The demo's split, its parts written as the demo's child process writes them."""
    members, non_members, to_store = _split_sensitive(sensitive, ids, "privsynth/sens-v0", cfg, log)
    for dataset_id, part in to_store:
        log(_store_part(dataset_id, part))
    return members, non_members


def test_split_is_stored_sensitive_and_kept_when_unchanged():
    sensitive = make_toy_dataset(lengths=(5, 3, 7, 4, 6), sensitive=True, name="privsynth/sens-v0")
    ids = ("privsynth/m-v0", "privsynth/n-v0")
    cfg = DemoConfig(member_fraction=0.6, seed=0)
    lines: list[str] = []
    parts = split_and_store(sensitive, ids, cfg, lines.append)
    assert [ln.split(":")[0] for ln in lines] == [f"  wrote {i}" for i in ids]
    for dataset_id, part in zip(ids, parts):
        stored = minari_io.load_dataset(dataset_id)
        assert stored.info.sensitive and minari_io.describe(dataset_id)["sensitive"]
        np.testing.assert_array_equal(stored.observations, part.observations)
        assert stored.info.extra["split"]["source"] == "privsynth/sens-v0"
        assert stored.info.extra["split"]["by"] == "transition"  # the demo's unit
    lines = []
    assert split_and_store(sensitive, ids, cfg, lines.append) and lines == [f"  reusing {i}" for i in ids]
    # another split (another seed, or an older demo's split by episode) replaces the stored one
    for cfg in (dataclasses.replace(cfg, seed=1), dataclasses.replace(cfg, seed=1, unit="trajectory")):
        lines = []
        parts = split_and_store(sensitive, ids, cfg, lines.append)
        assert len(lines) == 2 and all("wrote" in ln for ln in lines)
        np.testing.assert_array_equal(minari_io.load_dataset(ids[0]).observations, parts[0].observations)
    assert minari_io.load_dataset(ids[0]).info.extra["split"]["by"] == "episode"


def test_report_names_the_stored_split_and_the_audit_command(tmp_path):
    command = (f"privsynth --store {tmp_path / 'minari'} audit --release privsynth/syn-v0 --checkpoint w/finetuned.pt "
               "--members privsynth/m-v0 --non-members privsynth/n-v0 --seed 0 --out a.json")
    report = {
        "config": dataclasses.asdict(DemoConfig(store=None)), "seconds": {"total": 1.0},
        "audit": {"dcr": {"auc": 0.5, "tpr_at_fpr": {"0.01": 0.01}, "config": {"access": "data-only"},
                          "epsilon_test": {"epsilon_lower_bound": 0.0, "correct": 9, "guesses": 20}}},
        "epsilon_audit": {"status": "consistent", "line": "consistent with the claimed ε = 10", "notes": []},
        "audit_command": command,
        "datasets": {"public": ["p"], "sensitive": "s", "synthetic": "privsynth/syn-v0",
                     "members": {"id": "privsynth/m-v0", "episodes": 4, "transitions": 40},
                     "non_members": {"id": "privsynth/n-v0", "episodes": 4, "transitions": 10},
                     "split": {"by": "transition", "fraction": 0.8, "seed": 0}},
    }
    md = render_report(report, "## Privacy card", tmp_path)
    assert "`privsynth/m-v0`" in md and "`privsynth/n-v0`" in md and "split of the sensitive set by transition" in md
    assert f"`{command}`" in md
    assert "consistent with the claimed ε = 10" in md and "| dcr | data-only | 0.500 |" in md
