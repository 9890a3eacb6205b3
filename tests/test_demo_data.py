"""The demo's data stage: sets made by worker processes equal the ones made in the calling process."""
import numpy as np
import pytest

from privsynth.data.pointmaze import PointMazeConfig
from privsynth.demo import _datasets

ARRAYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids")


@pytest.mark.slow  # ~9 s: four short collection runs with their reference rollouts
def test_parallel_generation_gives_the_serial_datasets(tmp_path, monkeypatch):
    jobs = [(f"privsynth/t-{maze}-v0", PointMazeConfig(maze=maze, steps=400, seed=i, ref_episodes=1))
            for i, maze in enumerate(("umaze", "open"))]
    made = {}
    for workers in (1, 2):
        monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path / f"store{workers}"))
        lines: list[str] = []
        made[workers] = _datasets(jobs, workers, False, lines.append)
        assert len(lines) == 2 and all("wrote" in line for line in lines)
    for serial, parallel in zip(made[1], made[2]):
        for name in ARRAYS:
            np.testing.assert_array_equal(getattr(serial, name), getattr(parallel, name), err_msg=name)
        assert serial.info == parallel.info
    # a second call reuses the stored sets instead of generating them again
    lines = []
    again = _datasets(jobs, 2, False, lines.append)
    assert len(lines) == 2 and all("reusing" in line for line in lines)
    assert np.array_equal(again[0].observations, made[2][0].observations)
