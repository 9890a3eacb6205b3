"""PGM and PrivSyn: privacy cards agree with the mechanisms' parameters, noise is added, bad input is refused."""
import importlib.util

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.errors import BudgetExceeded, InvalidData, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.synth.baselines import PrivSynConfig, PrivSynSynthesizer, load_baseline, make_baseline

HAS_MBI = importlib.util.find_spec("mbi") is not None
needs_mbi = pytest.mark.skipif(not HAS_MBI, reason="the PGM baseline needs the 'pgm' extra (mbi)")
DELTA = 1e-5


@pytest.fixture(scope="module")
def data():
    pub = make_toy_dataset(lengths=(200, 200), seed=1, name="pub")
    sens = make_toy_dataset(lengths=(150, 150, 100), seed=2, sensitive=True, name="sens")
    return pub, sens


def _event_rho(ev) -> float:
    """ρ of a ledger event recomputed from its card parameters (Gaussian: count·Δ²/(2σ²); zCDP: its ρ)."""
    p = ev.params
    if ev.mechanism == "gaussian":
        return p["count"] * p["sensitivity"] ** 2 / (2 * p["sigma"] ** 2)
    assert ev.mechanism == "zcdp"
    return p["rho"]


def _check_card(synth, epsilon):
    card = synth.card()
    assert card["private"] and card["unit"] == "transition" and card["ledger"] == synth.ledger.to_dict()
    rho = sum(_event_rho(ev) for ev in synth.ledger.events)
    spends_all = synth.name == "pgm" or bool(getattr(synth, "marginals", None))
    if spends_all:
        assert rho == pytest.approx(synth.history[-1]["rho"], rel=1e-6)
    else:  # PrivSyn that selected no pair leaves its measurement share unspent
        assert rho < synth.history[-1]["rho"]
    independent = acc.zcdp_epsilon(rho, DELTA)  # native zCDP analysis, converted on its own
    assert card["epsilon"] == pytest.approx(independent, rel=1e-6)
    assert card["epsilon"] <= epsilon
    if spends_all:
        assert card["epsilon"] >= 0.99 * epsilon
    assert "zCDP" in card["native_accounting"]


@pytest.mark.parametrize("epsilon", [1.0, 10.0])
def test_privsyn_card_matches_its_mechanism(data, epsilon):
    pub, sens = data
    s = PrivSynSynthesizer(PrivSynConfig(gum_rounds=5)).pretrain(pub).finetune(sens, epsilon, DELTA)
    _check_card(s, epsilon)
    sel = [ev for ev in s.ledger.events if "InDif" in ev.name][0]
    assert sel.params["sensitivity"] == 4.0
    if s.marginals:  # the pair event lists one sigma per measured marginal
        pairs = [ev for ev in s.ledger.events if ev.mechanism == "zcdp"][0]
        assert len(pairs.params["sigmas"]) == len(s.marginals)
        assert pairs.params["rho"] == pytest.approx(sum(1 / (2 * m["sigma"] ** 2) for m in s.marginals))
    ds = s.sample(300)
    assert len(ds) == 300 and ds.info.privacy_card["epsilon"] == s.card()["epsilon"]
    assert (ds.obs_dim, ds.act_dim) == (sens.obs_dim, sens.act_dim)


def test_privsyn_pair_charge_does_not_depend_on_which_pairs_were_selected(data, monkeypatch):
    """The card must hold only DP outputs: the pair event charges the planned share to the last bit, whatever subset
    the noisy selection kept (a float sum over the kept sigmas differed in its 16th digit between D and D + 1)."""
    pub, sens = data
    charged = []
    original = PrivSynSynthesizer._greedy_select
    for pick in (slice(0, 1), slice(0, 3), slice(1, 4)):

        def chosen(self, pairs, noisy, sizes, rho_meas, _pick=pick):
            original(self, pairs, noisy, sizes, rho_meas)
            return pairs[_pick]

        monkeypatch.setattr(PrivSynSynthesizer, "_greedy_select", chosen)
        s = PrivSynSynthesizer(PrivSynConfig(gum_rounds=2)).pretrain(pub).finetune(sens, 3.0, DELTA)
        assert s.marginals
        charged.append([ev.params["rho"] for ev in s.ledger.events if ev.mechanism == "zcdp"][0])
    assert len(set(charged)) == 1


def test_privsyn_more_budget_selects_more_and_fits_better(data):
    pub, sens = data
    lo = PrivSynSynthesizer(PrivSynConfig(gum_rounds=10)).pretrain(pub).finetune(sens, 0.5, DELTA)
    hi = PrivSynSynthesizer(PrivSynConfig(gum_rounds=10)).pretrain(pub).finetune(sens, 50.0, DELTA)
    assert len(hi.marginals) >= len(lo.marginals)
    # noise really is added: the one-way histograms at small epsilon are further from the truth
    fine = lo.discretizer.fine_index(sens.transition_matrix())[:, 0]
    exact = np.bincount(fine, minlength=lo.discretizer.fine_bins)
    err_lo = np.abs(lo.discretizer.fine_counts[0] - exact).mean()
    err_hi = np.abs(hi.discretizer.fine_counts[0] - exact).mean()
    assert err_lo > 3 * err_hi


def test_privsyn_save_load_round_trip(data, tmp_path):
    pub, sens = data
    s = PrivSynSynthesizer(PrivSynConfig(gum_rounds=3)).pretrain(pub).finetune(sens, 2.0, DELTA)
    path = s.save(tmp_path / "privsyn.json")
    again = load_baseline(path)
    assert again.card()["epsilon"] == s.card()["epsilon"]
    np.testing.assert_allclose(again.sample(50, seed=3).transition_matrix(), s.sample(50, seed=3).transition_matrix())


@pytest.mark.parametrize("name", ["privsyn", pytest.param("pgm", marks=needs_mbi)])
def test_bad_input_gets_a_clear_error(data, name):
    pub, sens = data
    with pytest.raises(PrivacyError, match="epsilon"):
        make_baseline(name).pretrain(pub).finetune(sens, 0.0, DELTA)
    with pytest.raises(PrivacyError, match="epsilon"):
        make_baseline(name).pretrain(pub).finetune(sens, -1.0, DELTA)
    with pytest.raises(PrivacyError, match="delta"):
        make_baseline(name).pretrain(pub).finetune(sens, 1.0, 0.5)
    with pytest.raises(PrivacyError, match="trajectory"):
        make_baseline(name).pretrain(pub).finetune(sens, 1.0, DELTA, "trajectory")
    with pytest.raises(InvalidData, match="pretrain"):
        make_baseline(name).finetune(sens, 1.0, DELTA)
    with pytest.raises(PrivacyError, match="sensitive"):
        make_baseline(name).pretrain(sens)
    with pytest.raises(InvalidData, match="no public data"):
        make_baseline(name).pretrain([])
    with pytest.raises(InvalidData, match="not been fitted"):
        make_baseline(name).pretrain(pub).sample(10)
    with pytest.raises(InvalidData, match="unknown"):
        make_baseline(name, no_such_field=1)


def test_release_guard_refuses_a_smaller_budget(data):
    from privsynth.release import release_dataset

    pub, sens = data
    s = PrivSynSynthesizer(PrivSynConfig(gum_rounds=2)).pretrain(pub).finetune(sens, 5.0, DELTA)
    ds = s.sample(100, name="privsyn-toy")
    assert release_dataset(ds, s.ledger, None, epsilon_budget=5.0, delta=DELTA) <= 5.0
    with pytest.raises(BudgetExceeded):
        release_dataset(ds, s.ledger, "privsyn-toy", epsilon_budget=4.0, delta=DELTA)
    release_dataset(ds, s.ledger, "privsyn-toy", epsilon_budget=5.0, delta=DELTA)
    from privsynth.data import minari_io

    back = minari_io.load_dataset("privsyn-toy")
    assert back.info.privacy_card["synthesizer"] == "privsyn"
    assert back.info.privacy_card["epsilon"] == pytest.approx(s.card()["epsilon"])


@pytest.mark.slow  # 10-25 s each (PGM's JAX inference); runs in CI's slow stage, after the pgm extra is installed
@needs_mbi
@pytest.mark.parametrize("selection", ["mst", "appendix_e"])
def test_pgm_card_matches_its_mechanism(data, selection, tmp_path):
    pub, sens = data
    s = make_baseline("pgm", iters=100, selection=selection, two_way=8, three_way=2).pretrain(pub).finetune(sens, 1.0, DELTA)
    _check_card(s, 1.0)
    d = sens.transition_dim
    names = [ev.name for ev in s.ledger.events]
    if selection == "mst":
        sel = [ev for ev in s.ledger.events if ev.mechanism == "zcdp"][0]
        # d-1 exponential mechanisms with eps0 cost d-1 times eps0^2/8
        assert sel.params["rounds"] == d - 1
        assert (d - 1) * sel.params["epsilon_per_round"] ** 2 / 8 == pytest.approx(sel.params["rho"], rel=1e-9)
        assert len(s.measurements) == d + d - 1
    else:
        assert not any(ev.mechanism == "zcdp" for ev in s.ledger.events)  # random selection is free
        assert len(s.measurements) <= d + 10
    assert names[0].startswith("one-way")
    ds = s.sample(200)
    assert len(ds) == 200 and np.isfinite(ds.transition_matrix()).all()
    again = load_baseline(s.save(tmp_path / "pgm.json"))
    assert again.card()["epsilon"] == s.card()["epsilon"] and len(again.sample(20)) == 20
