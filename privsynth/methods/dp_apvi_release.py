"""DP-APVI's noisy counts released as a DP synthetic offline-RL dataset (notes section 8.2, "CountSynth").

The consistent noisy counts ñ[h,s,a,s'] define a tabular model (d̃1, μ̃, P̃) that is ρ-zCDP for one trajectory
(replace-one); sampling trajectories from it is post-processing. The dataset is written with the package's Minari
writer and carries a privacy card: the ledger (one Gaussian mechanism on the count vector), σ per count, the
consistency threshold E, the utility δ, and what is treated as public (the number of episodes n, the MDP's state and
action sets, the horizon, and the known reward table in the paper's known-reward setting).

Observations are ``[state index, step h]`` and actions ``[action index]`` (float32); there is no gymnasium id, so
``info.env_id`` is None and the MDP parameters needed to rebuild the environment are in ``info.extra``.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import PrivsynthError
from privsynth.methods.dp_apvi import CountRelease, count_sensitivity, release_counts_sensitive
from privsynth.methods.tabular_mdp import TabularMDP, Trajectories, gridworld_mdp, random_tabular_mdp, uniform_policy

__all__ = ["make_tabular_source", "synthetic_dataset", "release_synthetic_dataset"]


def make_tabular_source(env: str = "gridworld", H: int | None = None, seed: int = 0) -> tuple[TabularMDP, np.ndarray]:
    """(MDP, behaviour policy μ) of the tabular data sources: ``gridworld`` (μ = ½π* + ½ uniform) or ``random`` (uniform μ)."""
    if env == "gridworld":
        mdp = gridworld_mdp(H=H or 12)
        _, pi = mdp.optimal()
        Hh, S, A = mdp.shape
        return mdp, 0.5 * np.eye(A)[pi] + 0.5 * uniform_policy(Hh, S, A)
    if env == "random":
        mdp = random_tabular_mdp(H=H or 10, seed=seed)
        return mdp, uniform_policy(*mdp.shape)
    raise PrivsynthError(f"unknown tabular environment '{env}' (use gridworld or random)")


def _package_ledger(release: CountRelease, privacy_delta: float):
    """The release as a :class:`privsynth.privacy.ledger.Ledger` (one Gaussian or Laplace event, PLD accountant)."""
    from privsynth.privacy.ledger import Ledger, LedgerEvent

    H = release.shape[0]
    ledger = Ledger(unit="trajectory", accountant="pld", delta=privacy_delta,
                    neighbouring="replace one trajectory (n fixed); the sensitivities are replace-one values",
                    treated_as_public=["number of episodes n", "state and action sets, horizon H",
                                       "reward table (known-reward setting)" if release.reward_source == "known" else
                                       "nothing else: rewards are privatised with the counts"])
    private_rewards = release.reward_source == "private"
    if release.mechanism == "gaussian":
        ev = LedgerEvent.gaussian("dp_apvi.counts", sigma=release.noise_scale,
                                  sensitivity=count_sensitivity(H, private_rewards), unit="trajectory")
    else:
        ev = LedgerEvent.laplace("dp_apvi.counts", scale=release.noise_scale,
                                 sensitivity=count_sensitivity(H, private_rewards, "l1"), unit="trajectory")
    return ledger.append(ev)


def synthetic_dataset(release: CountRelease, n_episodes: int, rng: np.random.Generator, *, name: str,
                      source: dict[str, Any], privacy_delta: float = 1e-5) -> tuple[OfflineDataset, float]:
    """Sample ``n_episodes`` synthetic trajectories from the release; returns (dataset with privacy card, ε at δ)."""
    syn: Trajectories = release.sample(n_episodes, rng)
    card = release.card(privacy_delta)
    ledger = _package_ledger(release, privacy_delta)
    card["ledger"] = ledger.card()
    eps = ledger.epsilon()
    card["epsilon"] = eps
    extra = {"algorithm": "dp-apvi-counts", "mdp": source, "n_synthetic_episodes": n_episodes}
    return syn.to_offline_dataset(name=name, sensitive=False, extra=extra, privacy_card=card), eps


def release_synthetic_dataset(dataset_id: str, *, epsilon_budget: float, env: str = "gridworld", n_episodes: int = 10000,
                              rho: float = 1.0, n_synthetic: int | None = None, privacy_delta: float = 1e-5,
                              seed: int = 0, overwrite: bool = False) -> Path:
    """Generate sensitive trajectories from ``env``, release DP-APVI's counts at ``rho`` (known public reward), sample
    synthetic trajectories and write them as the Minari dataset ``dataset_id``. The release guard
    (:func:`privsynth.privacy.guard.guarded_write`) refuses (raises :class:`~privsynth.errors.BudgetExceeded`,
    nothing written) if ε at ``privacy_delta`` exceeds ``epsilon_budget``."""
    from privsynth.data import minari_io
    from privsynth.privacy.guard import check_budget, guarded_write

    final = minari_io.target_path(dataset_id)
    if final.exists() and not overwrite:
        raise PrivsynthError(f"dataset '{dataset_id}' already exists; pass --overwrite (overwrite=True) to replace it")
    mdp, mu = make_tabular_source(env, seed=seed)
    H, S, A = mdp.shape
    sensitive = mdp.sample(mu, n_episodes, np.random.default_rng([seed, 0]))
    release = release_counts_sensitive(sensitive, S, A, np.random.default_rng([seed, 1]), rho=rho, reward=mdp.R)
    ledger = _package_ledger(release, privacy_delta)
    check_budget(ledger, epsilon_budget, privacy_delta)  # refuse before sampling or writing anything
    source = {"name": mdp.name, **mdp.meta}
    ds, _ = synthetic_dataset(release, n_synthetic or n_episodes, np.random.default_rng([seed, 3]),
                              name=dataset_id, source=source, privacy_delta=privacy_delta)
    # the guard checks the budget again, writes to a temporary sibling, attaches the ledger and card, then renames
    return guarded_write(final, lambda tmp: minari_io.write_dataset_dir(ds, dataset_id, tmp), ledger,
                         epsilon_budget, privacy_delta)
