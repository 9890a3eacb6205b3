"""Kickstarted PPO: the privacy-aware penalty (eq. 16) and one query per env step (no re-querying in PPO epochs)."""
from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from privsynth.methods.kickstart.dirichlet import DirichletMechanism
from privsynth.methods.kickstart.ppo import KickstartedPPO, PPOConfig, privacy_aware_penalty
from privsynth.methods.kickstart.teacher import PrivateTeacher, TeacherConfig


def test_penalty_dead_zone_unaware_and_mask():
    torch.manual_seed(0)
    logits = torch.randn(64, 3, requires_grad=True)
    p = torch.softmax(logits, -1).detach()
    has = torch.ones(64)
    k = torch.full((64,), 5.0)
    close = p + 0.01 * torch.tensor([1.0, -1.0, 0.0])
    assert float(privacy_aware_penalty(logits, close, has, k, lam=0.5, beta=0.05)) == 0.0
    far = torch.eye(3)[torch.randint(0, 3, (64,))]
    dist = torch.linalg.norm(p - far, dim=-1)
    unaware = privacy_aware_penalty(logits, far, has, k, lam=0.0, beta=0.05)
    assert float(unaware) == pytest.approx(float(dist.mean()), abs=1e-5)
    alpha = 0.5 * math.sqrt(math.log(20) / 12)
    aware = privacy_aware_penalty(logits, far, has, k, lam=0.5, beta=0.05)
    assert float(aware) == pytest.approx(float((dist * (dist > alpha)).mean()), abs=1e-5)
    # per-sample k: a huge k shrinks the ball to ~0, so the same sample becomes active
    mid = p + 0.2 * torch.tensor([1.0, -1.0, 0.0]) / math.sqrt(2)
    assert float(privacy_aware_penalty(logits, mid, has, torch.full((64,), 1e6), lam=0.5, beta=0.05)) > 0.19
    assert float(privacy_aware_penalty(logits, mid, has, torch.zeros(64), lam=0.5, beta=0.05)) == 0.0
    # masked steps contribute nothing; the gradient is finite at distance 0
    assert float(privacy_aware_penalty(logits, far, torch.zeros(64), k, lam=0.0, beta=0.05)) == 0.0
    loss = privacy_aware_penalty(logits, p.clone(), has, k, lam=0.0, beta=0.05)
    loss.backward()
    assert torch.isfinite(logits.grad).all()


class CountingTeacher(PrivateTeacher):
    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self.calls = 0

    def query(self, obs):
        self.calls += 1
        return super().query(obs)


def test_student_queries_once_per_step_and_ledger_matches():
    env = gym.make("CartPole-v1")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    mech = DirichletMechanism(m=2, L=1.0, b=0.01, eta=0.1, delta_per_query=1e-6)
    T = CountingTeacher(net, mech, TeacherConfig(k0=5, c=0.9, k_min=0.3))
    cfg = PPOConfig(steps_per_epoch=200, epochs=3, train_pi_iters=10, train_v_iters=5, seed=0)
    student = KickstartedPPO(env, cfg, teacher=T)
    log = student.train()
    assert T.calls == 600 == T.asked  # one query per env step, none from the 10 PPO iterations per epoch
    assert T.ledger.n_queries == T.answered
    assert sum(r.teacher_fraction for r in log) * 200 == pytest.approx(T.answered)
    assert log[-1].query_eps == pytest.approx(T.ledger.totals()[0])
    assert all(np.isfinite(r.penalty) for r in log) and log[0].penalty > 0


def test_plain_ppo_learns_cartpole_a_little():
    env = gym.make("CartPole-v1")
    student = KickstartedPPO(env, PPOConfig(steps_per_epoch=500, epochs=8, seed=1))
    log = student.train()
    first = np.nanmean([r.ep_return for r in log[:2]])
    last = np.nanmean([r.ep_return for r in log[-2:]])
    assert last > first
