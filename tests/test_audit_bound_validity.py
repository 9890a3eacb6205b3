"""Validity of the one-run ε audits (from an auditor's review).

* One duplicated row switched off the check that the reference data share no records with the non-members, so a
  0-DP release got a false VIOLATION from reference data cut from the non-members.
* The canary mode tested its two score sources at 95% each, without a family-wise correction.
"""
from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia.audit import check_disjoint, run_data_audit
from privsynth.evaluation.mia.data_attacks import make_data_attack
from privsynth.evaluation.mia.epsilon import EpsilonTest


def test_reference_cut_from_the_non_members_is_refused_even_with_a_duplicated_row():
    """One duplicated row used to switch the overlap check off; the 0-DP release below was then a VIOLATION."""
    rng = np.random.default_rng(0)
    pool = rng.normal(size=(2000, 6))
    members, non_members = pool[:1000], pool[1000:]
    reference = np.concatenate([non_members[:500], rng.normal(size=(500, 6))])
    reference = np.concatenate([reference, reference[-1:]])  # one duplicated row
    with pytest.raises(InvalidData, match="reference data hold 500 of the non-members"):
        check_disjoint(members, non_members, reference)
    with pytest.raises(InvalidData, match="reference data hold"):
        run_data_audit(rng.normal(size=(3000, 6)), members, non_members, [make_data_attack("dcr_ref")],
                       reference=reference, n_boot=0, test=EpsilonTest(epsilon=1.0, delta=1e-5))
    # overlapping splits with a duplicated member row are refused as well
    with pytest.raises(InvalidData, match="members and non-members share"):
        check_disjoint(np.concatenate([members, members[:1]]), np.concatenate([non_members, members[:300]]))


def test_independent_discrete_sets_with_chance_equal_rows_are_still_accepted():
    rng = np.random.default_rng(1)
    pool = rng.integers(0, 4, size=(3000, 6)).astype(float)  # 4096 values: equal rows arise by chance
    check_disjoint(pool[:1500], pool[1500:2000], pool[2000:])


class _FlatEDM:
    """A stand-in released model whose loss is the same for every record (its weights reveal nothing)."""

    normalizer = SimpleNamespace(normalize=lambda rows: np.asarray(rows, dtype=np.float32))

    def denoise(self, x, sigma):
        return x

    def edm_loss(self, x, sigma, noise):
        return torch.zeros(x.shape[0])


def test_canary_sources_share_the_confidence_bonferroni(monkeypatch, tmp_path):
    """Released rows and weights are two tests of one claim (either refuting it exits 1): each at 1 − 0.05/2."""
    import privsynth.release
    import privsynth.synth
    import privsynth.synth.pretrained
    from privsynth.evaluation.mia.canary import CanaryAuditConfig, run_canary_audit
    from privsynth.privacy.audit import epsilon_lower_bound

    public = [make_toy_dataset(lengths=(20,) * 10, obs_dim=2, act_dim=1, seed=s, name=f"pub{s}") for s in (0, 1)]
    sens = make_toy_dataset(lengths=(10,) * 5, obs_dim=2, act_dim=1, seed=5, sensitive=True, name="s")
    release = public[0]

    def fake_synthesize(data, **kw):
        return SimpleNamespace(dataset=release, synthesizer=_FlatEDM(), epsilon=1.0, seconds={})

    monkeypatch.setattr(privsynth.release, "synthesize", fake_synthesize)
    monkeypatch.setattr(privsynth.synth.pretrained, "resolve_pretrained", lambda p: tmp_path / "pre.pt")
    monkeypatch.setattr(privsynth.synth.TransitionSynthesizer, "load", classmethod(lambda cls, p: _FlatEDM()))
    cfg = CanaryAuditConfig(canaries=40, unit="transition", canary_length=1, epsilon=1.0, noise=("on",), guesses=5)
    res = run_canary_audit(sens, public, cfg, pretrained="x", workdir=tmp_path, log=lambda *_: None)
    audits = res["runs"][0]["audits"]
    assert set(audits) == {"release", "weights"}
    for a in audits.values():
        assert a["confidence"] == pytest.approx(1 - 0.05 / 2)
    assert res["max_bound"] == pytest.approx(epsilon_lower_bound(40, 10, 10, cfg.delta, 1 - 0.05 / 2))
    one = run_canary_audit(sens, public, CanaryAuditConfig(canaries=40, unit="transition", canary_length=1,
                                                            noise=("on",), guesses=5, white_box=False),
                           pretrained="x", workdir=tmp_path, log=lambda *_: None)
    assert one["runs"][0]["audits"]["release"]["confidence"] == pytest.approx(0.95)
    assert math.isfinite(res["max_bound"])
