"""EDAC (An et al. 2021, SAC-N with ensemble diversification) with CORL's hyperparameters (``algorithms/offline/edac.py``).

Update order as in CORL (and the EDAC code): temperature, then actor, then critics, then Polyak. The critic loss is
the ensemble TD error ``Σ_i mean_B (Q_i(s,a) − y)²`` with ``y = r + γ(1 − d)(min_i Q̄_i(s', a') − α·log π(a'|s'))``,
plus ``η`` times the diversity term: the mean pairwise cosine similarity of the members' action gradients
``∇_a Q_i(s, a)``, summed over ordered pairs and divided by ``N − 1``.

Speed: the N critics are one :class:`~privsynth.evaluation.agents.nets.EnsembleMLP` (a batched linear layer via
``torch.baddbmm``), and the TD term and the diversity term share one forward pass of the ensemble (CORL runs the
ensemble twice on the same ``(s, a)``; the values are identical). During the actor step the critic's parameters are
frozen so autograd skips their weight gradients.

CORL's EDAC does **not** normalise states (``normalize_states=False`` below); set it to True for a uniform harness.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import torch
from torch import nn

from privsynth.evaluation.agents.common import Batch, make_adam, soft_update
from privsynth.evaluation.agents.nets import EnsembleMLP

__all__ = ["EDACConfig", "EDAC"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class EDACConfig:
    """CORL defaults (``edac.py`` TrainConfig and ``configs/offline/edac/maze2d/umaze_v1.yaml``)."""

    num_updates: int = 3_000_000  # CORL num_epochs 3000 x num_updates_on_epoch 1000; lower it on a CPU
    batch_size: int = 256  # CORL 256
    discount: float = 0.99  # CORL gamma 0.99
    tau: float = 0.005  # CORL 5e-3, target-critic Polyak rate
    num_critics: int = 10  # CORL 10
    eta: float = 0.1  # CORL maze2d 0.1 (halfcheetah 1.0), weight of the diversity loss
    hidden: tuple[int, ...] = (256, 256, 256)  # CORL hidden_dim 256, three hidden layers (actor and critics)
    actor_lr: float = 3e-4  # CORL 3e-4
    critic_lr: float = 3e-4  # CORL 3e-4
    alpha_lr: float = 3e-4  # CORL alpha_learning_rate 3e-4; log α starts at 0, target entropy −|A|
    log_std_min: float = -5.0  # CORL (EDAC paper) clip of log σ
    log_std_max: float = 2.0
    normalize_states: bool = False  # CORL EDAC trains on raw states
    eval_every: int = 5000  # CORL eval_every 5 epochs of 1000 updates
    eval_episodes: int = 10  # CORL eval_episodes 10


class TanhGaussianActor(nn.Module):
    """SAC actor: MLP trunk, separate μ and log σ heads, tanh squashing (CORL/EDAC init: biases 0.1, heads U(±1e-3))."""

    def __init__(self, obs_dim: int, act_dim: int, hidden: tuple[int, ...], max_action: float,
                 log_std_min: float, log_std_max: float) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        d = obs_dim
        for h in hidden:
            lin = nn.Linear(d, h)
            nn.init.constant_(lin.bias, 0.1)
            layers += [lin, nn.ReLU()]
            d = h
        self.trunk = nn.Sequential(*layers)
        self.mu = nn.Linear(d, act_dim)
        self.log_sigma = nn.Linear(d, act_dim)
        for head in (self.mu, self.log_sigma):
            nn.init.uniform_(head.weight, -1e-3, 1e-3)
            nn.init.uniform_(head.bias, -1e-3, 1e-3)
        self.max_action = max_action
        self.log_std_min, self.log_std_max = log_std_min, log_std_max

    def sample(self, obs: torch.Tensor, generator: torch.Generator | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised action and its log-probability (change of variables through tanh, SAC appendix C)."""
        h = self.trunk(obs)
        mu = self.mu(h)
        log_sigma = self.log_sigma(h).clamp(self.log_std_min, self.log_std_max)
        eps = torch.randn(mu.shape, generator=generator)
        u = mu + eps * log_sigma.exp()
        tanh_u = torch.tanh(u)
        log_prob = (-0.5 * eps.square() - log_sigma - _HALF_LOG_2PI).sum(-1)
        log_prob = log_prob - torch.log(1 - tanh_u.square() + 1e-6).sum(-1)
        return tanh_u * self.max_action, log_prob

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action ``max_action · tanh(μ(s))``."""
        return torch.tanh(self.mu(self.trunk(obs))) * self.max_action


def init_edac_critic(critic: EnsembleMLP) -> EnsembleMLP:
    """CORL/EDAC critic init: every bias 0.1 except the output layer, which is U(±3e-3) in weight and bias."""
    with torch.no_grad():
        for layer in critic.layers[:-1]:
            layer.bias.fill_(0.1)
        critic.layers[-1].weight.uniform_(-3e-3, 3e-3)
        critic.layers[-1].bias.uniform_(-3e-3, 3e-3)
    return critic


class EDAC(nn.Module):
    """The EDAC learner; ``update(batch)`` is one step of temperature, actor and critic ensemble."""

    name = "edac"

    def __init__(self, obs_dim: int, act_dim: int, *, max_action: float = 1.0, config: EDACConfig | None = None,
                 num_updates: int | None = None) -> None:
        super().__init__()
        self.config = cfg = config or EDACConfig()
        if cfg.num_critics < 2:
            raise ValueError("EDAC needs at least two critics for its diversity term")
        self.num_updates = int(num_updates or cfg.num_updates)
        self.max_action = float(max_action)
        self.actor = TanhGaussianActor(obs_dim, act_dim, cfg.hidden, self.max_action, cfg.log_std_min, cfg.log_std_max)
        self.critic = init_edac_critic(EnsembleMLP(obs_dim + act_dim, cfg.hidden, 1, cfg.num_critics))
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.zeros(1))
        self.target_entropy = -float(act_dim)
        self.actor_opt = make_adam(self.actor.parameters(), cfg.actor_lr)
        self.critic_opt = make_adam(self.critic.parameters(), cfg.critic_lr)
        self.alpha_opt = make_adam([self.log_alpha], cfg.alpha_lr)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        self.register_buffer("_off_diag", 1.0 - torch.eye(cfg.num_critics))
        self.steps = 0
        self.generator: torch.Generator | None = None  # source of the policy noise (None: torch's global RNG)

    def diversity_loss(self, q: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """EDAC's ensemble-gradient diversity term from ``q [N, B]`` computed on ``act [N, B, A]`` (requires grad)."""
        n = self.config.num_critics
        grad = torch.autograd.grad(q.sum(), act, create_graph=True)[0]  # [N, B, A]
        grad = grad / (grad.norm(dim=-1, keepdim=True) + 1e-10)
        grad = grad.transpose(0, 1)  # [B, N, A]
        cos = torch.bmm(grad, grad.transpose(1, 2))  # [B, N, N]
        return (cos * self._off_diag).sum(dim=(1, 2)).mean() / (n - 1)

    def update(self, b: Batch) -> dict[str, torch.Tensor]:
        cfg = self.config
        n = cfg.num_critics
        # temperature (CORL samples a fresh no-grad action for it)
        with torch.no_grad():
            _, log_prob = self.actor.sample(b.obs, self.generator)
        alpha_loss = (-self.log_alpha * (log_prob + self.target_entropy)).mean()
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        alpha = self.log_alpha.detach().exp()

        # actor, against the frozen ensemble's minimum
        for p in self._critic_params:
            p.requires_grad_(False)
        pi, log_pi = self.actor.sample(b.obs, self.generator)
        q_pi = self.critic(torch.cat([b.obs, pi], dim=-1)).squeeze(-1)  # [N, B]
        actor_loss = (alpha * log_pi - q_pi.amin(0)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()
        for p in self._critic_params:
            p.requires_grad_(True)

        # critics: TD + eta * diversity, one shared forward pass
        with torch.no_grad():
            next_act, next_log_prob = self.actor.sample(b.next_obs, self.generator)
            q_next = self.critic_target(torch.cat([b.next_obs, next_act], dim=-1)).squeeze(-1).amin(0)
            y = b.rew + cfg.discount * (1.0 - b.done) * (q_next - alpha * next_log_prob)
        obs_n = b.obs.unsqueeze(0).expand(n, *b.obs.shape)
        act_n = b.act.unsqueeze(0).expand(n, *b.act.shape).clone().requires_grad_(True)
        q = self.critic(torch.cat([obs_n, act_n], dim=-1)).squeeze(-1)  # [N, B]
        td_loss = (q - y).square().mean(1).sum()
        div_loss = self.diversity_loss(q, act_n)
        critic_loss = td_loss + cfg.eta * div_loss
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.backward()
        self.critic_opt.step()
        soft_update(self._target_params, self._critic_params, cfg.tau)
        self.steps += 1
        return {"critic_loss": critic_loss.detach(), "td_loss": td_loss.detach(), "diversity_loss": div_loss.detach(),
                "actor_loss": actor_loss.detach(), "alpha": alpha.squeeze()}

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic action for (normalised, if enabled) observations."""
        return self.actor(obs)
