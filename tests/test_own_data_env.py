"""Issue 39: simulator data without a schema and without public data. ``datasets import --env-id`` of a per-step
CSV, then a release whose normaliser bounds and clipping come from the environment's spaces (public facts), not the
data."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.dataset import DatasetInfo
from privsynth.errors import InvalidData
from privsynth.release.support import environment_schema


def pendulum_csv(path, episodes: int = 24, steps: int = 15, seed: int = 0):
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(seed)
    rows = []
    for ep in range(episodes):
        o, _ = env.reset(seed=seed + ep)
        for t in range(steps):
            a = rng.uniform(-2, 2, size=1).astype(np.float32)
            o2, r, term, _, _ = env.step(a)
            rows.append({"episode_id": ep, "obs_0": o[0], "obs_1": o[1], "obs_2": o[2], "act_0": a[0], "reward": r,
                         "terminal": int(term), "truncated": int(t == steps - 1)})
            o = o2
    pd.DataFrame(rows).to_csv(path, index=False)
    return path


def test_environment_schema_is_the_spaces_and_known_reward_bounds():
    s = environment_schema(DatasetInfo(name="p", env_id="Pendulum-v1"), 3, 1)
    assert [(c["low"], c["high"]) for c in s["observations"]] == [(-1.0, 1.0), (-1.0, 1.0), (-8.0, 8.0)]
    assert s["actions"] == [{"name": "act_0", "kind": "continuous", "low": -2.0, "high": 2.0}]
    assert s["reward"]["high"] == 0.0 and s["reward"]["low"] == pytest.approx(-16.2736, abs=1e-4)
    assert environment_schema(DatasetInfo(name="p", env_id="Pendulum-v1"), 3, 1,
                              reward_bounds=(-20.0, 1.0))["reward"] == {"name": "reward", "low": -20.0, "high": 1.0}
    assert environment_schema(DatasetInfo(name="x"), 3, 1) is None  # no environment: nothing to take bounds from


def test_environment_schema_names_what_is_missing():
    cart = DatasetInfo(name="c", env_id="CartPole-v1")
    with pytest.raises(InvalidData, match="CartPole-v1's spec gives no reward bounds: pass --reward-bounds"):
        environment_schema(cart, 4, 1)
    with pytest.raises(InvalidData, match="observation 1 has no finite public bound .*--obs-bounds"):
        environment_schema(cart, 4, 1, reward_bounds=(0.0, 1.0))
    s = environment_schema(cart, 4, 1, obs_bounds=(-10.0, 10.0), reward_bounds=(0.0, 1.0))
    assert s["actions"] == [{"name": "act_0", "kind": "categorical", "values": [0, 1]}]  # Discrete: one-hot
    assert s["observations"][0]["high"] == pytest.approx(4.8) and s["observations"][1]["high"] == 10.0


def test_pendulum_csv_release_without_public_data_takes_the_environments_bounds(tmp_path, capsys):
    csv = pendulum_csv(tmp_path / "pendulum.csv")
    assert main(["datasets", "import", str(csv), "--env-id", "Pendulum-v1", "--name", "pend"]) == 0
    real = minari_io.load_dataset("pend")
    assert real.info.schema is None and real.info.sensitive
    code = main(["synthesize", "--sensitive", "pend", "--epsilon", "8", "--delta", "1e-4", "--unit", "trajectory",
                 "-n", "150", "--out-dataset", "pend-syn", "--config", "tiny", "--quiet"])
    _, err = capsys.readouterr()
    assert code == 0, err
    syn = minari_io.load_dataset("pend-syn")
    assert syn.info.env_id == "Pendulum-v1"
    assert syn.info.privacy_card["ledger"]["public_data"] == ["normaliser: Pendulum-v1 spaces and reward bounds"]
    # the normaliser is the spaces', not the data's: the real data never reach |θ̇| = 8, the bounds do
    assert np.abs(real.observations[:, 2]).max() < 8.0
    assert syn.observations.min(0).tolist() >= [-1.0, -1.0, -8.0] and syn.observations.max(0).tolist() <= [1, 1, 8]
    assert np.abs(syn.actions).max() <= 2.0 and syn.rewards.max() <= 0.0  # Pendulum's rewards are never above 0
    assert syn.info.extra["schema_check"]["valid"] and syn.n_episodes < syn.n_transitions  # chained episodes
    assert main(["datasets", "export", "pend-syn", str(tmp_path / "pend_syn.csv")]) == 0
    back = pd.read_csv(tmp_path / "pend_syn.csv")
    assert list(back.columns) == ["episode_id", "step", "obs_0", "obs_1", "obs_2", "act_0", "reward", "terminal"]


def test_no_schema_no_environment_no_public_data_is_one_line(tmp_path, capsys):
    csv = pendulum_csv(tmp_path / "pendulum.csv", episodes=4, steps=5)
    assert main(["datasets", "import", str(csv), "--name", "anon"]) == 0
    code = main(["synthesize", "--sensitive", "anon", "--epsilon", "8", "--delta", "1e-3", "-n", "10",
                 "--out-dataset", "anon-syn", "--config", "tiny", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "--schema" in err and "--env-id" in err
    assert not minari_io.dataset_exists("anon-syn")
