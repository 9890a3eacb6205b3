"""PATE-GAN / PrePATE-GAN: the card's Gaussian vote events give the budget, training runs, bad input is refused."""
import math

import dp_accounting as dpa
import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.synth.baselines import PATEGANConfig, PATEGANSynthesizer, PrePATEGANSynthesizer, load_baseline

DELTA = 1e-5
TINY = dict(teachers=3, iterations=10, queries=100, student_steps=2, batch_size=16, generator_units=16,
            discriminator_units=16, noise_dim=4)


@pytest.fixture(scope="module")
def data():
    pub = make_toy_dataset(lengths=(100, 100), seed=1, name="pub")
    sens = make_toy_dataset(lengths=(80, 70, 50), seed=2, sensitive=True, name="sens")
    return pub, sens


def _classic_rdp_epsilon(sigma: float, count: int, delta: float) -> float:
    """Textbook RDP conversion for `count` Gaussian queries of sensitivity 1: min_a count*a/(2 s^2) + log(1/d)/(a-1)."""
    alphas = np.linspace(1.01, 500, 50000)
    return float(np.min(count * alphas / (2 * sigma**2) + math.log(1 / delta) / (alphas - 1)))


@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_card_matches_the_vote_mechanism(data, epsilon):
    pub, sens = data
    s = PATEGANSynthesizer(PATEGANConfig(**TINY)).pretrain(pub).finetune(sens, epsilon, DELTA)
    card = s.card()
    assert card["private"] and card["ledger"] == s.ledger.to_dict()
    (ev,) = s.ledger.events
    assert ev.mechanism == "gaussian" and ev.params["sensitivity"] == 1.0
    assert ev.params["count"] == 100 and ev.params["teachers"] == 3
    sigma = ev.params["sigma"]
    assert sigma == pytest.approx(s.history[-1]["vote_noise_sigma"])
    # independent checks: the exact (PLD-tight) epsilon of 100 Gaussians is below the ledger's RDP value, the
    # textbook RDP conversion above it, and the ledger spends (almost all of) the budget
    exact = dpa.get_epsilon_gaussian(sigma / math.sqrt(100), DELTA)
    assert exact <= card["epsilon"] <= _classic_rdp_epsilon(sigma, 100, DELTA) + 1e-6
    assert 0.99 * epsilon <= card["epsilon"] <= epsilon
    assert "RDP" in card["native_accounting"]


def test_less_budget_means_more_vote_noise(data):
    pub, sens = data
    sig = [PATEGANSynthesizer(PATEGANConfig(**TINY)).pretrain(pub).finetune(sens, e, DELTA).history[-1]["vote_noise_sigma"]
           for e in (1.0, 10.0)]
    assert sig[0] > 3 * sig[1]


def test_prepategan_pretrains_on_public_and_round_trips(data, tmp_path):
    pub, sens = data
    s = PrePATEGANSynthesizer(PATEGANConfig(**TINY, pretrain_steps=20)).pretrain(pub)
    assert s.history[0]["phase"] == "pretrain" and s.ledger is None  # public pre-training costs nothing
    s.finetune(sens, 5.0, DELTA)
    ds = s.sample(64, seed=1)
    assert len(ds) == 64 and ds.info.privacy_card["synthesizer"] == "prepategan"
    again = load_baseline(s.save(tmp_path / "pre.pt"))
    assert isinstance(again, PrePATEGANSynthesizer)
    np.testing.assert_allclose(again.sample(64, seed=1).transition_matrix(), ds.transition_matrix(), rtol=1e-5)
    assert again.card()["epsilon"] == s.card()["epsilon"]


def test_teachers_see_disjoint_parts_and_the_normaliser_is_public(data):
    pub, sens = data
    s = PATEGANSynthesizer(PATEGANConfig(**TINY)).pretrain(pub)
    assert s.normalizer.source.startswith("public:")
    mean_before = s.normalizer.mean.clone()
    s.finetune(sens, 1.0, DELTA)
    assert torch.equal(mean_before, s.normalizer.mean)  # never refitted on sensitive data
    g = torch.Generator().manual_seed(s.config.seed + 1)
    parts = torch.randperm(len(sens), generator=g).chunk(3)
    assert sum(len(p) for p in parts) == len(torch.cat(parts).unique()) == len(sens)


def test_bad_input_gets_a_clear_error(data):
    pub, sens = data
    with pytest.raises(PrivacyError, match="epsilon"):
        PATEGANSynthesizer(PATEGANConfig(**TINY)).pretrain(pub).finetune(sens, 0.0, DELTA)
    with pytest.raises(InvalidData, match="pretrain"):
        PATEGANSynthesizer(PATEGANConfig(**TINY)).finetune(sens, 1.0, DELTA)
    with pytest.raises(InvalidData, match="teachers"):
        PATEGANSynthesizer(PATEGANConfig(**{**TINY, "teachers": 500})).pretrain(pub).finetune(sens, 1.0, DELTA)
    with pytest.raises(InvalidData):
        PATEGANConfig(teachers=1)
    with pytest.raises(InvalidData, match="positive"):
        PATEGANSynthesizer(PATEGANConfig(**TINY)).pretrain(pub).finetune(sens, 1.0, DELTA).sample(0)
