"""Canary audit of the release pipeline: canary design, scoring from the released rows, the bound, the CLI."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.data import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia.canary import (
    CanaryAuditConfig,
    insert_canaries,
    make_canaries,
    run_canary_audit,
    score_canaries_from_release,
)
from privsynth.privacy.audit import audit_scores

O, A = 2, 1


@pytest.fixture(scope="module")
def public():
    return [make_toy_dataset(lengths=(20,) * 10, obs_dim=O, act_dim=A, seed=s, name=f"pub{s}") for s in (0, 1)]


def test_canaries_are_out_of_distribution_and_valid(public):
    cfg = CanaryAuditConfig(canaries=40, canary_length=4, radius=3.0)
    can = make_canaries(public, cfg, np.random.default_rng(0))
    assert can.n_episodes == 40 and np.all(can.episode_lengths() == 4)
    rows = np.concatenate([p.transition_matrix() for p in public])
    mu, sd = rows.mean(0), rows.std(0)
    z = (can.transition_matrix() - mu) / np.maximum(sd, 1e-6)
    free = [0, 1, 3, 4, 5]  # states, reward, next states (actions stay in the public range)
    rms = np.sqrt((z[:, free] ** 2).mean(1))
    assert np.all(rms > 2.5)  # far from the public data: ~3 std per column
    lo, hi = rows[:, O : O + A].min(0), rows[:, O : O + A].max(0)
    assert np.all((can.actions >= lo) & (can.actions <= hi)) and not can.terminals.any()
    # every canary is its own point: canaries are far from each other too
    centres = can.transition_matrix()[::4]
    d = np.linalg.norm(((centres[:, None] - centres[None]) / np.maximum(sd, 1e-6))[..., free], axis=-1)
    assert np.min(d[np.triu_indices(40, 1)]) > 0.5
    with pytest.raises(InvalidData, match="public"):
        make_canaries([], cfg, np.random.default_rng(0))


def test_insert_canaries_adds_exactly_the_included(public):
    sens = make_toy_dataset(lengths=(10,) * 5, obs_dim=O, act_dim=A, seed=5, sensitive=True, name="s")
    can = make_canaries(public, CanaryAuditConfig(canaries=10, canary_length=3), np.random.default_rng(1))
    inc = np.array([1, 0, 1, 1, 0, 0, 0, 1, 0, 1], bool)
    out = insert_canaries(sens, can, inc)
    assert out.n_episodes == 5 + 5 and out.n_transitions == 50 + 15 and out.info.sensitive
    assert out.info.name == "s"


def test_release_that_copies_canaries_refutes_the_claim_and_an_independent_one_does_not(public):
    """Known answer: a release holding near-copies of the included canaries gets them all right."""
    m = 400
    can = make_canaries(public, CanaryAuditConfig(canaries=m, canary_length=1), np.random.default_rng(2))
    included = np.random.default_rng(3).random(m) < 0.5
    honest = np.concatenate([p.transition_matrix() for p in public])
    leaky = np.concatenate([honest, can.transition_matrix()[included] + 0.01])
    k = m // 10
    good = audit_scores(score_canaries_from_release(leaky, can, public), included, k_pos=k, k_neg=k, delta=1e-5,
                        claimed_epsilon=1.0)
    assert good.correct == 2 * k and good.epsilon_lower_bound > 2.0 and not good.consistent
    null = audit_scores(score_canaries_from_release(honest, can, public), included, k_pos=k, k_neg=k, delta=1e-5,
                        claimed_epsilon=1.0)
    assert null.epsilon_lower_bound < 1.0 and null.consistent


@pytest.mark.slow
def test_pipeline_canary_audit_runs_and_noise_on_stays_below_claim(public, tmp_path):
    from privsynth.synth.config import cpu_config

    conf = cpu_config()
    conf.denoiser.width, conf.denoiser.depth = 64, 1
    conf.pretrain.epochs, conf.pretrain.batch_size = 2.0, 64
    conf.pretrain_curiosity = False
    conf.sampler.steps = 5
    sens = make_toy_dataset(lengths=(20,) * 10, obs_dim=O, act_dim=A, seed=7, sensitive=True, name="s")
    cfg = CanaryAuditConfig(canaries=40, unit="trajectory", canary_length=4, epsilon=1.0, delta=1e-3, samples=500,
                            finetune_epochs=5, finetune_batch_size=64, guesses=5)
    res = run_canary_audit(sens, public, cfg, config=conf, workdir=tmp_path, log=lambda *_: None)
    json.dumps(res)
    on, off = res["runs"]
    assert (on["noise"], off["noise"]) == ("on", "off") and res["guesses_per_side"] == 5
    assert 0 < res["max_bound"] < 2.0  # 10 guesses cannot certify much
    for src, a in on["audits"].items():
        assert a["epsilon_lower_bound"] <= a["claimed_epsilon"] and a["consistent"]
        assert a["claimed_epsilon"] == pytest.approx(on["card"]["epsilon"]) and a["claimed_epsilon"] <= 1.0
    assert off["audits"]["release"]["claimed_epsilon"] == 1.0 and off["card"]["private"] is False


def test_canary_cli_reports_and_exits_1_when_the_claim_is_refuted(tmp_path, monkeypatch, capsys, public):
    from privsynth.cli import main
    from privsynth.data import minari_io
    from privsynth.evaluation.mia import canary

    minari_io.write_dataset(public[0], "toy/pub-v0")
    minari_io.write_dataset(make_toy_dataset(lengths=(20,) * 5, obs_dim=O, act_dim=A, seed=7, name="s"), "toy/s-v0")

    def fake(sens, pub, cfg, **kw):
        assert isinstance(sens, OfflineDataset) and cfg.canaries == 50 and cfg.canary_length == 16
        lb = fake.bound
        audit = {"epsilon_lower_bound": lb, "claimed_epsilon": 1.0, "delta": 1e-5, "canaries": 50, "guesses": 10,
                 "correct": 9, "confidence": 0.95, "consistent": lb <= 1.0}
        return {"canaries": 50, "included": 25, "guesses_per_side": 5, "confidence": 0.95, "description": "toy",
                "max_bound": 2.5,
                "runs": [{"label": "noise on", "noise": "on", "card": {"epsilon": 1.0}, "audits": {"release": audit}}]}

    monkeypatch.setattr(canary, "run_canary_audit", fake)
    args = ["audit", "--canaries", "50", "--unit", "trajectory", "--sensitive", "toy/s-v0", "--public", "toy/pub-v0",
            "--out", str(tmp_path / "c.json"), "--overwrite"]
    fake.bound = 0.3
    assert main(args) == 0
    md = (tmp_path / "c.md").read_text()
    assert "Empirical ε lower bound" in md and "claimed ε" in md
    fake.bound = 2.0
    assert main(args) == 1
    assert main(["audit", "--canaries", "50", "--out", str(tmp_path / "c.json")]) == 2  # no --sensitive


def test_canary_audit_without_power_says_it_is_uninformative(tmp_path, monkeypatch, capsys, public):
    """A noise-off control the audit does not detect (22/40 right, bound 0) makes the noise-on result uninformative."""
    from privsynth.cli import main
    from privsynth.data import minari_io
    from privsynth.evaluation.mia import canary

    minari_io.write_dataset(public[0], "toy/pub-v0")
    minari_io.write_dataset(make_toy_dataset(lengths=(20,) * 5, obs_dim=O, act_dim=A, seed=7, name="s"), "toy/s-v0")

    def audit(correct, lb):
        return {"epsilon_lower_bound": lb, "claimed_epsilon": 1.0, "delta": 1e-5, "canaries": 200, "guesses": 40,
                "correct": correct, "confidence": 0.95, "consistent": lb <= 1.0}

    def fake(sens, pub, cfg, **kw):
        return {"canaries": 200, "included": 100, "guesses_per_side": 20, "confidence": 0.95, "description": "toy",
                "max_bound": 2.2,
                "runs": [{"label": "noise on", "noise": "on", "card": {"epsilon": 1.0}, "audits": {"release": audit(21, 0.0)}},
                         {"label": "noise off", "noise": "off", "card": {}, "audits": {"release": audit(fake.off, fake.lb)}}]}

    monkeypatch.setattr(canary, "run_canary_audit", fake)
    out = tmp_path / "c.json"
    args = ["audit", "--canaries", "200", "--sensitive", "toy/s-v0", "--public", "toy/pub-v0", "--out", str(out),
            "--overwrite"]
    fake.off, fake.lb = 22, 0.0
    assert main(args) == 3  # uninformative has its own exit status (issue 36: it used to exit 0, as consistent)
    printed = capsys.readouterr().out
    assert "UNINFORMATIVE (release)" in printed and "no power" in printed
    res = json.loads(out.read_text())["canary"]
    assert res["power"]["release"]["informative"] is False
    assert res["runs"][0]["audits"]["release"]["verdict"] == "uninformative"
    md = (tmp_path / "c.md").read_text()
    assert "**uninformative**" in md and "No power (release)" in md and "| yes |" not in md
    fake.off, fake.lb = 40, 2.2  # the control is detected: the audit had power, the noise-on run is consistent
    assert main(args) == 0
    res = json.loads(out.read_text())["canary"]
    assert res["power"]["release"]["informative"] is True
    assert res["runs"][0]["audits"]["release"]["verdict"] == "consistent"
    assert "UNINFORMATIVE" not in capsys.readouterr().out


def test_assess_power_without_control_or_with_a_design_capped_below_the_claim():
    from privsynth.evaluation.mia.canary import assess_power

    a = {"epsilon_lower_bound": 0.1, "claimed_epsilon": 1.0, "correct": 22, "guesses": 40, "consistent": True}
    one = assess_power({"max_bound": 2.0, "runs": [{"noise": "on", "audits": {"release": dict(a)}}]})
    assert one["power"]["release"]["informative"] is None
    assert one["runs"][0]["audits"]["release"]["verdict"] == "consistent (power unknown)"
    capped = assess_power({"max_bound": 0.8, "runs": [{"noise": "on", "audits": {"release": dict(a)}}]})
    assert capped["power"]["release"]["informative"] is False and "cannot refute" in capped["power"]["release"]["reason"]
    assert capped["status"] == "uninformative" and one["status"] == "consistent (power unknown)"
    bad = assess_power({"max_bound": 0.8, "runs": [{"noise": "on", "audits": {"release": {**a, "consistent": False}}}]})
    assert bad["runs"][0]["audits"]["release"]["verdict"] == "violation" and bad["status"] == "violation"


def test_canary_design_capped_below_the_claim_is_uninformative_with_the_canaries_needed(tmp_path, monkeypatch,
                                                                                        capsys, public):
    """Every canary guessed right still cannot refute ε = 4 with 200 canaries: uninformative (exit 3), and the report
    gives the fewest canaries whose design could (checked against the bound function)."""
    from privsynth.cli import main
    from privsynth.data import minari_io
    from privsynth.evaluation.mia import canary
    from privsynth.privacy.audit import epsilon_lower_bound

    cap = epsilon_lower_bound(200, 40, 40, 1e-5, 0.95)
    a = {"epsilon_lower_bound": cap, "claimed_epsilon": 4.0, "delta": 1e-5, "canaries": 200, "guesses": 40,
         "correct": 40, "confidence": 0.95, "consistent": True}
    off = {**a, "consistent": False, "claimed_epsilon": 1.0}

    def fake(sens, pub, cfg, **kw):
        return {"canaries": 200, "included": 100, "guesses_per_side": 20, "confidence": 0.95, "description": "toy",
                "max_bound": cap, "runs": [{"label": "noise on", "noise": "on", "card": {}, "audits": {"release": dict(a)}},
                                           {"label": "noise off", "noise": "off", "card": {}, "audits": {"release": off}}]}

    res = canary.assess_power(fake(None, None, None))
    assert res["status"] == "uninformative" and res["best_possible_bound"] == pytest.approx(cap) and cap < 4.0
    need = res["canaries_needed"]
    m, k = need["units"], need["guesses_per_side"]
    assert k == m // 10 and epsilon_lower_bound(m, 2 * k, 2 * k, 1e-5, 0.95) > 4.0
    m1 = m - 1
    assert epsilon_lower_bound(m1, 2 * (m1 // 10), 2 * (m1 // 10), 1e-5, 0.95) <= 4.0
    assert f"a test of it needs {m:,} canaries" in res["power"]["release"]["reason"]
    minari_io.write_dataset(public[0], "toy/pub-v0")
    minari_io.write_dataset(make_toy_dataset(lengths=(20,) * 5, obs_dim=O, act_dim=A, seed=7, name="s"), "toy/s-v0")
    monkeypatch.setattr(canary, "run_canary_audit", fake)
    out = tmp_path / "c.json"
    assert main(["audit", "--canaries", "200", "--sensitive", "toy/s-v0", "--public", "toy/pub-v0", "--epsilon", "4",
                 "--out", str(out)]) == 3
    saved = json.loads(out.read_text())["canary"]
    assert saved["status"] == "uninformative" and saved["canaries_needed"] == need
    assert f"needs {m:,} canaries" in capsys.readouterr().out
