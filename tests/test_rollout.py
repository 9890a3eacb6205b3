"""The ``rollout`` post-processing step (privsynth.release.rollout): short simulator rollouts from a release's rows."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivacyError

from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
from test_postprocess import _hopper_rollout


@pytest.fixture(scope="module")
def release() -> OfflineDataset:
    """Hopper rows shuffled into single transitions, as a transition release is: every s′ is a simulator step but
    no row continues another."""
    rows = _hopper_rollout(120, seed=3)
    order = np.random.default_rng(0).permutation(rows.n_transitions)
    return dataclasses.replace(rows, observations=rows.observations[order], actions=rows.actions[order],
                               rewards=rows.rewards[order], next_observations=rows.next_observations[order],
                               terminals=rows.terminals[order], timeouts=np.ones(len(order), bool),
                               episode_ids=np.arange(len(order)))


def test_chains_are_simulator_steps_whose_next_states_start_the_next_rows(release):
    from privsynth.data.env_adapters import adapter_for
    from privsynth.release.rollout import chain_rollouts

    out, stats = chain_rollouts(release, horizon=4, seed=1)
    assert out.n_transitions == release.n_transitions  # as many rows as came in
    ep = out.episode_ids
    same = ep[:-1] == ep[1:]
    # within a chain, each s' is the next row's s; a chain's end is flagged (terminal or truncation), nothing else
    np.testing.assert_allclose(out.next_observations[:-1][same], out.observations[1:][same], atol=1e-6)
    ends = np.append(~same, True)
    np.testing.assert_array_equal(out.terminals.astype(bool) | out.timeouts.astype(bool), ends)
    assert not (out.terminals.astype(bool) & out.timeouts.astype(bool)).any()
    lengths = np.bincount(ep)[np.unique(ep)]
    assert lengths.max() <= 4 and stats["chains"] == len(lengths)
    assert stats["chains"] < release.n_transitions / 2  # most chains run several steps
    # each chain starts with one of the release's rows, in order
    starts = np.flatnonzero(np.append(True, ~same[:]))[: stats["chains"]]
    np.testing.assert_array_equal(out.observations[starts], release.observations[: len(starts)])
    # every row is one step of the environment from its (s, a)
    adapter = adapter_for(out.info, out.observations)
    try:
        for i in range(out.n_transitions):
            s2, r, term = adapter.step_from(out.observations[i], out.actions[i])
            np.testing.assert_allclose(out.next_observations[i], s2, atol=1e-4)
            assert abs(out.rewards[i] - r) < 1e-4 and bool(out.terminals[i]) == term
    finally:
        adapter.close()
    assert (out.actions >= -1).all() and (out.actions <= 1).all()
    assert out.info.extra["postprocess"]["rollout"]["costs_privacy"] is False


def test_chains_are_a_function_of_the_release_and_the_seed(release):
    """Post-processing: the same rows and seed give the same chains; another seed other residuals."""
    from privsynth.release.rollout import chain_rollouts

    a, _ = chain_rollouts(release, horizon=3, seed=0)
    b, _ = chain_rollouts(release, horizon=3, seed=0)
    c, _ = chain_rollouts(release, horizon=3, seed=5)
    np.testing.assert_array_equal(a.actions, b.actions)
    assert not np.array_equal(a.actions, c.actions)


def test_rows_that_are_episodes_start_chains_all_over_the_release():
    """A trajectory release's rows come in episode order: the chains start at rows spread over its episodes (a
    seeded order), not at its first rows only, which would roll out its first few episodes and nothing else."""
    from privsynth.release.rollout import chain_rollouts

    rows = _hopper_rollout(200, seed=4)  # whole episodes in order, as a trajectory release is
    assert len(np.unique(rows.episode_ids)) < rows.n_transitions
    out, stats = chain_rollouts(rows, horizon=10, seed=0)
    ep = out.episode_ids
    firsts = np.flatnonzero(np.append(True, ep[1:] != ep[:-1]))
    # where each chain's first state sits in the input rows
    where = [int(np.flatnonzero((rows.observations == out.observations[i]).all(axis=1))[0]) for i in firsts]
    assert max(where) > rows.n_transitions // 2  # not only the release's first rows
    assert len(set(where)) == len(where)
    again, _ = chain_rollouts(rows, horizon=10, seed=0)
    np.testing.assert_array_equal(again.observations, out.observations)  # a function of rows and seed


def test_chain_refuses_sensitive_rows_other_environments_and_unsimulated_rows(release):
    from privsynth.release.postprocess import check_supported, postprocess
    from privsynth.release.rollout import chain_rollouts

    with pytest.raises(PrivacyError):
        chain_rollouts(release.mark_sensitive())
    with pytest.raises(InvalidData, match="horizon"):
        chain_rollouts(release, horizon=0)
    with pytest.raises(InvalidData, match="neither"):
        chain_rollouts(dataclasses.replace(release, info=DatasetInfo(name="p", env_id="Pendulum-v1")))
    with pytest.raises(InvalidData, match="resimulate"):
        check_supported(release.info, "clip,reward,rollout")
    with pytest.raises(InvalidData, match="resimulate"):
        postprocess(release, resimulate=False, rollout=True)


def test_postprocess_and_topped_up_chain_once_over_the_kept_rows(release):
    from privsynth.release.postprocess import postprocess, step_options, topped_up

    out, stats = postprocess(release, **step_options("clip,resimulate,reward,terminal,healthy,rollout"))
    assert stats["rollout"]["rows"] == out.n_transitions and out.info.extra["postprocess"]["steps"]["rollout"]
    draws = []

    def draw(k: int, i: int) -> OfflineDataset:
        draws.append(k)
        return release.first_rows(k)

    topped, st = topped_up(release.first_rows(60), draw, 100, **step_options("clip,resimulate,reward,rollout"))
    assert topped.n_transitions == 100 and draws  # topped up, then chained once
    assert st["rollout"]["rows"] == 100 and st["steps"]["rollout"] is True
    assert len(np.unique(topped.episode_ids)) == st["rollout"]["chains"]


def test_pointmaze_chains_keep_their_goal_and_follow_the_simulator():
    """PointMaze rows (shuffled single steps of the umaze simulator) chained: x, y, vx, vy by the simulator, the goal
    carried along each chain, the sparse reward and the flags from the environment's rule."""
    from privsynth.data.env_adapters import adapter_for
    from privsynth.release.rollout import chain_rollouts

    rows = generate_pointmaze(PointMazeConfig(maze="umaze", steps=150, seed=4, ref_episodes=1), progress=False)
    order = np.random.default_rng(1).permutation(rows.n_transitions)
    rows = dataclasses.replace(rows, **{k: getattr(rows, k)[order] for k in (
        "observations", "actions", "rewards", "next_observations", "terminals", "timeouts")},
        episode_ids=np.arange(len(order)))
    out, stats = chain_rollouts(rows, horizon=5, seed=0)
    assert out.n_transitions == rows.n_transitions and stats["mean_chain_length"] > 2
    same = out.episode_ids[:-1] == out.episode_ids[1:]
    np.testing.assert_allclose(out.next_observations[:-1][same], out.observations[1:][same], atol=1e-6)
    adapter = adapter_for(out.info, out.observations)
    try:
        goal = adapter.goal
        np.testing.assert_array_equal(out.observations[1:][same][:, goal], out.observations[:-1][same][:, goal])
        for i in range(out.n_transitions):
            np.testing.assert_allclose(out.next_observations[i, adapter.state_dims],
                                       adapter.simulate(out.observations[i], out.actions[i]), atol=1e-5)
        np.testing.assert_array_equal(out.rewards, adapter.reward(out.observations, out.actions,
                                                                  out.next_observations))
    finally:
        adapter.close()


@pytest.mark.slow
def test_a_release_asked_for_chains_is_chained_and_costs_nothing_more(tmp_path, monkeypatch):
    """Through the one release route: ``postprocess="...,rollout"`` writes chained episodes, records the step in the
    card, and puts no event on the ledger (post-processing): the same events as the release without chains."""
    from test_transition_synth import tiny_config

    from privsynth.release import synthesize
    from privsynth.release.postprocess import LOCOMOTION_DEFAULT

    monkeypatch.chdir(tmp_path)
    sens = dataclasses.replace(_hopper_rollout(200, seed=1), info=DatasetInfo(name="hopper-s", env_id="Hopper-v5"))
    public = _hopper_rollout(300, seed=2)
    events = {}
    for steps in (LOCOMOTION_DEFAULT, LOCOMOTION_DEFAULT + ",rollout"):
        res = synthesize(sens, public=[public], epsilon=8.0, delta=1e-3, config=tiny_config(), n=80, progress=False,
                         postprocess=steps, policy_share=0)
        assert res.epsilon <= 8.0
        events[steps] = [(e["name"], e["mechanism"]) for e in res.ledger.to_dict()["events"]]
    out = res.dataset
    assert out.n_transitions == 80 and out.info.privacy_card["postprocess"]["rollout"]["rows"] == 80
    assert out.info.privacy_card["postprocess"]["steps"]["rollout"] is True
    same = out.episode_ids[:-1] == out.episode_ids[1:]
    assert same.any()
    np.testing.assert_allclose(out.next_observations[:-1][same], out.observations[1:][same], atol=1e-5)
    assert events[LOCOMOTION_DEFAULT + ",rollout"] == events[LOCOMOTION_DEFAULT]  # no event of its own


def test_the_command_summary_says_the_rows_were_rolled_out():
    from privsynth.commands.synth import _post_note

    stats = {"rows_kept": 50, "rows_in": 60, "reward_changed": 0.5, "next_state_mean_change": 0.8}
    assert "rolled out" not in _post_note(stats)
    note = _post_note({**stats, "rollout": {"chains": 3, "horizon": 100}})
    assert note.endswith("rolled out as 3 simulator episodes of up to 100 steps")
