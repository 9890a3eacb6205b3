"""Kickstarted PPO student with the privacy-aware penalty (Gohari et al. 2021, Sec. 4,
eq. 14-17).

PPO follows OpenAI Spinning Up (the paper's RL code): separate tanh actor and critic MLPs, GAE-λ, advantage
normalisation, 80 actor iterations with KL early stopping, 80 critic iterations, one update per epoch. Written here
rather than taken from a library because the penalty needs the teacher's stored answers inside the actor loss, and
Spinning Up itself is TF1/MPI-era.

The student queries the teacher once per environment step and stores the answer (and the k it was drawn at) in the
rollout buffer; every PPO iteration reuses the stored answers, which is post-processing and costs no privacy. ``lam = 0`` is the privacy-unaware student (penalty always on); no teacher at all is plain PPO.
"""
from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from privsynth.nn import mlp
from privsynth.rl.evaluate import evaluate_policy
from privsynth.methods.kickstart.dirichlet import concentration_radius
from privsynth.methods.kickstart.teacher import PrivateTeacher

__all__ = ["PPOConfig", "mlp", "privacy_aware_penalty", "KickstartedPPO", "EpochLog"]


@dataclass
class PPOConfig:
    """Spinning Up PPO defaults (paper Sec. 5) except where noted."""

    hidden: tuple[int, ...] = (32, 32)  # student size [PAPER]; the teacher uses (64, 64)
    steps_per_epoch: int = 1000  # [PAPER] "every epoch consists of 1000 environment interactions"
    epochs: int = 50
    gamma: float = 0.99
    gae_lambda: float = 0.97
    clip_ratio: float = 0.2
    pi_lr: float = 3e-4
    vf_lr: float = 1e-3
    train_pi_iters: int = 80
    train_v_iters: int = 80
    target_kl: float = 0.01
    max_ep_len: int = 1000
    kick_lambda: float = 0.5  # λ of eq. 15; 0 = privacy-unaware [PAPER: 0.5 best of 0.1/0.5/1/2]
    kick_beta: float = 0.05  # β of eq. 15 [GUESS: not reported]
    kick_weight: float = 1.0  # weight of the penalty [PAPER: none, i.e. 1]
    seed: int = 0


def privacy_aware_penalty(
    logits: torch.Tensor,
    teacher: torch.Tensor,
    has_teacher: torch.Tensor,
    k_at_query: torch.Tensor,
    *,
    lam: float,
    beta: float,
) -> torch.Tensor:
    """Eq. 16 averaged over the batch: ``‖π_θ(s) − π^t‖₂ · 1[‖·‖ > α_λ(k)]``, zero where no answer was given.

    The distance is un-squared L2 between probability vectors (eq. 15); ``α_λ`` uses the k each answer was drawn at
    (k is public, stored per transition); a 1e-12 inside the square root keeps the gradient finite at distance 0.
    """
    p = torch.softmax(logits, dim=-1)
    dist = torch.sqrt(((p - teacher) ** 2).sum(-1) + 1e-12)
    if lam > 0:
        alpha = lam * torch.sqrt(math.log(1.0 / beta) / (2.0 * (k_at_query + 1.0)))
        active = (dist > alpha).to(dist.dtype)
    else:
        active = torch.ones_like(dist)
    return (dist * active * has_teacher.to(dist.dtype)).mean()


@dataclass
class EpochLog:
    epoch: int
    env_steps: int
    ep_return: float  # mean return of episodes finished this epoch (NaN if none)
    ep_len: float
    episodes: int
    teacher_fraction: float  # share of this epoch's steps that got an answer
    teacher_k: float
    query_eps: float  # teacher query ledger totals after this epoch
    query_delta: float
    penalty: float
    seconds: float


def _discount_cumsum(x: np.ndarray, discount: float) -> np.ndarray:
    out = np.zeros_like(x)
    run = 0.0
    for i in range(len(x) - 1, -1, -1):
        run = x[i] + discount * run
        out[i] = run
    return out


class KickstartedPPO:
    """PPO student on a discrete-action gymnasium env, optionally kickstarted by a :class:`PrivateTeacher`."""

    def __init__(self, env: Any, config: PPOConfig | None = None, teacher: PrivateTeacher | None = None) -> None:
        self.env = env
        self.cfg = config or PPOConfig()
        self.teacher = teacher
        obs_dim = int(np.prod(env.observation_space.shape))
        self.n_actions = int(env.action_space.n)
        torch.manual_seed(self.cfg.seed)
        self.np_rng = np.random.default_rng(self.cfg.seed)
        self.pi = mlp(obs_dim, self.cfg.hidden, self.n_actions, act=nn.Tanh)
        self.v = mlp(obs_dim, self.cfg.hidden, 1, act=nn.Tanh)
        self.pi_opt = torch.optim.Adam(self.pi.parameters(), lr=self.cfg.pi_lr)
        self.v_opt = torch.optim.Adam(self.v.parameters(), lr=self.cfg.vf_lr)
        self.obs_dim = obs_dim
        self.log: list[EpochLog] = []

    @torch.no_grad()
    def _act(self, obs: np.ndarray) -> tuple[int, float, float]:
        x = torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1)
        logits = self.pi(x)[0]
        logp_all = torch.log_softmax(logits, -1)
        a = int(torch.multinomial(logp_all.exp(), 1))
        return a, float(logp_all[a]), float(self.v(x)[0, 0])

    def train(self, progress: Any = None) -> list[EpochLog]:
        cfg, env, T = self.cfg, self.env, self.teacher
        n, m = cfg.steps_per_epoch, self.n_actions
        obs, _ = env.reset(seed=cfg.seed)
        if T is not None:
            T.on_episode_start()
        ep_ret, ep_len = 0.0, 0
        for epoch in range(cfg.epochs):
            t0 = time.time()
            if T is not None:
                T.on_epoch_start()
            buf_o = np.zeros((n, self.obs_dim), np.float32)
            buf_a = np.zeros(n, np.int64)
            buf_r = np.zeros(n, np.float32)
            buf_v = np.zeros(n, np.float32)
            buf_logp = np.zeros(n, np.float32)
            buf_adv = np.zeros(n, np.float32)
            buf_ret = np.zeros(n, np.float32)
            buf_tv = np.zeros((n, m), np.float32)  # stored teacher answers (reused by every PPO iteration)
            buf_has = np.zeros(n, np.float32)
            buf_k = np.zeros(n, np.float32)
            start, rets, lens = 0, [], []
            for t in range(n):
                a, logp, v = self._act(obs)
                if T is not None:
                    k_now = T.k
                    ans = T.query(obs)  # ONE query per step
                    if ans is not None:
                        buf_tv[t], buf_has[t], buf_k[t] = ans, 1.0, k_now
                next_obs, r, terminated, truncated, _ = env.step(a)
                buf_o[t], buf_a[t], buf_r[t], buf_v[t], buf_logp[t] = obs, a, r, v, logp
                ep_ret += float(r)
                ep_len += 1
                obs = next_obs
                timeout = truncated or ep_len >= cfg.max_ep_len
                epoch_end = t == n - 1
                if terminated or timeout or epoch_end:
                    last_v = 0.0 if terminated else self._act(obs)[2]
                    sl = slice(start, t + 1)
                    rews = np.append(buf_r[sl], last_v)
                    vals = np.append(buf_v[sl], last_v)
                    deltas = rews[:-1] + cfg.gamma * vals[1:] - vals[:-1]
                    buf_adv[sl] = _discount_cumsum(deltas, cfg.gamma * cfg.gae_lambda)
                    buf_ret[sl] = _discount_cumsum(rews, cfg.gamma)[:-1]
                    start = t + 1
                    if terminated or timeout:
                        rets.append(ep_ret)
                        lens.append(ep_len)
                        obs, _ = env.reset()
                        ep_ret, ep_len = 0.0, 0
                        if T is not None:
                            T.on_episode_start()
            pen = self._update(buf_o, buf_a, buf_logp, buf_adv, buf_ret, buf_tv, buf_has, buf_k)
            q_eps, q_delta = T.spent if T is not None else (0.0, 0.0)
            self.log.append(
                EpochLog(
                    epoch=epoch, env_steps=(epoch + 1) * n,
                    ep_return=float(np.mean(rets)) if rets else float("nan"),
                    ep_len=float(np.mean(lens)) if lens else float("nan"), episodes=len(rets),
                    teacher_fraction=float(buf_has.mean()), teacher_k=float(T.k) if T is not None else 0.0,
                    query_eps=q_eps, query_delta=q_delta, penalty=pen, seconds=time.time() - t0,
                )
            )
            if progress is not None:
                progress(self.log[-1])
        return self.log

    def _update(self, o, a, logp_old, adv, ret, tv, has, k) -> float:
        cfg = self.cfg
        O = torch.as_tensor(o)
        A = torch.as_tensor(a)
        LP = torch.as_tensor(logp_old)
        ADV = torch.as_tensor(adv)
        ADV = (ADV - ADV.mean()) / (ADV.std() + 1e-8)
        RET = torch.as_tensor(ret)
        TV, HAS, K = torch.as_tensor(tv), torch.as_tensor(has), torch.as_tensor(k)
        use_pen = self.teacher is not None and bool(HAS.any())
        pen_val = 0.0
        for _ in range(cfg.train_pi_iters):
            logits = self.pi(O)
            logp_all = torch.log_softmax(logits, -1)
            logp = logp_all.gather(1, A[:, None])[:, 0]
            ratio = torch.exp(logp - LP)
            clip = torch.clamp(ratio, 1 - cfg.clip_ratio, 1 + cfg.clip_ratio) * ADV
            loss = -torch.min(ratio * ADV, clip).mean()
            approx_kl = float((LP - logp).mean().detach())
            if approx_kl > 1.5 * cfg.target_kl:
                break
            if use_pen:
                pen = privacy_aware_penalty(logits, TV, HAS, K, lam=cfg.kick_lambda, beta=cfg.kick_beta)
                loss = loss + cfg.kick_weight * pen
                pen_val = float(pen.detach())
            self.pi_opt.zero_grad()
            loss.backward()
            self.pi_opt.step()
        for _ in range(cfg.train_v_iters):
            self.v_opt.zero_grad()
            ((self.v(O)[:, 0] - RET) ** 2).mean().backward()
            self.v_opt.step()
        return pen_val

    @torch.no_grad()
    def evaluate(self, env: Any, episodes: int = 5, seed: int = 10_000, greedy: bool = False) -> float:
        """Mean return of ``episodes`` fresh episodes (sampled actions unless ``greedy``)."""
        def act(obs: np.ndarray) -> list[int]:
            logits = self.pi(torch.as_tensor(obs, dtype=torch.float32).reshape(1, -1))[0]
            return [int(logits.argmax()) if greedy else int(torch.multinomial(torch.softmax(logits, -1), 1))]

        return float(evaluate_policy(env, act, range(seed, seed + episodes), max_steps=self.cfg.max_ep_len).mean())

    def config_dict(self) -> dict[str, Any]:
        d = asdict(self.cfg)
        d["hidden"] = list(self.cfg.hidden)
        return d
