"""The Δs = s′ − s parametrisation of PrivORL-n's next state (privsynth.synth.next_state): exact round trip, public
statistics only, checkpoint round trip, and a DP fine-tune that is accounted like the absolute one."""
from __future__ import annotations

import numpy as np
import pytest
import torch

import dp_accounting as dpa
from dp_accounting.rdp import rdp_privacy_accountant

from privsynth.errors import InvalidData, PrivacyError
from privsynth.synth import TransitionSynthesizer
from privsynth.synth.next_state import DeltaNormalizer, fit_public_normalizer
from test_transition_synth import public_data, sensitive_data, tiny_config


def test_delta_normalizer_encodes_the_step_and_round_trips():
    pub = public_data()
    norm = fit_public_normalizer([pub], "delta")
    assert isinstance(norm, DeltaNormalizer) and norm.source == "public:public"
    rows = pub.transition_matrix()
    o = pub.obs_dim
    enc = norm.encode(rows)
    np.testing.assert_allclose(enc[:, -1 - o : -1], pub.next_observations - pub.observations, atol=1e-6)
    np.testing.assert_array_equal(enc[:, : -1 - o], rows[:, : -1 - o])  # s, a, r untouched
    z = norm.normalize(rows)
    # statistics are those of the encoded public rows (std + 1e-3, as Normalizer.fit_public); terminal flag untouched
    np.testing.assert_allclose(norm.mean.numpy()[:-1], enc[:, :-1].mean(0), atol=1e-5)
    np.testing.assert_allclose(norm.std.numpy()[:-1], enc[:, :-1].std(0) + 1e-3, rtol=1e-4)
    assert norm.mean[-1] == 0 and norm.std[-1] == 1
    np.testing.assert_allclose(norm.unnormalize(z), rows, atol=1e-4)
    zt = norm.normalize(torch.as_tensor(rows))
    np.testing.assert_allclose(zt.numpy(), z, atol=1e-5)
    np.testing.assert_allclose(norm.unnormalize(zt).numpy(), rows, atol=1e-4)


def test_delta_statistics_refuse_sensitive_data():
    with pytest.raises(PrivacyError):
        fit_public_normalizer([sensitive_data()], "delta")
    with pytest.raises(InvalidData):
        fit_public_normalizer([public_data()], "sideways")


@pytest.mark.slow
def test_delta_synthesizer_is_accounted_saved_and_decoded(tmp_path):
    cfg = tiny_config(next_state="delta", noise_seed=None)
    synth = TransitionSynthesizer(cfg).pretrain(public_data(), progress=False)
    before = {k: v.clone() for k, v in synth.model.state_dict().items()}
    synth.finetune(sensitive_data(), 4.0, 1e-3, progress=False)
    card = synth.card()
    # the ledger's epsilon is what an independent RDP accountant gives for the recorded sigma, q and steps
    event = dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(card["sample_rate"], dpa.GaussianDpEvent(card["noise_multiplier"])), card["steps"])
    eps = rdp_privacy_accountant.RdpAccountant().compose(event).get_epsilon(1e-3)
    assert synth.ledger.epsilon() == pytest.approx(eps, rel=1e-6) and eps <= 4.0 + 1e-6
    assert card["noise_multiplier"] > 0 and card["private"] is True
    assert any(not torch.equal(before[k], v) for k, v in synth.model.state_dict().items())
    ds = synth.sample(64, seed=0)
    assert ds.n_transitions == 64 and np.isfinite(ds.next_observations).all()
    path = synth.save(tmp_path / "m.pt")
    again = TransitionSynthesizer.load(path)
    assert isinstance(again.normalizer, DeltaNormalizer) and again.config.next_state == "delta"
    np.testing.assert_allclose(again.sample(64, seed=0).next_observations, ds.next_observations, atol=1e-5)


def test_delta_config_refuses_a_normaliser_of_absolute_rows():
    synth = TransitionSynthesizer(tiny_config()).pretrain(public_data(), progress=False)  # absolute
    synth.config.next_state = "delta"
    with pytest.raises(InvalidData, match="delta"):
        synth.finetune(sensitive_data(), 4.0, 1e-3, progress=False)


def test_release_from_a_delta_checkpoint_keeps_its_representation(tmp_path):
    """``synthesize(pretrained=PATH, config=...)`` keeps the checkpoint's ``next_state`` as it keeps its architecture:
    a caller's absolute config does not turn a Δs model into a wrongly decoded absolute one."""
    from privsynth.release import synthesize

    path = TransitionSynthesizer(tiny_config(next_state="delta")).pretrain(public_data(), progress=False).save(
        tmp_path / "delta.pt")
    res = synthesize(sensitive_data(), epsilon=4.0, delta=1e-3, n=64, pretrained=path, config=tiny_config(),
                     progress=False)
    assert res.synthesizer.config.next_state == "delta" and isinstance(res.synthesizer.normalizer, DeltaNormalizer)
    assert res.dataset.n_transitions == 64 and np.isfinite(res.dataset.next_observations).all()
