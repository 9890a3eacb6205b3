"""PointMaze planner, controller and generator (D4RL maze2d recipe)."""
from __future__ import annotations

import dataclasses

import gymnasium as gym
import numpy as np
import pytest

from privsynth.data.envs import make_env
from privsynth.data.maze_planner import MazePlanner, WaypointController
from privsynth.data.pointmaze import (
    EPISODE_STEPS,
    EVAL_GOAL_CELLS,
    MAZES,
    PointMazeConfig,
    eval_env_spec,
    generate_pointmaze,
    maze_map,
    reference_scores,
)
from privsynth.errors import InvalidData


def _register():
    import gymnasium_robotics

    gym.register_envs(gymnasium_robotics)


def test_planner_shortest_path_umaze():
    from gymnasium_robotics.envs.maze.maps import U_MAZE

    planner = MazePlanner(U_MAZE)
    assert planner.path((3, 1), (1, 1)) == [(3, 2), (3, 3), (2, 3), (1, 3), (1, 2), (1, 1)]
    assert planner.path((1, 1), (1, 1)) == []
    v = planner.values((1, 1))
    assert v[1, 2] == pytest.approx(1.0) and v[1, 3] == pytest.approx(0.99)
    assert np.isneginf(v[0, 0])
    with pytest.raises(ValueError):
        planner.values((0, 0))


@pytest.mark.parametrize("maze", list(MAZES))
def test_controller_reaches_goals_on_every_map(maze):
    """From several random starts, the noiseless controller reaches a random goal within the map's episode length."""
    _register()
    env = gym.make(f"PointMaze_{MAZES[maze]}-v3", continuing_task=True, reset_target=True, max_episode_steps=10**6,
                   maze_map=maze_map(maze))
    ctrl = WaypointController(env.unwrapped.maze, rng=np.random.default_rng(0))
    obs, _ = env.reset(seed=1)
    reached, since = 0, 0
    for _ in range(4 * EPISODE_STEPS[maze]):
        obs, _, _, _, info = env.step(ctrl(obs))
        since += 1
        if info["success"]:
            reached += 1
            assert since <= EPISODE_STEPS[maze], f"{maze}: took {since} steps to reach a goal"
            since = 0
    assert reached >= 4, f"{maze}: reached only {reached} goals"
    env.close()


def test_controller_actions_clipped_and_pd():
    _register()
    env = gym.make("PointMaze_Open-v3")
    ctrl = WaypointController(env.unwrapped.maze, rng=np.random.default_rng(0))
    goal = np.array([0.3, 0.2])
    obs = {"observation": np.array([0.28, 0.21, 0.5, -0.5]), "desired_goal": goal, "achieved_goal": np.zeros(2)}
    a = ctrl(obs)  # same cell: the only waypoint is the exact goal
    np.testing.assert_allclose(a, [10 * 0.02 - 0.5, 10 * -0.01 + 0.5], rtol=1e-6)
    far = {"observation": np.array([-2.0, -1.0, 0.0, 0.0]), "desired_goal": np.array([2.0, 1.0])}
    assert np.all(np.abs(ctrl(far)) <= 1.0)


def test_generator_deterministic_and_structured():
    cfg = PointMazeConfig(maze="umaze", steps=2500, seed=3, ref_episodes=2)
    a = generate_pointmaze(cfg, progress=False)
    b = generate_pointmaze(cfg, progress=False)
    c = generate_pointmaze(PointMazeConfig(maze="umaze", steps=2500, seed=4, ref_episodes=2), progress=False)
    for name in ("observations", "actions", "rewards", "next_observations", "timeouts", "episode_ids"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    assert a.info == b.info
    assert not np.array_equal(a.actions, c.actions)
    # the reference scores (copied into every release as environment facts) are the environment's, not the draw's:
    # they must not reveal the data seed, from which the whole set could be regenerated
    assert (a.info.ref_min_score, a.info.ref_max_score) == (c.info.ref_min_score, c.info.ref_max_score)
    pinned = generate_pointmaze(dataclasses.replace(cfg, ref_seed=cfg.seed), progress=False)
    assert (pinned.info.ref_min_score, pinned.info.ref_max_score) != (a.info.ref_min_score, a.info.ref_max_score)
    np.testing.assert_array_equal(pinned.actions, a.actions)
    assert a.obs_dim == 6 and a.act_dim == 2 and a.n_transitions == 2500
    assert not a.terminals.any()
    assert a.timeouts[-1] and a.n_episodes == int(a.timeouts.sum()) >= 5
    # one continuous run: every next observation is the following observation
    np.testing.assert_array_equal(a.next_observations[:-1], a.observations[1:])
    # sparse reward 1 exactly on the goal-reaching steps (which end episodes); the env draws the new goal after
    # building the observation, so an episode's first observation still shows the previous goal, then it is fixed
    np.testing.assert_array_equal(a.rewards[:-1] == 1.0, a.timeouts[:-1])
    # (its next observations show the goal it pursues); every episode but the last ends within 0.45 of its goal
    episodes = list(a.episodes())
    for ep in episodes:
        goal = ep.next_observations[-1, 4:]
        assert np.all(ep.observations[1:, 4:] == goal) and np.all(ep.next_observations[:, 4:] == goal)
    for ep in episodes[:-1]:
        assert np.linalg.norm(ep.next_observations[-1, :2] - ep.next_observations[-1, 4:]) <= 0.45
    assert np.all(np.abs(a.actions) <= 1.0)
    # the noise is really there: actions are not all saturated or equal to the controller's
    assert a.actions.std() > 0.3
    assert a.info.env_id == "PointMaze_UMaze-v3" and a.info.obs_keys == ["observation", "desired_goal"]


def test_dense_variant_and_eval_env():
    ds = generate_pointmaze(PointMazeConfig(maze="open", steps=600, dense=True, ref_episodes=1), progress=False)
    assert ds.info.env_id == "PointMaze_OpenDense-v3"
    assert np.all((ds.rewards > 0) & (ds.rewards <= 1))
    env = make_env(ds.info)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (6,) and obs.dtype == np.float32
    r, c = EVAL_GOAL_CELLS["open"]
    goal_xy = env.unwrapped.maze.cell_rowcol_to_xy(np.array([r, c]))
    assert np.linalg.norm(obs[4:] - goal_xy) <= 0.25 * np.sqrt(2) + 1e-6  # fixed goal cell plus the env's noise
    assert env.spec.max_episode_steps == EPISODE_STEPS["open"]
    assert env.unwrapped.continuing_task and not env.unwrapped.reset_target


def test_reference_scores_normalise_expert_100_random_0():
    _register()
    lo, hi = reference_scores("umaze", episodes=10, seed=0)
    assert hi > lo + 50
    ds = generate_pointmaze(PointMazeConfig(maze="umaze", steps=200, ref_episodes=10), progress=False)
    assert (ds.info.ref_min_score, ds.info.ref_max_score) == (lo, hi)
    assert ds.normalized_score(hi) == pytest.approx(100.0) and ds.normalized_score(lo) == pytest.approx(0.0)
    # fresh episodes (other seeds): the noiseless controller scores near 100, random near 0
    lo2, hi2 = reference_scores("umaze", episodes=10, seed=1000)
    assert 75 <= ds.normalized_score(hi2) <= 125
    assert -25 <= ds.normalized_score(lo2) <= 25


def test_umaze_mirror_is_umaze_flipped_left_right_in_data_and_evaluation():
    umaze, mirror = maze_map("umaze"), maze_map("umaze_mirror")
    assert mirror == [row[::-1] for row in umaze] and mirror != umaze
    ds = generate_pointmaze(PointMazeConfig(maze="umaze_mirror", steps=50, ref_episodes=1), progress=False)
    assert ds.info.extra["collection_env_kwargs"]["maze_map"] == mirror
    env = make_env(ds.info)
    grid = env.unwrapped.maze.maze_map
    assert [[int(c == 1) for c in row] for row in grid] == mirror  # the evaluation env runs the mirrored map
    r, c = EVAL_GOAL_CELLS["umaze_mirror"]
    assert grid[r][c] == "g" and mirror[r][c] == 0
    env.close()


def test_bad_config():
    with pytest.raises(InvalidData, match="unknown maze"):
        PointMazeConfig(maze="huge")
    with pytest.raises(InvalidData):
        PointMazeConfig(steps=0)
    with pytest.raises(InvalidData):
        eval_env_spec("nope")


def test_collection_steps_the_env_as_gym_make_does_and_parts_make_the_set():
    """The collection loop steps the bare environment; replaying its actions through ``gym.make``'s wrapped env gives
    the same observations, rewards and goal hits, bit for bit. And collection + per-policy reference returns (the
    parts the demo's workers compute) make exactly :func:`generate_pointmaze`'s dataset."""
    from privsynth.data.envs import POINTMAZE_OBS_KEYS, flatten_obs
    from privsynth.data.pointmaze import (REFERENCE_POLICIES, collect_pointmaze, reference_args, reference_return,
                                          with_reference_scores)

    cfg = PointMazeConfig(maze="umaze", steps=600, seed=3, dense=True, ref_episodes=1)
    ds = collect_pointmaze(cfg, progress=False)
    assert ds.info.ref_min_score is None and ds.info.ref_max_score is None
    _register()
    env = gym.make(cfg.env_id, continuing_task=True, reset_target=True, max_episode_steps=cfg.steps + 1)
    obs, _ = env.reset(seed=cfg.seed)
    np.testing.assert_array_equal(flatten_obs(obs, POINTMAZE_OBS_KEYS), ds.observations[0])
    for t in range(cfg.steps):
        obs, r, _, _, info = env.step(ds.actions[t])
        np.testing.assert_array_equal(flatten_obs(obs, POINTMAZE_OBS_KEYS), ds.next_observations[t])
        assert np.float32(r) == ds.rewards[t]
        if t < cfg.steps - 1:  # the last row is a timeout by construction (the run ends there)
            assert bool(info["success"]) == ds.timeouts[t]
    env.close()
    assert ds.timeouts[:-1].any()  # the run reached goals: the replay covered goal resets
    whole = generate_pointmaze(cfg, progress=False)
    parts = with_reference_scores(ds, cfg, tuple(reference_return(*reference_args(cfg), p) for p in REFERENCE_POLICIES))
    for name in ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids"):
        np.testing.assert_array_equal(getattr(parts, name), getattr(whole, name), err_msg=name)
    assert parts.info == whole.info and whole.info.ref_max_score == reference_scores(*reference_args(cfg))[1]
