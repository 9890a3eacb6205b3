"""A compact Soft Actor-Critic (Haarnoja et al. 2018, automatic entropy tuning) in plain torch.

Used only to train the behaviour policies that stand in for D4RL's locomotion data-collection agents (D4RL trained
SAC to "medium" and "expert" levels). Written here rather than taken from a library because the project has no RL
training dependency (stable-baselines3 would pull in its own stack) and SAC needs ~150 lines. Defaults are the
SB3 / CORL ones: two 256x256 ReLU MLPs per network, Adam lr 3e-4, batch 256, gamma 0.99, tau 0.005, one gradient
step per environment step, target entropy -|A|.

The actor is what gets shipped (:class:`Actor`, ~73k parameters for HalfCheetah); ``act(obs, deterministic)`` gives
the tanh-squashed mean or a sample, both inside [-1, 1] (the action box of the gymnasium MuJoCo envs used here).
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = ["SACConfig", "Actor", "SAC", "ReplayBuffer", "mlp"]

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def mlp(inp: int, out: int, hidden: int = 256, layers: int = 2) -> nn.Sequential:
    mods: list[nn.Module] = []
    d = inp
    for _ in range(layers):
        mods += [nn.Linear(d, hidden), nn.ReLU()]
        d = hidden
    mods.append(nn.Linear(d, out))
    return nn.Sequential(*mods)


@dataclass
class SACConfig:
    hidden: int = 256
    lr: float = 3e-4
    batch_size: int = 256
    gamma: float = 0.99
    tau: float = 0.005
    learning_starts: int = 5000  # uniform random actions before the first update
    buffer_size: int = 1_000_000


class Actor(nn.Module):
    """Tanh-Gaussian policy: obs -> (mean, log_std) of a Gaussian squashed by tanh."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 256) -> None:
        super().__init__()
        self.obs_dim, self.act_dim, self.hidden = obs_dim, act_dim, hidden
        self.net = mlp(obs_dim, 2 * act_dim, hidden)

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action in (-1, 1) and its log-probability (with the tanh correction)."""
        mean, log_std = self(obs)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std) ** 2 - log_std - 0.5 * np.log(2 * np.pi)).sum(-1)
        logp = logp - (2 * (np.log(2) - u - F.softplus(-2 * u))).sum(-1)
        return a, logp

    @torch.no_grad()
    def act(self, obs: np.ndarray, deterministic: bool = True, rng: np.random.Generator | None = None) -> np.ndarray:
        """Action for one observation; a stochastic action draws its noise from ``rng`` (numpy, reproducible)."""
        mean, log_std = self(torch.as_tensor(obs, dtype=torch.float32).unsqueeze(0))
        mean, log_std = mean[0].numpy(), log_std[0].numpy()
        if deterministic:
            return np.tanh(mean).astype(np.float32)
        rng = rng if rng is not None else np.random.default_rng()
        return np.tanh(mean + np.exp(log_std) * rng.standard_normal(mean.shape)).astype(np.float32)

    def to_payload(self, half: bool = True) -> dict:
        """A small picklable dict (weights in float16 by default) for ``pretrained/``."""
        sd = {k: (v.half() if half else v.clone()) for k, v in self.state_dict().items()}
        return {"obs_dim": self.obs_dim, "act_dim": self.act_dim, "hidden": self.hidden, "state_dict": sd}

    @classmethod
    def from_payload(cls, payload: dict) -> "Actor":
        actor = cls(payload["obs_dim"], payload["act_dim"], payload["hidden"])
        actor.load_state_dict({k: v.float() for k, v in payload["state_dict"].items()})
        actor.eval()
        return actor


class ReplayBuffer:
    def __init__(self, obs_dim: int, act_dim: int, size: int) -> None:
        self.obs = np.zeros((size, obs_dim), np.float32)
        self.next_obs = np.zeros((size, obs_dim), np.float32)
        self.act = np.zeros((size, act_dim), np.float32)
        self.rew = np.zeros(size, np.float32)
        self.done = np.zeros(size, np.float32)
        self.n, self.size = 0, size

    def add(self, o: np.ndarray, a: np.ndarray, r: float, o2: np.ndarray, terminal: bool) -> None:
        i = self.n % self.size
        self.obs[i], self.act[i], self.rew[i], self.next_obs[i], self.done[i] = o, a, r, o2, float(terminal)
        self.n += 1

    def sample(self, batch: int, rng: np.random.Generator) -> tuple[torch.Tensor, ...]:
        idx = rng.integers(0, min(self.n, self.size), size=batch)
        return tuple(torch.from_numpy(x[idx]) for x in (self.obs, self.act, self.rew, self.next_obs, self.done))


class SAC:
    """Twin-Q SAC with a learned temperature."""

    def __init__(self, obs_dim: int, act_dim: int, cfg: SACConfig | None = None) -> None:
        self.cfg = cfg = cfg or SACConfig()
        self.actor = Actor(obs_dim, act_dim, cfg.hidden)
        self.q1, self.q2 = mlp(obs_dim + act_dim, 1, cfg.hidden), mlp(obs_dim + act_dim, 1, cfg.hidden)
        self.q1_t, self.q2_t = copy.deepcopy(self.q1), copy.deepcopy(self.q2)
        for p in list(self.q1_t.parameters()) + list(self.q2_t.parameters()):
            p.requires_grad_(False)
        self.log_alpha = torch.zeros(1, requires_grad=True)
        self.target_entropy = -float(act_dim)
        self.opt_actor = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr)
        self.opt_q = torch.optim.Adam(list(self.q1.parameters()) + list(self.q2.parameters()), lr=cfg.lr)
        self.opt_alpha = torch.optim.Adam([self.log_alpha], lr=cfg.lr)

    def update(self, batch: tuple[torch.Tensor, ...]) -> dict[str, float]:
        o, a, r, o2, d = batch
        alpha = self.log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = self.actor.sample(o2)
            oa2 = torch.cat([o2, a2], -1)
            q_t = torch.min(self.q1_t(oa2), self.q2_t(oa2)).squeeze(-1) - alpha * logp2
            y = r + self.cfg.gamma * (1 - d) * q_t
        oa = torch.cat([o, a], -1)
        q_loss = F.mse_loss(self.q1(oa).squeeze(-1), y) + F.mse_loss(self.q2(oa).squeeze(-1), y)
        self.opt_q.zero_grad()
        q_loss.backward()
        self.opt_q.step()

        pi, logp = self.actor.sample(o)
        opi = torch.cat([o, pi], -1)
        q_pi = torch.min(self.q1(opi), self.q2(opi)).squeeze(-1)
        actor_loss = (alpha * logp - q_pi).mean()
        self.opt_actor.zero_grad()
        actor_loss.backward()
        self.opt_actor.step()

        alpha_loss = -(self.log_alpha * (logp.detach() + self.target_entropy)).mean()
        self.opt_alpha.zero_grad()
        alpha_loss.backward()
        self.opt_alpha.step()

        with torch.no_grad():
            for net, tgt in ((self.q1, self.q1_t), (self.q2, self.q2_t)):
                for p, pt in zip(net.parameters(), tgt.parameters()):
                    pt.mul_(1 - self.cfg.tau).add_(p, alpha=self.cfg.tau)
        return {"q_loss": q_loss.item(), "actor_loss": actor_loss.item(), "alpha": alpha.item()}
