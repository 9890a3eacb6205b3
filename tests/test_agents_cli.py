"""The agents CLI: a tiny run through privsynth.cli.main, and its one-line errors."""
import json

from privsynth.cli import main
from privsynth.data.minari_io import write_dataset
from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze


def test_agents_train_cli_writes_summary(tmp_path, capsys):
    ds = generate_pointmaze(PointMazeConfig(maze="umaze", steps=600, seed=0, ref_episodes=1), progress=False)
    write_dataset(ds, "test/umaze-v0")
    rc = main(["agents", "train", "--data", "test/umaze-v0", "--agents", "td3bc", "--seeds", "0", "--updates", "20",
               "--eval-every", "10", "--eval-episodes", "1", "--final-k", "1", "--out", str(tmp_path), "--quiet"])
    assert rc == 0
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["eval_env"] == ds.info.env_id
    assert set(summary["agents"]) == {"td3bc"}
    # a second run into the same folder: refused (nothing trained), then with --overwrite the old seed file goes
    again = ["agents", "train", "--data", "test/umaze-v0", "--agents", "td3bc", "--seeds", "1", "--updates", "20",
             "--eval-every", "10", "--eval-episodes", "1", "--final-k", "1", "--out", str(tmp_path), "--quiet"]
    assert main(again) == 2
    assert "--overwrite" in capsys.readouterr().err
    assert (tmp_path / "td3bc-seed0.json").exists()
    assert main([*again, "--overwrite"]) == 0
    assert sorted(f.name for f in tmp_path.glob("*.json")) == ["summary.json", "td3bc-seed1.json"]


def test_agents_train_cli_rejects_unknown_agent(capsys):
    assert main(["agents", "train", "--data", "x", "--agents", "dqn"]) == 2
    assert "unknown agent" in capsys.readouterr().err


def test_agents_train_cli_refuses_bad_counts_and_file_out(tmp_path, capsys):
    for flag in ("--updates", "--eval-every", "--eval-episodes", "--final-k"):
        assert main(["agents", "train", "--data", "nope", flag, "0", "--quiet"]) == 2
        assert f"{flag} must be at least 1" in capsys.readouterr().err
    f = tmp_path / "file"
    f.write_text("x")
    assert main(["agents", "train", "--data", "nope", "--out", str(f), "--quiet"]) == 2
    assert "is a file" in capsys.readouterr().err
