"""DP-APVI's noisy counts released as a DP synthetic offline-RL dataset: post-processing of the eq. 2 count release
of Algorithm 1 in "Offline Reinforcement Learning with Differential Privacy".

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
from privsynth.privacy.noise import NoiseSource

__all__ = ["make_tabular_source", "synthetic_dataset", "release_outputs", "release_synthetic_dataset"]


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
    """The release as a :class:`privsynth.privacy.ledger.Ledger` (PLD accountant): the count release's own events,
    its Gaussian zCDP event restated as the Gaussian mechanism it is (σ, Δ₂, and the noise source's kind kept, so a
    reproducible-noise release stays marked not DP)."""
    from privsynth.privacy.ledger import Ledger, LedgerEvent

    ledger = Ledger(unit="trajectory", accountant="pld", delta=privacy_delta,
                    neighbouring="replace one trajectory (n fixed); the sensitivities are replace-one values",
                    treated_as_public=["number of episodes n", "state and action sets, horizon H",
                                       "reward table (known-reward setting)" if release.reward_source == "known" else
                                       "nothing else: rewards are privatised with the counts"])
    if not release.ledger.events:
        raise PrivsynthError("the count release carries no ledger event")
    for ev in release.ledger.events:
        if ev.mechanism == "zcdp" and ev.params.get("sigma") is not None:
            extra = {k: v for k, v in ev.params.items() if k not in ("rho", "xi", "sigma", "sensitivity")}
            ledger.append(LedgerEvent.gaussian(ev.name, sigma=ev.params["sigma"], sensitivity=ev.params["sensitivity"],
                                               **extra))
        else:
            ledger.append(ev)
    return ledger


def public_card(release: CountRelease, privacy_delta: float) -> tuple[dict[str, Any], Any]:
    """(privacy card, package ledger) of a count release: DP values (σ, E) and public facts only."""
    card = release.card(privacy_delta)
    ledger = _package_ledger(release, privacy_delta)
    card["ledger"] = ledger.card()
    card["epsilon"] = ledger.epsilon()
    return card, ledger


def synthetic_dataset(release: CountRelease, n_episodes: int, rng: np.random.Generator, *, name: str,
                      source: dict[str, Any], privacy_delta: float = 1e-5) -> tuple[OfflineDataset, float]:
    """Sample ``n_episodes`` synthetic trajectories from the release (``rng``: sampling from the released model,
    post-processing); returns (dataset with privacy card, ε at δ). ``source`` must hold public MDP facts only."""
    syn: Trajectories = release.sample(n_episodes, rng)
    card, ledger = public_card(release, privacy_delta)
    extra = {"algorithm": "dp-apvi-counts", "mdp": source, "n_synthetic_episodes": n_episodes}
    return syn.to_offline_dataset(name=name, sensitive=False, extra=extra, privacy_card=card), card["epsilon"]


def release_outputs(sensitive: Trajectories, mdp: TabularMDP, *, name: str, rho: float, n_synthetic: int,
                    privacy_delta: float = 1e-5, sample_seed: int = 0, noise: NoiseSource | None = None):
    """The releasing path of DP-APVI on a sensitive dataset: returns (synthetic dataset with card and metadata,
    package ledger). Everything returned is the DP release (ñ → synthetic rows, σ, E) or a public fact (the MDP's
    description, n, H, S, A, the known reward table); the neighbour test compares these across D and D'."""
    H, S, A = mdp.shape
    release = release_counts_sensitive(sensitive, S, A, noise, rho=rho, reward=mdp.R)
    source = {"name": mdp.name, **mdp.meta}
    ds, _ = synthetic_dataset(release, n_synthetic, np.random.default_rng([sample_seed, 3]), name=name, source=source,
                              privacy_delta=privacy_delta)
    return ds, _package_ledger(release, privacy_delta)


def release_synthetic_dataset(dataset_id: str, *, epsilon_budget: float, env: str = "gridworld", n_episodes: int = 10000,
                              rho: float = 1.0, n_synthetic: int | None = None, privacy_delta: float = 1e-5,
                              seed: int = 0, overwrite: bool = False, data_seed: int | None = None,
                              noise_seed: int | None = None) -> Path:
    """Generate sensitive trajectories from ``env``, release DP-APVI's counts at ``rho`` (known public reward), sample
    synthetic trajectories and write them as the Minari dataset ``dataset_id``. The release guard
    (:func:`privsynth.privacy.guard.guarded_write`) refuses (raises :class:`~privsynth.errors.BudgetExceeded`,
    nothing written) if ε at ``privacy_delta`` exceeds ``epsilon_budget``.

    ``seed`` picks the (public) MDP instance and the sampling from the released model; it is written in the
    metadata (``extra["mdp"]``), so it never drives the sensitive data or the noise: the sensitive trajectories come
    from ``data_seed`` (default: OS entropy; never written) and the privacy noise from OS entropy unless
    ``noise_seed`` is given (tests only: the guard then refuses the release)."""
    from privsynth.data import minari_io
    from privsynth.privacy.guard import check_budget, guarded_write

    final = minari_io.target_path(dataset_id)
    if final.exists() and not overwrite:
        raise PrivsynthError(f"dataset '{dataset_id}' already exists; pass --overwrite (overwrite=True) to replace it")
    mdp, mu = make_tabular_source(env, seed=seed)
    sensitive = mdp.sample(mu, n_episodes, np.random.default_rng(data_seed))
    noise = NoiseSource() if noise_seed is None else NoiseSource.reproducible(noise_seed)
    ds, ledger = release_outputs(sensitive, mdp, name=dataset_id, rho=rho, n_synthetic=n_synthetic or n_episodes,
                                 privacy_delta=privacy_delta, sample_seed=seed, noise=noise)
    check_budget(ledger, epsilon_budget, privacy_delta)  # refuse before writing anything
    # the guard checks the budget again, writes to a temporary sibling, attaches the ledger and card, then renames
    return guarded_write(final, lambda tmp: minari_io.write_dataset_dir(ds, dataset_id, tmp), ledger,
                         epsilon_budget, privacy_delta)
