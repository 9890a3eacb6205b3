"""PriMORL end to end (Algorithm 2 + 4, Figure 1) and its two further uses in privsynth.

* :func:`run_primorl`: sensitive dataset -> private ensemble (Alg. 1, accounted on a trajectory-unit ledger) ->
  pessimistic MDP -> SAC policy. The policy is (ε, δ)-TDP by post-processing (Theorem 4.5).
* :func:`generate_trajectories` + :func:`release_synthetic`: the private model as a DP trajectory generator; its
  rollouts from ρ0 under data-independent policies are a synthetic dataset with the same (ε, δ) (post-processing of
  the private model, Theorem 4.5), written as a Minari dataset through the release guard with the privacy card attached.
* :func:`run_on_synthetic`: the same pipeline as a consumer of DP synthetic data: the ensemble is fitted without
  clipping or noise (post-processing of already-private data), the ledger is the synthetic dataset's.

Public data. The paper declares a random 1% of the sensitive trajectories public (section 5.1) and uses it for the
target scales and snapshot selection; a random subset of the sensitive data is not public, so by default
(``public_source="env"``) privsynth generates its own public set instead: ``public_episodes`` rollouts of the public
simulator (``env_id`` of the dataset) under uniformly random actions, from seeds that are written in the config.
Every sensitive trajectory is then trained on under the accountant. ``public_source="split"`` reproduces the paper;
the card then says the guarantee covers only the trajectories outside that split. Input scales come from the
environment's public observation / action bounds.

Released metadata (config, synthetic dataset info) is built from public environment facts only
(:func:`public_env_info`: env id and kwargs, observation keys, action bounds, reference scores) plus the ledger and
card: nothing of the sensitive dataset's ``info.extra`` (which, for generated data, can hold the generator's seed).
"""
from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from privsynth.data import minari_io
from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.envs import make_env
from privsynth.errors import InvalidData, PrivacyError
from privsynth.methods.primorl.dynamics import (EnsembleConfig, GaussianEnsemble, TDPConfig, TDPResult,
                                                TrajectoryTensors, train_ensemble_nonprivate, train_tdp_ensemble)
from privsynth.methods.primorl.pessimistic_mdp import PessimismConfig, PessimisticMDP
from privsynth.methods.primorl.sac import SACConfig, SACPolicy, SACResult, train_sac_in_model
from privsynth.privacy.guard import guarded_write
from privsynth.privacy.ledger import Ledger
from privsynth.rl.evaluate import evaluate_policy

__all__ = ["PriMORLConfig", "PriMORLRun", "run_primorl", "run_mopo_reference", "run_on_synthetic",
           "generate_trajectories", "release_synthetic", "true_return", "build_model", "public_env_info",
           "public_rollouts", "train_outputs", "generate_outputs"]

# DatasetInfo fields that are facts about the (public) environment, not about the data
PUBLIC_INFO_FIELDS = ("env_id", "env_kwargs", "obs_keys", "action_low", "action_high", "ref_min_score", "ref_max_score")
# keys of info.extra that privsynth's own generator writes (public descriptions of the DP generator)
_GENERATOR_EXTRA = ("algorithm", "generator", "behaviour")


def public_env_info(info: DatasetInfo, name: str | None = None, extra: dict | None = None) -> DatasetInfo:
    """A DatasetInfo with the public environment facts of ``info`` only (never its ``extra``, name or card)."""
    return DatasetInfo(name=name or "primorl-synthetic", sensitive=False, extra=dict(extra or {}),
                       **{f: copy.deepcopy(getattr(info, f)) for f in PUBLIC_INFO_FIELDS})


@dataclass
class PriMORLConfig:
    ensemble: EnsembleConfig = field(default_factory=EnsembleConfig)
    tdp: TDPConfig = field(default_factory=TDPConfig)
    pessimism: PessimismConfig = field(default_factory=PessimismConfig)
    sac: SACConfig = field(default_factory=SACConfig)
    public_source: str = "env"  # "env": public random-policy rollouts of the simulator; "split": the paper's split
    public_episodes: int = 20  # episodes of the public rollouts ("env")
    public_fraction: float = 0.01  # "split" (and the non-private reference): the paper's 1% declared-public split
    eval_episodes: int = 5  # true-env episodes per SAC epoch (reporting only; paper: 10)
    seed: int = 0

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


@dataclass
class PriMORLRun:
    model: GaussianEnsemble
    mdp: PessimisticMDP
    sac: SACResult
    ledger: Ledger | None  # None for runs without noise (z = 0): no finite ε
    epsilon: float
    tdp: TDPResult | None = None

    @property
    def policy(self) -> SACPolicy:
        return self.sac.policy


def _space_scale(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    s = np.maximum(np.abs(low), np.abs(high)).astype(np.float32)
    if not np.all(np.isfinite(s)):
        raise InvalidData("the environment's observation/action bounds are not finite; give explicit input scales")
    return s


def build_model(info: DatasetInfo, public: OfflineDataset, cfg: EnsembleConfig, seed: int) -> GaussianEnsemble:
    """An untrained ensemble whose scales come from public information only (env bounds, public split)."""
    env = make_env(info)
    in_scale = np.concatenate([_space_scale(env.observation_space.low, env.observation_space.high),
                               _space_scale(env.action_space.low, env.action_space.high)])
    env.close()
    targets = np.concatenate([public.next_observations - public.observations, public.rewards[:, None]], 1)
    out_scale = targets.std(0) + 1e-3
    return GaussianEnsemble(public.obs_dim, public.act_dim, cfg, in_scale=in_scale, out_scale=out_scale, seed=seed)


def true_return(policy: SACPolicy, info: DatasetInfo, episodes: int = 5, seed: int = 10_000) -> float:
    """Mean undiscounted return of the deterministic policy in the TRUE environment (reporting only)."""
    env = make_env(info)
    try:
        return float(evaluate_policy(env, policy.act, range(seed, seed + episodes)).mean())
    finally:
        env.close()


def _policy_stage(model: GaussianEnsemble, info: DatasetInfo, cfg: PriMORLConfig, progress: bool) -> tuple[PessimisticMDP, SACResult]:
    """Everything after the model: only the model and public environment facts go in."""
    mdp = PessimisticMDP.for_env(model, info, cfg.pessimism, seed=cfg.seed)
    sac_cfg = dataclasses.replace(cfg.sac, seed=cfg.seed)
    env_info = DatasetInfo(name=info.name, env_id=info.env_id, env_kwargs=dict(info.env_kwargs), obs_keys=info.obs_keys)
    result = train_sac_in_model(mdp, sac_cfg, progress=progress,
                                evaluate=lambda pi: true_return(pi, env_info, cfg.eval_episodes, seed=10_000 + cfg.seed))
    return mdp, result


def public_rollouts(info: DatasetInfo, episodes: int = 20, *, seed: int = 0, max_steps: int = 1000) -> OfflineDataset:
    """Public data: ``episodes`` rollouts of the dataset's (public) environment under uniformly random actions,
    from reset seeds ``seed, seed+1, ...``. Nothing of the sensitive data goes in."""
    env = make_env(info)
    env.action_space.seed(seed)
    cols: dict[str, list] = {k: [] for k in ("o", "a", "r", "n", "term", "trunc", "ep")}
    for e in range(int(episodes)):
        obs, _ = env.reset(seed=seed + e)
        for t in range(max_steps):
            act = env.action_space.sample()
            nxt, r, term, trunc, _ = env.step(act)
            trunc = trunc or t + 1 == max_steps
            for k, v in (("o", obs), ("a", act), ("r", r), ("n", nxt), ("term", term), ("trunc", trunc and not term),
                         ("ep", e)):
                cols[k].append(v)
            obs = nxt
            if term or trunc:
                break
    env.close()
    f32 = lambda k: np.asarray(cols[k], dtype=np.float32)
    return OfflineDataset(observations=f32("o"), actions=f32("a").reshape(len(cols["a"]), -1), rewards=f32("r"),
                          next_observations=f32("n"), terminals=np.asarray(cols["term"], bool),
                          timeouts=np.asarray(cols["trunc"], bool), episode_ids=np.asarray(cols["ep"], np.int64),
                          info=public_env_info(info, name=f"{info.env_id}-public-random-rollouts",
                                               extra={"behaviour": "uniform random actions", "episodes": int(episodes),
                                                      "reset_seeds": f"{seed}..{seed + int(episodes) - 1}"}))


def _public_and_train(sensitive: OfflineDataset,
                      cfg: PriMORLConfig) -> tuple[OfflineDataset, OfflineDataset, str, list[str]]:
    """(training data, public data, what the card says about the public data, extra card notes)."""
    if cfg.public_source == "env":
        public = public_rollouts(sensitive.info, cfg.public_episodes, seed=cfg.seed)
        return (sensitive, public,
                f"{cfg.public_episodes} public rollouts of {sensitive.info.env_id} under uniformly random actions, reset "
                f"seeds {cfg.seed}..{cfg.seed + cfg.public_episodes - 1} (target scales, model snapshot selection)", [])
    if cfg.public_source == "split":
        train, public = sensitive.split_episodes(1.0 - cfg.public_fraction, seed=cfg.seed)
        # no counts here: the number of trajectories is private under add/remove (the card shows the DP count)
        note = (f"the guarantee covers only the trajectories outside the {cfg.public_fraction:.0%} split declared "
                "public as in the paper; those trajectories set the target scales and the saved snapshot and are NOT "
                "protected")
        return train, public, f"{cfg.public_fraction:.0%} split of the sensitive dataset declared public (NOT protected)", [note]
    raise InvalidData(f"unknown public source '{cfg.public_source}': choose env or split")


def run_primorl(sensitive: OfflineDataset, cfg: PriMORLConfig = PriMORLConfig(), *, progress: bool = False) -> PriMORLRun:
    """PriMORL on a sensitive dataset (privacy unit: one trajectory)."""
    train, public, public_desc, notes = _public_and_train(sensitive, cfg)
    model = build_model(sensitive.info, public, cfg.ensemble, cfg.seed)
    tdp_cfg = dataclasses.replace(cfg.tdp, seed=cfg.seed)
    data = TrajectoryTensors.from_dataset(train, model)
    res = train_tdp_ensemble(data, model, tdp_cfg, public=TrajectoryTensors.from_dataset(public, model), progress=progress)
    del data, train  # nothing below may touch the sensitive trajectories
    ledger = None
    if res.event is not None:
        ledger = Ledger(unit="trajectory", accountant=tdp_cfg.accountant, delta=tdp_cfg.delta,
                        public_data=[public_desc, "environment: observation/action bounds, initial-state distribution ρ0"],
                        notes=notes + ["hyperparameters (C, z, λ, penalty, clipping strategy) were not tuned on this data "
                                       "with accounting; tuning on private data is not charged"])
        ledger.append(res.event)
    mdp, sac = _policy_stage(model, public_env_info(sensitive.info), cfg, progress)
    return PriMORLRun(model, mdp, sac, ledger, res.epsilon, res)


def run_mopo_reference(sensitive: OfflineDataset, cfg: PriMORLConfig = PriMORLConfig(), *, model_steps: int = 16_000,
                       batch: int = 256, progress: bool = False) -> PriMORLRun:
    """The non-private MOPO-style reference of the paper's Table 3 (ε = ∞; nothing from it can be released).

    The same ensemble and public scales as :func:`run_primorl`, fitted by plain minibatch maximum likelihood on the
    training transitions with independent batches per member (MOPO's diversity; PriMORL's members must share one
    Poisson sample), then the same policy stage (starts from ρ0 and model states, no real transitions in SAC).
    The default ``model_steps`` x ``batch`` is about the number of transitions PriMORL's T = 700 rounds visit."""
    train, public = sensitive.split_episodes(1.0 - cfg.public_fraction, seed=cfg.seed)
    model = build_model(sensitive.info, public, cfg.ensemble, cfg.seed)
    train_ensemble_nonprivate(TrajectoryTensors.from_dataset(train, model), model, steps=model_steps, batch=batch,
                              seed=cfg.seed, progress=progress)
    del train
    mdp, sac = _policy_stage(model, sensitive.info, cfg, progress)
    return PriMORLRun(model, mdp, sac, None, float("inf"))


def run_on_synthetic(synthetic: OfflineDataset, cfg: PriMORLConfig = PriMORLConfig(), *, model_steps: int = 3000,
                     progress: bool = False) -> PriMORLRun:
    """The PriMORL policy stage as a consumer of a DP synthetic dataset (post-processing: no clip, no noise).

    The returned ledger is the synthetic dataset's own card (if it has one); nothing new is spent."""
    if synthetic.info.sensitive:
        raise PrivacyError(f"dataset '{synthetic.info.name}' is marked sensitive; use run_primorl for sensitive data")
    card = synthetic.info.privacy_card
    _, public = synthetic.split_episodes(1.0 - cfg.public_fraction, seed=cfg.seed)
    model = build_model(synthetic.info, public, cfg.ensemble, cfg.seed)
    train_ensemble_nonprivate(TrajectoryTensors.from_dataset(synthetic, model), model, steps=model_steps,
                              seed=cfg.seed, progress=progress)
    mdp, sac = _policy_stage(model, synthetic.info, cfg, progress)
    eps = float(card["epsilon"]) if card and "epsilon" in card else float("inf")
    return PriMORLRun(model, mdp, sac, None, eps)


# ------------------------------------------------------------------------------------------------- generation
@torch.no_grad()
def generate_trajectories(mdp: PessimisticMDP, policies: list[SACPolicy | None], *, episodes: int, horizon: int,
                          action_noise: tuple[float, ...] = (0.0, 0.5, 1.0), seed: int = 0,
                          info: DatasetInfo | None = None) -> OfflineDataset:
    """Roll the private model from ρ0 for ``horizon`` steps under data-independent behaviour: each episode picks a
    policy (None = uniform random actions) and a Gaussian action-noise level (in action-half-range units).

    Rewards are the model's unpenalised r̂ (the penalty is a planning device, not part of the data)."""
    if not isinstance(mdp, PessimisticMDP):
        raise TypeError("generate_trajectories takes a PessimisticMDP")
    rng = np.random.default_rng(seed)
    g = torch.Generator().manual_seed(seed)
    which = rng.integers(0, len(policies), episodes)
    noise = torch.as_tensor(np.asarray(action_noise, dtype=np.float32)[rng.integers(0, len(action_noise), episodes)])
    obs = mdp.reset(episodes, rng)
    half = (mdp.act_high - mdp.act_low) / 2
    cols: dict[str, list[torch.Tensor]] = {k: [] for k in ("obs", "act", "rew", "next", "done")}
    alive = torch.ones(episodes, dtype=torch.bool)
    lengths = torch.full((episodes,), horizon)
    for t in range(horizon):
        act = mdp.act_low + (mdp.act_high - mdp.act_low) * torch.rand(episodes, mdp.act_dim, generator=g)
        for j, pi in enumerate(policies):
            sel = torch.as_tensor(which == j)
            if pi is not None and sel.any():
                act[sel] = torch.as_tensor(pi.act(obs[sel])) + noise[sel, None] * half * torch.randn(int(sel.sum()), mdp.act_dim, generator=g)
        out = mdp.step(obs, act, g)
        for k, v in (("obs", obs), ("act", out["action"]), ("rew", out["model_reward"]), ("next", out["next_obs"]),
                     ("done", out["done"])):
            cols[k].append(v)
        lengths[alive & out["done"]] = t + 1
        alive &= ~out["done"]
        obs = out["next_obs"]
    stack = {k: torch.stack(v, 1) for k, v in cols.items()}  # [E, H, ...]
    keep = torch.arange(horizon)[None] < lengths[:, None]
    flat = {k: v[keep].numpy() for k, v in stack.items()}
    n = int(keep.sum())
    ends = np.cumsum(lengths.numpy()) - 1
    terminals = flat["done"].astype(bool).reshape(-1)
    timeouts = np.zeros(n, dtype=bool)
    timeouts[ends] = ~terminals[ends]
    # public environment facts only: never the sensitive dataset's name, card or extra (issue 21, item 5)
    new_info = public_env_info(info or DatasetInfo(), extra={
        "algorithm": "PriMORL private model rollouts", "generator": "rollouts of the TDP ensemble from rho0",
        "behaviour": f"{len(policies)} policies (None = uniform), noise {list(action_noise)}"})
    return OfflineDataset(observations=flat["obs"], actions=flat["act"], rewards=flat["rew"],
                          next_observations=flat["next"], terminals=terminals, timeouts=timeouts,
                          episode_ids=np.repeat(np.arange(episodes), lengths.numpy()), info=new_info)


def release_synthetic(synthetic: OfflineDataset, ledger: Ledger, dataset_id: str, *, epsilon_budget: float,
                      overwrite: bool = False) -> Path:
    """Write the synthetic dataset as a local Minari dataset through the release guard, card attached."""
    dest = minari_io.target_path(dataset_id)
    if dest.exists() and not overwrite:
        raise InvalidData(f"dataset '{dataset_id}' already exists; pass --overwrite to replace it")
    ds = copy.copy(synthetic)
    ds.info = _release_info(synthetic.info, ledger, dataset_id)
    return guarded_write(dest, lambda tmp: minari_io.write_dataset_dir(ds, dataset_id, tmp), ledger, epsilon_budget)


def _release_info(info: DatasetInfo, ledger: Ledger, dataset_id: str) -> DatasetInfo:
    """The released dataset's info: public environment facts, the generator's own description, the card."""
    extra = {k: info.extra[k] for k in _GENERATOR_EXTRA if k in info.extra}
    out = public_env_info(info, name=dataset_id, extra=extra)
    out.privacy_card = ledger.card()
    return out


# ------------------------------------------------------------------------------------------ releasing paths
def train_outputs(sensitive: OfflineDataset, cfg: PriMORLConfig, *, dataset_id: str, progress: bool = False) -> dict:
    """The releasing path of ``privsynth primorl train`` on a dataset: everything it writes, in memory.

    Returns ``{"model": state dict, "policy": state dict, "config": dict, "history": dict, "ledger": Ledger}``
    (``ledger`` None for a run without noise, which cannot be released). Model and policy are the DP outputs; the
    config holds the run's settings and public environment facts; the history holds the public-data NLL of the
    snapshots and the policy stage's record (private model and true environment only)."""
    run = run_primorl(sensitive, cfg, progress=progress)
    config = {"obs_dim": sensitive.obs_dim, "act_dim": sensitive.act_dim,
              "env": public_env_info(sensitive.info).to_dict(), **cfg.to_dict()}
    history = {"sac": run.sac.history, "model": run.tdp.history if run.tdp is not None else []}
    return {"model": run.model.state_dict(), "policy": run.policy.state_dict(), "config": config, "history": history,
            "ledger": run.ledger, "run": run}


def generate_outputs(sensitive: OfflineDataset, cfg: PriMORLConfig, *, synthetic_id: str, episodes: int,
                     horizon: int, progress: bool = False) -> tuple[OfflineDataset, Ledger | None]:
    """The releasing path of ``privsynth primorl generate`` on a dataset: (synthetic dataset exactly as written,
    info and card included; ledger). Only the DP model and policy and public facts reach the output."""
    run = run_primorl(sensitive, cfg, progress=progress)
    syn = generate_trajectories(run.mdp, [None, run.policy], episodes=episodes, horizon=horizon,
                                info=public_env_info(sensitive.info), seed=cfg.seed)
    if run.ledger is not None:
        syn.info = _release_info(syn.info, run.ledger, synthetic_id)
    return syn, run.ledger
