"""DP-VAPVI behind the method protocol (Qiao & Wang, "Offline Reinforcement Learning with Differential Privacy",
Algorithm 2; docs/dp_vapvi.md).

Wraps :func:`privsynth.methods.dp_vapvi.dp_vapvi` on the linear MDP of the paper's simulation (section 5,
:func:`privsynth.methods.linear_mdp.synthetic_linear_mdp`), whose feature map φ (normalised to ‖φ‖ ≤ 1) is public
and named by the config. The 5H Gaussian releases land on a zCDP ledger, restated on a package ledger at the
config's δ (RDP over the zCDP events). The gap v* − v^π̂ is exact in the public MDP.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.methods.adapters.tabular_view import TabularPolicy, rho_for_budget, trajectories_view
from privsynth.methods.dp_vapvi import VAPVIConfig, dp_vapvi
from privsynth.methods.linear_mdp import LinearMDP, behaviour_policy, synthetic_linear_mdp
from privsynth.methods.protocol import MethodAdapter, MethodResult, finish
from privsynth.privacy.noise import NoiseSource

__all__ = ["LinearEnvConfig", "DPVAPVIMethodConfig", "DPVAPVIMethod", "public_linear_mdp", "example_dataset"]


@dataclass
class LinearEnvConfig:
    """The public linear MDP (section 5: 2 states, A actions, d = 10, horizon H; reconstructed modifications)."""

    H: int = 20
    A: int = 100
    seed: int = 0
    transition_mode: str = "two_alpha"
    reward_mode: str = "R1"


@dataclass
class DPVAPVIMethodConfig:
    epsilon: float = 7.5  # ≈ ρ = 1 at δ = 1e-5 (the paper plots ρ ∈ {1, 10, 100} as well)
    delta: float = 1e-5
    rho: float | None = None  # zCDP budget; None: the largest ρ whose ε at δ fits epsilon
    env: LinearEnvConfig = field(default_factory=LinearEnvConfig)
    vapvi: VAPVIConfig = field(default_factory=VAPVIConfig)
    seed: int = 0  # tie-breaking only (never the noise)
    noise_seed: int | None = None  # None: noise from OS entropy; an int replays it (NOT DP)


def public_linear_mdp(env: LinearEnvConfig) -> LinearMDP:
    return synthetic_linear_mdp(H=env.H, A=env.A, seed=env.seed, transition_mode=env.transition_mode,
                                reward_mode=env.reward_mode, normalize_features=True)


class DPVAPVIMethod(MethodAdapter):
    name = "dp-vapvi"
    config_class = DPVAPVIMethodConfig

    def _run(self, sensitive: OfflineDataset, cfg: DPVAPVIMethodConfig) -> MethodResult:
        mdp = public_linear_mdp(cfg.env)
        H, S, A = mdp.tabular.shape
        traj = trajectories_view(sensitive, H, S, A, self.name)
        noise = NoiseSource() if cfg.noise_seed is None else NoiseSource.reproducible(cfg.noise_seed)
        rho = rho_for_budget(cfg.rho, cfg.epsilon, cfg.delta)
        result = dp_vapvi(traj, mdp.Phi, rho, cfg.vapvi, cfg.seed, noise=noise)
        del traj
        ledger = result.ledger.to_ledger(cfg.delta)
        metrics = {"gap": mdp.gap(result.policy), "value": mdp.tabular.policy_value(result.policy),
                   "v_star": mdp.tabular.optimal()[0], "rho": rho}
        settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "noise_seed"}
        return finish(ledger, cfg.epsilon, settings=settings, policy=TabularPolicy(result.policy, result.Q), metrics=metrics)


def example_dataset(episodes: int = 100, env: LinearEnvConfig | dict | None = None,
                    seed: int = 0) -> OfflineDataset:
    """Sensitive trajectories of the paper's behaviour policy (action 0 w.p. 0.6) in the public linear MDP."""
    env = LinearEnvConfig(**env) if isinstance(env, dict) else env or LinearEnvConfig()
    mdp = public_linear_mdp(env)
    H, S, A = mdp.tabular.shape
    traj = mdp.sample(behaviour_policy(H, S, A), episodes, np.random.default_rng([seed, 0]))
    return traj.to_offline_dataset(name=f"{mdp.name}-behaviour", sensitive=True)
