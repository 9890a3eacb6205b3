"""Walker2d rows projected onto Hopper's layout (bench source ``locomotion_projected``, docs/transfer.md)."""
from __future__ import annotations

import numpy as np
import pytest

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.sources import PROJECTIONS, project_dataset, projected_locomotion_dataset, source_keys


def test_the_walker_layout_puts_the_right_leg_where_hopper_has_its_leg():
    """The index map agrees with the simulators: Walker2d's first three joints after the root and its first three
    actuators are the ones Hopper has (same names, same order)."""
    gym = pytest.importorskip("gymnasium")
    mujoco = pytest.importorskip("mujoco")

    def layout(env_id):
        env = gym.make(env_id)
        m = env.unwrapped.model
        joints = [mujoco.mj_id2name(m, mujoco.mjtObj.mjOBJ_JOINT, i) for i in range(m.njnt)]
        acts = [joints[m.actuator_trnid[i, 0]] for i in range(m.nu)]
        env.close()
        return joints, acts

    wj, wa = layout("Walker2d-v5")
    hj, ha = layout("Hopper-v5")
    proj = PROJECTIONS[("walker2d", "hopper")]
    walker_obs = wj[1:] + [f"v_{j}" for j in wj]  # qpos without rootx, then qvel
    hopper_obs = hj[1:] + [f"v_{j}" for j in hj]
    assert [walker_obs[i] for i in proj["obs"]] == hopper_obs
    assert [wa[i] for i in proj["act"]] == ha


def test_projected_dataset_has_hopper_widths_and_keeps_rewards_and_episodes():
    ds = projected_locomotion_dataset(onto="hopper", env="walker2d", kind="random", steps=200, seed=3)
    assert ds.observations.shape == (200, 11) and ds.next_observations.shape == (200, 11)
    assert ds.actions.shape == (200, 3) and ds.info.env_id == "Hopper-v5"
    assert ds.info.extra["projected_from"] == "Walker2d-v5" and ds.info.action_low == [-1.0, -1.0, -1.0]
    from privsynth.evaluation.bench.sources import locomotion_dataset

    whole = locomotion_dataset(env="walker2d", kind="random", steps=200, seed=3)
    np.testing.assert_array_equal(ds.observations, whole.observations[:, [0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13]])
    np.testing.assert_array_equal(ds.rewards, whole.rewards)
    np.testing.assert_array_equal(ds.episode_ids, whole.episode_ids)
    assert "onto" in source_keys("locomotion_projected")


def test_unknown_projection_and_too_narrow_data_are_refused():
    from privsynth.evaluation.bench.sources import random_dataset

    with pytest.raises(InvalidData, match="no projection of hopper onto walker2d"):
        project_dataset(random_dataset(obs_dim=11, act_dim=3), "hopper", "walker2d")
    with pytest.raises(InvalidData, match="too few"):
        project_dataset(random_dataset(obs_dim=11, act_dim=3), "walker2d", "hopper")
