"""PrivORL-j with ``next_state = "delta"``: rows carry s′ − s under a public Δs normaliser, the DP fine-tune is
accounted as the absolute one, checkpoints keep the representation, and a mismatched normaliser is refused."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dp_accounting as dpa
from dp_accounting.rdp import rdp_privacy_accountant

from conftest import make_toy_dataset
from privsynth.data.normalize import Normalizer
from privsynth.errors import InvalidData, PrivacyError
from privsynth.synth.next_state import DeltaNormalizer
from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config


def _data():
    pub = make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=3, act_dim=2, seed=1)
    sens = make_toy_dataset(lengths=(7, 5, 10, 4, 8, 6), obs_dim=3, act_dim=2, seed=2, sensitive=True)
    return pub, sens


def _cfg(next_state: str = "delta"):
    cfg = tiny_config()
    cfg.pretrain_curiosity = False
    cfg.next_state = next_state  # type: ignore[assignment]
    return cfg


def test_delta_rows_are_encoded_with_public_statistics_and_decoded_exactly():
    pub, _ = _data()
    s = TrajectorySynthesizer(_cfg()).pretrain(pub, progress=False)
    assert isinstance(s.normalizer, DeltaNormalizer) and s.normalizer.source.startswith("public:")
    rows = s.model_rows(pub)
    o = pub.obs_dim
    raw = pub.transition_matrix()
    enc = (raw - s.normalizer.mean.numpy()) / s.normalizer.std.numpy()
    step = (pub.next_observations - pub.observations - s.normalizer.mean.numpy()[-1 - o:-1]) / s.normalizer.std.numpy()[-1 - o:-1]
    np.testing.assert_allclose(rows[:, -2 - o:-2], step, atol=1e-5)  # the model sees the z-scored step
    np.testing.assert_allclose(rows[:, : -2 - o], enc[:, : -1 - o], atol=1e-5)  # s, a, r as before
    np.testing.assert_allclose(s.to_raw(rows)[:, :-1], raw, atol=1e-4)  # decoding gives s' back


@pytest.mark.slow
def test_delta_fine_tune_is_accounted_and_survives_a_checkpoint(tmp_path):
    pub, sens = _data()
    torch.manual_seed(0)
    s = TrajectorySynthesizer(_cfg()).pretrain(pub, progress=False)
    before = {k: v.clone() for k, v in s.model.named_parameters()}
    s.finetune(sens, 3.0, 1e-3, progress=False)
    h = s.history[-1]
    event = dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(h["sample_rate"], dpa.GaussianDpEvent(h["noise_multiplier"])), h["steps"])
    scale = s.ledger.events[-1].params["count_scale"]  # the run's Laplace count of the trajectories (issue 36)
    eps = (rdp_privacy_accountant.RdpAccountant().compose(dpa.LaplaceDpEvent(scale)).compose(event)
           .get_epsilon(1e-3))
    assert s.ledger.epsilon() == pytest.approx(eps, rel=1e-6) and eps <= 3.0 + 1e-6
    assert h["noise_multiplier"] > 0
    assert any(not torch.equal(v, before[k]) for k, v in s.model.named_parameters())
    ds = s.sample(6, seed=0)
    assert np.isfinite(ds.next_observations).all()
    again = TrajectorySynthesizer.load(s.save(tmp_path / "j.pt"))
    assert isinstance(again.normalizer, DeltaNormalizer) and again.config.next_state == "delta"
    np.testing.assert_allclose(again.sample(6, seed=0).next_observations, ds.next_observations, atol=1e-5)


def test_a_delta_config_refuses_a_normaliser_of_absolute_rows():
    pub, sens = _data()
    with pytest.raises(InvalidData, match="delta"):  # fixed bounds of absolute rows cannot decode Δs
        TrajectorySynthesizer(_cfg(), normalizer=Normalizer.fit_public([pub])).pretrain(pub, progress=False)
    s = TrajectorySynthesizer(_cfg("absolute")).pretrain(pub, progress=False)
    s.config.next_state = "delta"
    with pytest.raises(InvalidData, match="delta"):
        s.finetune(sens, 3.0, 1e-3, progress=False)
    assert s.ledger is None or s.ledger.epsilon() == 0.0  # refused before any DP step


def test_the_delta_statistics_refuse_sensitive_data():
    _, sens = _data()
    with pytest.raises(PrivacyError):
        TrajectorySynthesizer(_cfg()).pretrain(sens, progress=False)


def test_a_dp_normaliser_of_delta_rows_is_charged_to_the_ledger():
    pub, sens = _data()
    s = TrajectorySynthesizer(_cfg())
    s.fit_dp_normalizer(sens, low=-10.0, high=10.0, epsilon=1.0, delta=1e-3, unit="trajectory")
    assert isinstance(s.normalizer, DeltaNormalizer) and s.normalizer.source == "dp"
    s.pretrain(pub, progress=False)  # keeps the DP normaliser
    s.finetune(sens, 3.0, 1e-3, progress=False)
    assert len(s.ledger.events) == 2 and s.ledger.epsilon() <= 3.0 + 1.0 + 1e-6
