"""D4RL-style MuJoCo locomotion datasets from the project's own SAC behaviour policies (PrivORL's MuJoCo domain).

D4RL's halfcheetah/walker2d/hopper files cannot be downloaded here, so equivalents are made the same way from the
policies in ``pretrained/locomotion/<env>/`` (trained by ``scripts/train_locomotion_policy.py``):

* ``random``: uniform random actions in [-1, 1] (D4RL used a randomly initialised policy).
* ``medium``: the "medium" snapshot (the earlier snapshot scoring closest to ``medium_frac`` of the best; D4RL: about
  a third of expert), actions *sampled* from its tanh-Gaussian (as D4RL's SAC collection).
* ``expert``: the best snapshot, sampled actions.
* ``medium-replay``: D4RL's is the replay buffer of training up to the medium policy. We do not ship the buffer; we
  replay it: uniform random actions for the training's ``learning_starts`` steps, then each shipped snapshot in
  training order (snapshot at step k acts for the steps k .. k+K-1, as the training actor did up to its next
  snapshot), sampled actions, until the medium snapshot's step. ``--steps`` rescales every segment proportionally
  (the default, ``steps=None``, gives the training's own length). Episodes run on across policy switches, as in the
  buffer. It is an approximation: during training the actor changed every step, here every K steps.
* ``medium-expert``: the medium and the expert datasets (``steps`` // 2 each) concatenated, as D4RL.

Every kind is one continuous run of ``gym.make(env_id)`` (1000-step time limit) with resets between episodes;
``timeouts`` mark the 1000th step, ``terminals`` the env's termination (never for HalfCheetah; falls for Walker2d and
Hopper). The first reset uses ``cfg.seed``; the action noise draws from ``numpy.random.default_rng(cfg.seed)``;
policies run as float32 numpy forward passes, so the data is identical under a seed. Reference scores are the
random and expert returns measured at training time and cached in the policy card.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.locomotion.policies import env_id_of, load_actor, load_card
from privsynth.data.locomotion.sac import Actor
from privsynth.errors import InvalidData

__all__ = ["KINDS", "LocomotionConfig", "generate_locomotion", "NumpyPolicy"]

KINDS = ("random", "medium", "expert", "medium-replay", "medium-expert")
DEFAULT_STEPS = 100_000


@dataclass
class LocomotionConfig:
    env: str = "halfcheetah"  # halfcheetah | walker2d | hopper
    kind: str = "medium"  # random | medium | expert | medium-replay | medium-expert
    steps: int | None = None  # None: 100000, or the medium snapshot's training length for medium-replay
    seed: int = 0
    name: str | None = None  # default "<env>-<kind>"
    policy_root: str | None = None  # default <repo>/pretrained/locomotion

    def __post_init__(self) -> None:
        self.env = str(self.env).lower()
        env_id_of(self.env)
        self.kind = str(self.kind).lower()
        if self.kind not in KINDS:
            raise InvalidData(f"unknown dataset kind '{self.kind}'; choose one of {', '.join(KINDS)}")
        if self.steps is not None and self.steps < 1:
            raise InvalidData(f"steps must be at least 1, got {self.steps}")

    @property
    def env_id(self) -> str:
        return env_id_of(self.env)

    @property
    def dataset_name(self) -> str:
        return self.name or f"{self.env}-{self.kind}"


class NumpyPolicy:
    """A float32 numpy copy of an :class:`Actor` (fast and bit-stable for one observation at a time)."""

    def __init__(self, actor: Actor) -> None:
        lin = [m for m in actor.net if hasattr(m, "weight")]
        self.w = [m.weight.detach().numpy().astype(np.float32).T.copy() for m in lin]
        self.b = [m.bias.detach().numpy().astype(np.float32).copy() for m in lin]
        self.act_dim = actor.act_dim

    def __call__(self, obs: np.ndarray, noise: np.ndarray | None) -> np.ndarray:
        h = obs.astype(np.float32)
        for i, (w, b) in enumerate(zip(self.w, self.b)):
            h = h @ w + b
            if i < len(self.w) - 1:
                h = np.maximum(h, 0.0)
        mean, log_std = h[: self.act_dim], np.clip(h[self.act_dim:], -5.0, 2.0)
        u = mean if noise is None else mean + np.exp(log_std) * noise
        return np.tanh(u).astype(np.float32)


def _schedule(cfg: LocomotionConfig, card: dict) -> list[tuple[int | None, int]]:
    """(snapshot step or None for uniform random, number of steps) segments of the run."""
    med, exp = card["levels"]["medium"], card["levels"]["expert"]
    n = cfg.steps or DEFAULT_STEPS
    if cfg.kind == "random":
        return [(None, n)]
    if cfg.kind == "medium":
        return [(med, n)]
    if cfg.kind == "expert":
        return [(exp, n)]
    if cfg.kind == "medium-expert":
        return [(med, n // 2), (exp, n - n // 2)]
    # medium-replay: training order up to the medium snapshot
    starts = int(card["learning_starts"])
    snaps = sorted(s["step"] for s in card["snapshots"] if s["step"] < med)
    first = snaps[0] if snaps else med
    edges: list[tuple[int | None, int, int]] = [(None, 0, max(starts, first))]  # before any usable snapshot
    for k, nxt in zip(snaps, snaps[1:] + [med]):
        lo = max(k, edges[0][2])
        if nxt > lo:
            edges.append((k, lo, nxt))
    total = sum(hi - lo for _, lo, hi in edges)
    target = cfg.steps or total
    out: list[tuple[int | None, int]] = []
    done = 0
    for k, lo, hi in edges:  # cumulative rounding: the segment lengths add up to exactly ``target``
        m = round((done + hi - lo) * target / total) - round(done * target / total)
        done += hi - lo
        if m > 0:
            out.append((k, m))
    return out


def generate_locomotion(cfg: LocomotionConfig, progress: bool = True) -> OfflineDataset:
    """Collect a locomotion dataset (see module docstring); deterministic under ``cfg.seed``."""
    root = Path(cfg.policy_root) if cfg.policy_root else None
    card = load_card(cfg.env, root)
    segments = _schedule(cfg, card)
    n = sum(m for _, m in segments)
    env = gym.make(cfg.env_id, max_episode_steps=1000)
    obs_dim, act_dim = int(env.observation_space.shape[0]), int(env.action_space.shape[0])
    low, high = env.action_space.low.astype(np.float32), env.action_space.high.astype(np.float32)
    rng = np.random.default_rng(cfg.seed)
    observations = np.empty((n, obs_dim), np.float32)
    next_observations = np.empty((n, obs_dim), np.float32)
    actions = np.empty((n, act_dim), np.float32)
    rewards = np.empty(n, np.float32)
    terminals = np.zeros(n, bool)
    timeouts = np.zeros(n, bool)
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=n, desc=f"collecting {cfg.dataset_name}", unit="step", mininterval=0.5)
    obs, _ = env.reset(seed=cfg.seed)
    t = 0
    try:
        for step, m in segments:
            policy = None if step is None else NumpyPolicy(load_actor(cfg.env, step, root))
            for _ in range(m):
                if policy is None:
                    a = rng.uniform(low, high).astype(np.float32)
                else:
                    a = np.clip(policy(obs, rng.standard_normal(act_dim)), low, high)
                obs2, r, term, trunc, _ = env.step(a)
                observations[t], actions[t], rewards[t], next_observations[t] = obs, a, r, obs2
                terminals[t], timeouts[t] = bool(term), bool(trunc) and not term
                obs = obs2
                if term or trunc:
                    obs, _ = env.reset()
                t += 1
                if bar is not None and t % 1000 == 0:
                    bar.update(1000)
        if bar is not None:
            bar.update(n - bar.n)
    finally:
        if bar is not None:
            bar.close()
        env.close()
    if not (terminals[-1] or timeouts[-1]):
        timeouts[-1] = True  # the last, cut-off episode
    ends = terminals | timeouts
    episode_ids = np.concatenate([[0], np.cumsum(ends[:-1])]).astype(np.int64)
    ref = card["reference"]
    info = DatasetInfo(
        name=cfg.dataset_name,
        env_id=cfg.env_id,
        env_kwargs={},
        obs_keys=None,
        action_low=low.tolist(),
        action_high=high.tolist(),
        ref_min_score=float(ref["random_return"]),
        ref_max_score=float(ref["expert_return"]),
        sensitive=False,
        extra={
            "generator": "privsynth.data.locomotion.generate",
            "config": dataclasses.asdict(cfg),
            "policy_segments": [[s, m] for s, m in segments],
            "policy_card": {k: card[k] for k in ("command", "seed", "steps_trained", "levels", "reference")},
            "algorithm": "SAC behaviour policy snapshots (sampled actions)",
        },
    )
    return OfflineDataset(
        observations=observations,
        actions=actions,
        rewards=rewards,
        next_observations=next_observations,
        terminals=terminals,
        timeouts=timeouts,
        episode_ids=episode_ids,
        info=info,
    )
