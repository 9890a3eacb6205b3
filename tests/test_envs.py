import numpy as np

from privsynth.data import DatasetInfo
from privsynth.data.envs import POINTMAZE_OBS_KEYS, make_env


def test_make_env_flattens_pointmaze_obs():
    info = DatasetInfo(name="t", env_id="PointMaze_UMaze-v3", env_kwargs={"continuing_task": False},
                       obs_keys=list(POINTMAZE_OBS_KEYS))
    env = make_env(info, max_episode_steps=5)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (6,) and obs.dtype == np.float32
    assert env.observation_space.shape == (6,)
    obs2, r, term, trunc, _ = env.step(env.action_space.sample())
    assert obs2.shape == (6,)
    env.close()
