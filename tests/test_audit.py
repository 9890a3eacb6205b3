"""One-run audit: catches an engine whose noise is disabled; never exceeds the claim when the engine is sound."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from privsynth.privacy import dpsgd
from privsynth.privacy.audit import audit_dp_train, audit_scores, epsilon_lower_bound, p_value
from privsynth.privacy.dpsgd import DPSGDConfig

CFG = dict(target_epsilon=1.0, delta=1e-5, epochs=4, batch_size=50, max_grad_norm=1.0, grad_sample_mode="bk")  # noise from OS entropy


def test_bound_is_monotone_and_capped():
    # perfect guesses: the bound grows with the number of guesses but stays near log(r / log 20)
    b100 = epsilon_lower_bound(1000, 100, 100)
    b400 = epsilon_lower_bound(1000, 400, 400)
    assert 0 < b100 < b400 < math.log(400 / math.log(20)) + 0.1
    assert epsilon_lower_bound(1000, 100, 50) == 0.0  # coin flipping proves nothing
    assert epsilon_lower_bound(1000, 100, 100, delta=1e-4) < b100  # δ weakens the bound
    assert p_value(1000, 100, 90, 0.5, 0.0) > p_value(1000, 100, 90, 0.2, 0.0)  # a looser claim explains more hits


def test_random_scores_give_no_bound():
    rng = np.random.default_rng(0)
    res = audit_scores(rng.normal(size=1000), rng.random(1000) < 0.5, k_pos=100, k_neg=100, delta=1e-5,
                       claimed_epsilon=1.0)
    assert res.epsilon_lower_bound < 0.5 and res.consistent


def _disable_noise(monkeypatch):
    """Simulate a bug: the engine keeps its calibrated σ (and its claim) but adds no noise."""

    def noiseless(self):
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
            p.grad.div_(self.expected_batch)
        self.optimizer.step()

    monkeypatch.setattr(dpsgd._Engine, "_noise_and_step", noiseless)
    # the single-process bk engine draws its noise straight into the gradient buffers
    monkeypatch.setattr(dpsgd._Engine, "_draw_noise", lambda self, buf, std: buf.zero_())


def test_audit_catches_disabled_noise(monkeypatch):
    _disable_noise(monkeypatch)
    # noise is off here; noise_seed only fixes the Poisson masks so the count of correct guesses is repeatable
    audit, run = audit_dp_train(DPSGDConfig(**CFG, noise_seed=0), canaries=1000, k_pos=150, k_neg=150)
    assert run.epsilon <= 1.0  # the engine still claims ε ≤ 1
    assert audit.correct >= 295
    assert audit.epsilon_lower_bound > 3.0 and not audit.consistent


@pytest.mark.parametrize("mode", ["bk", "ghost"])
def test_audit_with_noise_stays_below_claim(mode):
    audit, run = audit_dp_train(DPSGDConfig(**{**CFG, "grad_sample_mode": mode}), canaries=1000, k_pos=150,
                                k_neg=150)
    assert audit.claimed_epsilon == pytest.approx(run.epsilon)
    assert audit.epsilon_lower_bound <= audit.claimed_epsilon and audit.consistent


def test_cli_audit(capsys):
    import json

    from privsynth.cli import main

    assert main(["privacy", "audit", "--canaries", "600", "--guesses", "100", "--json"]) == 0
    ok = json.loads(capsys.readouterr().out)
    assert ok["consistent"] and ok["epsilon_lower_bound"] <= ok["claimed_epsilon"]
    assert main(["privacy", "audit", "--canaries", "600", "--guesses", "100", "--noise-multiplier", "0", "--json"]) == 1
    bad = json.loads(capsys.readouterr().out)
    assert not bad["consistent"] and bad["claimed_epsilon"] == 1.0
