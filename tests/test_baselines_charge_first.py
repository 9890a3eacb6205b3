"""Review of the classic DP baselines: a run stopped part-way never leaves DP outputs its ledger has not charged.

PATE-GAN appended its one ledger event (all teacher-vote queries) only after the training loop, and PrivSyn its
pair-marginal event only after measuring every pair. A run stopped inside the loop (an error, Ctrl-C in a notebook)
kept a generator trained on noisy votes, or pair tables that ``sample()`` uses, with a ledger that did not hold their
cost: PATE-GAN's card read "(0, 1e-05)-differential privacy" and ``save()`` wrote that ledger into the checkpoint.
Both now charge the planned budget before the first noisy answer. The PGM part checks the MST path (ledger ε, score
sensitivity, neighbour view) with ``mbi`` stubbed out, since the PGM tests skip without the extra.
"""
from __future__ import annotations

import itertools
import types

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from neighbour import add_episode, leaks
from privsynth.privacy import accounting as acc
from privsynth.synth.baselines import load_baseline, make_baseline
from privsynth.synth.baselines import pgm as pgm_mod
from privsynth.synth.baselines import privsyn as privsyn_mod

TINY_PATE = dict(teachers=3, iterations=10, queries=100, student_steps=2, batch_size=16, generator_units=16,
                 discriminator_units=16)


class Stop(Exception):
    """Stands for any interruption of a fine-tune (an error, KeyboardInterrupt)."""


@pytest.fixture
def data():
    pub = make_toy_dataset(lengths=(100, 100), seed=1, name="pub")
    sens = make_toy_dataset(lengths=(40, 40, 40), seed=2, sensitive=True, name="sens")
    return pub, sens


def test_pategan_interrupted_run_has_already_charged_its_votes(data, tmp_path):
    torch.set_num_threads(1)
    pub, sens = data
    synth = make_baseline("pategan", **TINY_PATE).pretrain(pub)
    before = {k: v.clone() for k, v in synth.generator.state_dict().items()}
    calls = [0]

    def stop(*_):  # the generator runs 3 times per iteration: stop inside iteration 6 of 10
        calls[0] += 1
        if calls[0] == 18:
            raise Stop

    hook = synth.generator.register_forward_hook(stop)
    with pytest.raises(Stop):
        synth.finetune(sens, 1.0, 1e-5)
    hook.remove()
    assert any(not torch.equal(before[k], v) for k, v in synth.generator.state_dict().items())  # votes were used
    eps = synth.ledger.epsilon()
    assert 0.99 < eps <= 1.0  # the planned queries, charged before the first answer
    assert "(0, " not in synth.ledger.render_markdown()
    synth.save(tmp_path / "m.pt")
    assert load_baseline(tmp_path / "m.pt").ledger.epsilon() == pytest.approx(eps)


def test_privsyn_interrupted_measurement_has_already_charged_its_pairs(data, monkeypatch):
    pub, sens = data
    real = privsyn_mod.gaussian_mechanism
    pairs = [0]

    def flaky(value, **kw):
        if kw["name"].startswith("pair marginal"):
            pairs[0] += 1
            if pairs[0] == 2:
                raise Stop
        return real(value, **kw)

    monkeypatch.setattr(privsyn_mod, "gaussian_mechanism", flaky)
    # three pairs always selected (the greedy rule is post-processing of the noisy scores; fixed here so that the
    # loop reaches its second table)
    monkeypatch.setattr(privsyn_mod.PrivSynSynthesizer, "_greedy_select", lambda self, pairs, *a: pairs[:3])
    synth = make_baseline("privsyn", gum_rounds=1).pretrain(pub)
    with pytest.raises(Stop):
        synth.finetune(sens, 1.0, 1e-5)
    assert len(synth.marginals) == 1  # one pair table measured and kept (sample() uses it)
    assert synth.ledger.epsilon() == pytest.approx(1.0, abs=1e-5)  # the whole planned budget is on the ledger
    assert synth.card()["private"] and len(synth.sample(10)) == 10


# ------------------------------------------------------------------ PGM (MST) with mbi stubbed out
@pytest.fixture
def no_mbi(monkeypatch):
    monkeypatch.setattr(pgm_mod, "require_mbi", lambda: types.SimpleNamespace())
    monkeypatch.setattr(pgm_mod.PGMSynthesizer, "_estimate", lambda self: None)


def test_pgm_mst_ledger_matches_an_independent_zcdp_conversion(data, no_mbi):
    pub, sens = data
    synth = make_baseline("pgm").pretrain(pub)
    synth.finetune(sens, 2.0, 1e-4)
    rho = 0.0
    for ev in synth.ledger.events:
        p = ev.params
        rho += p["rho"] if ev.mechanism == "zcdp" else p["count"] * p["sensitivity"] ** 2 / (2 * p["sigma"] ** 2)
    assert rho == pytest.approx(acc.zcdp_rho_for(2.0, 1e-4), rel=1e-9)
    assert acc.zcdp_to_epsilon(rho, 1e-4, "rdp") <= synth.ledger.epsilon() <= 2.0


def test_pgm_mst_neighbour_view_differs_only_in_dp_outputs(data, no_mbi):
    pub, sens = data
    views = []
    for d in (sens, add_episode(sens, 1)):
        synth = make_baseline("pgm").pretrain(pub)
        synth.finetune(d, 2.0, 1e-4)
        views.append({"card": synth.card()})
    assert leaks(*views, dp_outputs=("*measurements*", "*cliques*", "*discretizer*")) == []


def test_mst_score_moves_by_at_most_its_sensitivity():
    rng = np.random.default_rng(0)
    for _ in range(200):
        sizes = [int(k) for k in rng.integers(2, 6, size=4)]
        codes = np.stack([rng.integers(0, k, size=30) for k in sizes], 1)
        noisy = [rng.normal(10, 5, size=k) for k in sizes]
        pairs = list(itertools.combinations(range(4), 2))
        a = pgm_mod.mst_scores(codes, sizes, noisy, pairs)
        b = pgm_mod.mst_scores(np.concatenate([codes, [[rng.integers(0, k) for k in sizes]]]), sizes, noisy, pairs)
        assert max(abs(a[p] - b[p]) for p in pairs) <= pgm_mod.MST_SCORE_SENSITIVITY + 1e-9
