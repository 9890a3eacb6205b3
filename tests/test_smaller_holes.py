"""Issue 36, smaller holes.

1. ``synthesize --postprocess goals,walls`` that can keep no row failed only after the DP fine-tune had spent the
   budget, and nothing was kept without ``--workdir``: now refused before the fine-tune when no public row (public
   data, the pre-trained model's samples) survives the filters, and otherwise the fine-tuned model is saved through
   the release guard and the error says where and how to sample it again.
2. Bench cells wrote the time and memory of runs on the sensitive set among their published figures, and a registry
   cell with ``num_samples: 0`` saved ``model.ckpt`` without the guard: now those figures sit in a ``holder_only``
   section and every DP model a cell writes goes through the guard.
3. ``synthesize(pretrained=PATH)`` and ``privsynth finetune --model PATH`` never compared the checkpoint's public data
   with the sensitive set (the bench did): now by name and by the content its card records.
"""
from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import make_toy_dataset
from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
from privsynth.errors import BudgetExceeded, InvalidData, PrivacyError
from privsynth.release import load_synthesizer, synthesize
from privsynth.synth import TransitionSynthesizer
from test_transition_synth import tiny_config


def _maze(maze: str, seed: int, sensitive: bool = False, steps: int = 300):
    ds = generate_pointmaze(PointMazeConfig(maze=maze, steps=steps, seed=seed, ref_episodes=1), progress=False)
    return ds.mark_sensitive(sensitive)


@pytest.fixture(scope="module")
def sens():
    return _maze("umaze", 4, sensitive=True)


def _no_finetune(monkeypatch):
    def refuse(*a, **k):
        raise AssertionError("the DP fine-tune ran before the request was checked")

    monkeypatch.setattr(TransitionSynthesizer, "finetune", refuse)


# ------------------------------------------------------------------------ 1. post-processing that cannot reach -n
@pytest.mark.slow
def test_filters_keeping_no_public_row_are_refused_before_the_fine_tune(sens, monkeypatch):
    """Large-maze public data and its pre-trained model put every row inside the U-maze's walls or off its map: the
    request used to fail after the fine-tune ('kept 0 of 1281 sampled rows')."""
    _no_finetune(monkeypatch)
    with pytest.raises(InvalidData, match=r"keeps none of \d+ public rows .*before|keeps none of .*spent the budget"):
        synthesize(sens, public=[_maze("large", 5)], epsilon=5.0, delta=1e-3, n=64, config=tiny_config(),
                   progress=False, postprocess="goals,walls", out_dataset="pm-none")
    with pytest.raises(InvalidData, match="unknown post-processing steps"):  # names: before any data is read
        synthesize("no-such-dataset", public=["nor-this"], epsilon=5.0, delta=1e-3, postprocess="goals,wall")


@pytest.mark.slow
def test_postprocessing_failing_after_the_fine_tune_keeps_the_model(sens, monkeypatch, tmp_path):
    from privsynth.cli import main
    from privsynth.data import minari_io
    from privsynth.release import postprocess as post

    def kept_nothing(first, draw, n, **options):
        raise InvalidData(f"post-processing kept 0 of {20 * n + 1} sampled rows; stopped before {n}")

    real_topped_up = post.topped_up
    monkeypatch.setattr(post, "topped_up", kept_nothing)
    monkeypatch.chdir(tmp_path)
    public = _maze("umaze", 5)  # its rows pass the filters: the request is not refused up front
    with pytest.raises(InvalidData, match=r"kept 0 of 1281 .*saved at .*finetuned\.pt .*privsynth sample --model"):
        synthesize(sens, public=[public], epsilon=5.0, delta=1e-3, n=64, config=tiny_config(), progress=False,
                   postprocess="goals,walls", out_dataset="pm-kept")
    (saved,) = tmp_path.glob("*.finetuned.pt")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]  # the guard's temporary file is gone
    model = load_synthesizer(saved)
    assert model.ledger is not None and model.ledger.epsilon() <= 5.0
    monkeypatch.setattr(post, "topped_up", real_topped_up)
    assert main(["sample", "--model", str(saved), "-n", "40", "--out-dataset", "pm-resumed", "--quiet"]) == 0
    assert minari_io.load_dataset("pm-resumed").n_transitions == 40
    # with a work directory the stage file is the saved model: no second copy
    monkeypatch.setattr(post, "topped_up", kept_nothing)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidData, match=r"saved at .*wd/finetuned\.pt"):
        synthesize(sens, public=[public], epsilon=5.0, delta=1e-3, n=64, config=tiny_config(), progress=False,
                   postprocess="goals,walls", workdir=tmp_path / "wd")
    assert len(list(tmp_path.glob("*.finetuned.pt"))) == 1


# ------------------------------------------------------------------------ 2. bench cells
def _registry_cell(tmp_path, num_samples: int):
    from privsynth.evaluation.cells import synthesize_cell

    sets = {"pub": make_toy_dataset(lengths=(120, 120), seed=1, name="pub"),
            "sens": make_toy_dataset(lengths=(100, 100, 50), seed=2, name="sens", sensitive=True)}
    ctx = SimpleNamespace(dataset=sets.__getitem__, artifact_dir=tmp_path, cell_id="c", upstream=None)
    params = {"synthesizer": "privsyn", "epsilon": 1.0, "delta": 1e-5, "num_samples": num_samples, "seed": 0,
              "config": {"preset": "tiny"}, "data": {"public": ["pub"], "sensitive": "sens"}}
    return synthesize_cell(params, ctx)


def test_registry_cell_without_samples_saves_its_model_through_the_guard(tmp_path, monkeypatch):
    from privsynth.privacy import guard

    def over(*a, **k):
        raise BudgetExceeded("refusing to release: over the budget")

    monkeypatch.setattr(guard, "check_budget", over)
    with pytest.raises(BudgetExceeded):
        _registry_cell(tmp_path, num_samples=0)
    assert not (tmp_path / "model.ckpt").exists()


def test_cell_timings_of_the_sensitive_run_are_the_holders_own(tmp_path):
    from privsynth.evaluation.bench.tables import records_frame

    res = _registry_cell(tmp_path, num_samples=30)
    assert not {"finetune_seconds", "fit_seconds", "peak_rss_mb"} & set(res)
    assert {"finetune_seconds", "fit_seconds", "peak_rss_mb"} <= set(res["holder_only"])
    assert "pretrain_seconds" in res and "sample_seconds" in res  # public work stays where it was
    assert (tmp_path / "model.ckpt").exists()
    frame = records_frame([{"id": "c", "params": {"epsilon": 1.0}, "result": res, "seconds": 1.0}])
    assert frame["finetune_seconds"][0] == res["holder_only"]["finetune_seconds"]  # the holder's tables show them


# ------------------------------------------------------------------------ 3. pre-trained model vs sensitive set
def test_pretrained_public_data_is_compared_by_name_and_content(sens):
    from privsynth.release import check_pretrained_public

    named = SimpleNamespace(public_data=[sens.info.name])
    with pytest.raises(PrivacyError, match="pre-trained on 'pointmaze-umaze'"):
        check_pretrained_public(named, sens)
    split = make_toy_dataset(name="members", sensitive=True)
    split.info.extra["split"] = {"source": "whole", "part": "members"}
    with pytest.raises(PrivacyError, match="'whole'"):  # the set the sensitive part was split from
        check_pretrained_public(SimpleNamespace(public_data=["whole"]), split)
    made = {"name": "elsewhere", "generator": "privsynth.data.pointmaze",
            "config": {"maze": "umaze", "steps": 300, "seed": 4}}
    with pytest.raises(PrivacyError, match="same spec"):
        check_pretrained_public(SimpleNamespace(public_data=[]), sens, {"public_data": [made]})
    other = {**made, "config": {"maze": "umaze", "steps": 300, "seed": 5}}
    check_pretrained_public(SimpleNamespace(public_data=["pointmaze-open"]), sens, {"public_data": [other]})


def test_release_path_refuses_a_checkpoint_pretrained_on_the_sensitive_data(sens, monkeypatch, tmp_path):
    from privsynth.cli import main
    from privsynth.data import minari_io
    from privsynth.synth.pretrained import resolve_pretrained

    _no_finetune(monkeypatch)
    shipped = resolve_pretrained("pointmaze-umaze")
    folder = tmp_path / "m"
    folder.mkdir()
    shutil.copy(shipped, folder / "model.pt")
    card = json.loads((shipped.parent / "card.json").read_text())
    card["public_data"].append({"name": "my-copy", "generator": "privsynth.data.pointmaze",
                                "config": {"maze": "umaze", "steps": 300, "seed": 4}})
    (folder / "card.json").write_text(json.dumps(card))
    with pytest.raises(PrivacyError, match="refusing the pre-trained model: public dataset 'my-copy"):
        synthesize(sens, pretrained=folder / "model.pt", epsilon=5.0, delta=1e-3, n=8, progress=False)
    minari_io.write_dataset(sens, "pm-sensitive")
    code = main(["finetune", "--model", str(folder / "model.pt"), "--sensitive", "pm-sensitive", "--out",
                 str(tmp_path / "o.pt"), "--epsilon", "5", "--delta", "1e-3", "--quiet"])
    assert code == 2 and not (tmp_path / "o.pt").exists()
    with pytest.raises(AssertionError, match="fine-tune ran"):  # the shipped card's public data passes the check
        synthesize(sens, pretrained="pointmaze-umaze", epsilon=5.0, delta=1e-3, n=8, progress=False)


class _ProbeReached(Exception):
    """Raised by :func:`_spy_on_filter_probe` where the route calls the up-front filter probe."""


def _spy_on_filter_probe(monkeypatch) -> list[dict]:
    """Replace the route's filter probe with one that records its arguments and stops the release there."""
    from privsynth.release import salvage

    calls: list[dict] = []

    def spy(environment, steps, public, pretrained=None, **kw):
        calls.append({"steps": steps, "public": list(public), "pretrained": pretrained})
        raise _ProbeReached

    monkeypatch.setattr(salvage, "check_filters_can_keep", spy)
    return calls


def test_from_scratch_filter_probe_samples_no_untrained_model(sens, monkeypatch):
    """With no public data and nothing pre-trained, the up-front filter probe used to sample the untrained network:
    its noise fell in the U-maze's walls for one seed in two and the release was refused (--seed 1, stop 47)."""
    calls = _spy_on_filter_probe(monkeypatch)
    with pytest.raises(_ProbeReached):
        synthesize(sens, epsilon=5.0, delta=1e-3, n=64, config=tiny_config(), progress=False, postprocess="all",
                   obs_bounds=(-5.3, 5.3), reward_bounds=(0.0, 1.0), out_dataset="pm-scratch")
    assert [(c["public"], c["pretrained"]) for c in calls] == [([], None)]


def test_filter_probe_samples_a_given_model_only_when_it_has_weights(sens, monkeypatch):
    """The no-pre-training ablation gives the route a model holding public statistics and no weights; the up-front
    filter probe sampled it and the release failed ("no weights yet"; the Hopper ablation suite, stop 50). A given
    model with weights is still probed."""
    calls = _spy_on_filter_probe(monkeypatch)
    fresh = TransitionSynthesizer(tiny_config()).fit_public_stats([_maze("open", 5)])
    assert not fresh.has_trained_weights()
    with pytest.raises(_ProbeReached):
        synthesize(sens, pretrained=fresh, epsilon=5.0, delta=1e-3, n=16, progress=False, postprocess="all")
    assert calls[0]["pretrained"] is None
    monkeypatch.setattr(TransitionSynthesizer, "has_trained_weights", lambda self: True)
    with pytest.raises(_ProbeReached):
        synthesize(sens, pretrained=fresh, epsilon=5.0, delta=1e-3, n=16, progress=False, postprocess="all")
    assert calls[1]["pretrained"] is fresh


def test_from_scratch_maze_release_defaults_to_repairs_and_rollouts(sens, monkeypatch):
    """``postprocess="auto"`` without public data or a pre-trained model on PointMaze resolves to every repair plus
    rollouts (issue 37, seventh round); with public data it stays off (UMaze with public data cannot choose)."""
    from privsynth.release.postprocess import SCRATCH_MAZE_DEFAULT

    calls = _spy_on_filter_probe(monkeypatch)
    monkeypatch.setattr(TransitionSynthesizer, "pretrain", lambda self, *a, **k: None)
    with pytest.raises(_ProbeReached):
        synthesize(sens, epsilon=5.0, delta=1e-3, n=64, config=tiny_config(), progress=False,
                   obs_bounds=(-5.3, 5.3), reward_bounds=(0.0, 1.0), out_dataset="pm-scratch-auto")
    assert [c["steps"] for c in calls] == [SCRATCH_MAZE_DEFAULT]
    _no_finetune(monkeypatch)
    # with public data nothing is post-processed: no filter probe runs
    with pytest.raises((AssertionError, _ProbeReached)):
        synthesize(sens, public=[_maze("umaze", 5)], epsilon=5.0, delta=1e-3, n=64, config=tiny_config(),
                   progress=False, out_dataset="pm-public-auto")
    assert [c["steps"] for c in calls] == [SCRATCH_MAZE_DEFAULT]
