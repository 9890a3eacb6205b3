"""RL-aware post-processing of a release (issue 20 item 3): exact on real data, repairs perturbed rows, free under DP."""
from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import gymnasium as gym
import numpy as np
import pytest

from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
from privsynth.errors import InvalidData, PrivacyError, PrivsynthError
from privsynth.release.postprocess import postprocess

TOL = 1e-5


@pytest.fixture(scope="module", params=[False, True], ids=["sparse", "dense"])
def real(request):
    return generate_pointmaze(PointMazeConfig(maze="umaze", steps=300, seed=3, dense=request.param, ref_episodes=1),
                              progress=False)


@pytest.fixture(scope="module")
def sparse():
    return generate_pointmaze(PointMazeConfig(maze="umaze", steps=300, seed=4, ref_episodes=1), progress=False)


def _replace(ds: OfflineDataset, **arrays) -> OfflineDataset:
    return dataclasses.replace(ds, **arrays)


def test_real_data_is_left_unchanged(real):
    """On data the environment generated, recomputing s′ and the (sparse or dense) reward changes nothing."""
    out, st = postprocess(real)
    assert st["reward_type"] == ("dense" if "Dense" in real.info.env_id else "sparse")
    assert st["rows_kept"] == st["rows_in"] == real.n_transitions and st["rows_dropped_in_walls"] == 0
    assert st["rows_dropped_goal_in_wall"] == 0  # PointMaze draws every goal in a free cell
    assert st["next_state_max_change"] < TOL and st["reward_changed"] == 0.0 and st["actions_clipped"] == 0.0
    np.testing.assert_allclose(out.next_observations, real.next_observations, atol=TOL)
    np.testing.assert_allclose(out.rewards, real.rewards, atol=TOL)
    assert (real.rewards > 0).any() and (real.rewards != real.rewards[0]).any()  # the check sees non-trivial rewards


def test_perturbed_next_states_and_rewards_are_restored(real):
    rng = np.random.default_rng(0)
    nxt = real.next_observations.copy()
    nxt[:, :4] += rng.normal(0, 0.3, size=(len(nxt), 4))
    bad = _replace(real, next_observations=nxt, rewards=rng.permutation(real.rewards) + 0.5)
    out, st = postprocess(bad, drop_in_walls=False)
    np.testing.assert_allclose(out.next_observations, real.next_observations, atol=TOL)
    np.testing.assert_allclose(out.rewards, real.rewards, atol=TOL)
    assert st["reward_changed"] == 1.0 and st["next_state_mean_change"] > 0.1
    kept, _ = postprocess(bad, resimulate=False, reward=False, drop_in_walls=False)
    np.testing.assert_array_equal(kept.next_observations, bad.next_observations)  # the flags switch the steps off
    np.testing.assert_array_equal(kept.rewards, bad.rewards)


def test_states_in_walls_are_dropped(sparse):
    from privsynth.data.envs import make_env

    env = make_env(sparse.info)
    wall = env.unwrapped.maze.cell_rowcol_to_xy(np.array([0, 0]))  # the border cell (0, 0) is a wall
    env.close()
    obs = sparse.observations.copy()
    obs[[5, 17], :2] = wall
    obs[40, :2] = [100.0, -100.0]  # off the map
    out, st = postprocess(_replace(sparse, observations=obs))
    assert st["rows_dropped_in_walls"] == 3 and out.n_transitions == sparse.n_transitions - 3
    assert not np.any(np.all(out.observations[:, :2] == wall.astype(np.float32), axis=1))
    np.testing.assert_array_equal(out.episode_ids, np.delete(sparse.episode_ids, [5, 17, 40]))
    kept, _ = postprocess(_replace(sparse, observations=obs), drop_in_walls=False)
    assert kept.n_transitions == sparse.n_transitions
    everywhere = obs.copy()
    everywhere[:, :2] = wall
    with pytest.raises(InvalidData, match="dropped every row"):
        postprocess(_replace(sparse, observations=everywhere))


def test_a_dropped_row_ends_its_episode_piece_with_a_timeout(sparse):
    """Dropping rows cuts episodes: the kept row before each cut is flagged truncated, so Minari / d3rlpy readers find
    every episode end flagged; no other flag changes."""
    from privsynth.data.envs import make_env

    env = make_env(sparse.info)
    wall = env.unwrapped.maze.cell_rowcol_to_xy(np.array([0, 0]))
    env.close()
    obs = sparse.observations.copy()
    obs[[5, 17], :2] = wall
    out, _ = postprocess(_replace(sparse, observations=obs))
    expected = sparse.timeouts.copy()
    for i in (4, 16):
        if sparse.episode_ids[i] == sparse.episode_ids[i + 1] and not sparse.terminals[i]:
            expected[i] = True
    np.testing.assert_array_equal(out.timeouts, np.delete(expected, [5, 17]))
    assert expected.sum() > sparse.timeouts.sum()  # the fixture's rows 4 and 16 sit inside episodes


def test_actions_are_clipped_before_simulating(sparse):
    act = sparse.actions * 3.0
    out, st = postprocess(_replace(sparse, actions=act))
    assert out.actions.min() >= -1.0 and out.actions.max() <= 1.0
    assert st["actions_clipped"] == pytest.approx(np.mean(np.any(np.abs(act) > 1.0, axis=1)))
    assert 0 < st["actions_clipped"] < 1
    np.testing.assert_array_equal(out.actions, np.clip(act, -1, 1))


def test_sensitive_dataset_is_refused(sparse):
    with pytest.raises(PrivacyError, match="sensitive"):
        postprocess(sparse.mark_sensitive())


def test_unsupported_environment_names_what_is_supported():
    env = gym.make("Pendulum-v1")
    n = 20
    ds = OfflineDataset(np.zeros((n, 3)), np.zeros((n, 1)), np.zeros(n), np.zeros((n, 3)), np.zeros(n, bool),
                        np.zeros(n, bool), np.zeros(n, int), info=DatasetInfo(name="pend", env_id="Pendulum-v1"))
    env.close()
    with pytest.raises(PrivsynthError, match="PointMaze .* MuJoCo locomotion"):
        postprocess(ds)
    with pytest.raises(PrivsynthError, match="records no environment"):
        postprocess(dataclasses.replace(ds, info=DatasetInfo(name="none")))


def test_card_records_the_postprocessing_and_input_is_untouched(sparse):
    card = {"private": True, "epsilon": 1.0, "ledger": {"events": []}}
    ds = dataclasses.replace(sparse, info=dataclasses.replace(sparse.info, privacy_card=card))
    before = ds.next_observations.copy()
    out, st = postprocess(ds)
    rec = out.info.privacy_card["postprocess"]
    assert rec["costs_privacy"] is False and rec["rows_kept"] == st["rows_kept"] and "Dwork" in rec["note"]
    assert out.info.privacy_card["ledger"] == card["ledger"] and out.info.privacy_card["epsilon"] == 1.0
    assert out.info.extra["postprocess"]["steps"]["resimulate"] is True
    assert "postprocess" not in card and "postprocess" not in sparse.info.extra  # the input is not modified
    np.testing.assert_array_equal(ds.next_observations, before)


def test_output_is_a_rowwise_function_of_the_rows_and_the_environment_spec(sparse):
    """The neighbour property: nothing but the DP rows and the public environment enters, row by row. Same rows ->
    same output (no randomness); other info fields (name, card, reference scores) change nothing; changing one input
    row changes only that output row."""
    rng = np.random.default_rng(1)
    nxt = sparse.next_observations.copy()
    nxt[:, :4] += rng.normal(0, 0.2, size=(len(nxt), 4))
    ds = _replace(sparse, next_observations=nxt)
    a, _ = postprocess(ds, drop_in_walls=False)
    other_info = dataclasses.replace(ds.info, name="other", extra={"x": 1}, ref_min_score=-5.0, ref_max_score=7.0,
                                     privacy_card={"private": True})
    b, _ = postprocess(dataclasses.replace(ds, info=other_info), drop_in_walls=False)
    for f in ("observations", "actions", "rewards", "next_observations", "terminals"):
        np.testing.assert_array_equal(getattr(a, f), getattr(b, f))
    i = 123
    act = ds.actions.copy()
    act[i] = -act[i]
    c, _ = postprocess(_replace(ds, actions=act), drop_in_walls=False)
    differs = np.any(c.next_observations != a.next_observations, axis=1)
    assert differs[i] and differs.sum() == 1


def _cheetah_rollout(steps: int, seed: int = 0) -> OfflineDataset:
    """``steps`` seeded random-action HalfCheetah transitions in one episode (arrays filled in place)."""
    env = gym.make("HalfCheetah-v5")
    env.action_space.seed(seed)
    act = np.stack([env.action_space.sample() for _ in range(steps)])
    obs = np.empty((steps + 1, env.observation_space.shape[0]))
    rew, term = np.empty(steps), np.zeros(steps, bool)
    obs[0] = env.reset(seed=0)[0]
    for t in range(steps):
        obs[t + 1], rew[t], term[t] = env.step(act[t])[:3]
    env.close()
    return OfflineDataset(obs[:-1], act, rew, obs[1:], term, np.zeros(steps, bool), np.zeros(steps, int),
                          info=DatasetInfo(name="hc", env_id="HalfCheetah-v5"))


def test_mujoco_locomotion_rows_are_restored(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # MuJoCo writes compiler warnings to MUJOCO_LOG.TXT in the working directory
    # The re-simulation starts each row's contact solver cold, the rollout warm from the previous step: the two agree
    # to the solver's tolerance, not bit for bit (7e-5 at most over 40 action seeds, 4.7e-4 seen once unseeded).
    tol = 2e-3
    real = _cheetah_rollout(40)
    same, st = postprocess(real)
    assert st["adapter"] == "mujoco" and st["rows_kept"] == 40 and st["next_state_max_change"] < tol
    np.testing.assert_allclose(same.rewards, real.rewards, atol=1e-4)
    bad = _replace(real, next_observations=real.next_observations + 0.5, rewards=real.rewards + 1.0)
    fixed, st = postprocess(bad)
    np.testing.assert_allclose(fixed.next_observations, real.next_observations, atol=tol)
    np.testing.assert_allclose(fixed.rewards, real.rewards, atol=1e-4)
    assert st["reward_changed"] == 1.0


def _hopper_rollout(steps: int, seed: int = 0) -> OfflineDataset:
    """``steps`` random-action Hopper transitions, reset after each fall (so some rows are terminal)."""
    env = gym.make("Hopper-v5")
    env.action_space.seed(seed)
    rows: dict[str, list] = {k: [] for k in ("obs", "act", "rew", "nxt", "term", "ep")}
    obs, ep = env.reset(seed=seed)[0], 0
    for _ in range(steps):
        act = env.action_space.sample()
        nxt, rew, term = env.step(act)[:3]
        for k, v in zip(rows, (obs, act, rew, nxt, term, ep)):
            rows[k].append(v)
        obs = nxt
        if term:
            obs, ep = env.reset()[0], ep + 1
    env.close()
    a = {k: np.asarray(v) for k, v in rows.items()}
    return OfflineDataset(a["obs"], a["act"], a["rew"], a["nxt"], a["term"].astype(bool), np.zeros(steps, bool),
                          a["ep"], info=DatasetInfo(name="hopper-random", env_id="Hopper-v5"))


def test_terminal_flags_follow_each_rows_own_next_state(tmp_path, monkeypatch):
    """``terminal`` restores scrambled flags from s′ alone (no step: s′ and the other columns stay as sampled);
    ``healthy`` drops exactly the rows that start in a state the environment ends episodes in (issue 37)."""
    from privsynth.release.postprocess import step_options

    monkeypatch.chdir(tmp_path)
    real = _hopper_rollout(200)
    assert 3 <= real.terminals.sum() < 100  # random Hopper falls within a few dozen steps
    same, st = postprocess(real, **step_options("terminal,healthy"))
    np.testing.assert_array_equal(same.terminals, real.terminals)
    assert st["rows_kept"] == 200 and st["rows_dropped_terminated_start"] == 0 and st["terminal_changed"] == 0.0
    scrambled = np.random.default_rng(0).permutation(real.terminals)
    assert (scrambled != real.terminals).any()
    obs = real.observations.copy()
    fallen = np.flatnonzero(real.terminals)[:2]
    obs[fallen + 1] = real.next_observations[fallen]  # rows that continue from a state the episode ended in
    bad = _replace(real, terminals=scrambled, observations=obs)
    fixed, st = postprocess(bad, **step_options("terminal"))
    np.testing.assert_array_equal(fixed.terminals, real.terminals)
    np.testing.assert_array_equal(fixed.next_observations, real.next_observations)
    np.testing.assert_array_equal(fixed.rewards, real.rewards)
    assert st["terminal_changed"] > 0 and st["rows_kept"] == 200
    kept, st = postprocess(bad, **step_options("healthy"))
    assert st["rows_dropped_terminated_start"] == 2 and kept.n_transitions == 198
    np.testing.assert_array_equal(kept.terminals, np.delete(scrambled, fallen + 1))  # flags untouched by 'healthy'


def test_healthy_step_is_locomotion_only(sparse):
    from privsynth.release.postprocess import check_supported

    check_supported(sparse.info, "terminal")
    with pytest.raises(InvalidData, match="MuJoCo locomotion only"):
        check_supported(sparse.info, "healthy")


def test_agent_cell_postprocesses_its_training_data(sparse, tmp_path):
    from privsynth.evaluation.bench.sources import save_dataset
    from privsynth.evaluation.cells import _agent_data

    nxt = sparse.next_observations.copy()
    nxt[:, :2] += 0.3
    save_dataset(_replace(sparse, next_observations=nxt), tmp_path / "synthetic.npz")
    records_read: list[str] = []
    ctx = SimpleNamespace(cell_id="agent-1", upstream=object(), upstream_dir=tmp_path,
                          dataset=lambda name: records_read.append(name) or sparse,
                          dataset_info=lambda name: sparse.info)  # postprocess: the environment facts only
    params = {"agent": "iql", "num_updates": 4, "eval_every": 4, "eval_episodes": 1, "final_k": 1,
              "data": {"sensitive": "umaze"}, "postprocess": True}
    data, extra = _agent_data(params, ctx)
    np.testing.assert_allclose(data.next_observations, sparse.next_observations, atol=TOL)
    assert extra["postprocess"]["next_state_mean_change"] > 0.3
    rewarded, extra = _agent_data({**params, "postprocess": ["clip", "reward"]}, ctx)
    assert np.array_equal(rewarded.next_observations, nxt) and extra["postprocess"]["steps"]["resimulate"] is False
    plain, none = _agent_data({**params, "postprocess": False}, ctx)
    assert none == {} and np.array_equal(plain.next_observations, nxt)
    assert records_read == []  # the sensitive set's records were never loaded, only its info
    with pytest.raises(InvalidData, match="synthetic data"):
        _agent_data({**params, "synthesizer": "real"}, ctx)


@pytest.mark.slow
def test_agent_cell_trains_on_postprocessed_data_and_records_it(sparse, tmp_path):
    from privsynth.evaluation.bench.sources import save_dataset
    from privsynth.evaluation.cells import agent_cell

    save_dataset(sparse, tmp_path / "synthetic.npz")
    ctx = SimpleNamespace(cell_id="agent-1", upstream=object(), upstream_dir=tmp_path, dataset=lambda name: sparse,
                          dataset_info=lambda name: sparse.info)  # postprocess: the environment facts only
    res = agent_cell({"agent": "iql", "num_updates": 4, "eval_every": 4, "eval_episodes": 1, "final_k": 1,
                      "data": {"sensitive": "umaze"}, "postprocess": True}, ctx)
    assert res["postprocess"]["rows_kept"] == sparse.n_transitions and "final_score" in res


@pytest.mark.slow
def test_synthesize_and_sample_postprocess_write_a_repaired_release_with_its_card(sparse, tmp_path, capsys):
    from privsynth.cli import main
    from privsynth.data import minari_io
    from privsynth.release import synthesize
    from test_transition_synth import tiny_config

    public = generate_pointmaze(PointMazeConfig(maze="umaze", steps=300, seed=5, ref_episodes=1), progress=False)
    res = synthesize(sparse, public=[public], epsilon=5.0, delta=1e-3, n=300, config=tiny_config(),
                     out_dataset="pm-post", progress=False, postprocess=True)
    out = minari_io.load_dataset("pm-post")
    rec = out.info.privacy_card["postprocess"]
    # topped up by default: the release holds the 300 rows asked for, drawn from more samples of the same model
    assert out.n_transitions == rec["rows_kept"] == res.dataset.n_transitions == 300 and rec["topped_up_to"] == 300
    assert rec["rows_in"] > 300 and rec["draws"] >= 2  # the tiny model puts rows in walls: some were dropped
    assert res.epsilon <= 5.0 and rec["costs_privacy"] is False
    assert len(np.unique(out.observations, axis=0)) == 300  # the extra draws are new rows, not repeats
    short = synthesize(sparse, public=[public], epsilon=5.0, delta=1e-3, n=300, config=tiny_config(),
                       progress=False, postprocess=True, topup=False)
    rec2 = short.dataset.info.extra["postprocess"]
    assert rec2["rows_in"] == 300 and short.dataset.n_transitions == rec2["rows_kept"] < 300
    again, st = postprocess(out)  # the release already obeys the environment: a second pass changes nothing
    assert st["rows_kept"] == out.n_transitions and st["reward_changed"] == 0.0 and st["next_state_max_change"] < TOL
    minari_io.write_dataset(sparse, "pm-sensitive")  # `privsynth sample` reads its environment spec
    model = res.synthesizer.save(tmp_path / "m.pt")
    code = main(["sample", "--model", str(model), "-n", "300", "--out-dataset", "pm-post-cli", "--sensitive",
                 "pm-sensitive", "--postprocess", "--quiet"])
    assert code == 0 and "post-processed: 300/" in capsys.readouterr().out
    assert minari_io.load_dataset("pm-post-cli").n_transitions == 300
    code = main(["sample", "--model", str(model), "-n", "300", "--out-dataset", "pm-post-cli2", "--sensitive",
                 "pm-sensitive", "--postprocess", "--no-topup", "--quiet"])
    rec3 = minari_io.load_dataset("pm-post-cli2").info.privacy_card["postprocess"]
    assert code == 0 and rec3["rows_in"] == 300 and rec3["rows_kept"] < 300


def test_cli_synthesize_passes_postprocess_and_reports_it(sparse, monkeypatch, capsys):
    import privsynth.release
    from privsynth.cli import main

    seen = {}
    out, _ = postprocess(sparse)

    def fake_synthesize(*args, **kwargs):
        seen.update(kwargs)
        return SimpleNamespace(dataset=out, epsilon=1.0, seconds={}, synthesizer=None, warnings=[])

    monkeypatch.setattr(privsynth.release, "synthesize", fake_synthesize)
    cli = ["synthesize", "--sensitive", "s", "--public", "p", "--epsilon", "1", "--out-dataset", "o", "--quiet"]
    assert main([*cli, "--postprocess"]) == 0
    assert seen["postprocess"] == "all" and "post-processed: 300/300 rows kept" in capsys.readouterr().out
    assert main([*cli, "--postprocess", "clip,reward"]) == 0
    assert seen["postprocess"] == "clip,reward"
    assert seen["topup"] is True
    assert main([*cli, "--postprocess", "--no-topup"]) == 0 and seen["topup"] is False
    assert main(cli) == 0
    assert seen["postprocess"] == "auto"  # the environment decides (default_steps)
    assert main([*cli, "--postprocess", "none"]) == 0
    assert seen["postprocess"] is False


def test_auto_repairs_locomotion_releases_only(sparse):
    """``postprocess="auto"`` (the release default) is the simulator repair on MuJoCo locomotion and nothing on
    PointMaze or data without an environment; trajectory-unit and episode releases keep their rows as sampled."""
    from privsynth.release.pipeline import _check_postprocess
    from privsynth.release.postprocess import LOCOMOTION_DEFAULT, default_steps, step_options

    hopper = DatasetInfo(name="h", env_id="Hopper-v5")
    assert default_steps(hopper) == LOCOMOTION_DEFAULT
    assert step_options(LOCOMOTION_DEFAULT)["drop_in_walls"] is False
    assert default_steps(sparse.info) is None and default_steps(DatasetInfo(name="own")) is None
    # learnt from scratch (no public data, nothing pre-trained), a PointMaze release is repaired and rolled out
    from privsynth.release.postprocess import SCRATCH_MAZE_DEFAULT, check_supported
    from privsynth.release.relabel import POLICY_SHARE, resolve_policy_share

    assert default_steps(sparse.info, from_scratch=True) == SCRATCH_MAZE_DEFAULT
    assert default_steps(hopper, from_scratch=True) == LOCOMOTION_DEFAULT
    # at eps <= 1 (a public fact) a locomotion release is rolled out too; above it, the repair alone
    from privsynth.release.postprocess import LOW_EPSILON

    assert default_steps(hopper, epsilon=LOW_EPSILON) == LOCOMOTION_DEFAULT + ",rollout"
    assert default_steps(hopper, epsilon=0.5) == LOCOMOTION_DEFAULT + ",rollout"
    assert default_steps(hopper, epsilon=LOW_EPSILON * 1.01) == LOCOMOTION_DEFAULT
    assert default_steps(hopper, epsilon=10.0) == LOCOMOTION_DEFAULT
    assert default_steps(sparse.info, epsilon=0.5) is None  # PointMaze with public data: unchanged
    assert default_steps(DatasetInfo(name="own"), from_scratch=True) is None
    scratch = step_options(SCRATCH_MAZE_DEFAULT)
    assert scratch["rollout"] and scratch["drop_in_walls"] and not scratch["drop_terminated_starts"]
    check_supported(sparse.info, SCRATCH_MAZE_DEFAULT)  # every named step serves PointMaze
    assert resolve_policy_share("auto", steps=SCRATCH_MAZE_DEFAULT, unit="transition", n=10) == POLICY_SHARE
    # Ant-v5 observes contact forces too: the adapter cannot set its state from a row, so nothing is repaired
    assert default_steps(DatasetInfo(name="a", env_id="Ant-v5")) is None

    with pytest.raises(PrivsynthError, match="no post-processing"):  # refused before any fine-tune, not after
        check_supported(DatasetInfo(name="a", env_id="Ant-v5"), "reward")
    assert _check_postprocess(hopper, "auto", unit="transition", episodes=None) == LOCOMOTION_DEFAULT
    # every route resolves the same default for the same budget (the generic route passes its epsilon)
    assert _check_postprocess(hopper, "auto", unit="transition", episodes=None, epsilon=1.0) == default_steps(
        hopper, epsilon=1.0)
    assert _check_postprocess(hopper, "auto", unit="trajectory", episodes=None) is None
    assert _check_postprocess(hopper, "auto", unit="transition", episodes=5) is None
    assert _check_postprocess(hopper, False, unit="transition", episodes=None) is False
    assert _check_postprocess(sparse.info, "auto", unit="transition", episodes=None) is None


def test_step_options_name_the_steps():
    from privsynth.release.postprocess import step_options

    every = {"clip_actions": True, "reward": True, "resimulate": True, "drop_in_walls": True,
             "drop_goals_in_walls": True, "relabel_terminals": True, "drop_terminated_starts": True, "rollout": False}
    assert step_options(True) == step_options("all") == every  # rollout only by its name
    none = dict.fromkeys(every, False)
    assert step_options("resimulate,rollout") == {**none, "resimulate": True, "rollout": True}
    assert step_options("clip,reward") == step_options(["reward", "clip"]) == {
        **none, "clip_actions": True, "reward": True}
    assert step_options("goals,walls") == {**none, "drop_in_walls": True, "drop_goals_in_walls": True}
    assert step_options("terminal,healthy") == {**none, "relabel_terminals": True, "drop_terminated_starts": True}
    with pytest.raises(InvalidData, match="unknown post-processing steps"):
        step_options("reward,wall")


def test_reward_step_alone_restores_rewards_and_keeps_every_row_and_next_state(sparse):
    from privsynth.release.postprocess import step_options

    obs = sparse.observations.copy()
    obs[:5, :2] = 0.0  # the centre of umaze is a wall: the full post-processing drops these rows
    nxt = sparse.next_observations.copy()
    nxt[:, :2] += 0.05
    bad = _replace(sparse, observations=obs, next_observations=nxt, rewards=1.0 - sparse.rewards)
    fixed, st = postprocess(bad, **step_options("clip,reward"))
    assert fixed.n_transitions == sparse.n_transitions and st["rows_dropped_in_walls"] == 0
    np.testing.assert_array_equal(fixed.next_observations, nxt)  # s' is not re-simulated
    dist = np.linalg.norm(nxt[:, :2] - nxt[:, 4:6], axis=1)
    np.testing.assert_array_equal(fixed.rewards, (dist <= 0.45).astype(fixed.rewards.dtype))
    assert st["steps"] == {"clip_actions": True, "resimulate": False, "reward": True, "drop_in_walls": False,
                           "drop_goals_in_walls": False, "relabel_terminals": False, "drop_terminated_starts": False,
                           "rollout": False}
    assert postprocess(bad)[1]["rows_dropped_in_walls"] >= 5


GOAL = slice(4, 6)  # desired_goal's columns in the flat PointMaze observation (observation, desired_goal)


def test_rows_whose_goal_lies_in_a_wall_are_dropped(sparse):
    """The goals step drops rows whose desired goal (in s or s′) lies in a wall or off the map, and nothing else."""
    from privsynth.data.envs import make_env

    env = make_env(sparse.info)
    wall = env.unwrapped.maze.cell_rowcol_to_xy(np.array([0, 0]))
    env.close()
    obs, nxt = sparse.observations.copy(), sparse.next_observations.copy()
    obs[[3, 9], GOAL] = wall
    nxt[12, GOAL] = [50.0, 50.0]  # off the map, in s′ only
    bad = _replace(sparse, observations=obs, next_observations=nxt)
    out, st = postprocess(bad, resimulate=False, reward=False, drop_in_walls=False)
    assert st["rows_dropped_goal_in_wall"] == 3 and out.n_transitions == sparse.n_transitions - 3
    np.testing.assert_array_equal(out.episode_ids, np.delete(sparse.episode_ids, [3, 9, 12]))
    assert postprocess(bad, drop_goals_in_walls=False, resimulate=False, reward=False)[0].n_transitions == \
        sparse.n_transitions
    both = obs.copy()
    both[3, :2] = wall  # a row with its state and its goal in walls counts once, under walls
    _, st2 = postprocess(_replace(bad, observations=both), resimulate=False, reward=False)
    assert st2["rows_dropped_in_walls"] == 1 and st2["rows_dropped_goal_in_wall"] == 2
    assert st2["rows_kept"] == sparse.n_transitions - 3


def _with_bad_goals(ds: OfflineDataset, every: int) -> OfflineDataset:
    """``ds`` with every ``every``-th row's goal moved off the map, tagged in the reward (row index)."""
    obs = ds.observations.copy()
    obs[::every, GOAL] = [50.0, 50.0]
    return _replace(ds, observations=obs, rewards=np.arange(ds.n_transitions, dtype=np.float32))


def test_topped_up_keeps_drawing_until_n_valid_rows_in_sampling_order(sparse):
    from privsynth.release.postprocess import topped_up

    opts = dict(resimulate=False, reward=False, drop_in_walls=False)
    first = _with_bad_goals(sparse, 2)  # half of the rows rejected
    calls = []

    def draw(k, i):
        calls.append((k, i))
        return _with_bad_goals(sparse, 3)

    n = sparse.n_transitions  # needs about twice the first draw
    out, st = topped_up(first, draw, n, **opts)
    assert out.n_transitions == n and st["rows_kept"] == n and st["draws"] == len(calls) + 1 >= 2
    assert [i for _, i in calls] == list(range(1, len(calls) + 1)) and all(k > 0 for k, _ in calls)
    assert not np.any(out.observations[:, GOAL] == 50.0)
    head = first.rewards[1::2]  # the first draw's kept rows come first, in order
    np.testing.assert_array_equal(out.rewards[:len(head)], head)
    m = sparse.n_transitions
    assert st["rows_in"] == m * (1 + len(calls))  # every draw returned m rows; the drops add up over the draws
    assert st["rows_dropped_goal_in_wall"] == len(range(0, m, 2)) + len(calls) * len(range(0, m, 3))
    assert out.info.extra["postprocess"]["topped_up_to"] == n and out.info.extra["postprocess"]["rows_kept"] == n
    one, st1 = topped_up(first, draw, 10, **opts)  # enough after the first draw: no more sampling
    assert one.n_transitions == 10 and st1["draws"] == 1


def test_topped_up_refuses_a_model_whose_rows_never_fit(sparse):
    from privsynth.release.postprocess import topped_up

    hopeless = _with_bad_goals(sparse, 1)
    with pytest.raises(InvalidData, match="do not fit this environment"):
        topped_up(hopeless, lambda k, i: hopeless, 100, max_draws=5, resimulate=False, reward=False)
    with pytest.raises(PrivacyError):
        topped_up(sparse.mark_sensitive(), lambda k, i: sparse, 10)


@pytest.mark.slow
def test_a_locomotion_release_is_repaired_by_default_and_not_when_asked(tmp_path, monkeypatch):
    """Through the one release route: a MuJoCo locomotion release carries the default repair in its metadata and
    card, with every flag following its own s′; ``postprocess=False`` keeps the rows as sampled."""
    from test_transition_synth import tiny_config

    from privsynth.release import synthesize
    from privsynth.release.postprocess import LOCOMOTION_DEFAULT, step_options

    monkeypatch.chdir(tmp_path)
    sens = dataclasses.replace(_hopper_rollout(200, seed=1), info=DatasetInfo(name="hopper-s", env_id="Hopper-v5"))
    public = _hopper_rollout(300, seed=2)
    runs = {}
    for post in ("auto", False):
        runs[post] = synthesize(sens, public=[public], epsilon=8.0, delta=1e-3, config=tiny_config(), n=80,
                                progress=False, postprocess=post).dataset
    repaired = runs["auto"]
    assert repaired.n_transitions == 80  # topped up after 'healthy' drops
    assert repaired.info.extra["postprocess"]["steps"] == step_options(LOCOMOTION_DEFAULT)
    assert repaired.info.privacy_card["postprocess"]["costs_privacy"] is False
    from privsynth.data.env_adapters import adapter_for

    adapter = adapter_for(repaired.info, repaired.observations)
    try:
        np.testing.assert_array_equal(repaired.terminals, adapter.terminated_at(repaired.next_observations))
    finally:
        adapter.close()
    assert "postprocess" not in runs[False].info.extra


@pytest.mark.slow
def test_release_resolves_auto_finecur_and_fit_columns_at_the_release_budget(monkeypatch, tmp_path):
    """Through a release, ``"auto"`` FineCur and ``"auto"`` loss columns read the release's budget, not the
    fine-tune's share of it: at ε = 1.05 the fine-tune gets less than 1 (the relabel's share is spent apart) yet
    FineCur runs and the loss covers the state and action columns only (the repair recomputes the rest), at ε = 1
    neither; the config on the card says what ran."""
    from privsynth.release import synthesize
    from privsynth.release.postprocess import LOW_EPSILON
    from test_transition_synth import tiny_config

    monkeypatch.chdir(tmp_path)
    sens = dataclasses.replace(_hopper_rollout(120, seed=1), info=DatasetInfo(name="hopper-s", env_id="Hopper-v5"))
    public = _hopper_rollout(200, seed=2)
    ran = {}
    for eps in (LOW_EPSILON, LOW_EPSILON * 1.05):
        cfg = tiny_config()
        cfg.finetune.max_steps = 3
        assert cfg.finetune_curiosity == "auto" and cfg.dp.fit_columns == "auto"
        res = synthesize(sens, public=[public], epsilon=eps, delta=1e-3, config=cfg, n=40, progress=False)
        fine = [h for h in res.synthesizer.history if h.get("phase") == "finetune"][-1]
        assert fine["target_epsilon"] < LOW_EPSILON  # the fine-tune's own share is under the bound either way
        ran[eps] = (fine["finetune_curiosity"], res.synthesizer.config.finetune_curiosity, fine["fit_columns"],
                    res.dataset.info.privacy_card["config"]["dp"]["fit_columns"])
    assert ran == {LOW_EPSILON: (False, False, "all", "all"),
                   LOW_EPSILON * 1.05: (True, True, "state_action", "state_action")}
