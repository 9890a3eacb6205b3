"""DP self-pre-training without public data (issue 37, item 4): a PrivSyn summary bought with a share of ε, a corpus
drawn from it (free), pre-training on the corpus, DP-SGD with the rest. Its privacy: every event on the ledger (checked
against an independent dp-accounting composition), secure noise, the guard's budget, and no raw row in pre-training."""
from __future__ import annotations

import dataclasses
import math

import dp_accounting as dpa
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from dp_accounting.rdp import rdp_privacy_accountant

from privsynth.errors import PrivacyError
from privsynth.privacy.events import LedgerEvent
from privsynth.release import synthesize
from privsynth.synth.baselines.privsyn import PrivSynSynthesizer
from privsynth.synth.transition import TransitionSynthesizer
from privsynth.synth.warmstart import WARM_START_SHARE, gaussian_events, resolve_warm_share
from test_transition_synth import public_data, sensitive_data, tiny_config

BOUNDS = dict(obs_bounds=(-10.0, 10.0), reward_bounds=(-5.0, 5.0))


def _sens():
    ds = sensitive_data()
    return dataclasses.replace(ds, info=dataclasses.replace(ds.info, action_low=[-1.0, -1.0], action_high=[1.0, 1.0]))


def _release(share, **kw):
    kw = {"normalizer_epsilon": 1.0, **BOUNDS, **kw}
    return synthesize(_sens(), epsilon=6.0, delta=1e-3, unit="transition", n=0, config=tiny_config(),
                      progress=False, warm_start=share, **kw)


def _independent(events, accountant: str, delta: float) -> float:
    """ε of the ledger's events recomputed from their card parameters with dp-accounting directly."""
    acct = (rdp_privacy_accountant.RdpAccountant() if accountant == "rdp"
            else pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4))
    for ev in events:
        p = ev.params
        if ev.mechanism == "gaussian" and "sigmas" in p:  # pair marginals: Gaussians of sensitivity 1, composed
            assert sum(1 / (2 * s**2) for s in p["sigmas"]) == pytest.approx(p["rho"], rel=1e-9)
            acct.compose(dpa.ComposedDpEvent([dpa.GaussianDpEvent(s) for s in p["sigmas"]]))
        elif ev.mechanism == "gaussian":
            acct.compose(dpa.GaussianDpEvent(p["sigma"] / p["sensitivity"]), int(p.get("count", 1)))
        elif ev.mechanism == "laplace":
            acct.compose(dpa.LaplaceDpEvent(p["scale"] / p["sensitivity"]), int(p.get("count", 1)))
        elif ev.mechanism == "dpsgd":
            acct.compose(dpa.PoissonSampledDpEvent(p["sample_rate"], dpa.GaussianDpEvent(p["noise_multiplier"])),
                         int(p["steps"]))
            if p.get("count_scale"):
                acct.compose(dpa.LaplaceDpEvent(p["count_scale"]))
        else:
            raise AssertionError(f"unexpected event {ev.name} ({ev.mechanism})")
    return float(acct.get_epsilon(delta))


@pytest.mark.slow
def test_warm_start_ledger_composes_every_event_and_matches_dp_accounting():
    res = _release(0.3)
    led = res.ledger
    names = [ev.name for ev in led.events]
    assert any("one-way" in n for n in names) and any("InDif" in n for n in names)
    assert any("pair marginals" in n for n in names) and any(ev.mechanism == "dpsgd" for ev in led.events)
    assert any("normalisation" in n for n in names)  # the DP normaliser too
    assert all(ev.noise == "secure" for ev in led.events) and led.private
    eps = led.epsilon()
    assert eps == pytest.approx(_independent(led.events, led.accountant, 1e-3), rel=1e-3) and eps <= 6.0
    assert res.epsilon == pytest.approx(eps)
    ws = [h for h in res.synthesizer.history if h["phase"] == "warm_start"]
    assert len(ws) == 1 and ws[0]["rows"] == 20_000  # a public constant, not the sensitive N


@pytest.mark.slow
def test_warm_start_pretrains_on_the_dp_corpus_only(monkeypatch):
    drawn, seen = [], []
    real_sample, real_warm = PrivSynSynthesizer.sample, TransitionSynthesizer.warm_start

    def spy_sample(self, n, **kw):
        assert self.ledger is not None and len(self.ledger.events) >= 3  # measured and charged before any draw
        drawn.append(real_sample(self, n, **kw))
        return drawn[-1]

    def spy_warm(self, corpus, events, **kw):
        seen.append(corpus)
        return real_warm(self, corpus, events, **kw)

    monkeypatch.setattr(PrivSynSynthesizer, "sample", spy_sample)
    monkeypatch.setattr(TransitionSynthesizer, "warm_start", spy_warm)
    _release(0.3)
    assert len(seen) == 1 and seen[0] is drawn[0] and not seen[0].info.sensitive
    rows = {tuple(r) for r in _sens().transition_matrix().round(5)}
    assert not rows & {tuple(r) for r in seen[0].transition_matrix().round(5)}  # no sensitive row copied in


def test_warm_start_refuses_raw_rows_and_corpora_without_their_events():
    synth = TransitionSynthesizer(tiny_config())
    with pytest.raises(PrivacyError, match="sensitive"):
        synth.warm_start(_sens(), [LedgerEvent.gaussian("x", sigma=1.0, sensitivity=1.0, noise="secure")])
    pub = public_data()
    with pytest.raises(PrivacyError, match="ledger events"):
        synth.warm_start(pub, [])


def test_warm_start_shares_and_refusals_before_any_data(monkeypatch):
    from privsynth.synth import warmstart

    assert resolve_warm_share(None, default_applies=True, unit="transition") == WARM_START_SHARE == 0.0  # measured
    monkeypatch.setattr(warmstart, "WARM_START_SHARE", 0.3)  # a default share applies only without public inputs
    assert resolve_warm_share(None, default_applies=True, unit="transition") == 0.3
    assert resolve_warm_share(None, default_applies=False, unit="transition") == 0.0
    assert resolve_warm_share(None, default_applies=True, unit="trajectory") == 0.0
    monkeypatch.undo()
    for bad in (1.0, -0.1, True):
        with pytest.raises(PrivacyError, match="share of epsilon"):
            resolve_warm_share(bad, default_applies=True, unit="transition")
    with pytest.raises(PrivacyError, match="protects transitions"):
        resolve_warm_share(0.2, default_applies=True, unit="trajectory")
    with pytest.raises(Exception, match="without public data"):
        synthesize(_sens(), epsilon=6.0, delta=1e-3, n=0, config=tiny_config(), public=[public_data()],
                   warm_start=0.2, progress=False)
    with pytest.raises(PrivacyError, match="spend all of epsilon"):  # normaliser 3 + warm 0.5 * 6 = 6
        _release(0.5, normalizer_epsilon=3.0)


def test_zcdp_pair_marginals_become_the_equal_gaussian():
    sigmas = [2.0, 3.0, 5.0]
    rho = sum(1 / (2 * s**2) for s in sigmas)
    ev = LedgerEvent.zcdp("pair marginals", rho=rho, sigmas=sigmas, sensitivity=1.0, noise="secure", unit="transition")
    (g,) = gaussian_events([ev])
    assert g.mechanism == "gaussian" and g.params["sigma"] == pytest.approx(1 / math.sqrt(2 * rho))
    assert g.params["noise"] == "secure" and g.params["sigmas"] == sigmas
    for delta in (1e-5, 1e-3):  # the same privacy loss: equal ε under RDP and PLD
        a = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4).compose(dpa.ComposedDpEvent(
            [dpa.GaussianDpEvent(s) for s in sigmas])).get_epsilon(delta)
        b = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4).compose(g.dp_event).get_epsilon(delta)
        assert a == pytest.approx(b, rel=1e-3)
        r1 = rdp_privacy_accountant.RdpAccountant().compose(ev.dp_event).get_epsilon(delta)
        r2 = rdp_privacy_accountant.RdpAccountant().compose(g.dp_event).get_epsilon(delta)
        assert r1 == pytest.approx(r2, rel=1e-6)
    with pytest.raises(PrivacyError, match="not a set of Gaussian"):
        gaussian_events([LedgerEvent.zcdp("other", rho=0.1, noise="secure", unit="transition")])
    assert np.isfinite(g.params["rho"])


def test_privsyn_without_public_data_takes_its_bins_from_the_environment(tmp_path, capsys):
    from privsynth.cli import main
    from privsynth.data import minari_io
    from test_own_data_env import pendulum_csv

    assert main(["datasets", "import", str(pendulum_csv(tmp_path / "p.csv")), "--env-id", "Pendulum-v1",
                 "--name", "pend"]) == 0
    code = main(["synthesize", "--synth", "privsyn", "--sensitive", "pend", "--epsilon", "4", "--delta", "1e-4",
                 "-n", "200", "--out-dataset", "pend-ps", "--config", "tiny", "--quiet"])
    assert code == 0, capsys.readouterr().err
    syn = minari_io.load_dataset("pend-ps")
    card = syn.info.privacy_card
    assert card["ledger"]["public_data"] == ["bins: Pendulum-v1 spaces and reward bounds"]
    assert card["epsilon"] <= 4.0 and all(ev["params"]["noise"] == "secure" for ev in card["ledger"]["events"])
    assert np.abs(syn.observations[:, 2]).max() <= 8.0 and np.abs(syn.actions).max() <= 2.0
    assert main(["synthesize", "--synth", "pgm", "--sensitive", "pend", "--epsilon", "4", "--delta", "1e-4",
                 "-n", "200", "--out-dataset", "pend-pgm", "--config", "tiny", "--quiet"]) != 0  # pgm: public data
