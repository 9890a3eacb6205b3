"""Importing your own table refuses what it cannot store faithfully, with one line that says how to fix it: flag
columns hold booleans only, the environment id must be registered, actions lie in the environment's action space, and
layout errors name the CLI flag (reviewer's report on `privsynth datasets import`)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.dataset import OfflineDataset
from privsynth.data.minari_spaces import check_env_id
from privsynth.errors import InvalidData, SpaceMismatch


def frame(n: int = 20, episode: int = 10, seed: int = 0, act_dim: int = 1, obs_dim: int = 3) -> pd.DataFrame:
    """Random rows in the documented layout (Pendulum-v1 widths by default), actions inside [-1, 1]."""
    rng = np.random.default_rng(seed)
    df = pd.DataFrame({f"obs_{i}": rng.uniform(-1, 1, n) for i in range(obs_dim)})
    for i in range(act_dim):
        df[f"act_{i}"] = rng.uniform(-1, 1, n)
    df["reward"] = rng.normal(size=n)
    for i in range(obs_dim):
        df[f"next_obs_{i}"] = rng.uniform(-1, 1, n)
    df["terminal"] = 0
    df["truncated"] = (np.arange(n) + 1) % episode == 0
    df["episode_id"] = np.arange(n) // episode
    return df


def cli_import(capsys, path, *args):
    code = main(["datasets", "import", str(path), *args])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------- 1. terminal / truncated
@pytest.mark.parametrize("column", [
    [False] * 5 + [True] + [False] * 14,                                        # real booleans
    [0] * 5 + [1] + [0] * 14,                                                   # integers
    [0.0] * 5 + [1.0] + [0.0] * 14,                                             # floats
    ["False"] * 5 + ["True"] + ["False"] * 14,                                  # pandas / parquet object strings
    [" false"] * 5 + ["TRUE "] + ["0"] * 14,                                    # any case, spaces trimmed
    ["0"] * 5 + ["1"] + [False] * 14,                                           # mixed objects
    pd.array([False] * 5 + [True] + [False] * 14, dtype="boolean"),             # nullable booleans without NA
])
def test_flag_columns_accept_booleans_zero_one_and_true_false(column):
    df = frame()
    df["terminal"] = pd.Series(column, dtype=object) if isinstance(column, list) else column
    ds = OfflineDataset.from_pandas(df, env_id="Pendulum-v1")
    np.testing.assert_array_equal(np.flatnonzero(ds.terminals), [5])


@pytest.mark.parametrize("value,shown", [
    ("yes", "'yes'"), (2, "2"), (-1, "-1"), (0.5, "0.5"), ("", "''"), ("t", "'t'"),
    (np.nan, "a missing value"), (None, "a missing value"),
])
def test_flag_columns_refuse_anything_else_naming_column_row_and_value(value, shown):
    df = frame()
    df["terminal"] = df["terminal"].astype(object)
    df.loc[10, "terminal"] = value
    with pytest.raises(InvalidData) as err:
        OfflineDataset.from_pandas(df, env_id="Pendulum-v1")
    assert str(err.value) == f"column 'terminal' must hold 0/1 or true/false; row 10 has {shown}"
    renamed = frame().rename(columns={"truncated": "cut"})
    renamed["cut"] = renamed["cut"].astype(object)
    renamed.loc[3, "cut"] = "no"
    with pytest.raises(InvalidData, match=r"column 'cut' must hold 0/1 or true/false; row 3 has 'no'"):
        OfflineDataset.from_pandas(renamed, columns={"truncated": "cut"})


def test_cli_refuses_a_text_terminal_with_the_file_line_and_writes_nothing(tmp_path, capsys):
    df = frame()
    df["terminal"] = df["terminal"].astype(object)
    df.loc[10, "terminal"] = "yes"
    df.to_csv(tmp_path / "mine.csv", index=False)
    code, _, err = cli_import(capsys, tmp_path / "mine.csv", "--env-id", "Pendulum-v1")
    assert code == 2 and err.count("\n") == 1
    assert "column 'terminal' must hold 0/1 or true/false; row 10 (line 12 of the file) has 'yes'" in err
    assert not minari_io.dataset_exists("mine")
    frame().assign(terminal="False").to_csv(tmp_path / "ok.csv", index=False)  # read back as booleans by pandas
    code, _, err = cli_import(capsys, tmp_path / "ok.csv", "--env-id", "Pendulum-v1")
    assert code == 0, err
    assert not minari_io.load_dataset("ok").terminals.any()


# ------------------------------------------------------------------------------------------- 2. environment id
def test_unknown_env_id_is_refused_with_the_closest_registered_ids(tmp_path, capsys):
    with pytest.raises(InvalidData) as err:
        OfflineDataset.from_pandas(frame(), env_id="Pendulm-v1")
    msg = str(err.value)
    assert msg.startswith("unknown environment id 'Pendulm-v1': not registered with gymnasium")
    assert "'Pendulum-v1'" in msg and "--env-id" in msg
    check_env_id("PointMaze_UMaze-v3")  # gymnasium-robotics ids are registered first
    check_env_id(None)
    with pytest.raises(InvalidData, match="did you mean 'PointMaze_UMaze-v3'"):
        check_env_id("pointmaze_umaze-v3")
    with pytest.raises(InvalidData, match="unknown environment id 'no such env'"):
        check_env_id("no such env")
    frame().to_csv(tmp_path / "mine.csv", index=False)
    code, _, err = cli_import(capsys, tmp_path / "mine.csv", "--env-id", "Pendulum-v9")
    assert code == 2 and "unknown environment id 'Pendulum-v9'" in err and "'Pendulum-v1'" in err
    assert not minari_io.dataset_exists("mine")
    code, out, err = cli_import(capsys, tmp_path / "mine.csv")  # without --env-id: no environment, no checks
    assert code == 0 and "env -" in out, err
    assert minari_io.load_dataset("mine").info.env_id is None
    f = frame()  # the .npz import path checks the id too
    np.savez(tmp_path / "mine.npz", observations=f[["obs_0", "obs_1", "obs_2"]].to_numpy(),
             actions=f[["act_0"]].to_numpy(), rewards=f["reward"].to_numpy(),
             terminals=np.zeros(len(f), bool))
    code, _, err = cli_import(capsys, tmp_path / "mine.npz", "--name", "mine-npz", "--env-id", "Pendulum-v9")
    assert code == 2 and "unknown environment id 'Pendulum-v9'" in err
    assert not minari_io.dataset_exists("mine-npz")


def test_datasets_naming_an_unregistered_environment_still_write_and_load():
    """Only imports refuse unknown ids: stored datasets may name environments this machine does not have."""
    import dataclasses

    ds = OfflineDataset.from_pandas(frame())
    ds = dataclasses.replace(ds, info=dataclasses.replace(ds.info, env_id="Toy-v0"))
    minari_io.write_dataset(ds, "toy")
    assert minari_io.load_dataset("toy").info.env_id == "Toy-v0"


# ------------------------------------------------------------------------------------------------ 3. messages
def test_layout_errors_name_the_cli_flags(tmp_path, capsys):
    with pytest.raises(InvalidData, match=r"--obs-cols .*observation_columns"):
        OfflineDataset.from_pandas(frame().rename(columns=lambda c: c.replace("obs_", "o")))
    with pytest.raises(InvalidData, match=r"--act-cols .*action_columns"):
        OfflineDataset.from_pandas(frame().rename(columns={"act_0": "torque"}))
    with pytest.raises(InvalidData, match=r"--map reward=COLUMN"):
        OfflineDataset.from_pandas(frame().rename(columns={"reward": "r"}))
    frame().to_csv(tmp_path / "semi.csv", index=False, sep=";")
    code, _, err = cli_import(capsys, tmp_path / "semi.csv", "--env-id", "Pendulum-v1")
    assert code == 2 and err.count("\n") == 1
    assert "single column, 'obs_0;obs_1;obs_2;act_0;" in err and "looks ';'-separated" in err


def test_missing_action_column_and_dict_observations_say_what_to_pass():
    df = frame(act_dim=2, obs_dim=6)  # PointMaze: 2-D actions, observation + desired_goal = 6 columns
    with pytest.raises(SpaceMismatch, match="--obs-keys observation,desired_goal"):
        OfflineDataset.from_pandas(df, env_id="PointMaze_UMaze-v3")
    keys = ["observation", "desired_goal"]
    assert OfflineDataset.from_pandas(df, env_id="PointMaze_UMaze-v3", obs_keys=keys).act_dim == 2
    with pytest.raises(SpaceMismatch) as err:
        OfflineDataset.from_pandas(df.drop(columns=["act_1"]), env_id="PointMaze_UMaze-v3", obs_keys=keys)
    assert str(err.value) == ("the data has 1 action dim but PointMaze_UMaze-v3 has 2: the table lacks the action "
                              "column act_1")
    with pytest.raises(SpaceMismatch, match="lacks the observation column obs_2"):
        OfflineDataset.from_pandas(frame().drop(columns=["obs_2", "next_obs_2"]), env_id="Pendulum-v1")


def test_episode_id_errors_name_the_row():
    df = frame()
    df["episode_id"] = df["episode_id"].astype(float)
    df.loc[3, "episode_id"] = np.nan
    with pytest.raises(InvalidData, match=r"column 'episode_id' \(episode ids\) has missing values, first at row 3"):
        OfflineDataset.from_pandas(df)
    split = frame(n=30)
    split.loc[20:, "episode_id"] = 0  # episode 0 again after episode 1
    with pytest.raises(InvalidData, match="episode 0 starts again at row 20"):
        OfflineDataset.from_pandas(split)
    labelled = frame().assign(episode_id=["a"] * 10 + ["b"] * 10)  # any labels still work
    assert OfflineDataset.from_pandas(labelled).n_episodes == 2


# ---------------------------------------------------------------------------------------------- 4. action box
def test_actions_outside_the_action_box_are_refused_observations_are_not(tmp_path, capsys):
    df = frame()
    df.loc[7, "act_0"] = 5.0
    with pytest.raises(InvalidData) as err:
        OfflineDataset.from_pandas(df, env_id="Pendulum-v1")
    assert str(err.value).startswith("column 'act_0' has 5 at row 7, outside Pendulum-v1's action box [-2, 2]")
    assert OfflineDataset.from_pandas(df).actions.max() == 5.0  # no environment: no box to check against
    df.to_csv(tmp_path / "big.csv", index=False)
    code, _, err = cli_import(capsys, tmp_path / "big.csv", "--env-id", "Pendulum-v1")
    assert code == 2 and "row 7 (line 9 of the file)" in err and not minari_io.dataset_exists("big")
    far = frame()
    far[["obs_2", "next_obs_2"]] = 100.0  # outside Pendulum's observation bounds [-8, 8]: kept as given
    assert OfflineDataset.from_pandas(far, env_id="Pendulum-v1").observations[:, 2].max() == 100.0
    # without next-observation columns an episode's last row only closes it: its action is not stored or checked
    ordered = frame().drop(columns=[f"next_obs_{i}" for i in range(3)])
    ordered.loc[9, "act_0"] = 5.0
    assert OfflineDataset.from_pandas(ordered, env_id="Pendulum-v1").actions.max() <= 2.0


def test_discrete_actions_must_be_valid_indices():
    df = frame(obs_dim=4)  # CartPole-v1: 4 observation dims, Discrete(2)
    df["act_0"] = (df.index % 2).astype(float)
    assert OfflineDataset.from_pandas(df, env_id="CartPole-v1").act_dim == 1
    for bad in (2.0, 0.5):
        df.loc[4, "act_0"] = bad
        with pytest.raises(InvalidData, match=rf"column 'act_0' has {bad:g} at row 4, outside CartPole-v1's actions"):
            OfflineDataset.from_pandas(df, env_id="CartPole-v1")
