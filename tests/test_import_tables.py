"""Your own data in (issue 22, items 5-6): CSV, parquet and DataFrames of a gymnasium environment's data, checked
against the environment at import, marked sensitive, and a release that stays inside the environment's support."""
from __future__ import annotations

import gymnasium as gym
import numpy as np
import pandas as pd
import pytest

from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, SpaceMismatch
from privsynth.release import synthesize
from test_transition_synth import tiny_config


def pendulum_frame(steps: int = 240, episode: int = 60, seed: int = 0, next_columns: bool = True) -> pd.DataFrame:
    """Random-policy Pendulum-v1 rollouts in the documented column layout."""
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(seed)
    rows = []
    obs, _ = env.reset(seed=seed)
    for t in range(steps):
        a = rng.uniform(-2, 2, size=1).astype(np.float32)
        nxt, r, term, _, _ = env.step(a)
        trunc = (t + 1) % episode == 0
        row = {f"obs_{i}": obs[i] for i in range(3)} | {"act_0": a[0], "reward": r, "terminal": term,
                                                        "truncated": trunc, "episode_id": t // episode}
        if next_columns:
            row |= {f"next_obs_{i}": nxt[i] for i in range(3)}
        rows.append(row)
        obs = env.reset(seed=seed + t)[0] if trunc else nxt
    env.close()
    return pd.DataFrame(rows)


def test_from_pandas_layout_mapping_and_episode_order():
    df = pendulum_frame()
    ds = OfflineDataset.from_pandas(df, env_id="Pendulum-v1", name="pendulum")
    assert ds.info.sensitive and ds.n_transitions == 240 and ds.n_episodes == 4
    assert ds.info.action_low == [-2.0] and ds.info.action_high == [2.0]  # from the environment, not the data
    np.testing.assert_allclose(ds.next_observations[:59], ds.observations[1:60])
    renamed = df.rename(columns={"reward": "r", "episode_id": "traj"})
    same = OfflineDataset.from_pandas(renamed, env_id="Pendulum-v1", columns={"reward": "r", "episode_id": "traj"})
    np.testing.assert_array_equal(same.rewards, ds.rewards)
    # no next-observation columns: the following row is the next observation; an episode's last row closes it
    ordered = OfflineDataset.from_pandas(df.drop(columns=[f"next_obs_{i}" for i in range(3)]), env_id="Pendulum-v1")
    assert ordered.n_transitions == 240 - 4 and ordered.timeouts.sum() == 4
    np.testing.assert_array_equal(ordered.next_observations[:59], ds.observations[1:60])
    with pytest.raises(SpaceMismatch, match="observation dims"):
        OfflineDataset.from_pandas(df.drop(columns=["obs_2", "next_obs_2"]), env_id="Pendulum-v1")
    with pytest.raises(InvalidData, match="reward"):
        OfflineDataset.from_pandas(df.drop(columns=["reward"]))


@pytest.mark.slow
def test_import_csv_parquet_and_release_within_the_action_space(tmp_path, capsys):
    pytest.importorskip("pyarrow")
    pendulum_frame(seed=1).to_csv(tmp_path / "mine.csv", index=False)
    pendulum_frame(seed=2).to_parquet(tmp_path / "public.parquet")
    assert main(["datasets", "import", str(tmp_path / "mine.csv"), "--env-id", "Pendulum-v1"]) == 0
    assert "sensitive" in capsys.readouterr().out
    assert main(["datasets", "import", str(tmp_path / "public.parquet"), "--env-id", "Pendulum-v1", "--public"]) == 0
    sens, pub = minari_io.load_dataset("mine"), minari_io.load_dataset("public")
    assert sens.info.sensitive and not pub.info.sensitive and sens.n_transitions == 240
    assert main(["datasets", "import", str(tmp_path / "mine.csv"), "--env-id", "HalfCheetah-v5",
                 "--name", "wrong"]) == 2
    assert "observation dims" in capsys.readouterr().err
    res = synthesize("mine", public=["public"], epsilon=8.0, delta=1e-3, n=400, config=tiny_config(),
                     out_dataset="pendulum-synthetic", progress=False)
    out = minari_io.load_dataset("pendulum-synthetic")
    assert out.info.env_id == "Pendulum-v1" and res.dataset.n_transitions == out.n_transitions
    space = gym.make("Pendulum-v1").action_space
    assert all(space.contains(a) for a in out.actions)  # every released action inside [-2, 2]
    assert not out.terminals.any()  # Pendulum never terminates
    obs_space = gym.make("Pendulum-v1").observation_space
    assert np.all(out.observations <= obs_space.high) and np.all(out.observations >= obs_space.low)


@pytest.mark.slow
def test_synthesize_without_public_data_in_the_cli_charges_the_dp_normaliser(tmp_path, capsys):
    """Issue 22 item 7: no public data; the DP normaliser within public bounds is charged to the ledger."""
    from privsynth.privacy.ledger import Ledger

    pendulum_frame(seed=3).to_csv(tmp_path / "mine.csv", index=False)
    assert main(["datasets", "import", str(tmp_path / "mine.csv"), "--env-id", "Pendulum-v1"]) == 0
    base = ["synthesize", "--sensitive", "mine", "--epsilon", "8", "--delta", "1e-3", "-n", "300", "--config", "tiny",
            "--out-dataset", "nopub", "--quiet"]
    # issue 39: without --dp-normalizer the environment's spaces bound the columns (was: refused, "no public data")
    assert main(base[:-2] + ["nopub-env", "--quiet"]) == 0, capsys.readouterr().err
    env_card = minari_io.load_dataset("nopub-env").info.privacy_card
    assert env_card["ledger"]["public_data"] == ["normaliser: Pendulum-v1 spaces and reward bounds"]
    assert main(base + ["--dp-normalizer", "1"]) == 2 and "reward bounds" in capsys.readouterr().err
    assert main(base + ["--dp-normalizer", "1", "--reward-bounds=-17,0"]) == 0, capsys.readouterr().err
    out = minari_io.load_dataset("nopub")
    card = out.info.privacy_card
    ledger = Ledger.from_dict(card["ledger"])
    assert [ev.mechanism for ev in ledger.events] == ["gaussian", "laplace", "dpsgd"]  # the normaliser first, then the unit count and DP-SGD
    assert ledger.events[0].params["noise"] == "secure" and card["epsilon"] <= 8.0 + 1e-9
    assert card["normalizer"] == "dp" and not card["public_data"]
    space = gym.make("Pendulum-v1").action_space
    assert all(space.contains(a) for a in out.actions)
