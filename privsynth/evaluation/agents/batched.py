"""K agents of one kind trained at once as one model with stacked weights (issue 17, item 1).

:func:`stack_learners` takes K ordinary learners (:class:`~privsynth.evaluation.agents.iql.IQL`,
:class:`~privsynth.evaluation.agents.td3bc.TD3BC` or :class:`~privsynth.evaluation.agents.edac.EDAC`, each built
under its own seed) and returns one batched learner in which every layer holds the weights of all K·M members
(M = members per agent: 1 for a V net or an actor, 2 for a twin critic, N for EDAC's ensemble) as one tensor, applied
with one ``torch.baddbmm``. ``update(batch)`` takes a :class:`~privsynth.evaluation.agents.common.Batch` whose
tensors carry a leading agent axis ``[K, B, ...]`` (each agent its own minibatch, from its own buffer and possibly
its own dataset) and returns per-agent losses ``[K]``.

Why batched matmuls rather than ``torch.func.vmap(functional_call)``: the learners already run their critics as
vectorised ensembles (``EnsembleLinear``), so stacking agents is only a larger ensemble axis; autograd through
``baddbmm`` needs no functorch transforms, and EDAC's double backward (the diversity term) works unchanged.

**Same arithmetic as K separate runs.** Each agent's loss only reads its own slice of every stacked tensor, the
per-agent losses are summed before the backward pass (so each slice's gradient is exactly its own loss's gradient),
Adam and Polyak averaging are elementwise, and every random draw (minibatch indices, TD3+BC smoothing noise, EDAC's
policy noise) comes from that agent's own ``torch.Generator`` in the order the unbatched learner draws it. Layers
stacked from ``nn.Linear`` keep its ``[out, in]`` layout and its backward orientation (:class:`StackedLinear`),
layers stacked from :class:`EnsembleLinear` keep theirs; with that, K = 1 reproduces the unbatched learner bit for
bit on this torch/MKL build, and within a larger K each agent matches its own run to float rounding
(tests/test_agents_batched.py).

The speed-up is bounded by arithmetic: at batch 256 and width 256 one IQL update is ~0.5 GFLOP of matrix products and
a single agent already runs them at about half a core's matmul rate, so batching recovers only the launch, Python
and allocation overhead (``scripts/bench_agents.py --batched``; docs/agents.md).

The stacked layers, the per-slice optimiser and the per-agent helpers are in :mod:`.stacked`.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from privsynth.evaluation.agents.common import Batch, soft_update
from privsynth.evaluation.agents.edac import EDAC
from privsynth.evaluation.agents.iql import IQL
from privsynth.evaluation.agents.nets import set_matmul_precision
from privsynth.evaluation.agents.stacked import (SliceAdam, StackedLinear, StackedMLP, member_forward, randn_per_agent,
                                                 repeat_members, stack_batches, stacked_linears)
from privsynth.evaluation.agents.td3bc import TD3BC

# SliceAdam, StackedLinear, StackedMLP and stack_batches live in .stacked and are re-exported here
__all__ = ["SliceAdam", "StackedLinear", "StackedMLP", "BatchedIQL", "BatchedTD3BC", "BatchedEDAC", "stack_learners", "stack_batches"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class _Batched(nn.Module):
    """Shared plumbing: the K learners, their generators, write-back."""

    name = "batched"

    def __init__(self, learners: Sequence[nn.Module]) -> None:
        super().__init__()
        if not learners:
            raise ValueError("a batched learner needs at least one learner")
        kinds = {type(x) for x in learners}
        if len(kinds) != 1:
            raise ValueError(f"cannot batch different learner kinds: {sorted(k.__name__ for k in kinds)}")
        cfgs = {repr(x.config) for x in learners}
        if len(cfgs) != 1 or len({x.num_updates for x in learners}) != 1:
            raise ValueError("batched learners must share their config and update budget")
        if any(x.steps for x in learners):
            raise ValueError("stack fresh learners (their optimiser state is not carried over)")
        self.learners = list(learners)
        self.k = len(learners)
        self.config = learners[0].config
        self.num_updates = learners[0].num_updates
        self.steps = learners[0].steps
        self.name = learners[0].name
        self.generators = [getattr(x, "generator", None) for x in learners]

    def write_back(self) -> None:  # pragma: no cover - implemented by subclasses
        raise NotImplementedError


# ------------------------------------------------------------------------------------------------ IQL
class BatchedIQL(_Batched):
    """K :class:`IQL` learners as one model; same fused update (V expectile, twin Q TD, AWR actor, Polyak)."""

    def __init__(self, learners: Sequence[IQL]) -> None:
        super().__init__(learners)
        cfg = self.config
        self.v = StackedMLP.from_members([stacked_linears(x.v) for x in learners])
        self.q = StackedMLP.from_members([stacked_linears(x.q) for x in learners])
        self.q_target = StackedMLP.from_members([stacked_linears(x.q_target) for x in learners]).requires_grad_(False)
        self.actor_net = StackedMLP.from_members([stacked_linears(x.actor.net) for x in learners])
        self.log_std = nn.Parameter(torch.stack([x.actor.log_std.detach() for x in learners]).unsqueeze(1))
        self.max_action = learners[0].actor.max_action
        self.optimizer = SliceAdam(
            [
                {"params": list(self.v.parameters()), "lr": cfg.vf_lr},
                {"params": list(self.q.parameters()), "lr": cfg.qf_lr},
                {"params": [*self.actor_net.parameters(), self.log_std], "lr": cfg.actor_lr},
            ],
            self.k,
        )
        self._actor_group = self.optimizer.param_groups[2]
        self._actor_group["lr"] = learners[0]._actor_group["lr"]
        self._q_params = list(self.q.parameters())
        self._q_target_params = list(self.q_target.parameters())

    def update(self, b: Batch) -> dict[str, torch.Tensor]:
        cfg = self.config
        sa = repeat_members(torch.cat([b.obs, b.act], dim=-1), 2)  # [2K, B, in]
        with torch.no_grad():
            target_q = self.q_target(sa).unflatten(0, (self.k, 2)).amin(1).squeeze(-1)  # [K, B]
            next_v = self.v(b.next_obs).squeeze(-1)
            q_target_value = b.rew + (1.0 - b.done) * cfg.discount * next_v
        v = self.v(b.obs).squeeze(-1)
        adv = target_q - v
        weight = torch.abs(cfg.iql_tau - (adv < 0).float())
        v_loss = (weight * adv.square()).mean(-1)  # [K]
        qs = self.q(sa).squeeze(-1).unflatten(0, (self.k, 2))  # [K, 2, B]
        q_loss = (qs - q_target_value.unsqueeze(1)).square().flatten(1).mean(-1)
        exp_adv = torch.exp(cfg.beta * adv.detach()).clamp(max=cfg.exp_adv_max)
        mean = torch.tanh(self.actor_net(b.obs))
        log_std = self.log_std.clamp(cfg.log_std_min, cfg.log_std_max)  # [K, 1, A]
        # per agent, so that log σ's gradient is reduced over each agent's batch as in the unbatched learner
        log_prob = torch.stack([
            (-0.5 * ((b.act[j] / self.max_action - mean[j]) * torch.exp(-log_std[j])).square() - log_std[j]
             - _HALF_LOG_2PI).sum(-1)
            for j in range(self.k)])
        actor_loss = (exp_adv * -log_prob).mean(-1)

        self.optimizer.zero_grad(set_to_none=True)
        (v_loss + q_loss + actor_loss).sum().backward()
        self.optimizer.step()
        self.steps += 1
        if cfg.actor_cosine:
            self._actor_group["lr"] = cfg.actor_lr * 0.5 * (1.0 + math.cos(math.pi * min(self.steps, self.num_updates)
                                                                            / self.num_updates))
        soft_update(self._q_target_params, self._q_params, cfg.tau)
        return {"value_loss": v_loss.detach(), "q_loss": q_loss.detach(), "actor_loss": actor_loss.detach()}

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Deterministic actions of all K agents for normalised observations ``[K, B, obs]``."""
        return (torch.tanh(self.actor_net(obs)) * self.max_action).clamp(-self.max_action, self.max_action)

    @torch.no_grad()
    def write_back(self) -> None:
        """Copy the stacked weights (and step counts) into the K learners."""
        self.v.load_into([stacked_linears(x.v) for x in self.learners])
        self.q.load_into([stacked_linears(x.q) for x in self.learners])
        self.q_target.load_into([stacked_linears(x.q_target) for x in self.learners])
        self.actor_net.load_into([stacked_linears(x.actor.net) for x in self.learners])
        for j, x in enumerate(self.learners):
            x.actor.log_std.copy_(self.log_std[j, 0])
            x.steps = self.steps


# ------------------------------------------------------------------------------------------------ TD3+BC
class BatchedTD3BC(_Batched):
    """K :class:`TD3BC` learners as one model (critic step every update, actor and targets every ``policy_freq``)."""

    def __init__(self, learners: Sequence[TD3BC]) -> None:
        super().__init__(learners)
        cfg = self.config
        self.max_action = learners[0].max_action
        self.actor = StackedMLP.from_members([stacked_linears(x.actor) for x in learners])
        self.actor_target = StackedMLP.from_members([stacked_linears(x.actor_target) for x in learners]).requires_grad_(False)
        self.critic = StackedMLP.from_members([stacked_linears(x.critic) for x in learners])
        self.critic_target = StackedMLP.from_members([stacked_linears(x.critic_target) for x in learners])
        self.critic_target.requires_grad_(False)
        self.actor_opt = SliceAdam([{"params": self.actor.parameters(), "lr": cfg.actor_lr}], self.k)
        self.critic_opt = SliceAdam([{"params": self.critic.parameters(), "lr": cfg.critic_lr}], self.k)
        self._critic_params = list(self.critic.parameters())
        self._online = self._critic_params + list(self.actor.parameters())
        self._targets = list(self.critic_target.parameters()) + list(self.actor_target.parameters())
        self._last_actor_loss = torch.zeros(self.k)

    def _pi(self, net: StackedMLP, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(net(obs)) * self.max_action

    def update(self, b: Batch) -> dict[str, torch.Tensor]:
        cfg = self.config
        with torch.no_grad():
            noise = (randn_per_agent(self.generators, b.act.shape[1:]) * (cfg.policy_noise * self.max_action)).clamp(
                -cfg.noise_clip * self.max_action, cfg.noise_clip * self.max_action)
            next_act = (self._pi(self.actor_target, b.next_obs) + noise).clamp(-self.max_action, self.max_action)
            nsa = repeat_members(torch.cat([b.next_obs, next_act], dim=-1), 2)
            target_q = self.critic_target(nsa).unflatten(0, (self.k, 2)).amin(1).squeeze(-1)  # [K, B]
            target = b.rew + (1.0 - b.done) * cfg.discount * target_q
        sa = repeat_members(torch.cat([b.obs, b.act], dim=-1), 2)
        qs = self.critic(sa).squeeze(-1).unflatten(0, (self.k, 2))  # [K, 2, B]
        critic_loss = (qs - target.unsqueeze(1)).square().mean(-1).sum(-1)  # [K]
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.sum().backward()
        self.critic_opt.step()
        self.steps += 1

        if self.steps % cfg.policy_freq == 0:
            for p in self._critic_params:
                p.requires_grad_(False)
            pi = self._pi(self.actor, b.obs)
            q = member_forward(self.critic, torch.cat([b.obs, pi], dim=-1), 0, 2).squeeze(-1)  # [K, B]
            lmbda = cfg.alpha / q.abs().mean(-1).detach()
            actor_loss = -lmbda * q.mean(-1) + (pi - b.act).square().flatten(1).mean(-1)
            self.actor_opt.zero_grad(set_to_none=True)
            actor_loss.sum().backward()
            self.actor_opt.step()
            for p in self._critic_params:
                p.requires_grad_(True)
            soft_update(self._targets, self._online, cfg.tau)
            self._last_actor_loss = actor_loss.detach()
        return {"critic_loss": critic_loss.detach(), "actor_loss": self._last_actor_loss}

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return self._pi(self.actor, obs)

    @torch.no_grad()
    def write_back(self) -> None:
        self.actor.load_into([stacked_linears(x.actor) for x in self.learners])
        self.actor_target.load_into([stacked_linears(x.actor_target) for x in self.learners])
        self.critic.load_into([stacked_linears(x.critic) for x in self.learners])
        self.critic_target.load_into([stacked_linears(x.critic_target) for x in self.learners])
        for j, x in enumerate(self.learners):
            x.steps = self.steps
            x._last_actor_loss = self._last_actor_loss[j].clone()


# ------------------------------------------------------------------------------------------------ EDAC
class BatchedEDAC(_Batched):
    """K :class:`EDAC` learners as one model: K actors, K·N critics, K temperatures."""

    def __init__(self, learners: Sequence[EDAC]) -> None:
        super().__init__(learners)
        cfg = self.config
        a0 = learners[0].actor
        self.max_action = learners[0].max_action
        self.log_std_min, self.log_std_max = a0.log_std_min, a0.log_std_max
        self.trunk = StackedMLP.from_members([stacked_linears(x.actor.trunk) for x in learners], relu_last=True)
        self.mu = StackedMLP.from_members([[x.actor.mu] for x in learners])
        self.log_sigma = StackedMLP.from_members([[x.actor.log_sigma] for x in learners])
        self.critic = StackedMLP.from_members([stacked_linears(x.critic) for x in learners])
        self.critic_target = StackedMLP.from_members([stacked_linears(x.critic_target) for x in learners])
        self.critic_target.requires_grad_(False)
        self.log_alpha = nn.Parameter(torch.stack([x.log_alpha.detach() for x in learners]))  # [K, 1]
        self.target_entropy = learners[0].target_entropy
        actor_params = [*self.trunk.parameters(), *self.mu.parameters(), *self.log_sigma.parameters()]
        self.actor_opt = SliceAdam([{"params": actor_params, "lr": cfg.actor_lr}], self.k)
        self.critic_opt = SliceAdam([{"params": self.critic.parameters(), "lr": cfg.critic_lr}], self.k)
        self.alpha_opt = SliceAdam([{"params": [self.log_alpha], "lr": cfg.alpha_lr}], self.k)
        self._critic_params = list(self.critic.parameters())
        self._target_params = list(self.critic_target.parameters())
        self.register_buffer("_off_diag", 1.0 - torch.eye(cfg.num_critics))

    def _sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised actions and log-probabilities of all K actors, noise from each agent's generator."""
        h = self.trunk(obs)
        mu = self.mu(h)
        log_sigma = self.log_sigma(h).clamp(self.log_std_min, self.log_std_max)
        eps = randn_per_agent(self.generators, mu.shape[1:])
        u = mu + eps * log_sigma.exp()
        tanh_u = torch.tanh(u)
        log_prob = (-0.5 * eps.square() - log_sigma - _HALF_LOG_2PI).sum(-1)
        log_prob = log_prob - torch.log(1 - tanh_u.square() + 1e-6).sum(-1)
        return tanh_u * self.max_action, log_prob

    def _q(self, net: StackedMLP, obs: torch.Tensor, act: torch.Tensor) -> torch.Tensor:
        """``[K, B, ·]`` states and actions -> ``[K, N, B]`` values of each agent's N critics."""
        n = self.config.num_critics
        return net(repeat_members(torch.cat([obs, act], dim=-1), n)).squeeze(-1).unflatten(0, (self.k, n))

    def update(self, b: Batch) -> dict[str, torch.Tensor]:
        cfg = self.config
        n, k = cfg.num_critics, self.k
        with torch.no_grad():
            _, log_prob = self._sample(b.obs)
        alpha_loss = (-self.log_alpha * (log_prob + self.target_entropy)).mean(-1)  # [K]
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.sum().backward()
        self.alpha_opt.step()
        alpha = self.log_alpha.detach().exp()  # [K, 1]

        for p in self._critic_params:
            p.requires_grad_(False)
        pi, log_pi = self._sample(b.obs)
        q_pi = self._q(self.critic, b.obs, pi)  # [K, N, B]
        actor_loss = (alpha * log_pi - q_pi.amin(1)).mean(-1)
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.sum().backward()
        self.actor_opt.step()
        for p in self._critic_params:
            p.requires_grad_(True)

        with torch.no_grad():
            next_act, next_log_prob = self._sample(b.next_obs)
            q_next = self._q(self.critic_target, b.next_obs, next_act).amin(1)
            y = b.rew + cfg.discount * (1.0 - b.done) * (q_next - alpha * next_log_prob)  # [K, B]
        obs_n = repeat_members(b.obs, n)
        act_n = repeat_members(b.act, n).requires_grad_(True)  # [K·N, B, A]
        q = self.critic(torch.cat([obs_n, act_n], dim=-1)).squeeze(-1)  # [K·N, B]
        td_loss = (q.unflatten(0, (k, n)) - y.unsqueeze(1)).square().mean(-1).sum(-1)  # [K]
        grad = torch.autograd.grad(q.sum(), act_n, create_graph=True)[0]  # [K·N, B, A]
        grad = grad / (grad.norm(dim=-1, keepdim=True) + 1e-10)
        grad = grad.unflatten(0, (k, n)).transpose(1, 2).flatten(0, 1)  # [K·B, N, A]
        cos = torch.bmm(grad, grad.transpose(1, 2)).unflatten(0, (k, -1))  # [K, B, N, N]
        div_loss = (cos * self._off_diag).sum(dim=(2, 3)).mean(-1) / (n - 1)
        critic_loss = td_loss + cfg.eta * div_loss
        self.critic_opt.zero_grad(set_to_none=True)
        critic_loss.sum().backward()
        self.critic_opt.step()
        soft_update(self._target_params, self._critic_params, cfg.tau)
        self.steps += 1
        return {"critic_loss": critic_loss.detach(), "td_loss": td_loss.detach(), "diversity_loss": div_loss.detach(),
                "actor_loss": actor_loss.detach(), "alpha": alpha.squeeze(-1)}

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.mu(self.trunk(obs))) * self.max_action

    @torch.no_grad()
    def write_back(self) -> None:
        self.trunk.load_into([stacked_linears(x.actor.trunk) for x in self.learners])
        self.mu.load_into([[x.actor.mu] for x in self.learners])
        self.log_sigma.load_into([[x.actor.log_sigma] for x in self.learners])
        self.critic.load_into([stacked_linears(x.critic) for x in self.learners])
        self.critic_target.load_into([stacked_linears(x.critic_target) for x in self.learners])
        for j, x in enumerate(self.learners):
            x.log_alpha.copy_(self.log_alpha[j])
            x.steps = self.steps


BATCHED: dict[type, type] = {IQL: BatchedIQL, TD3BC: BatchedTD3BC, EDAC: BatchedEDAC}


def stack_learners(learners: Sequence[nn.Module]) -> _Batched:
    """One batched learner from K learners of the same kind, config and budget (their weights are copied in).

    The learners keep their own objects; call ``write_back()`` on the result to copy trained weights into them (the
    trainer does before every evaluation, so each learner's ``actor`` is its agent's current policy).
    """
    kind = type(learners[0])
    if kind not in BATCHED:
        raise ValueError(f"no batched version of {kind.__name__}")
    precisions = {getattr(x, "matmul_precision", "fp32") for x in learners}
    if len(precisions) != 1:
        raise ValueError(f"batched learners must share their matmul precision, got {sorted(precisions)}")
    model = BATCHED[kind](learners)
    model.matmul_precision = precisions.pop()
    return set_matmul_precision(model, model.matmul_precision)
