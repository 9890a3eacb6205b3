"""Review of the evaluation harness: each test pins a defect that was reproduced and fixed.

* IQL fitted its Gaussian's (pre-scaling, tanh) mean to the raw data action and then acted ``max_action · mean``: on
  an environment whose action box is not [-1, 1] (Pendulum: [-2, 2]) the policy doubled every action it imitated.
* The report compared the synthetic TrajScore (up to 2000 windows per side) with a real-halves baseline that has
  about half the windows per side; nearest-neighbour scores grow with the count, so fresh real data scored above
  its own baseline.
* ``ks_statistic`` claimed scipy's value but returned a number for NaN input (NaN sorts last).
* The markdown report did not say how the agent scores were measured (updates, evaluations, episodes, how many
  evaluations the final score averages, the reference returns); a cut evaluation horizon was not recorded at all.
"""
from __future__ import annotations

import sys
import types

import numpy as np
import pytest

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData


# ------------------------------------------------------------------------------------------------ helpers
def _pendulum_data(n: int = 512, action: float = 0.5, seed: int = 0) -> OfflineDataset:
    """Pendulum-shaped transitions whose behaviour policy is the constant torque ``action`` (box [-2, 2])."""
    rng = np.random.default_rng(seed)
    info = DatasetInfo(name="pendulum-const", env_id="Pendulum-v1", ref_min_score=-1200.0, ref_max_score=-150.0)
    return OfflineDataset(
        observations=rng.normal(size=(n, 3)), actions=np.full((n, 1), action), rewards=np.zeros(n),
        next_observations=rng.normal(size=(n, 3)), terminals=np.zeros(n, bool), timeouts=np.zeros(n, bool),
        episode_ids=np.arange(n) // 64, info=info,
    )


def _random_walks(n_episodes: int, length: int, seed: int, name: str) -> OfflineDataset:
    """Episodes of a 2-D random walk (no environment id: the RL checks use the coverage grid only)."""
    rng = np.random.default_rng(seed)
    obs, act, nxt = [], [], []
    for _ in range(n_episodes):
        a = rng.normal(scale=0.1, size=(length, 2))
        s = np.cumsum(np.vstack([rng.normal(size=(1, 2)), a]), axis=0)
        obs.append(s[:-1]), act.append(a), nxt.append(s[1:])
    n = n_episodes * length
    return OfflineDataset(
        observations=np.concatenate(obs), actions=np.concatenate(act), rewards=rng.normal(size=n),
        next_observations=np.concatenate(nxt), terminals=np.zeros(n, bool), timeouts=np.zeros(n, bool),
        episode_ids=np.repeat(np.arange(n_episodes), length), info=DatasetInfo(name=name),
    )


# ------------------------------------------------------------------------------------------------ IQL action scale
def test_iql_imitates_the_data_action_when_the_action_box_is_not_unit():
    """Advantages are all 0 (zero rewards), so IQL's actor is plain behaviour cloning of the constant torque 0.5."""
    from privsynth.evaluation.agents import IQLConfig, train_agent, train_batched
    from privsynth.evaluation.agents.train import AgentJob

    data = _pendulum_data()
    cfg = IQLConfig(hidden=(32, 32), actor_lr=3e-3, actor_cosine=False, batch_size=64)
    kw = dict(num_updates=300, eval_every=300, eval_episodes=1, max_episode_steps=3, config=cfg, progress=False)
    run = train_agent(data, data.info, "iql", seed=0, **kw)
    acts = run.policy.act(data.observations[:32])
    assert np.abs(acts - 0.5).max() < 0.1, acts.ravel()[:4]  # before the fix: about 1.0 (= 2 × 0.5)
    (batched,) = train_batched([AgentJob(data, data.info, seed=0)], "iql", **kw)
    np.testing.assert_array_equal(batched.policy.act(data.observations[:32]), acts)  # batched learner: same fix


def test_iql_log_prob_peaks_at_the_action_the_policy_takes():
    import torch

    from privsynth.evaluation.agents.iql import GaussianActor

    torch.manual_seed(0)
    actor = GaussianActor(3, 2, (16,), max_action=2.0)
    obs = torch.randn(5, 3)
    with torch.no_grad():
        act = actor(obs)  # the deterministic action, max_action · mean
        best = actor.log_prob(obs, act, -20.0, 2.0)
        for shift in (-0.05, 0.05):
            assert torch.all(actor.log_prob(obs, act + shift, -20.0, 2.0) < best)


def test_iql_unchanged_at_unit_action_box():
    """At max_action 1 (every D4RL/PointMaze task) the log-probability is CORL's, bit for bit."""
    import torch

    from privsynth.evaluation.agents.iql import _HALF_LOG_2PI, GaussianActor

    torch.manual_seed(0)
    actor = GaussianActor(3, 2, (16,), max_action=1.0)
    obs, act = torch.randn(7, 3), torch.rand(7, 2) * 2 - 1
    with torch.no_grad():
        corl = (-0.5 * ((act - actor.net(obs)) * torch.exp(-actor.log_std)).square() - actor.log_std
                - _HALF_LOG_2PI).sum(-1)
        assert torch.equal(actor.log_prob(obs, act, -20.0, 2.0), corl)


# ------------------------------------------------------------------------------------------------ TrajScore baseline
def test_report_scores_trajscore_and_its_baseline_at_one_window_count(tmp_path):
    from privsynth.evaluation.report import evaluate_synthetic
    from privsynth.evaluation.trajscore import TrajScoreConfig, fit_trajscore_encoder, trajscore, trajscore_baseline

    public = _random_walks(20, 16, seed=2, name="public")
    real = _random_walks(40, 16, seed=0, name="real")   # 80 windows of 8: the halves have about 40 each
    fresh = _random_walks(40, 16, seed=1, name="fresh")  # an independent draw of the real process
    enc = fit_trajscore_encoder(public, TrajScoreConfig(window=8, hidden=16, embed_dim=8, steps=5))
    rep = evaluate_synthetic(fresh, real, trajscore_encoder=enc, tsne=False, out=tmp_path / "r.json")
    ts = rep["trajscore"]
    base = trajscore_baseline(real, enc)
    assert ts["windows"] == 80 and base["windows"] < 80  # the plain score has twice the baseline's candidates
    # the report's comparison is at one count (before the fix: only the 80-window score next to the baseline)
    assert ts["baseline_windows"] == base["windows"] and ts["baseline"] == pytest.approx(base["trajscore"])
    matched = trajscore(fresh, real, enc, max_windows=base["windows"])
    assert matched["windows"] == base["windows"] and ts["trajscore_matched"] == pytest.approx(matched["trajscore"])
    md = (tmp_path / "r.md").read_text()
    assert f"at {base['windows']} windows per side {ts['trajscore_matched']:.4g} against the real-halves baseline" in md


def test_trajscore_without_real_halves_still_scores(tmp_path):
    from privsynth.evaluation.report import evaluate_synthetic
    from privsynth.evaluation.trajscore import TrajScoreConfig, fit_trajscore_encoder

    public = _random_walks(10, 16, seed=2, name="public")
    real = _random_walks(1, 32, seed=0, name="real")  # one episode: no halves, no baseline
    enc = fit_trajscore_encoder(public, TrajScoreConfig(window=8, hidden=16, embed_dim=8, steps=2))
    ts = evaluate_synthetic(_random_walks(4, 16, 1, "s"), real, trajscore_encoder=enc, tsne=False,
                            out=tmp_path / "r.json")["trajscore"]
    assert ts["baseline"] is None and "baseline_note" in ts and 0 < ts["windows"] <= 4 and "trajscore" in ts


# ------------------------------------------------------------------------------------------------ KS with NaN
def test_ks_statistic_refuses_nan():
    from privsynth.evaluation.fidelity import ks_statistic

    assert ks_statistic([0.0, 1.0, 2.0, 3.0], [2.0, 3.0, 4.0, 5.0]) == 0.5  # docs/evaluation.md's example
    with pytest.raises(InvalidData, match="NaN"):
        ks_statistic([np.nan, 1.0, 2.0], [1.0, 2.0, 3.0])  # returned 1/3 (scipy: nan)


# ------------------------------------------------------------------------------------------------ what was measured
def test_markdown_says_how_agent_scores_were_measured(tmp_path, monkeypatch):
    from privsynth.evaluation.report import evaluate_synthetic

    real = _random_walks(4, 16, 0, "real")
    real = OfflineDataset(**{k: getattr(real, k) for k in ("observations", "actions", "rewards", "next_observations",
                                                           "terminals", "timeouts", "episode_ids")},
                          info=DatasetInfo(name="real", ref_min_score=-5.0, ref_max_score=20.0))
    synth = _random_walks(4, 16, 1, "synth")

    class Summary:
        def to_dict(self):
            run = {"num_updates": 1000, "final_k": 10, "curve": [[500, 1.0], [1000, 3.0]],
                   "config": {"eval_episodes": 7, "max_episode_steps": None}}
            return {"agent": "iql", "seeds": [0], "final_mean": 2.0, "final_std": 0.0, "best_mean": 3.0,
                    "best_std": 0.0, "runs": [run]}

    fake = types.ModuleType("privsynth.evaluation.agents")
    fake.run_seeds = lambda *a, **k: Summary()
    fake.AGENTS = {"iql": None}
    monkeypatch.setitem(sys.modules, "privsynth.evaluation.agents", fake)
    evaluate_synthetic(synth, real, agents=["iql"], seeds=[0], tsne=False, out=tmp_path / "a.json")
    md = (tmp_path / "a.md").read_text()
    assert "1000 updates per seed, 2 evaluations of 7 episodes each; final = mean of the last 2" in md
    assert "100·(R − -5)/(20 − -5)" in md


def test_agent_run_records_a_cut_evaluation_horizon():
    from privsynth.evaluation.agents import TD3BCConfig, train_agent

    data = _pendulum_data(n=64)
    run = train_agent(data, data.info, "td3bc", num_updates=2, eval_every=2, eval_episodes=1, max_episode_steps=4,
                      config=TD3BCConfig(hidden=(8, 8), batch_size=8), progress=False)
    assert run.config["max_episode_steps"] == 4  # the normalised score is against full-length reference returns


def test_markdown_says_how_many_transitions_the_simulator_checked(tmp_path):
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
    from privsynth.evaluation.report import evaluate_synthetic
    from privsynth.evaluation.rl_checks import RLCheckConfig

    real = generate_pointmaze(PointMazeConfig(maze="open", steps=300, seed=0, dense=True, ref_episodes=1),
                              progress=False)
    evaluate_synthetic(real.first_rows(120), real, rl_config=RLCheckConfig(max_transitions=200), tsne=False,
                       out=tmp_path / "p.json")
    md = (tmp_path / "p.md").read_text()
    assert "Simulator checks on 120 synthetic and 200 real transitions (seeded subsample of at most 200)" in md


def test_cli_headline_compares_trajscore_and_baseline_at_one_window_count(capsys):
    """The headline printed the score at up to 2000 windows beside the baseline at half as many."""
    from privsynth.commands.evaluate import _print_headline

    _print_headline({"fidelity": {"marginal": 0.9, "correlation": 0.8},
                     "trajscore": {"trajscore": 0.956, "trajscore_matched": 0.941, "baseline": 0.940,
                                   "baseline_windows": 495}})
    out = capsys.readouterr().out
    assert "TrajScore 0.9410 vs real halves 0.9400 (495 windows)" in out and "0.956" not in out
