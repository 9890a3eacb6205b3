"""The report writes JSON and markdown with every section; agents are optional and wired through run_seeds."""
from __future__ import annotations

import dataclasses
import json
import sys
import types

import numpy as np
import pytest

from pointmaze_util import pointmaze_rollouts
import privsynth.evaluation.agents.common  # noqa: F401  (loaded before the tests below fake its parent package)
from privsynth.errors import InvalidData
from privsynth.evaluation.report import evaluate_synthetic
from privsynth.evaluation.trajscore import TrajScoreConfig, fit_trajscore_encoder

CARD = {"unit": "trajectory", "epsilon": 10.0, "delta": 1e-6, "accountant": "rdp",
        "dp_sgd": {"noise_multiplier": 0.9, "clip_norm": 1.0, "steps": 1000}}


@pytest.fixture(scope="module")
def datasets():
    real = pointmaze_rollouts(steps=320, episode_len=80, seed=0)
    public = pointmaze_rollouts(steps=320, episode_len=80, seed=1000)
    perm = np.random.default_rng(0).permutation(real.n_transitions)
    synth = dataclasses.replace(
        real,
        next_observations=real.next_observations[perm],
        info=dataclasses.replace(real.info, name="synthetic-test", privacy_card=CARD),
    )
    return real, synth, public


@pytest.fixture(scope="module")
def encoder(datasets):
    return fit_trajscore_encoder(datasets[2], TrajScoreConfig(window=16, hidden=32, embed_dim=8, steps=50))


def test_report_writes_json_and_markdown(datasets, encoder, tmp_path):
    real, synth, _ = datasets
    out = tmp_path / "sub" / "report.json"
    rep = evaluate_synthetic(synth, real, trajscore_encoder=encoder, tsne_points=150, out=out)
    assert out.exists() and out.with_suffix(".md").exists() and (tmp_path / "sub" / "report_tsne.png").exists()
    loaded = json.loads(out.read_text())
    assert loaded == rep
    assert rep["privacy_card"]["epsilon"] == 10.0
    assert 0 < rep["fidelity"]["marginal"] <= 1 and 0 < rep["fidelity"]["correlation"] <= 1
    assert rep["rl_checks"]["synthetic"]["dynamics"]["within_tol"] < 0.1
    assert rep["rl_checks"]["real"]["dynamics"]["within_tol"] == 1.0
    assert "trajscore" in rep["trajscore"] and rep["trajscore"]["baseline"] is not None
    assert "agents" not in rep
    md = out.with_suffix(".md").read_text()
    assert "## Privacy card" in md and "| dp_sgd.noise_multiplier | 0.9 |" in md
    assert "marginal (mean 1 − KS)" in md and "dynamics: fraction within" in md and "report_tsne.png" in md
    up = rep["utility_predictor"]  # issue 20: the cheap utility predictor is part of the fidelity report
    assert "policy_r2" in up and "policy_r2_real" in up and "policy R²" in md


def test_report_without_card_public_or_tsne(datasets, tmp_path):
    real, _, _ = datasets
    rep = evaluate_synthetic(real, real, tsne=False, out=tmp_path / "r.json")
    assert rep["privacy_card"] is None
    assert "skipped" in rep["trajscore"]
    assert rep["fidelity"]["marginal"] == 1.0
    md = (tmp_path / "r.md").read_text()
    assert "carries no privacy card" in md and "t-SNE" not in md
    assert "not itself differentially private" not in md
    sensitive = real.mark_sensitive()
    evaluate_synthetic(real, sensitive, tsne=False, out=tmp_path / "s.json")
    assert "not itself differentially private" in (tmp_path / "s.md").read_text()
    with pytest.raises(InvalidData):
        evaluate_synthetic(real, real, tsne=False, out=tmp_path / "r.txt")


def test_agents_are_wired_through_run_seeds(datasets, tmp_path, monkeypatch):
    real, synth, _ = datasets
    calls = []

    class Summary:
        def __init__(self, agent, seeds):
            self.agent, self.seeds = agent, seeds

        def to_dict(self):
            return {"agent": self.agent, "seeds": self.seeds, "final_mean": 42.0, "final_std": 1.5,
                    "best_mean": 50.0, "best_std": 2.0}

    def run_seeds(train_data, eval_info, agent, *, seeds, **kwargs):
        calls.append((train_data.info.name, eval_info.name, agent, tuple(seeds), kwargs.get("num_updates")))
        return Summary(agent, seeds)

    fake = types.ModuleType("privsynth.evaluation.agents")
    fake.run_seeds = run_seeds
    fake.AGENTS = {"iql": None, "td3bc": None, "edac": None}
    monkeypatch.setitem(sys.modules, "privsynth.evaluation.agents", fake)
    with pytest.raises(InvalidData, match="unknown agent"):
        evaluate_synthetic(synth, real, agents=["ppo"], tsne=False, out=tmp_path / "x.json")
    assert not (tmp_path / "x.json").exists()
    rep = evaluate_synthetic(synth, real, agents=["td3bc", "iql"], seeds=[0, 1], num_updates=10, agents_on_real=True,
                             tsne=False, out=tmp_path / "a.json")
    assert [c[2] for c in calls] == ["td3bc", "td3bc", "iql", "iql"]
    assert calls[0] == ("synthetic-test", real.info.name, "td3bc", (0, 1), 10)  # trained on synthetic, real env
    assert calls[1][0] == real.info.name
    assert rep["agents"]["iql"]["synthetic"]["final_mean"] == 42.0
    assert "| iql | synthetic | 42.0 ± 1.5 |" in (tmp_path / "a.md").read_text()


def test_agents_missing_module_is_reported(datasets, tmp_path, monkeypatch):
    real, synth, _ = datasets
    monkeypatch.setitem(sys.modules, "privsynth.evaluation.agents", None)  # import raises ImportError
    rep = evaluate_synthetic(synth, real, agents=["iql"], tsne=False, out=tmp_path / "m.json")
    assert "skipped" in rep["agents"]


def test_cli_evaluate_end_to_end(datasets, encoder, tmp_path, capsys):
    from privsynth.cli import main
    from privsynth.data.minari_io import write_dataset

    real, synth, public = datasets
    write_dataset(real, "test/real-v0")
    write_dataset(synth, "test/synth-v0")
    write_dataset(public, "test/public-v0")
    enc_path = encoder.save(tmp_path / "enc.pt")  # the CLI loads an existing encoder file
    out = tmp_path / "cli" / "report.json"
    rc = main(["evaluate", "--synthetic", "test/synth-v0", "--real", "test/real-v0", "--public", "test/public-v0",
               "--trajscore-encoder", str(enc_path), "--no-tsne", "--quiet", "--out", str(out)])
    assert rc == 0
    rep = json.loads(out.read_text())
    assert rep["privacy_card"]["unit"] == "trajectory"  # the card survives the Minari round trip
    assert rep["rl_checks"]["synthetic"]["dynamics"]["within_tol"] < 0.1
    assert "trajscore" in rep["trajscore"]
    printed = capsys.readouterr().out
    assert "marginal" in printed and "dynamics within tol" in printed
    # a missing dataset is a one-line error with exit status 2
    assert main(["evaluate", "--synthetic", "test/nope-v0", "--real", "test/real-v0", "--out", str(out),
                 "--overwrite"]) == 2
    assert "error" in capsys.readouterr().err
    # without --overwrite the earlier report is kept: refused before any dataset is read
    assert main(["evaluate", "--synthetic", "test/synth-v0", "--real", "test/real-v0", "--out", str(out)]) == 2
    assert "earlier report" in capsys.readouterr().err and json.loads(out.read_text()) == rep


def test_report_with_real_agents(datasets, tmp_path):
    pytest.importorskip("privsynth.evaluation.agents")
    real, synth, _ = datasets
    rep = evaluate_synthetic(synth, real, agents=["td3bc"], seeds=[0], num_updates=20,
                             agent_kwargs={"eval_every": 20, "eval_episodes": 1, "max_episode_steps": 50},
                             tsne=False, out=tmp_path / "ag.json")
    entry = rep["agents"]["td3bc"]["synthetic"]
    assert entry["seeds"] == [0] and entry["runs"][0]["num_updates"] == 20
    assert entry["final_mean"] is not None
    assert "| td3bc | synthetic |" in (tmp_path / "ag.md").read_text()


def test_trajscore_skipped_for_independent_transitions_without_training(datasets, tmp_path, monkeypatch):
    import privsynth.evaluation.trajscore as ts_mod

    real, synth, public = datasets
    flat = dataclasses.replace(synth, episode_ids=np.arange(synth.n_transitions))

    def boom(*a, **k):
        raise AssertionError("the encoder must not be trained when TrajScore cannot be computed")

    monkeypatch.setattr(ts_mod, "fit_trajscore_encoder", boom)
    rep = evaluate_synthetic(flat, real, public=public, tsne=False, out=tmp_path / "f.json")
    assert "no episode of at least" in rep["trajscore"]["skipped"]


def test_report_trains_and_saves_encoder_from_public(datasets, tmp_path, monkeypatch):
    import privsynth.evaluation.trajscore as ts_mod

    real, synth, public = datasets
    small = TrajScoreConfig(window=16, hidden=32, embed_dim=8, steps=20)
    original = ts_mod.fit_trajscore_encoder
    monkeypatch.setattr(ts_mod, "fit_trajscore_encoder", lambda data, config=None, **k: original(data, small, **k))
    rep = evaluate_synthetic(synth, real, public=public, tsne=False, out=tmp_path / "e.json")
    assert rep["trajscore"]["encoder_file"] == "e_trajscore_encoder.pt"
    loaded = ts_mod.TrajEncoder.load(tmp_path / "e_trajscore_encoder.pt")
    assert ts_mod.trajscore(synth, real, loaded)["trajscore"] == rep["trajscore"]["trajscore"]
