"""What every agent shares: the replay buffer, the state normaliser, the policy wrapper and real-environment evaluation.

* :class:`ReplayBuffer` samples minibatches from an :class:`~privsynth.data.dataset.OfflineDataset`'s own arrays
  (``torch.from_numpy`` views, no copy per algorithm; CORL copies the data into a buffer inside every algorithm file).
* :func:`fit_state_normalizer` z-scores states with statistics of the **training data itself** (CORL's
  ``compute_mean_std``, eps 1e-3). For a synthetic run that is the synthetic data, so evaluation never reads statistics
  of the real data (PrivORL and SynthER wrap the evaluation env with the real dataset's statistics; we do not). The
  same normaliser is applied to training batches and to the observations the agent sees during evaluation.
* :class:`Evaluator` rolls out the deterministic policy (the mean action) in the **real** environment, recreated from
  the real dataset's :class:`~privsynth.data.dataset.DatasetInfo` by :func:`privsynth.data.envs.make_env`, and turns the
  mean undiscounted return into the D4RL normalised score ``100·(R − ref_min)/(ref_max − ref_min)`` with that info's
  reference scores (anchors_code.md §3.3). Several environments are stepped in lockstep so that one batched forward
  pass serves all of them.
"""
from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np
import torch
from torch import nn

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.envs import make_env
from privsynth.rl.evaluate import evaluate_policy
from privsynth.data.normalize import Normalizer
from privsynth.errors import InvalidData, SpaceMismatch

__all__ = [
    "Batch",
    "ReplayBuffer",
    "fit_state_normalizer",
    "Policy",
    "Evaluator",
    "EvalResult",
    "normalized_score",
    "seed_everything",
    "soft_update",
    "make_adam",
]


class Batch(NamedTuple):
    """A minibatch of normalised transitions: obs/next_obs [B, obs_dim], act [B, act_dim], rew/done [B]."""

    obs: torch.Tensor
    act: torch.Tensor
    rew: torch.Tensor
    next_obs: torch.Tensor
    done: torch.Tensor


def _share(a: np.ndarray) -> torch.Tensor:
    """A torch view of a numpy array (no copy) when numpy allows it, else a copy."""
    a = np.asarray(a)
    if a.flags.writeable and a.dtype == np.float32:
        return torch.from_numpy(a)
    return torch.tensor(a, dtype=torch.float32)


def fit_state_normalizer(data: OfflineDataset, *, eps: float = 1e-3) -> Normalizer:
    """Z-score statistics of ``data.observations`` (CORL ``compute_mean_std``: std + eps).

    ``data`` is the agent's **training** data (synthetic data in a synthetic run). The resulting normaliser belongs to
    the evaluation agent and is never released; its ``source`` names the data it came from.
    """
    x = data.observations.astype(np.float64)
    return Normalizer.from_stats(x.mean(axis=0), x.std(axis=0) + eps, source=f"training-data:{data.info.name}")


def identity_normalizer(obs_dim: int) -> Normalizer:
    """A normaliser that changes nothing (EDAC in CORL trains on raw states)."""
    return Normalizer(obs_dim, source="identity")


class ReplayBuffer:
    """Uniform minibatches over a dataset's arrays, normalised on the fly (the dataset is never copied).

    Indices come from ``torch.randint`` with the buffer's own generator, so sampling is reproducible from ``seed``.
    """

    def __init__(self, data: OfflineDataset, normalizer: Normalizer | None = None, *, seed: int = 0) -> None:
        self.n = data.n_transitions
        self.obs = _share(data.observations)
        self.act = _share(data.actions)
        self.rew = _share(data.rewards)
        self.next_obs = _share(data.next_observations)
        self.done = torch.from_numpy(data.terminals.astype(np.float32))  # bool -> float: N floats, the only copy
        self.normalizer = normalizer
        if normalizer is not None:
            self._mean, self._inv_std = normalizer.mean.clone(), 1.0 / normalizer.std
        self.generator = torch.Generator().manual_seed(int(seed))

    def __len__(self) -> int:
        return self.n

    def sample(self, batch_size: int) -> Batch:
        idx = torch.randint(self.n, (batch_size,), generator=self.generator)
        obs, next_obs = self.obs[idx], self.next_obs[idx]
        if self.normalizer is not None:
            obs = (obs - self._mean) * self._inv_std
            next_obs = (next_obs - self._mean) * self._inv_std
        return Batch(obs, self.act[idx], self.rew[idx], next_obs, self.done[idx])


class Policy(nn.Module):
    """A trained deterministic policy on raw observations: normaliser, then the agent's actor, then action clipping.

    ``policy(obs)`` takes raw (un-normalised) observations ``[B, obs_dim]`` as a tensor or array and returns actions.
    When ``actor`` is a module (the learners' ``.actor``, whose ``forward`` is the deterministic action), its weights
    and the normaliser's statistics are in ``policy.state_dict()``.
    """

    def __init__(self, actor: Callable[[torch.Tensor], torch.Tensor], normalizer: Normalizer,
                 action_low: np.ndarray, action_high: np.ndarray) -> None:
        super().__init__()
        self.normalizer = normalizer
        self.actor = actor  # deterministic: a learner's ``.actor`` module or any callable
        self.register_buffer("low", torch.as_tensor(np.asarray(action_low, dtype=np.float32)))
        self.register_buffer("high", torch.as_tensor(np.asarray(action_high, dtype=np.float32)))

    @torch.no_grad()
    def forward(self, obs: torch.Tensor | np.ndarray) -> torch.Tensor:
        obs_t = torch.as_tensor(obs, dtype=torch.float32)
        action = self.actor(self.normalizer(obs_t))
        return torch.maximum(torch.minimum(action, self.high), self.low)

    def act(self, obs: np.ndarray) -> np.ndarray:
        """Numpy in, numpy out; a single observation gives a single action."""
        single = np.asarray(obs).ndim == 1
        out = self(np.atleast_2d(obs)).numpy()
        return out[0] if single else out


def normalized_score(info: DatasetInfo, ret: float | np.ndarray) -> float | np.ndarray:
    """D4RL normalised score ``100·(R − ref_min)/(ref_max − ref_min)`` from ``info``'s reference returns."""
    lo, hi = require_reference_scores(info)
    return 100.0 * (np.asarray(ret, dtype=np.float64) - lo) / (hi - lo)


def require_reference_scores(info: DatasetInfo) -> tuple[float, float]:
    """``info``'s (ref_min, ref_max), or a one-line error saying how to set them (check before training agents)."""
    lo, hi = info.ref_min_score, info.ref_max_score
    if lo is None or hi is None:
        raise InvalidData(
            f"dataset '{info.name}' has no reference scores; cannot compute a normalised score: set them by "
            f"re-importing its file with `privsynth datasets import FILE --name {info.name} --ref-min RANDOM_RETURN "
            "--ref-max EXPERT_RETURN --overwrite` plus the options it was imported with, e.g. --env-id (the mean "
            "returns of a random and an expert policy in its environment), or take the environment and scores of a dataset that has them (`privsynth agents train "
            "--eval-from ID`; `privsynth evaluate` uses those of --real)"
        )
    if hi == lo:
        raise InvalidData(f"dataset '{info.name}' has equal reference scores ({lo}); cannot normalise a return")
    return float(lo), float(hi)


@dataclass(frozen=True)
class EvalResult:
    """One evaluation: per-episode returns and the normalised score of their mean."""

    returns: np.ndarray
    score: float

    @property
    def mean_return(self) -> float:
        return float(self.returns.mean())


class Evaluator:
    """Deterministic rollouts of a :class:`Policy` in the real environment of ``eval_info``.

    Every call plays the same ``episodes`` start states (reset seeds derived from ``seed``), as CORL re-seeds its eval
    env before each evaluation, so successive evaluations differ only through the policy. Up to ``parallel``
    environments run in lockstep and share one batched policy forward per step.
    """

    def __init__(self, eval_info: DatasetInfo, *, episodes: int = 10, seed: int = 0, parallel: int = 10,
                 max_episode_steps: int | None = None) -> None:
        if episodes < 1:
            raise InvalidData(f"evaluation needs at least one episode, got {episodes}")
        normalized_score(eval_info, 0.0)  # fail early when reference scores are missing
        self.info = eval_info
        self.episodes = int(episodes)
        overrides = {} if max_episode_steps is None else {"max_episode_steps": int(max_episode_steps)}
        self.envs = [make_env(eval_info, **overrides) for _ in range(min(self.episodes, max(1, parallel)))]
        self.reset_seeds = [int(s) for s in np.random.SeedSequence([int(seed), 2024]).generate_state(self.episodes)]
        space = self.envs[0].action_space
        self.action_low = np.asarray(space.low, dtype=np.float32)
        self.action_high = np.asarray(space.high, dtype=np.float32)
        self.obs_dim = int(np.prod(self.envs[0].observation_space.shape))
        self.act_dim = int(np.prod(space.shape))

    def check_compatible(self, data: OfflineDataset) -> None:
        """Raise :class:`SpaceMismatch` unless ``data`` has this environment's observation and action widths."""
        if (data.obs_dim, data.act_dim) != (self.obs_dim, self.act_dim):
            raise SpaceMismatch(
                f"training data '{data.info.name}' has obs/action dims {data.obs_dim}/{data.act_dim} but the "
                f"evaluation environment {self.info.env_id} has {self.obs_dim}/{self.act_dim}"
            )

    def __call__(self, policy: Callable[[torch.Tensor], torch.Tensor]) -> EvalResult:
        returns = evaluate_policy(self.envs, lambda obs: policy(torch.from_numpy(obs)).numpy(), self.reset_seeds)
        return EvalResult(returns=returns, score=float(normalized_score(self.info, returns.mean())))

    def close(self) -> None:
        for env in self.envs:
            env.close()


def seed_everything(seed: int) -> None:
    """Seed Python, numpy and torch (environments are seeded through their reset seeds)."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


@torch.no_grad()
def soft_update(target: Sequence[torch.Tensor], source: Sequence[torch.Tensor], tau: float) -> None:
    """Polyak averaging ``target ← (1 − tau)·target + tau·source`` in one fused call."""
    torch._foreach_lerp_(list(target), list(source), tau)


def make_adam(params, lr: float) -> torch.optim.Adam:
    """Adam with the fused CPU kernel (one kernel for all parameters) where this torch build supports it."""
    params = list(params)
    try:
        return torch.optim.Adam(params, lr=lr, fused=True)
    except (RuntimeError, TypeError):  # pragma: no cover - older builds
        return torch.optim.Adam(params, lr=lr, foreach=True)
