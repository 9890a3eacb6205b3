"""A release as its users load it (issue 22, DESIGN invariant 8): plain Minari without privsynth, d3rlpy's
``get_minari``, and the documented d3rlpy conversion, on a release of a UMaze run pre-trained on open-maze data."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from privsynth.data import minari_io
from privsynth.data.pointmaze import PointMazeConfig, eval_env_spec, generate_pointmaze
from privsynth.release import synthesize
from test_transition_synth import tiny_config

RELEASE = "privsynth/umaze-synthetic-v0"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "datasets.md"

PLAIN_MINARI = r"""
import json, sys
import minari
import numpy as np

ds = minari.load_dataset(sys.argv[1])
meta = ds.storage.metadata
env = ds.recover_environment()
eval_env = ds.recover_environment(eval_env=True)
rows = {k: [] for k in ("s", "a", "r", "s2", "term", "trunc")}
for ep in ds.iterate_episodes():
    o = np.concatenate([ep.observations["observation"], ep.observations["desired_goal"]], axis=1)
    t = len(ep.rewards)
    assert ep.terminations[-1] or ep.truncations[-1], "an episode ends in neither a termination nor a truncation"
    rows["s"].append(o[:t]); rows["s2"].append(o[1:]); rows["a"].append(ep.actions); rows["r"].append(ep.rewards)
    rows["term"].append(ep.terminations); rows["trunc"].append(ep.truncations)
np.savez(sys.argv[2], **{k: np.concatenate(v) for k, v in rows.items()})
print(json.dumps({
    "privsynth_imported": any(m.startswith("privsynth") for m in sys.modules),
    "env_id": env.spec.id, "eval_env_id": eval_env.spec.id, "maze_map": eval_env.spec.kwargs.get("maze_map"),
    "ref": [meta.get("ref_min_score"), meta.get("ref_max_score")],
    "episodes": ds.total_episodes, "steps": ds.total_steps,
    "some": len(list(ds.iterate_episodes([0, 1, 2]))), "sampled": len(ds.sample_episodes(2)),
    "epsilon": meta["privacy_card"]["epsilon"], "unit": meta["privacy_card"]["unit"],
    "description": meta["description"],
    "obs_space_matches_env": ds.observation_space == eval_env.observation_space,
}))
"""


@pytest.fixture(scope="module")
def release(tmp_path_factory):
    """(store, sensitive dataset, released dataset as privsynth reads it): public = open maze, sensitive = UMaze."""
    store = tmp_path_factory.mktemp("store")
    mp = pytest.MonkeyPatch()
    mp.setenv("MINARI_DATASETS_PATH", str(store))
    try:
        minari_io.write_dataset(
            generate_pointmaze(PointMazeConfig(maze="open", steps=400, seed=1, ref_episodes=1), progress=False), "open"
        )
        sensitive = generate_pointmaze(PointMazeConfig(maze="umaze", steps=400, seed=2, ref_episodes=1),
                                       progress=False)
        minari_io.write_dataset(sensitive, "umaze")
        synthesize("umaze", public=["open"], epsilon=8.0, delta=1e-3, n=60, config=tiny_config(),
                   out_dataset=RELEASE, progress=False)
        released = minari_io.load_dataset(RELEASE)
    finally:
        mp.undo()
    return store, sensitive, released


def _use_store(monkeypatch, store: Path) -> None:
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(store))


def test_plain_minari_reads_the_release_right(release, tmp_path):
    store, sensitive, released = release
    out = tmp_path / "rows.npz"
    env = {**os.environ, "MINARI_DATASETS_PATH": str(store)}
    proc = subprocess.run([sys.executable, "-c", PLAIN_MINARI, RELEASE, str(out)], env=env, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    facts = json.loads(proc.stdout.strip().splitlines()[-1])
    assert not facts["privsynth_imported"]
    # the sensitive dataset's environment and reference scores, not the public (open maze) ones
    assert facts["env_id"] == facts["eval_env_id"] == "PointMaze_UMaze-v3"
    assert facts["maze_map"] == eval_env_spec("umaze")[1]["maze_map"]
    assert facts["ref"] == [sensitive.info.ref_min_score, sensitive.info.ref_max_score]
    assert facts["obs_space_matches_env"]
    assert facts["episodes"] == facts["steps"] == 60 and facts["some"] == 3 and facts["sampled"] == 2
    assert facts["epsilon"] <= 8.0 and facts["unit"] == "transition"
    assert re.search(r"\([\d.]+, 0\.001\)-DP; privacy unit: transition", facts["description"])
    rows = np.load(out)
    np.testing.assert_allclose(rows["s"], released.observations, rtol=0, atol=1e-6)
    np.testing.assert_allclose(rows["s2"], released.next_observations, rtol=0, atol=1e-6)  # real next states
    np.testing.assert_array_equal(rows["a"], released.actions)
    np.testing.assert_array_equal(rows["r"], released.rewards)
    np.testing.assert_array_equal(rows["term"], released.terminals)
    assert not rows["term"].any()  # PointMaze with continuing_task never terminates
    np.testing.assert_array_equal(rows["trunc"], ~released.terminals)
    low, high = np.asarray(sensitive.info.action_low), np.asarray(sensitive.info.action_high)
    assert np.all(rows["a"] >= low) and np.all(rows["a"] <= high)


def _doc_snippet() -> str:
    text = DOCS.read_text()
    m = re.search(r"```python\n(# d3rlpy-from-minari.*?)```", text, re.S)
    assert m, "docs/datasets.md lost its d3rlpy-from-minari snippet"
    return m.group(1)


def test_d3rlpy_users_get_the_release_transitions(release, monkeypatch):
    d3rlpy = pytest.importorskip("d3rlpy")
    from d3rlpy.dataset import BasicTransitionPicker

    store, _, released = release
    _use_store(monkeypatch, store)
    dataset, env = d3rlpy.datasets.get_minari(RELEASE)  # loads without error (its own alignment is documented)
    assert env.unwrapped.spec.id == "PointMaze_UMaze-v3"  # the sensitive map
    scope: dict = {}
    exec(compile(_doc_snippet(), "docs/datasets.md", "exec"), scope)
    mdp = scope["minari_to_d3rlpy"](RELEASE)
    picker = BasicTransitionPicker()
    got = [picker(ep, i) for ep in mdp.episodes for i in range(ep.transition_count)]
    assert len(got) == released.n_transitions
    for k, tr in enumerate(got):
        np.testing.assert_allclose(tr.observation, released.observations[k], atol=1e-6)
        np.testing.assert_allclose(tr.action, released.actions[k], atol=1e-6)
        np.testing.assert_allclose(tr.reward, [released.rewards[k]], atol=1e-6)
        assert bool(tr.terminal) == bool(released.terminals[k])
        if not released.terminals[k]:
            np.testing.assert_allclose(tr.next_observation, released.next_observations[k], atol=1e-6)
    iql = d3rlpy.algos.IQLConfig(batch_size=16).create(device="cpu:0")
    iql.fit(mdp, n_steps=10, n_steps_per_epoch=10, show_progress=False,
            logger_adapter=d3rlpy.logging.NoopAdapterFactory())
    action = iql.predict(released.observations[:4])
    assert action.shape == (4, 2) and np.isfinite(action).all()
