"""Expert-level DP behind the method protocol (Sharma, Vinod et al., "Preserving Expert-Level Privacy in Offline
RL", TMLR 2025; docs/expert_svt.md).

Wraps Algorithm 2 (:func:`privsynth.methods.expert_svt.data_release`, the SVT stable-prefix release at (ε₁, δ₁))
and Algorithm 3 (:func:`privsynth.methods.expert_dpsgd.selective_dpsgd`, expert-level DP-SGD on the rest at
(ε₂, δ₂)), with the budget split of the paper (:func:`~privsynth.methods.expert_svt.budget_split`). The ledger is the
trained model's (release event + the strict DP-SGD event, unit = expert); the policy is the learner's greedy action;
the dataset is the released stable prefixes D_stable (no expert ids).

The private database is the set of experts with their trajectories: the sensitive dataset carries each episode's
expert id (``info.extra["episode_expert"]``, as :meth:`ExpertData.to_offline_dataset` writes it) and the SVT count
needs query access to the experts' policies (Assumption 3.5): the config's ``experts`` object, else the linear
experts stored with the dataset (``info.extra["experts"]`` = ``{"W", "c", "p_min"}``). Both are sensitive and are
read only inside the mechanisms.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData
from privsynth.methods.discrete_learners import LearnerConfig
from privsynth.methods.expert_dpsgd import SelectiveConfig, selective_dpsgd
from privsynth.methods.expert_envs import ENV_SPECS, ExpertData, LinearExperts, default_env_returns, get_spec
from privsynth.methods.expert_svt import (DataReleaseConfig, budget_split, check_expert_delta, data_release,
                                          PUBLIC_DEFAULT_DELTA, release_order)
from privsynth.methods.protocol import MethodAdapter, MethodResult, finish, require_sensitive
from privsynth.privacy.accounting import check_epsilon

__all__ = ["ExpertSVTMethodConfig", "ExpertSVTMethod", "expert_view", "example_dataset"]

T_ROUNDS = {5.0: 20, 7.5: 20, 10.0: 25}  # paper App. B.3 (Acrobot and CartPole)
P_SELECTIVE = {5.0: 0.8, 7.5: 0.9, 10.0: 0.8}  # paper Table 1 (CartPole CQL)


@dataclass
class ExpertSVTMethodConfig:
    """Defaults: the paper's main setting (ε = 10, CQL, C = 1, b = 128), except δ.

    δ: the paper used δ = 1/m (m = number of experts, the privacy units; 1/3000 in its experiments). privsynth
    requires δ < 1/N for N privacy units (:func:`privsynth.privacy.accounting.check_delta`), since a δ = 1/N guarantee
    allows publishing one unit's data outright, so ``delta = None`` (the default) means the public constant
    :data:`~privsynth.methods.expert_svt.PUBLIC_DEFAULT_DELTA` (1e-6: 1/(10m) would print m, which is private), and an explicit δ ≥ 1/m is refused
    (PrivacyError) before any data is touched."""

    epsilon: float = 10.0
    delta: float | None = None  # total δ; None: 1e-6, a public constant (must be < 1/m)
    split: str = "paper"  # budget split (App. B.3): paper | split | stable | dpsgd
    env: str | None = None  # cartpole | acrobot; None: from info.env_id ("privsynth-<env>")
    n_rounds: int | None = None  # T; None: the paper's T for the nearest listed ε (20 or 25)
    sampler: str = "expert"  # the analysed sampler (Alg. 2 A₁)
    max_len: int | None = None  # public horizon cap L; None: the environment's data horizon
    p: float | None = None  # probability of a noisy step; None: 0 (stable), 1 (dpsgd), Table 1 (split)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    steps: int = 1000  # training steps N (CPU cap; the paper trains as long as ε₂ allows)
    batch_size: int = 128  # b
    clip: float = 1.0  # C
    accountant: str = "pld"  # the paper's accountant
    eval_episodes: int = 10
    seed: int = 0  # non-private: init, public coins, batches of the released D_stable, evaluation
    noise_seed: int | None = None  # None: draws and noise from OS entropy; an int replays them (NOT DP)
    experts: Any = None  # query access to the experts' policies (ExpertPolicies); None: from the dataset


def _nearest(table: dict[float, Any], eps: float) -> Any:
    return table[min(table, key=lambda k: abs(k - eps))]


def _experts(ds: OfflineDataset, cfg: ExpertSVTMethodConfig) -> Any:
    if cfg.experts is not None:
        return cfg.experts
    spec = ds.info.extra.get("experts")
    if not isinstance(spec, dict) or not {"W", "c", "p_min"} <= set(spec):
        raise InvalidData("expert-svt needs query access to the experts' policies: give config.experts or a dataset "
                          "whose info.extra['experts'] holds {W, c, p_min}")
    return LinearExperts(np.asarray(spec["W"], dtype=np.float64), np.asarray(spec["c"], dtype=np.float64),
                         float(spec["p_min"]))


def expert_view(ds: OfflineDataset, env: str, n_experts: int) -> ExpertData:
    """The dataset as expert-tagged data (:class:`ExpertData`); a reshape, no statistic of the data is computed."""
    who = ds.info.extra.get("episode_expert")
    starts = np.concatenate([[0], np.flatnonzero(ds.episode_ids[1:] != ds.episode_ids[:-1]) + 1])
    if who is None or len(who) != len(starts):
        raise InvalidData(f"expert-svt needs each episode's expert id in info.extra['episode_expert'] "
                          f"({len(starts)} episodes in dataset '{ds.info.name}')")
    who = np.asarray(who, dtype=np.int64)
    if who.min() < 0 or who.max() >= n_experts:
        raise InvalidData(f"expert-svt: expert ids must lie in [0, {n_experts}) (one per expert policy)")
    spec = get_spec(env)
    if ds.obs_dim != spec.obs_dim or ds.act_dim != 1:
        raise InvalidData(f"expert-svt on {env} reads {spec.obs_dim}-d observations and one action-index column")
    lengths = np.diff(np.concatenate([starts, [len(ds)]]))
    actions = np.rint(ds.actions[:, 0]).astype(np.int64)
    if actions.min() < 0 or actions.max() >= spec.n_actions:
        raise InvalidData(f"expert-svt: actions must be indices in [0, {spec.n_actions}) for {env}")
    return ExpertData(env=env, obs=ds.observations.astype(np.float32), actions=actions,
                      rewards=ds.rewards.astype(np.float32), next_obs=ds.next_observations.astype(np.float32),
                      terminals=ds.terminals.astype(bool), expert=np.repeat(who, lengths), ep_start=starts,
                      ep_len=lengths, ep_expert=who, n_experts=n_experts)


class GreedyPolicy:
    """The learner's greedy action for one observation or a batch."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def act(self, obs: Any) -> np.ndarray:
        o = torch.as_tensor(np.asarray(obs, dtype=np.float32))
        return self.model.act(o.reshape(-1, o.shape[-1])).numpy().reshape(o.shape[:-1])


class ExpertSVTMethod(MethodAdapter):
    name = "expert-svt"
    config_class = ExpertSVTMethodConfig

    def run(self, sensitive: OfflineDataset, config: Any = None) -> MethodResult:
        """As :meth:`MethodAdapter.run`, with ``delta = None`` resolved to the public default δ first (m = the number of experts,
        a public fact read from the experts' query access, not from the data)."""
        cfg = self.config if config is None else config
        if isinstance(cfg, ExpertSVTMethodConfig) and cfg.delta is None:
            require_sensitive(sensitive, self.name)
            check_epsilon(cfg.epsilon, f"{self.name}: epsilon")  # the protocol's order: the budget before the layout
            cfg = dataclasses.replace(cfg, delta=PUBLIC_DEFAULT_DELTA)  # a public constant: m is private
        return super().run(sensitive, cfg)

    def _run(self, sensitive: OfflineDataset, cfg: ExpertSVTMethodConfig) -> MethodResult:
        env = cfg.env or (sensitive.info.env_id or "").removeprefix("privsynth-")
        if env not in ENV_SPECS:
            raise InvalidData(f"expert-svt: unknown environment '{env}': set config.env to one of {', '.join(ENV_SPECS)}")
        experts = _experts(sensitive, cfg)
        m = int(experts.m)
        delta = PUBLIC_DEFAULT_DELTA if cfg.delta is None else cfg.delta
        check_expert_delta(delta, m, "expert-svt config.delta")  # before the data is read
        cfg = dataclasses.replace(cfg, delta=delta)  # the card's settings show the δ actually used
        data = expert_view(sensitive, env, m)
        e1, d1, e2, d2 = budget_split(env, cfg.epsilon, cfg.delta, cfg.split)
        p = cfg.p if cfg.p is not None else (0.0 if e2 == 0 else 1.0 if e1 == 0 else _nearest(P_SELECTIVE, cfg.epsilon))
        rounds = cfg.n_rounds or _nearest(T_ROUNDS, cfg.epsilon)
        seed2 = None if cfg.noise_seed is None else cfg.noise_seed + 1
        release = data_release(data, experts, DataReleaseConfig(e1, d1 if e1 else 0.0, rounds, cfg.sampler,
                                                                 cfg.max_len, cfg.noise_seed), keep_trace=False)
        sel = SelectiveConfig(steps=cfg.steps, batch_size=cfg.batch_size, p=p, clip=cfg.clip, eps2=e2, delta2=d2,
                              accountant=cfg.accountant, seed=cfg.seed, noise_seed=seed2)
        res = selective_dpsgd(data, release, cfg.learner, sel, n_actions=get_spec(env).n_actions)
        policy = GreedyPolicy(res.model)
        rets = default_env_returns(env, policy.act, cfg.eval_episodes, seed=10_000 + cfg.seed)
        stable = (_stable_dataset(data, release, ledger_card=res.ledger.card(), env=env)
                  if release.n_stable else None)  # the release may be empty (few experts agree)
        metrics = {"return": float(rets.mean()), "n_stable": release.n_stable, "noisy_steps": res.noisy_steps,
                   "stable_steps": res.stable_steps, "eps1": e1, "eps2": e2, "p": p, "rounds": rounds}
        settings = {k: v for k, v in dataclasses.asdict(dataclasses.replace(cfg, experts=None)).items()
                    if k not in ("experts", "noise_seed")}
        return finish(res.ledger, cfg.epsilon, settings=settings, policy=policy, dataset=stable, metrics=metrics)


def _stable_dataset(data: ExpertData, release: Any, *, ledger_card: dict, env: str) -> OfflineDataset:
    """D_stable (the DP release) as an OfflineDataset: one episode per released prefix, numbered 0..n-1 in the
    (secret, random) order of the SVT rounds, no expert ids.

    Neither the logged episode index nor the log order may leave: the log is stored expert by expert
    (``collect_expert_data``), so the logged index of a prefix reveals which expert produced it (index // N), the
    identity the release protects, and sorting the prefixes by log position reveals their experts' relative order."""
    lengths = np.asarray([int(r["k"]) for r in release.rounds if int(r["k"]) > 0], dtype=np.int64)
    idx = release_order(data, release)
    if not len(idx) or not np.array_equal(np.sort(idx), np.asarray(release.stable_idx, dtype=np.int64)):
        raise InvalidData("expert-svt: the rounds do not describe the stable release")  # internal consistency
    episode = np.repeat(np.arange(len(lengths)), lengths)
    ends = np.zeros(len(idx), dtype=bool)
    ends[np.cumsum(lengths) - 1] = True
    terminals = data.terminals[idx]
    info = DatasetInfo(name=f"expert-svt-stable-{env}", env_id=f"privsynth-{env}", privacy_card=ledger_card,
                       extra={"algorithm": "expert-level SVT stable prefixes (Alg. 2)", "discrete_actions": True})
    return OfflineDataset(observations=data.obs[idx], actions=data.actions[idx].astype(np.float32)[:, None],
                          rewards=data.rewards[idx], next_observations=data.next_obs[idx], terminals=terminals,
                          timeouts=ends & ~terminals, episode_ids=episode, info=info)


def example_dataset(env: str = "acrobot", per_factor: int = 3, n_traj_per_expert: int = 4, seed: int = 0) -> OfflineDataset:
    """A small expert pool (:func:`privsynth.methods.expert_envs.make_expert_pool`, per_factor³ variants x 3
    experts) with its trajectories, the experts' linear policies stored with the (sensitive) dataset."""
    from privsynth.methods.expert_envs import ExpertPoolConfig, make_expert_pool

    experts, data = make_expert_pool(ExpertPoolConfig(env=env, per_factor=per_factor,
                                                      n_traj_per_expert=n_traj_per_expert, seed=seed))
    ds = data.to_offline_dataset(name=f"{env}-experts")
    ds.info.extra["experts"] = {"W": experts.W.tolist(), "c": experts.c.tolist(), "p_min": experts.p_min}
    return ds
