"""Importing a table refuses what would silently change its meaning (reviewer's report on CSV/parquet/npz import):
a role mapped to a column the table lacks, episodes too short or flagged in the wrong row when rows are consecutive
steps, and a ``.npz`` file that is not a zip archive (no invitation to unpickle it)."""
from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from privsynth.cli import main
from privsynth.data.dataset import OfflineDataset
from privsynth.data.tabular import read_npz, read_table
from privsynth.errors import InvalidData


def steps(episodes: int = 3, length: int = 4, seed: int = 0) -> pd.DataFrame:
    """Consecutive steps (no next_obs columns), ``length`` rows per episode, renamed roles r / traj / done / cut."""
    rng = np.random.default_rng(seed)
    n = episodes * length
    return pd.DataFrame({"obs_0": rng.normal(size=n), "obs_1": rng.normal(size=n), "act_0": rng.uniform(-1, 1, n),
                         "r": rng.normal(size=n), "traj": np.arange(n) // length, "done": False, "cut": False})


MAPPED = {"reward": "r", "episode_id": "traj", "terminal": "done", "truncated": "cut"}


# ------------------------------------------------------------------------ 1. a mapped role names a missing column
@pytest.mark.parametrize("role,typo,closest", [
    ("episode_id", "trajj", "traj"), ("terminal", "donee", "done"), ("truncated", "cutt", "cut"), ("reward", "rr", "r"),
])
def test_a_role_mapped_to_a_missing_column_is_an_error_naming_role_column_and_closest(role, typo, closest):
    with pytest.raises(InvalidData) as err:
        OfflineDataset.from_pandas(steps(), columns={**MAPPED, role: typo})
    msg = str(err.value)
    assert f"no column '{typo}' for the {role} role" in msg and f"'{closest}'" in msg
    assert "closest column" in msg


@pytest.mark.parametrize("option", ["observation_columns", "action_columns", "next_observation_columns"])
def test_missing_columns_named_by_the_column_options_are_errors_with_the_closest_names(option):
    df = steps()
    df["next_obs_0"], df["next_obs_1"] = df["obs_0"], df["obs_1"]
    kw = {option: ["obs_0", "obs_2"] if option != "action_columns" else ["act_1"]}
    if option == "next_observation_columns":
        kw[option] = ["next_obs_0", "next_obs_3"]
    with pytest.raises(InvalidData, match=r"closest columns? '") as err:
        OfflineDataset.from_pandas(df, columns=MAPPED, **kw)
    assert option in str(err.value)


def test_unmapped_roles_keep_their_silent_defaults():
    df = steps().drop(columns=["done", "cut", "traj"])
    ds = OfflineDataset.from_pandas(df, columns={"reward": "r"})  # no flags, no ids: one episode, truncated
    assert ds.n_episodes == 1 and ds.n_transitions == len(df) - 1 and not ds.terminals.any()
    ds = OfflineDataset.from_pandas(steps(), columns=MAPPED)
    assert ds.n_episodes == 3


def test_cli_map_with_a_typo_fails_in_one_line(tmp_path, capsys):
    steps().to_csv(tmp_path / "log.csv", index=False)
    code = main(["datasets", "import", str(tmp_path / "log.csv"), "--name", "typo", "--map", "reward=r",
                 "--map", "episode_id=trajj"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "'trajj'" in err and "'traj'" in err


# --------------------------------------------------------------- 2. consecutive steps: T+1 rows per episode, checked
def test_a_single_row_episode_is_an_error_naming_episode_and_row_even_among_long_ones():
    df = steps()
    df.loc[4, "traj"] = 9  # episode 1 becomes rows 5-7; row 4 is an episode of its own
    with pytest.raises(InvalidData, match=r"episode 9 has a single row, row 4; .*at least two rows"):
        OfflineDataset.from_pandas(df, columns=MAPPED)


def test_a_single_row_episode_without_episode_ids_is_an_error_too():
    df = steps().drop(columns=["traj"])
    df.loc[[3, 4], "done"] = True  # rows 0-3 end in a terminal, then row 4 alone
    with pytest.raises(InvalidData, match=r"episode 1 \(counted from 0; .*\) has a single row, row 4"):
        OfflineDataset.from_pandas(df, columns={k: v for k, v in MAPPED.items() if k != "episode_id"})


@pytest.mark.parametrize("col", ["done", "cut"])
def test_with_episode_ids_a_flag_before_the_last_two_rows_is_an_error(col):
    df = steps()
    df.loc[5, col] = True  # episode 1 is rows 4-7: row 5 is neither its last nor its second-to-last row
    with pytest.raises(InvalidData, match=rf"column '{col}' is set at row 5, 2 rows before the last row of episode 1"):
        OfflineDataset.from_pandas(df, columns=MAPPED)


def test_flags_on_the_last_two_rows_are_fine_and_a_terminal_is_not_also_truncated():
    df = steps()
    df.loc[3, "done"] = True  # on the closing row of episode 0
    df.loc[6, "done"] = True  # on the last real transition of episode 1
    ds = OfflineDataset.from_pandas(df, columns=MAPPED)
    assert ds.n_transitions == 9 and ds.info.extra["dropped_final_rows"] == 3
    np.testing.assert_array_equal(np.flatnonzero(ds.terminals), [2, 5])
    np.testing.assert_array_equal(np.flatnonzero(ds.timeouts), [8])  # only the episode without a terminal


def test_without_episode_ids_flags_cut_episodes_anywhere():
    df = steps().drop(columns=["traj"])
    df.loc[[2, 8], "done"] = True
    ds = OfflineDataset.from_pandas(df, columns={"reward": "r", "terminal": "done", "truncated": "cut"})
    assert ds.n_episodes == 3 and ds.info.extra["dropped_final_rows"] == 3


def test_dropped_final_rows_is_zero_with_next_observation_columns():
    df = steps()
    df["next_obs_0"], df["next_obs_1"] = df["obs_0"], df["obs_1"]
    ds = OfflineDataset.from_pandas(df, columns=MAPPED)
    assert ds.n_transitions == len(df) and ds.info.extra["dropped_final_rows"] == 0


# ------------------------------------------------------------------------------- 3. a .npz that is not a zip archive
def test_a_npz_that_is_not_a_zip_archive_is_refused_as_such(tmp_path):
    bad = tmp_path / "log.npz"
    bad.write_text("obs_0,act_0\n1,2\n")
    for reader in (read_npz, read_table):
        with pytest.raises(InvalidData) as err:
            reader(bad)
        assert str(err.value) == f"cannot read {bad} as .npz: not a valid .npz (zip) archive"
        assert "pickle" not in str(err.value)


def test_read_npz_reads_arrays_and_never_unpickles(tmp_path):
    good = tmp_path / "ok.npz"
    np.savez(good, rewards=np.arange(3.0), terminals=np.zeros(3, bool))
    arrays = read_npz(good)
    assert sorted(arrays) == ["rewards", "terminals"] and arrays["rewards"].tolist() == [0.0, 1.0, 2.0]
    objects = tmp_path / "obj.npz"
    np.savez(objects, rewards=np.array([{"a": 1}], dtype=object))
    with pytest.raises(InvalidData, match="cannot read .* as .npz"):
        read_npz(objects)


def test_cli_refuses_a_non_zip_npz_without_the_pickle_advice(tmp_path, capsys):
    from privsynth.cli import main

    bad = tmp_path / "broken.npz"
    bad.write_text("garbage\n")
    assert main(["datasets", "import", str(bad), "--env-id", "Pendulum-v1", "--name", "bad"]) == 2
    err = capsys.readouterr().err
    assert "not a valid .npz (zip) archive" in err and "allow_pickle" not in err
