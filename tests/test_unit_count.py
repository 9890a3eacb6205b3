"""The number of privacy units is private under add/remove (issue 36): it is counted with DP, charged to the ledger,
and everything sized by it (q, steps, the DP normaliser's divisor) comes from the noisy count."""
from __future__ import annotations

import json
import math
import re

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant
from torch import nn

from privsynth.errors import PrivacyError
from privsynth.privacy import Ledger
from privsynth.privacy.count import COUNT_SHARE, count_epsilon, noisy_unit_count
from privsynth.privacy.dp_stats import dp_normalizer_stats
from privsynth.privacy.dpsgd import DPSGDConfig, dp_train
from privsynth.privacy.guard import check_budget


class _Loss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x).squeeze(-1) ** 2


def test_count_is_a_laplace_mechanism_with_secure_noise_and_its_epsilon():
    draws = [noisy_unit_count(1000, epsilon=0.5, unit="transition") for _ in range(400)]
    values = np.array([n for n, _ in draws], dtype=float)
    # noise is really added: Laplace(2) has std 2.83; rounding adds a little
    assert len(set(values)) > 10 and 2.0 < values.std() < 3.8 and abs(values.mean() - 1000) < 1.0
    ev = draws[0][1]
    assert ev.mechanism == "laplace" and ev.params["noise"] == "secure" and ev.params["sensitivity"] == 1.0
    # the ledger's ε is dp-accounting's for Laplace(1/ε) at sensitivity 1 (add/remove one unit)
    led = Ledger(unit="transition", accountant="pld", delta=1e-6).append(ev)
    indep = pld_privacy_accountant.PLDAccountant().compose(dpa.LaplaceDpEvent(2.0)).get_epsilon(1e-6)
    assert led.epsilon() == pytest.approx(indep, rel=1e-6) and led.epsilon() <= 0.5 + 1e-3
    # a seed makes it reproducible, and the event says so (the guard refuses it)
    a, ea = noisy_unit_count(1000, epsilon=0.5, unit="transition", source=_seeded(3))
    b, _ = noisy_unit_count(1000, epsilon=0.5, unit="transition", source=_seeded(3))
    assert a == b and ea.params["noise"] == "reproducible"
    with pytest.raises(PrivacyError):
        check_budget(Ledger(unit="transition", delta=1e-6).append(ea), 10.0)
    with pytest.raises(PrivacyError):
        noisy_unit_count(-1, epsilon=1.0, unit="transition")
    with pytest.raises(PrivacyError):
        noisy_unit_count(10, epsilon=0.0, unit="transition")
    assert count_epsilon(10.0) == pytest.approx(COUNT_SHARE * 10.0)


def _seeded(seed: int):
    from privsynth.privacy.noise import NoiseSource

    return NoiseSource.reproducible(seed)


@pytest.mark.parametrize("accountant", ["rdp", pytest.param("pld", marks=pytest.mark.slow)])
def test_dp_train_counts_its_units_and_composes_the_count(accountant):
    torch.manual_seed(0)
    x = torch.randn(300, 4)
    cfg = DPSGDConfig(target_epsilon=2.0, delta=1e-4, epochs=1, batch_size=30, accountant=accountant,
                      grad_sample_mode="bk")
    res = dp_train(_Loss(), (x,), cfg)
    n_noisy = res.n_units_noisy
    assert res.event.params["n_units_noisy"] == n_noisy and "n_units" not in res.event.params
    assert res.sample_rate == 30 / n_noisy and res.steps == round(1 / res.sample_rate)
    scale = res.event.params["count_scale"]
    assert scale == pytest.approx(1 / (COUNT_SHARE * 2.0))
    # independent dp-accounting composition of the count and the run
    acct = (rdp_privacy_accountant.RdpAccountant() if accountant == "rdp"
            else pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4))
    acct.compose(dpa.LaplaceDpEvent(scale))
    acct.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(res.sample_rate,
                                                                    dpa.GaussianDpEvent(res.noise_multiplier)),
                                         res.steps))
    assert res.epsilon == pytest.approx(acct.get_epsilon(1e-4), rel=1e-6) and res.epsilon <= 2.0 * (1 + 1e-9)
    led = Ledger(unit="transition", accountant=accountant, delta=1e-4).append(res.event)
    assert led.epsilon() == pytest.approx(res.epsilon, rel=1e-6)
    # the count is secure noise: repeated runs on the same data see different counts
    quick = DPSGDConfig(target_epsilon=2.0, delta=1e-4, epochs=0.1, batch_size=30, noise_multiplier=1.0,
                        grad_sample_mode="bk")
    counts = {dp_train(_Loss(), (x,), quick).n_units_noisy for _ in range(6)}
    assert len(counts) > 1


def test_noisy_normaliser_divides_by_a_noisy_count_with_add_remove_sensitivities():
    rng = np.random.default_rng(0)
    x = rng.uniform(0, 1, size=(500, 3))
    mean, std, ev = dp_normalizer_stats(x, low=0.0, high=1.0, epsilon=1.0, delta=1e-5, skip=None)
    p = ev.params
    assert "n_units" not in p and p["count"] == 3 and p["sensitivity"] == 1.0
    # three releases (count S0, S1/Δ1, S2/Δ2), each of L2 sensitivity 1 under add/remove: ε at the target
    led = Ledger(unit="transition", accountant="pld", delta=1e-5).append(ev)
    indep = pld_privacy_accountant.PLDAccountant().compose(
        dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(p["sigma"]), 3)).get_epsilon(1e-5)
    assert led.epsilon() == pytest.approx(indep, rel=1e-6) and indep == pytest.approx(1.0, rel=2e-2)
    # adding one unit moves S0 by 1 and each scaled sum by at most 1 (the sensitivities the event records)
    r = np.full(3, 0.5)
    extreme = np.ones(3)
    assert np.linalg.norm((extreme - 0.5) / np.linalg.norm(r)) <= 1 + 1e-12
    assert np.linalg.norm(((extreme - 0.5) ** 2 - r**2 / 2) / np.linalg.norm(r**2 / 2)) <= 1 + 1e-12
    # noise is really added, and the estimate is still right at a large ε
    means = [dp_normalizer_stats(x, low=0.0, high=1.0, epsilon=1.0, delta=1e-5, skip=None)[0] for _ in range(3)]
    assert not np.allclose(means[0], means[1])
    m, _, _ = dp_normalizer_stats(x, low=0.0, high=1.0, epsilon=1e4, delta=1e-5, skip=None)
    np.testing.assert_allclose(m, x.mean(0), atol=1e-2)


def test_a_release_card_holds_no_exact_unit_count():
    """PrivORL-n's card: a count event, q from the noisy count, and nowhere the exact N (transitions or episodes)."""
    from test_transition_synth import public_data, sensitive_data, tiny_config

    from privsynth.synth.transition import TransitionSynthesizer

    sens = sensitive_data()
    synth = TransitionSynthesizer(tiny_config(noise_seed=None)).pretrain(public_data(), progress=False)
    synth.finetune(sens, 4.0, 1e-3, progress=False)
    card = synth.sample(16, seed=0).info.privacy_card
    text = json.dumps(card)
    count = next(ev for ev in card["events"] if ev["mechanism"] == "laplace")
    n_noisy = count["n_units_noisy"]
    assert card["sample_rate"] == pytest.approx(min(16, n_noisy) / n_noisy)
    assert '"n_units"' not in text and '"units"' not in text and card["treated_as_public"] == []
    # the exact N appears as no number on the card (unless the noise happened to give it back exactly)
    if n_noisy != sens.n_transitions:
        assert not re.search(rf"(?<![\d.]){sens.n_transitions}(?![\d.])", text)
    assert card["epsilon"] <= 4.0 + 1e-9 and math.isfinite(card["epsilon"])
