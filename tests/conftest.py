"""Shared fixtures: tiny datasets, an isolated Minari store, one torch thread."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsynth.data import DatasetInfo, OfflineDataset

torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _isolated_minari(tmp_path_factory, monkeypatch):
    """Every test writes Minari datasets to its own temporary store."""
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(tmp_path_factory.mktemp("minari")))


def make_toy_dataset(lengths=(5, 3, 7), obs_dim=4, act_dim=2, seed=0, sensitive=False, name="toy") -> OfflineDataset:
    """Random episodes with the given lengths; the last transition of the second episode is terminal."""
    rng = np.random.default_rng(seed)
    n = sum(lengths)
    ids = np.repeat(np.arange(len(lengths)) + 10, lengths)
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    terminals = np.zeros(n, dtype=bool)
    if len(lengths) > 1:
        terminals[lengths[0] + lengths[1] - 1] = True
    timeouts = np.zeros(n, dtype=bool)
    ends = np.cumsum(lengths) - 1
    timeouts[ends] = ~terminals[ends]
    return OfflineDataset(
        observations=obs,
        actions=rng.uniform(-1, 1, size=(n, act_dim)),
        rewards=rng.normal(size=n),
        next_observations=obs + 0.1,
        terminals=terminals,
        timeouts=timeouts,
        episode_ids=ids,
        info=DatasetInfo(name=name, sensitive=sensitive, ref_min_score=0.0, ref_max_score=10.0),
    )


@pytest.fixture
def toy_dataset() -> OfflineDataset:
    return make_toy_dataset()
