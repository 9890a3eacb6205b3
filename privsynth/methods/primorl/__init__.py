"""PriMORL (Rio et al., ICLR 2025 submission / arXiv 2402.05525): trajectory-level DP offline RL by privatising the
learner. A DP-FedAvg-style ensemble of Gaussian dynamics models (Algorithm 1, :mod:`.dynamics`), a pessimistic MDP
built from it (:mod:`.pessimistic_mdp`), SAC on model rollouts only (:mod:`.sac`), glued by :mod:`.pipeline`.
See docs/primorl.md."""
from privsynth.methods.primorl.dynamics import (
    EnsembleConfig,
    GaussianEnsemble,
    TDPConfig,
    TDPResult,
    ensemble_clip,
    poisson_sample,
    primorl_epsilon,
    train_ensemble_nonprivate,
    train_tdp_ensemble,
)



__all__ = [
    "EnsembleConfig",
    "GaussianEnsemble",
    "TDPConfig",
    "TDPResult",
    "ensemble_clip",
    "poisson_sample",
    "primorl_epsilon",
    "train_ensemble_nonprivate",
    "train_tdp_ensemble",
    "PessimisticMDP",
    "PessimismConfig",
    "initial_state_sampler",
    "SACConfig",
    "SACPolicy",
    "train_sac_in_model",
]
from privsynth.methods.primorl.pessimistic_mdp import PessimisticMDP, PessimismConfig, initial_state_sampler  # noqa: E402
from privsynth.methods.primorl.sac import SACConfig, SACPolicy, train_sac_in_model  # noqa: E402
