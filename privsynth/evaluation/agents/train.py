"""Train a downstream agent on any dataset and score it in the real environment (PrivORL section VII-A protocol).

:func:`train_agent` trains IQL, TD3+BC or EDAC on ``train_data`` (real or synthetic) and evaluates the deterministic
policy every ``eval_every`` updates in the environment of ``eval_info`` (the **real** dataset's info: env id, kwargs,
reference scores). It returns an :class:`AgentRun` with the learning curve, the final score (mean of the last
``final_k`` evaluations, the metric of the paper's tables, ``score_calculate.py``: last 10) and the best score (max over
evaluations, what PrivORL's ``best_score`` records; optimistic, CORL warns that the two differ a lot).
:func:`run_seeds` repeats this over seeds and reports mean ± std (population std, ddof=0) of both.
"""
from __future__ import annotations

import dataclasses
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.agents.common import (
    Evaluator,
    Policy,
    ReplayBuffer,
    fit_state_normalizer,
    identity_normalizer,
    seed_everything,
)
from privsynth.evaluation.agents.edac import EDAC, EDACConfig
from privsynth.evaluation.agents.iql import IQL, IQLConfig
from privsynth.evaluation.agents.nets import check_precision, set_matmul_precision
from privsynth.evaluation.agents.td3bc import TD3BC, TD3BCConfig

__all__ = ["AGENTS", "AgentJob", "AgentRun", "SeedSummary", "make_agent", "noise_seed", "train_agent", "train_batched",
           "run_seeds"]

#: agent name -> (learner class, config class)
AGENTS: dict[str, tuple[type, type]] = {
    "iql": (IQL, IQLConfig),
    "td3bc": (TD3BC, TD3BCConfig),
    "edac": (EDAC, EDACConfig),
}


def agent_key(agent: str) -> str:
    """The :data:`AGENTS` key an agent name spells (``"TD3+BC"``, ``"td3-bc"`` -> ``"td3bc"``); it may be unknown."""
    return agent.lower().replace("+", "").replace("_", "").replace("-", "")


def _agent_entry(agent: str) -> tuple[type, type]:
    key = agent_key(agent)
    if key not in AGENTS:
        raise InvalidData(f"unknown agent '{agent}'; choose one of {', '.join(AGENTS)}")
    return AGENTS[key]


def make_agent(agent: str, obs_dim: int, act_dim: int, *, max_action: float = 1.0, config: Any = None,
               num_updates: int | None = None, precision: str = "fp32"):
    """Build a learner by name with its CORL config (or ``config``); ``precision="bf16"`` runs the products of its
    wide layers in bf16 (:func:`~privsynth.evaluation.agents.nets.set_matmul_precision`)."""
    cls, cfg_cls = _agent_entry(agent)
    if config is not None and not isinstance(config, cfg_cls):
        raise InvalidData(f"agent '{agent}' needs a {cfg_cls.__name__}, got {type(config).__name__}")
    _check_precision(precision)
    learner = cls(obs_dim, act_dim, max_action=max_action, config=config or cfg_cls(), num_updates=num_updates)
    learner.matmul_precision = precision
    return set_matmul_precision(learner, precision)


def _check_precision(precision: str) -> None:
    try:
        check_precision(precision)
    except ValueError as e:
        raise InvalidData(str(e)) from None


@dataclass
class AgentRun:
    """One training run: curve of (update, normalised score), final and best scores, timings, the trained policy."""

    agent: str
    seed: int
    num_updates: int
    train_data: str
    eval_env: str | None
    curve: list[tuple[int, float]]
    final_k: int
    wall_time: float  # seconds, training + evaluation
    train_time: float  # seconds spent in updates (sampling + gradient steps)
    eval_time: float  # seconds spent in evaluation rollouts
    config: dict[str, Any]
    normalizer_source: str
    eval_returns: list[list[float]] = field(default_factory=list)  # per evaluation, per episode
    losses: list[tuple[int, dict[str, float]]] = field(default_factory=list)  # every log_every updates
    policy: Policy | None = field(default=None, repr=False, compare=False)
    batched_with: int = 1  # agents trained together in one batched model (train_time is this run's share)

    @property
    def final_score(self) -> float:
        """Mean normalised score of the last ``final_k`` evaluations (the paper tables' metric)."""
        if not self.curve:
            return float("nan")
        return float(np.mean([s for _, s in self.curve[-self.final_k:]]))

    @property
    def best_score(self) -> float:
        """Maximum normalised score over all evaluations (optimistic)."""
        return float(max(s for _, s in self.curve)) if self.curve else float("nan")

    @property
    def updates_per_s(self) -> float:
        return self.num_updates / self.train_time if self.train_time > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "policy"}
        d.update(final_score=self.final_score, best_score=self.best_score, updates_per_s=self.updates_per_s)
        return d

    def save_json(self, path: str | Path) -> None:
        Path(path).write_text(json.dumps(self.to_dict(), indent=1))


@dataclass
class SeedSummary:
    """Mean ± std (ddof=0) over seeds of the final and best scores."""

    runs: list[AgentRun]

    def _scores(self, which: str) -> np.ndarray:
        return np.array([getattr(r, which) for r in self.runs], dtype=np.float64)

    @property
    def final_mean(self) -> float:
        return float(self._scores("final_score").mean())

    @property
    def final_std(self) -> float:
        return float(self._scores("final_score").std())

    @property
    def best_mean(self) -> float:
        return float(self._scores("best_score").mean())

    @property
    def best_std(self) -> float:
        return float(self._scores("best_score").std())

    def to_dict(self) -> dict[str, Any]:
        return {
            "agent": self.runs[0].agent if self.runs else None,
            "seeds": [r.seed for r in self.runs],
            "final_mean": self.final_mean, "final_std": self.final_std,
            "best_mean": self.best_mean, "best_std": self.best_std,
            "runs": [r.to_dict() for r in self.runs],
        }

    def __str__(self) -> str:
        return (f"{self.runs[0].agent}: final {self.final_mean:.1f} ± {self.final_std:.1f}, "
                f"best {self.best_mean:.1f} ± {self.best_std:.1f} over seeds {[r.seed for r in self.runs]}")


def noise_seed(seed: int) -> int:
    """Seed of a run's own noise generator (TD3+BC smoothing noise, EDAC policy noise), distinct from the
    minibatch sampler's ``seed``."""
    return int(np.random.SeedSequence([int(seed), 17]).generate_state(1)[0])


def _setup(train_data: OfflineDataset, eval_info: DatasetInfo, agent: str, seed: int, cfg: Any, n_updates: int,
           episodes: int, eval_parallel: int, max_episode_steps: int | None, precision: str = "fp32"):
    """Evaluator, normaliser, buffer, learner and policy of one run, seeded from ``seed`` (shared by the unbatched
    and the batched trainer, so both build the same initial weights and draw the same random numbers)."""
    seed_everything(seed)
    evaluator = Evaluator(eval_info, episodes=episodes, seed=seed, parallel=eval_parallel,
                          max_episode_steps=max_episode_steps)
    evaluator.check_compatible(train_data)
    normalizer = fit_state_normalizer(train_data) if cfg.normalize_states else identity_normalizer(train_data.obs_dim)
    buffer = ReplayBuffer(train_data, normalizer if cfg.normalize_states else None, seed=seed)
    max_action = float(np.max(np.abs(np.concatenate([evaluator.action_low, evaluator.action_high]))))
    learner = make_agent(agent, train_data.obs_dim, train_data.act_dim, max_action=max_action, config=cfg,
                         num_updates=n_updates, precision=precision)
    learner.generator = torch.Generator().manual_seed(noise_seed(seed))
    policy = Policy(learner.actor, normalizer, evaluator.action_low, evaluator.action_high)  # deterministic forward
    return evaluator, normalizer, buffer, learner, policy


def _resolve(agent: str, config: Any, num_updates: int | None, eval_every: int | None, eval_episodes: int | None,
             final_k: int) -> tuple[Any, int, int, int]:
    cls, cfg_cls = _agent_entry(agent)
    if config is not None and not isinstance(config, cfg_cls):
        raise InvalidData(f"agent '{agent}' needs a {cfg_cls.__name__}, got {type(config).__name__}")
    cfg = config or cfg_cls()
    n_updates = int(num_updates if num_updates is not None else cfg.num_updates)
    every = int(eval_every if eval_every is not None else cfg.eval_every)
    episodes = int(eval_episodes if eval_episodes is not None else cfg.eval_episodes)
    if n_updates < 1 or every < 1:
        raise InvalidData(f"num_updates and eval_every must be positive, got {n_updates} and {every}")
    if final_k < 1:
        raise InvalidData(f"final_k must be at least 1, got {final_k}")
    return cfg, n_updates, every, episodes


def train_agent(
    train_data: OfflineDataset,
    eval_info: DatasetInfo,
    agent: str = "iql",
    *,
    seed: int = 0,
    num_updates: int | None = None,
    eval_every: int | None = None,
    eval_episodes: int | None = None,
    final_k: int = 10,
    config: Any = None,
    eval_parallel: int = 10,
    max_episode_steps: int | None = None,
    log_every: int = 1000,
    progress: bool = True,
    precision: str = "fp32",
) -> AgentRun:
    """Train ``agent`` on ``train_data`` and evaluate it in the real environment described by ``eval_info``.

    ``num_updates``, ``eval_every`` and ``eval_episodes`` default to the agent config's CORL values (1M updates is
    hours on a CPU: pass a smaller ``num_updates``). The state normaliser is fitted on ``train_data`` itself. Seeds
    python, numpy, torch, the minibatch sampler, the learner's noise generator (:func:`noise_seed`) and the
    evaluation reset seeds from ``seed``. :func:`train_batched` trains several such runs at once with the same results.
    ``precision="bf16"`` runs the wide layers' matrix products in bf16 (faster on CPUs with native bf16; not the same
    arithmetic as fp32, so not the same scores: docs/agents.md measures the difference).
    """
    cfg, n_updates, every, episodes = _resolve(agent, config, num_updates, eval_every, eval_episodes, final_k)
    setup = _setup(train_data, eval_info, agent, seed, cfg, n_updates, episodes, eval_parallel, max_episode_steps,
                   precision)
    evaluator, normalizer, buffer, learner, policy = setup

    curve: list[tuple[int, float]] = []
    eval_returns: list[list[float]] = []
    losses: list[tuple[int, dict[str, float]]] = []
    train_time = eval_time = 0.0
    start = time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_updates, desc=f"{learner.name} seed {seed}", unit="upd", mininterval=1.0)
    batch_size = cfg.batch_size
    step = 0
    while step < n_updates:
        chunk = min(every - step % every, n_updates - step)
        t0 = time.perf_counter()
        for _ in range(chunk):
            metrics = learner.update(buffer.sample(batch_size))
            step += 1
            if step % log_every == 0:
                losses.append((step, {k: float(v) for k, v in metrics.items()}))
        train_time += time.perf_counter() - t0
        if bar is not None:
            bar.update(chunk)
        if step % every == 0 or step == n_updates:
            t0 = time.perf_counter()
            result = evaluator(policy)
            eval_time += time.perf_counter() - t0
            curve.append((step, result.score))
            eval_returns.append(result.returns.tolist())
            if bar is not None:
                bar.set_postfix(score=f"{result.score:.1f}")
    if bar is not None:
        bar.close()
    evaluator.close()
    return AgentRun(
        agent=learner.name, seed=seed, num_updates=n_updates, train_data=train_data.info.name,
        eval_env=eval_info.env_id, curve=curve, final_k=final_k, wall_time=time.perf_counter() - start,
        train_time=train_time, eval_time=eval_time,
        config={**dataclasses.asdict(cfg), "num_updates": n_updates, "eval_every": every,
                "eval_episodes": episodes, "precision": precision, "max_episode_steps": max_episode_steps},
        normalizer_source=normalizer.source, eval_returns=eval_returns, losses=losses, policy=policy,
    )


@dataclass
class AgentJob:
    """One run of a batched group: its training data, the real dataset's info for evaluation, its seed."""

    train_data: OfflineDataset
    eval_info: DatasetInfo
    seed: int = 0


def train_batched(
    jobs: Sequence[AgentJob],
    agent: str = "iql",
    *,
    num_updates: int | None = None,
    eval_every: int | None = None,
    eval_episodes: int | None = None,
    final_k: int = 10,
    config: Any = None,
    eval_parallel: int = 10,
    max_episode_steps: int | None = None,
    log_every: int = 1000,
    progress: bool = True,
    precision: str = "fp32",
) -> list[AgentRun]:
    """Train ``len(jobs)`` agents of one kind at once as one model with stacked weights (:mod:`.batched`).

    Every job is the :func:`train_agent` run of its own ``(train_data, eval_info, seed)``: same initial weights, same
    minibatches, same noise, same evaluations, hence (on this torch build, see tests/test_agents_batched.py) the
    same losses and scores; only the matrix products of the K agents share kernel calls. Jobs may train on different
    datasets (e.g. real, ε = 1 and ε = 10 side by side) as long as observation and action widths agree; they share
    the agent, its config, the update budget and the evaluation schedule. Each returned run's ``train_time`` is the
    shared training time divided by K (its share of the CPU), so ``updates_per_s`` is per agent.
    """
    from privsynth.evaluation.agents.batched import stack_batches, stack_learners

    if not jobs:
        raise InvalidData("train_batched needs at least one job")
    cfg, n_updates, every, episodes = _resolve(agent, config, num_updates, eval_every, eval_episodes, final_k)
    dims = {(j.train_data.obs_dim, j.train_data.act_dim) for j in jobs}
    if len(dims) != 1:
        raise InvalidData(f"batched jobs must share observation and action widths, got {sorted(dims)}")
    setups = [_setup(j.train_data, j.eval_info, agent, j.seed, cfg, n_updates, episodes, eval_parallel,
                     max_episode_steps, precision) for j in jobs]
    evaluators, normalizers, buffers, learners, policies = (list(x) for x in zip(*setups))
    if len({(tuple(e.action_low), tuple(e.action_high)) for e in evaluators}) > 1:
        raise InvalidData("batched jobs must share the evaluation environment's action range")
    model = stack_learners(learners)
    k = len(jobs)
    curves: list[list[tuple[int, float]]] = [[] for _ in jobs]
    returns: list[list[list[float]]] = [[] for _ in jobs]
    losses: list[list[tuple[int, dict[str, float]]]] = [[] for _ in jobs]
    eval_times = [0.0] * k
    train_time = 0.0
    start = time.perf_counter()
    bar = None
    if progress:
        from tqdm.auto import tqdm

        bar = tqdm(total=n_updates, desc=f"{learners[0].name} x{k}", unit="upd", mininterval=1.0)
    batch_size = cfg.batch_size
    step = 0
    while step < n_updates:
        chunk = min(every - step % every, n_updates - step)
        t0 = time.perf_counter()
        for _ in range(chunk):
            metrics = model.update(stack_batches([buf.sample(batch_size) for buf in buffers]))
            step += 1
            if step % log_every == 0:
                values = {name: v.tolist() for name, v in metrics.items()}
                for j in range(k):
                    losses[j].append((step, {name: float(v[j]) for name, v in values.items()}))
        train_time += time.perf_counter() - t0
        if bar is not None:
            bar.update(chunk)
        if step % every == 0 or step == n_updates:
            model.write_back()
            for j in range(k):
                t0 = time.perf_counter()
                result = evaluators[j](policies[j])
                eval_times[j] += time.perf_counter() - t0
                curves[j].append((step, result.score))
                returns[j].append(result.returns.tolist())
            if bar is not None:
                bar.set_postfix(score=" ".join(f"{c[-1][1]:.1f}" for c in curves))
    if bar is not None:
        bar.close()
    wall = time.perf_counter() - start
    runs = []
    for j, job in enumerate(jobs):
        evaluators[j].close()
        runs.append(AgentRun(
            agent=learners[j].name, seed=job.seed, num_updates=n_updates, train_data=job.train_data.info.name,
            eval_env=job.eval_info.env_id, curve=curves[j], final_k=final_k, wall_time=wall,
            train_time=train_time / k, eval_time=eval_times[j],
            config={**dataclasses.asdict(cfg), "num_updates": n_updates, "eval_every": every,
                    "eval_episodes": episodes, "precision": precision, "max_episode_steps": max_episode_steps},
            normalizer_source=normalizers[j].source, eval_returns=returns[j], losses=losses[j], policy=policies[j],
            batched_with=k,
        ))
    return runs


def run_seeds(train_data: OfflineDataset, eval_info: DatasetInfo, agent: str = "iql", *,
              seeds: Sequence[int] = (0, 1, 2), batched: bool = False, **kwargs: Any) -> SeedSummary:
    """:func:`train_agent` for each seed (sequentially), or with ``batched=True`` all seeds at once as one model
    (:func:`train_batched`, same results); mean ± std of the final and best scores."""
    if not seeds:
        raise InvalidData("run_seeds needs at least one seed")
    if batched:
        return SeedSummary(train_batched([AgentJob(train_data, eval_info, s) for s in seeds], agent, **kwargs))
    return SeedSummary([train_agent(train_data, eval_info, agent, seed=s, **kwargs) for s in seeds])
