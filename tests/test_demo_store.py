"""What the demo leaves in its Minari store: the sensitive set flagged sensitive (also after a re-run on a store of an
older demo), and the members / non-members split saved for a CLI audit."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.data import minari_io
from privsynth.data.pointmaze import PointMazeConfig
from privsynth.demo import DemoConfig, _datasets, _render, _store_split

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


def test_split_is_stored_sensitive_and_kept_when_unchanged():
    sensitive = make_toy_dataset(lengths=(5, 3, 7, 4, 6), sensitive=True, name="privsynth/sens-v0")
    ids = ("privsynth/m-v0", "privsynth/n-v0")
    cfg = DemoConfig(member_fraction=0.6, seed=0)
    parts = sensitive.split_episodes(cfg.member_fraction, seed=cfg.seed)
    lines: list[str] = []
    _store_split(parts, ids, "privsynth/sens-v0", cfg, lines.append)
    assert [ln.split(":")[0] for ln in lines] == [f"  wrote {i}" for i in ids]
    for dataset_id, part in zip(ids, parts):
        stored = minari_io.load_dataset(dataset_id)
        assert stored.info.sensitive and minari_io.describe(dataset_id)["sensitive"]
        np.testing.assert_array_equal(stored.observations, part.observations)
        assert stored.info.extra["split"]["source"] == "privsynth/sens-v0"
    lines = []
    _store_split(parts, ids, "privsynth/sens-v0", cfg, lines.append)
    assert lines == [f"  reusing {i}" for i in ids]
    # another split (another seed) replaces the stored one
    cfg = dataclasses.replace(cfg, seed=1)
    parts = sensitive.split_episodes(cfg.member_fraction, seed=cfg.seed)
    lines = []
    _store_split(parts, ids, "privsynth/sens-v0", cfg, lines.append)
    assert all("wrote" in ln for ln in lines)
    np.testing.assert_array_equal(minari_io.load_dataset(ids[0]).observations, parts[0].observations)


def test_report_names_the_stored_split(tmp_path):
    report = {
        "config": dataclasses.asdict(DemoConfig(store=None)), "seconds": {"total": 1.0}, "audit": {},
        "datasets": {"public": ["p"], "sensitive": "s", "synthetic": "privsynth/syn-v0",
                     "members": {"id": "privsynth/m-v0", "episodes": 4, "transitions": 40},
                     "non_members": {"id": "privsynth/n-v0", "episodes": 1, "transitions": 10}},
    }
    md = _render(report, "## Privacy card", tmp_path)
    assert "`privsynth/m-v0`" in md and "`privsynth/n-v0`" in md
    assert (f"privsynth --store {tmp_path / 'minari'} audit --release privsynth/syn-v0 --members privsynth/m-v0 "
            "--non-members privsynth/n-v0") in md
