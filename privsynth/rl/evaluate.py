"""One policy-evaluation loop: undiscounted returns of ``act(obs) -> action`` in real environments.

Used by the locomotion data generator, PriMORL's true-environment report, kickstarting's PPO, the expert-level method
and the offline-RL agents' :class:`~privsynth.evaluation.agents.common.Evaluator`. Evaluation is reporting only: no
caller feeds a return back into training on sensitive data.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Protocol, Sequence, runtime_checkable

import numpy as np

__all__ = ["evaluate_policy", "BatchedEnv"]


@runtime_checkable
class BatchedEnv(Protocol):
    """``n`` episodes simulated as one array (e.g. :class:`privsynth.methods.expert_envs.VecClassicEnv`)."""

    n: int

    def reset(self) -> np.ndarray: ...

    def step(self, action: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]: ...


def evaluate_policy(
    env: Any | Sequence[Any] | BatchedEnv,
    act: Callable[[np.ndarray], Any],
    seeds: Iterable[int] = (0,),
    *,
    max_steps: int | None = None,
) -> np.ndarray:
    """Return of each episode (float64 array) of the policy ``act(obs [k, D]) -> actions [k, ...]``.

    ``env`` is a gymnasium environment, a list of them, or a :class:`BatchedEnv`:

    - gymnasium: one episode per reset seed in ``seeds``; with a list of ``k`` environments, ``k`` episodes run in
      lockstep and share one batched ``act`` call per step (``act`` always sees a batch, of one for one environment).
      An episode ends on ``terminated``/``truncated`` or after ``max_steps`` steps.
    - :class:`BatchedEnv`: its ``n`` episodes from one ``reset()`` (the environment owns its seed; ``seeds`` is
      unused), for at most ``max_steps`` steps; a terminated episode stops earning reward.
    """
    if isinstance(env, BatchedEnv):
        return _batched_returns(env, act, max_steps)
    envs = list(env) if isinstance(env, (list, tuple)) else [env]
    seeds = [int(s) for s in seeds]
    returns = np.zeros(len(seeds), dtype=np.float64)
    limit = np.inf if max_steps is None else int(max_steps)
    for start in range(0, len(seeds), len(envs)):
        ids = list(range(start, min(start + len(envs), len(seeds))))
        obs = np.stack([e.reset(seed=seeds[i])[0] for e, i in zip(envs, ids)])
        active, steps = list(range(len(ids))), 0
        while active and steps < limit:
            actions = act(obs[active])
            still = []
            for j, a in zip(active, actions):
                o, r, term, trunc, _ = envs[j].step(a)
                returns[ids[j]] += float(r)
                obs[j] = o
                if not (term or trunc):
                    still.append(j)
            active, steps = still, steps + 1
    return returns


def _batched_returns(env: BatchedEnv, act: Callable[[np.ndarray], Any], max_steps: int | None) -> np.ndarray:
    if max_steps is None:
        raise ValueError("a batched environment has no time limit of its own: give max_steps")
    obs = env.reset()
    alive = np.ones(env.n, bool)
    returns = np.zeros(env.n)
    for _ in range(int(max_steps)):
        obs, r, term = env.step(np.asarray(act(obs)))
        returns += np.where(alive, r, 0.0)
        alive &= ~term
        if not alive.any():
            break
    return returns
