"""PriMORL behind the method protocol (Rio et al., arXiv 2402.05525; docs/primorl.md).

Wraps :func:`privsynth.methods.primorl.pipeline.run_primorl`: the TDP ensemble (Algorithm 1) is calibrated to the
config's (ε, δ) at the trajectory unit, its ledger is the result's ledger, and the SAC policy trained in the
pessimistic model (Algorithm 4) is the result's policy (post-processing, Theorem 4.5). With ``n_synthetic > 0`` the
private model's rollouts from ρ0 are returned as a DP synthetic dataset too (same ledger, post-processing).
The dataset must name a gymnasium environment (``info.env_id``): bounds, ρ0 and the public rollouts come from it.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.methods.primorl.pipeline import PriMORLConfig, generate_trajectories, public_env_info, run_primorl
from privsynth.methods.protocol import MethodAdapter, MethodResult, finish

__all__ = ["PriMORLMethodConfig", "PriMORLMethod", "example_dataset"]


@dataclass
class PriMORLMethodConfig:
    """The paper's Pendulum "High" privacy level (Table 2: ε = 5.1 at δ = 1e-5) and its pipeline settings."""

    epsilon: float = 5.1  # target ε of the TDP ensemble (Table 2, Pendulum High)
    delta: float = 1e-5  # Table 2
    seed: int = 0  # non-private randomness: initialisation, minibatch orders, SAC, evaluation resets
    noise_seed: int | None = None  # None: Poisson masks and noise from OS entropy; an int replays them (NOT DP)
    pipeline: PriMORLConfig = field(default_factory=PriMORLConfig)  # ensemble, TDP, pessimism, SAC (Tables 7-8)
    n_synthetic: int = 0  # episodes of private-model rollouts returned as a DP dataset (0: none)
    synthetic_horizon: int = 200  # Pendulum-v1's episode length


class PriMORLMethod(MethodAdapter):
    name = "primorl"
    config_class = PriMORLMethodConfig

    def _run(self, sensitive: OfflineDataset, cfg: PriMORLMethodConfig) -> MethodResult:
        if not sensitive.info.env_id:
            raise InvalidData(f"primorl needs the dataset's environment (info.env_id) for bounds, rho0 and public "
                              f"rollouts; dataset '{sensitive.info.name}' names none")
        tdp = dataclasses.replace(cfg.pipeline.tdp, target_epsilon=cfg.epsilon, noise_multiplier=None,
                                  delta=cfg.delta, noise_seed=cfg.noise_seed)
        pipe = dataclasses.replace(cfg.pipeline, tdp=tdp, seed=cfg.seed)
        run = run_primorl(sensitive, pipe)
        if run.ledger is None:
            raise PrivacyError("primorl: the run added no noise, so it has no finite epsilon")
        dataset = None
        if cfg.n_synthetic > 0:
            dataset = generate_trajectories(run.mdp, [None, run.policy], episodes=cfg.n_synthetic,
                                            horizon=cfg.synthetic_horizon, info=public_env_info(sensitive.info),
                                            seed=cfg.seed)
            dataset.info.privacy_card = run.ledger.card()
        metrics = {"return": run.sac.final_return(5), "noise_multiplier": run.tdp.noise_multiplier,
                   "rounds": run.tdp.rounds}
        return finish(run.ledger, cfg.epsilon, settings=_settings(cfg), policy=run.policy, dataset=dataset,
                      metrics=metrics)


def _settings(cfg: PriMORLMethodConfig) -> dict:
    out = dataclasses.asdict(cfg)
    out.pop("noise_seed")
    return out


def example_dataset(episodes: int = 20, seed: int = 0) -> OfflineDataset:
    """A sensitive Pendulum-v1 dataset of the paper's kind (:func:`privsynth.methods.primorl.data.make_pendulum_dataset`)."""
    from privsynth.methods.primorl.data import PendulumDataConfig, make_pendulum_dataset

    return make_pendulum_dataset(PendulumDataConfig(episodes=episodes, seed=seed))
