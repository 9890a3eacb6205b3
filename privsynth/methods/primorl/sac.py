"""Soft actor-critic trained only on rollouts of the pessimistic private model (PriMORL Algorithm 4).

:func:`train_sac_in_model` accepts a :class:`~privsynth.methods.primorl.pessimistic_mdp.PessimisticMDP` and nothing
else: it has no parameter through which a dataset could arrive (real-data ratio 0, no dataset start states, as the
post-processing argument of the paper's Theorem 4.5 requires), and it refuses any other object. The optional
``evaluate`` callback (true-environment return) is for reporting only: its value never feeds back into training or checkpoint choice.

The SAC update is the project's one SAC (:class:`privsynth.rl.sac.SAC`, also behind the locomotion behaviour
policies); what is specific to here is the model-rollout buffer with ρ0 / model-state branching and the loop below.
Defaults follow the paper (lr 3e-4, auto-α, target entropy −3, H = 30 for Pendulum) and the MOPO code it builds on
(γ 0.99, τ 0.005, batch 256); network width, epochs and rollout batch are scaled down for CPU (see docs/primorl.md).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import torch
from tqdm.auto import tqdm

from privsynth.methods.primorl.pessimistic_mdp import PessimisticMDP
from privsynth.rl.sac import SAC, SquashedGaussianActor

__all__ = ["SACConfig", "SACPolicy", "SACResult", "train_sac_in_model"]


@dataclass
class SACConfig:
    hidden: tuple[int, ...] = (128, 128)  # MOPO code: 256 x 256; halved for CPU
    lr: float = 3e-4  # Table 8
    gamma: float = 0.99
    tau: float = 0.005
    batch: int = 256
    target_entropy: float = -3.0  # Table 8 / MOPO default (non-standard for 1-D actions, where SAC uses −|A|; kept)
    epochs: int = 40  # MOPO code: 200 x 1000 updates; scaled down
    steps_per_epoch: int = 250
    horizon: int = 30  # H (Table 8: 30 for Pendulum)
    rollout_batch: int = 2000  # start states per epoch (MOPO: 50k)
    model_start_fraction: float = 0.5  # share of starts taken from earlier model states, rest from ρ0
    retain_epochs: int = 5  # FIFO buffer keeps this many epochs of rollouts
    seed: int = 0


SACPolicy = SquashedGaussianActor  # ``SACPolicy(obs_dim, act_dim, act_low, act_high, hidden)``


class _Buffer:
    def __init__(self, capacity: int, obs_dim: int, act_dim: int) -> None:
        self.cap, self.n, self.i = capacity, 0, 0
        self.data = {k: torch.zeros(capacity, d) for k, d in
                     (("obs", obs_dim), ("act", act_dim), ("rew", 1), ("next", obs_dim), ("done", 1))}

    def add(self, **batch: torch.Tensor) -> None:
        b = len(batch["obs"])
        idx = (self.i + torch.arange(b)) % self.cap
        for k, v in batch.items():
            self.data[k][idx] = v.reshape(b, -1).float()
        self.i, self.n = (self.i + b) % self.cap, min(self.n + b, self.cap)

    def sample(self, b: int, g: torch.Generator) -> dict[str, torch.Tensor]:
        idx = torch.randint(0, self.n, (b,), generator=g)
        return {k: v[idx] for k, v in self.data.items()}


@dataclass
class SACResult:
    policy: SACPolicy
    history: list[dict[str, float]] = field(default_factory=list)

    def final_return(self, last: int = 5) -> float:
        vals = [h["eval_return"] for h in self.history if "eval_return" in h]
        return float(np.mean(vals[-last:])) if vals else float("nan")


def train_sac_in_model(mdp: PessimisticMDP, cfg: SACConfig = SACConfig(), *,
                       evaluate: Callable[[SACPolicy], float] | None = None, progress: bool = False) -> SACResult:
    """Algorithm 4: SAC on H-step rollouts of the pessimistic model; 100% model data."""
    if not isinstance(mdp, PessimisticMDP):
        raise TypeError(f"the PriMORL policy stage takes a PessimisticMDP, not {type(mdp).__name__}: "
                        "it must never see the dataset")
    torch.manual_seed(cfg.seed)
    g = torch.Generator().manual_seed(cfg.seed)
    rng = np.random.default_rng(cfg.seed)
    od, ad = mdp.obs_dim, mdp.act_dim
    sac = SAC(od, ad, hidden=cfg.hidden, lr=cfg.lr, gamma=cfg.gamma, tau=cfg.tau, target_entropy=cfg.target_entropy,
              act_low=mdp.act_low, act_high=mdp.act_high)
    actor = sac.actor
    buf = _Buffer(cfg.retain_epochs * cfg.rollout_batch * cfg.horizon, od, ad)
    history: list[dict[str, float]] = []
    for epoch in tqdm(range(cfg.epochs), disable=not progress, desc="SAC in the private model"):
        # rollouts: starts from ρ0 and from earlier model states, never from the data
        n_model = int(cfg.model_start_fraction * cfg.rollout_batch) if buf.n else 0
        starts = [mdp.reset(cfg.rollout_batch - n_model, rng)]
        if n_model:
            starts.append(buf.data["next"][torch.randint(0, buf.n, (n_model,), generator=g)])
        obs = torch.cat(starts)
        pen, raw = [], []
        for _ in range(cfg.horizon):
            with torch.no_grad():
                act, _ = actor.sample(obs, g)
            out = mdp.step(obs, act, g)
            buf.add(obs=obs, act=out["action"], rew=out["reward"], next=out["next_obs"], done=out["done"])
            pen.append(float(out["reward"].mean())), raw.append(float(out["u"].mean()))
            keep = ~out["done"]
            obs = out["next_obs"][keep]
            if not len(obs):
                break
        # updates
        for _ in range(cfg.steps_per_epoch):
            b = buf.sample(cfg.batch, g)
            stats = sac.update((b["obs"], b["act"], b["rew"], b["next"], b["done"]), g)
        rec = {"epoch": epoch + 1, "model_reward_penalised": float(np.mean(pen)), "mean_u": float(np.mean(raw)),
               "alpha": float(sac.log_alpha.exp().item()), "q_loss": stats["q_loss"]}
        if evaluate is not None:
            rec["eval_return"] = float(evaluate(actor))  # reporting only
        history.append(rec)
    return SACResult(actor, history)
