"""Shared fixtures: tiny datasets, an isolated Minari store, one torch thread."""
from __future__ import annotations

import importlib.util
import pathlib
from types import ModuleType

import numpy as np
import pytest
import torch

from privsynth.data import DatasetInfo, OfflineDataset

torch.set_num_threads(1)

SCRIPTS = pathlib.Path(__file__).resolve().parents[1] / "scripts"


def load_script(stem: str) -> ModuleType:
    """``scripts/<stem>.py`` as a module (scripts/ is no package), executed afresh."""
    spec = importlib.util.spec_from_file_location(stem, SCRIPTS / f"{stem}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod

# Tests measured over ~5 s on the 2-core machine (`pytest --durations=80`, the machine shared); `make test` skips them,
# `make test-all` and CI's second stage run them. A test file may also mark its own tests with @pytest.mark.slow.
SLOW = {
    "test_demo.py::test_demo_end_to_end_tiny",
    "test_distributed_dpsgd.py::test_two_process_gradient_is_single_process_clipping",
    "test_sharded_sample.py::test_sharded_draw_is_the_shards_concatenated",
    "test_expert_svt.py::test_removing_one_expert_changes_release_only_within_round_guarantee",
    "test_privacy_accounting.py::test_calibration_is_tight",
    "test_mia.py::test_loss_attack_detects_memorisation",
    "test_locomotion.py::test_sac_update_runs_and_learns_a_bandit",
    "test_runner.py::test_cells_run_in_parallel_processes",
    "test_mia_synth.py::test_overfit_nondp_synthesizer_leaks",
    "test_kickstart_ppo.py::test_plain_ppo_learns_cartpole_a_little",
    "test_primorl_pipeline.py::test_train_and_generate_release_with_card",
    "test_traj_privacy.py::test_release_guard_refuses_over_budget",
    "test_traj_privacy.py::test_sample_rate_is_over_trajectories_and_epsilon_is_accounted",
    "test_pointmaze.py::test_reference_scores_normalise_expert_100_random_0",
    "test_agents.py::test_update_reduces_critic_loss",
    "test_dp_apvi.py::test_release_writes_a_minari_dataset_with_a_card_and_the_guard_refuses",
    "test_pointmaze.py::test_generator_deterministic_and_structured",
    "test_traj_privacy.py::test_normaliser_never_sees_sensitive_data",
    "test_traj_cli.py::test_synthesize_traj_releases_with_card",
    "test_primorl_accounting.py::test_ledger_event_of_a_run_matches_accountant",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        key = f"{item.path.name}::{item.originalname}"
        if key in SLOW:
            item.add_marker(pytest.mark.slow)


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


@pytest.fixture(scope="module")
def expert_pool():
    """600 linear CartPole experts and 20 logged trajectories each (the expert-level SVT tests' pool). The exact
    sampler draws experts with replacement (secure, unseeded) and refuses an exhausted one; with 20 per expert, as
    many as the tests' 20 rounds, it cannot run out (with 3 per expert, about 2e-5 of 20-round releases did)."""
    import numpy as np

    from privsynth.methods.expert_envs import LinearExperts, collect_expert_data

    rng = np.random.default_rng(0)
    m = 600
    base = rng.normal(size=(1, 2, 5))
    ex = LinearExperts(base[..., :4] + 0.3 * rng.normal(size=(m, 2, 4)), base[..., 4] + 0.3 * rng.normal(size=(m, 2)),
                       p_min=0.02)
    return ex, collect_expert_data("cartpole", ex, 20, seed=0, horizon=30)
