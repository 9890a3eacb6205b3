"""The Δs = s′ − s parametrisation of PrivORL-n's next state (privsynth.synth.next_state): exact round trip, public
statistics only, checkpoint round trip, and a DP fine-tune that is accounted like the absolute one."""
from __future__ import annotations

import dataclasses

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
    # the ledger's epsilon is what an independent RDP accountant gives for the recorded unit count (Laplace) and
    # sigma, q and steps
    event = dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(card["sample_rate"], dpa.GaussianDpEvent(card["noise_multiplier"])), card["steps"])
    count = next(ev for ev in card["events"] if ev["mechanism"] == "laplace")
    eps = (rdp_privacy_accountant.RdpAccountant().compose(dpa.LaplaceDpEvent(count["scale"])).compose(event)
           .get_epsilon(1e-3))
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
    synth = TransitionSynthesizer(tiny_config(next_state="absolute")).pretrain(public_data(), progress=False)
    synth.config.next_state = "delta"
    with pytest.raises(InvalidData, match="delta"):
        synth.finetune(sensitive_data(), 4.0, 1e-3, progress=False)


def test_release_from_a_delta_checkpoint_keeps_its_representation(tmp_path):
    """``synthesize(pretrained=PATH, config=...)`` keeps the checkpoint's ``next_state`` as it keeps its architecture:
    a caller's absolute config does not turn a Δs model into a wrongly decoded absolute one."""
    from privsynth.release import synthesize

    path = TransitionSynthesizer(tiny_config(next_state="delta")).pretrain(public_data(), progress=False).save(
        tmp_path / "delta.pt")
    res = synthesize(sensitive_data(), epsilon=4.0, delta=1e-3, n=64, pretrained=path,
                     config=tiny_config(next_state="absolute"), progress=False)
    assert res.synthesizer.config.next_state == "delta" and isinstance(res.synthesizer.normalizer, DeltaNormalizer)
    assert res.dataset.n_transitions == 64 and np.isfinite(res.dataset.next_observations).all()


# ------------------------------------------------------------------------- the DP normaliser (no public data)
def test_delta_bounds_come_from_the_public_state_box():
    from privsynth.synth.next_state import delta_bounds

    # rows: s (2) | a (1) | r | s' (2) | terminal
    low, high = np.array([-1.0, 0.0, -2.0, -5.0, -1.0, 0.0, 0.0]), np.array([3.0, 1.0, 2.0, 5.0, 3.0, 1.0, 1.0])
    lo, hi = delta_bounds(low, high, obs_dim=2)
    np.testing.assert_array_equal(lo, [-1.0, 0.0, -2.0, -5.0, -4.0, -1.0, 0.0])
    np.testing.assert_array_equal(hi, [3.0, 1.0, 2.0, 5.0, 4.0, 1.0, 1.0])
    np.testing.assert_array_equal(low, [-1.0, 0.0, -2.0, -5.0, -1.0, 0.0, 0.0])  # the caller's box is not changed


def test_dp_delta_normaliser_estimates_the_step_with_accounted_secure_noise():
    """The no-public-data path of a Δs model: DP statistics of the *encoded* rows (Gaussian mechanism, two releases
    of sensitivity 1, ε recomputed by dp-accounting), close to the true Δs statistics at a large ε, and different on
    every call (secure noise); a seeded call repeats and says so."""
    from dp_accounting.pld import pld_privacy_accountant

    from privsynth.synth.next_state import dp_delta_normalizer

    sens = sensitive_data()
    o = sens.obs_dim
    step = np.random.default_rng(0).normal([0.5, -0.2, 0.0, 1.0], [0.3, 0.1, 0.5, 0.2], size=sens.observations.shape)
    sens = dataclasses.replace(sens, next_observations=(sens.observations + step).astype(np.float32))
    # secure noise: at ε = 1e5 (σ = 0.0032) the variances get noise of sd 9.3e-4 and the means 2.1e-4, so the std
    # check fails only past 8.5 sd of variance noise (tightest column, std 0.096), the mean check past 141 sd:
    # P ≈ 1e-17 per run. At ε = 1e4 (variance noise sd 3e-3, margin 2.6 sd) about 0.4% of runs failed.
    norm, event = dp_delta_normalizer(sens, low=0.0, high=10.0, epsilon=1e5, delta=1e-3)
    assert isinstance(norm, DeltaNormalizer) and norm.source == "dp"
    step = sens.next_observations - sens.observations
    np.testing.assert_allclose(norm.mean.numpy()[-1 - o:-1], step.mean(0), atol=0.03)
    np.testing.assert_allclose(norm.std.numpy()[-1 - o:-1], step.std(0), atol=0.06)  # s' alone: std 2.2-2.8
    np.testing.assert_allclose(norm.unnormalize(norm.normalize(sens.transition_matrix())), sens.transition_matrix(),
                               atol=1e-4)
    p = event.params
    assert p["clip_high"][-1 - o:-1] == [10.0] * o and p["clip_low"][-1 - o:-1] == [-10.0] * o
    assert p["noise"] == "secure" and "n_units" not in p  # N is private: divided by the noisy count
    # at epsilon 1 the noise is real: two secure calls differ, a seeded pair repeats and is tagged reproducible
    a, event = dp_delta_normalizer(sens, low=-10.0, high=10.0, epsilon=1.0, delta=1e-3)
    b, _ = dp_delta_normalizer(sens, low=-10.0, high=10.0, epsilon=1.0, delta=1e-3)
    assert not torch.equal(a.mean, b.mean)
    p = event.params
    acc = pld_privacy_accountant.PLDAccountant().compose(
        dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(p["sigma"]), p["count"]))
    assert acc.get_epsilon(1e-3) == pytest.approx(1.0, rel=1e-2)
    c, ev = dp_delta_normalizer(sens, low=-10.0, high=10.0, epsilon=1.0, delta=1e-3, noise_seed=3)
    d, _ = dp_delta_normalizer(sens, low=-10.0, high=10.0, epsilon=1.0, delta=1e-3, noise_seed=3)
    assert torch.equal(c.mean, d.mean) and ev.params["noise"] == "reproducible"


def test_delta_synthesizer_with_a_dp_normaliser_charges_it_and_fine_tunes():
    cfg = tiny_config(next_state="delta", noise_seed=None)
    synth = TransitionSynthesizer(cfg)
    sens = sensitive_data()
    synth.fit_dp_normalizer(sens, low=-10.0, high=10.0, epsilon=1.0, delta=1e-3)
    assert isinstance(synth.normalizer, DeltaNormalizer) and synth.normalizer.source == "dp"
    synth.finetune(sens, 3.0, 1e-3, progress=False)
    names = [ev.name for ev in synth.ledger.events]
    assert names[0].startswith("DP normalisation") and len(names) == 3  # + the unit count and DP-SGD
    assert synth.history[-1]["epsilon"] < synth.ledger.epsilon() <= 1.0 + 3.0 + 1e-6  # composed, below basic comp.
    assert np.isfinite(synth.sample(32, seed=0).next_observations).all()
