"""DP-APVI behind the method protocol (Qiao & Wang, "Offline Reinforcement Learning with Differential Privacy",
Algorithm 1; docs/dp_vapvi.md).

Wraps :func:`privsynth.methods.dp_apvi.release_counts_sensitive` (step A-B: noisy, consistent counts, the only
access to the sensitive trajectories) and :func:`privsynth.methods.dp_apvi.plan_on_release` (steps C-D:
post-processing). The ledger is the count release's zCDP ledger restated at the config's δ (RDP over the zCDP
events, as DP-VAPVI's; ``privsynth dp-apvi release`` reports the same events under PLD, which is a little
smaller). ``n_synthetic > 0`` also returns trajectories sampled from
the released counts (post-processing, same ledger). The gap v* − v^π̂ is exact in the public MDP.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np

from privsynth.data.dataset import OfflineDataset, environment_facts
from privsynth.errors import InvalidData
from privsynth.methods.adapters.tabular_view import TabularPolicy, rho_for_budget, trajectories_view
from privsynth.methods.dp_apvi import APVIConfig, plan_on_release, release_counts_sensitive
from privsynth.methods.dp_apvi_release import make_tabular_source
from privsynth.methods.protocol import MethodAdapter, MethodResult, finish
from privsynth.methods.tabular_mdp import TabularMDP
from privsynth.privacy.noise import NoiseSource

__all__ = ["TabularEnvConfig", "DPAPVIMethodConfig", "DPAPVIMethod", "public_mdp", "example_dataset"]


@dataclass
class TabularEnvConfig:
    """The public tabular MDP the data come from (:func:`privsynth.methods.dp_apvi_release.make_tabular_source`)."""

    kind: str = "gridworld"  # "gridworld" (4x4 slippery maze) or "random" (S=5, A=3 random MDP)
    H: int | None = None  # None: 12 for the gridworld, 10 for the random MDP
    seed: int = 0  # instance of the random MDP


@dataclass
class DPAPVIMethodConfig:
    """Defaults: the paper's Gaussian mechanism in the known-reward setting with the practical constants."""

    epsilon: float = 7.5  # ≈ ρ = 1 (the paper's middle budget) at δ = 1e-5
    delta: float = 1e-5
    rho: float | None = None  # zCDP budget; None: the largest ρ whose ε at δ fits epsilon
    mechanism: str = "gaussian"  # "gaussian" (ρ-zCDP, eq. 2) or "laplace" (pure ε-DP at epsilon)
    known_reward: bool = True  # the paper's setting; False privatises the reward sums with the counts
    env: TabularEnvConfig = field(default_factory=TabularEnvConfig)
    apvi: APVIConfig = field(default_factory=APVIConfig)
    n_synthetic: int = 0  # synthetic trajectories sampled from the released counts (0: none)
    seed: int = 0  # tie-breaking and synthetic sampling (never the noise)
    noise_seed: int | None = None  # None: noise from OS entropy; an int replays it (NOT DP)


def public_mdp(env: TabularEnvConfig) -> TabularMDP:
    return make_tabular_source(env.kind, H=env.H, seed=env.seed)[0]


class DPAPVIMethod(MethodAdapter):
    name = "dp-apvi"
    config_class = DPAPVIMethodConfig

    def _run(self, sensitive: OfflineDataset, cfg: DPAPVIMethodConfig) -> MethodResult:
        mdp = public_mdp(cfg.env)
        H, S, A = mdp.shape
        traj = trajectories_view(sensitive, H, S, A, self.name)
        noise = NoiseSource() if cfg.noise_seed is None else NoiseSource.reproducible(cfg.noise_seed)
        reward = mdp.R if cfg.known_reward else None
        if cfg.mechanism == "gaussian":
            rho = rho_for_budget(cfg.rho, cfg.epsilon, cfg.delta)
            release = release_counts_sensitive(traj, S, A, noise, rho=rho, delta=cfg.apvi.delta, reward=reward)
        elif cfg.mechanism == "laplace":
            release = release_counts_sensitive(traj, S, A, noise, epsilon=cfg.epsilon, delta=cfg.apvi.delta,
                                               reward=reward)
        else:
            raise InvalidData(f"dp-apvi: unknown mechanism '{cfg.mechanism}': choose gaussian or laplace")
        del traj  # everything below is post-processing of the release
        result = plan_on_release(release, cfg.apvi, cfg.seed)
        ledger = release.ledger.to_ledger(cfg.delta)
        if cfg.mechanism == "laplace":
            ledger.accountant = "pld"  # exact for pure ε-DP Laplace; RDP would report a little more than epsilon
        dataset = None
        if cfg.n_synthetic > 0:  # sampling the released model: post-processing
            syn = release.sample(cfg.n_synthetic, np.random.default_rng([cfg.seed, 3]))
            dataset = syn.to_offline_dataset(name="dp-apvi-synthetic", privacy_card=ledger.card(),
                                             extra={"algorithm": "dp-apvi-counts", "mdp": {"name": mdp.name, **mdp.meta}})
            # the sensitive set's environment facts (spec, reference scores: public), as every release carries
            dataset.info = dataclasses.replace(dataset.info, **environment_facts(sensitive.info))
        v_star = mdp.optimal()[0]
        metrics = {"gap": mdp.gap(result.policy), "value": mdp.policy_value(result.policy), "v_star": v_star,
                   "noise_scale": release.noise_scale, "threshold_E": release.threshold}
        settings = {k: v for k, v in dataclasses.asdict(cfg).items() if k != "noise_seed"}
        return finish(ledger, cfg.epsilon, settings=settings, policy=TabularPolicy(result.policy, result.Q), dataset=dataset,
                      metrics=metrics)


def example_dataset(episodes: int = 200, env: TabularEnvConfig | dict | None = None,
                    seed: int = 0) -> OfflineDataset:
    """Sensitive trajectories of the public MDP's behaviour policy (½π* + ½ uniform on the gridworld, uniform on
    the random MDP), from data seed ``seed``."""
    env = TabularEnvConfig(**env) if isinstance(env, dict) else env or TabularEnvConfig()
    mdp, mu = make_tabular_source(env.kind, H=env.H, seed=env.seed)
    traj = mdp.sample(mu, episodes, np.random.default_rng([seed, 0]))
    return traj.to_offline_dataset(name=f"{mdp.name}-behaviour", sensitive=True)
