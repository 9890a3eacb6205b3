"""The method conformance suite: every registered DP offline-RL method (``privsynth.methods.names()``) runs on a tiny
sensitive dataset through the same protocol and is checked by the same code: the result type, the ledger's ε against
an independent dp-accounting recomputation from the events' recorded parameters, that the noise is really added
(two secure runs differ; a reproducible run repeats, is marked not DP and is refused by the guard), that the guard
refuses over budget, and that unmarked or malformed input is refused in one line. Registering a method is all it
takes to be tested here."""
from __future__ import annotations

import importlib

import dp_accounting as dpa
import numpy as np
import pytest
import torch
from dp_accounting import pld, rdp

from conftest import make_toy_dataset
from privsynth import methods
from privsynth.data.dataset import OfflineDataset
from privsynth.errors import BudgetExceeded, InvalidData, PrivacyError, PrivsynthError
from privsynth.methods.protocol import MethodResult
from privsynth.privacy.guard import check_budget
from privsynth.privacy.ledger import Ledger

FAST = {"dp-apvi", "dp-vapvi"}  # the others take seconds to tens of seconds per run: marked slow
EPS = {"primorl": 6.0, "dp-apvi": 20.0, "dp-vapvi": 5.0, "expert-svt": 10.0, "kickstart": 8.0}
# per-method settings on top of the tiny preset; expert-svt splits the budget so the DP-SGD stage runs too
EXTRA = {"expert-svt": {"split": "split", "env": "acrobot"}}
DATA = {"primorl": {"episodes": 20}, "dp-apvi": {"episodes": 2000}, "dp-vapvi": {"episodes": 200, "env": {"H": 5, "A": 10}},
        "expert-svt": {"per_factor": 3, "n_traj_per_expert": 4}, "kickstart": {"episodes": 4}}


def _params():
    return [pytest.param(n, marks=[] if n in FAST else [pytest.mark.slow], id=n) for n in methods.names()]


def _example(name: str) -> OfflineDataset:
    module = importlib.import_module(methods.registry.entry(name).adapter.split(":")[0])
    return module.example_dataset(**DATA[name])


def _make(name: str, **overrides):
    return methods.make(name, preset="tiny", **{"epsilon": EPS[name], **EXTRA.get(name, {}), **overrides})


@pytest.fixture(scope="module")
def runs():
    """(dataset, secure result, second secure result, reproducible result, repeat) per method, computed once."""
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            ds = _example(name)
            cache[name] = dict(data=ds, a=_make(name).run(ds), b=_make(name).run(ds),
                               r1=_make(name, noise_seed=7).run(ds), r2=_make(name, noise_seed=7).run(ds))
        return cache[name]
    return get


def _fingerprint(name: str, res: MethodResult, data: OfflineDataset) -> np.ndarray:
    """A DP output of the run, as numbers (differs between runs only through the privacy noise)."""
    if res.dataset is not None and name == "kickstart":
        return res.dataset.observations[:200]
    pol = res.policy
    if getattr(pol, "Q", None) is not None:  # tabular methods: the pessimistic Q
        return pol.Q
    if hasattr(pol, "model"):  # expert-svt: the learner's weights
        return torch.cat([p.detach().flatten() for p in pol.model.parameters()]).numpy()
    return np.asarray(pol.act(data.observations[:64]))


def independent_epsilon(ledger: Ledger) -> float:
    """ε of a ledger recomputed with dp-accounting from the events' recorded parameters (not their DpEvents):
    DP-SGD (q, z, steps), Gaussian (σ/Δ), Laplace (b/Δ) and zCDP (ρ) events under the ledger's accountant,
    (ε, δ)-only events by basic composition with their δ taken from the ledger's."""
    events, eps_basic, delta_basic = [], 0.0, 0.0
    for ev in ledger.events:
        p = ev.params
        if ev.mechanism == "dpsgd":
            events.append(dpa.SelfComposedDpEvent(
                dpa.PoissonSampledDpEvent(p["sample_rate"], dpa.GaussianDpEvent(p["noise_multiplier"])), p["steps"]))
            if p.get("count_scale"):  # the Laplace count of the units the run composes (issue 36)
                events.append(dpa.LaplaceDpEvent(p["count_scale"]))
        elif ev.mechanism == "gaussian":
            events.append(dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(p["sigma"] / p["sensitivity"]), p.get("count", 1)))
        elif ev.mechanism == "laplace":
            events.append(dpa.SelfComposedDpEvent(dpa.LaplaceDpEvent(p["scale"] / p["sensitivity"]), p.get("count", 1)))
        elif ev.mechanism == "zcdp":
            events.append(dpa.ZCDpEvent(p["rho"]))
        else:
            eps_basic, delta_basic = eps_basic + ev.epsilon, delta_basic + ev.delta
    if not events:
        return eps_basic
    acc = rdp.RdpAccountant() if ledger.accountant == "rdp" else pld.PLDAccountant()
    acc.compose(dpa.ComposedDpEvent(events))
    return eps_basic + acc.get_epsilon(ledger.delta - delta_basic)


# ------------------------------------------------------------------------------------------------------ the checks
@pytest.mark.parametrize("name", _params())
def test_result_type_policy_and_dataset(name, runs):
    run = runs(name)
    res = run["a"]
    assert isinstance(res, MethodResult) and isinstance(res.ledger, Ledger)
    assert res.private and res.ledger.events and res.ledger.unit == methods.registry.entry(name).unit
    assert res.policy is not None or res.dataset is not None
    if res.policy is not None:
        assert np.all(np.isfinite(np.asarray(res.policy.act(run["data"].observations[0]), dtype=float)))
    if res.dataset is not None:
        assert isinstance(res.dataset, OfflineDataset) and not res.dataset.info.sensitive
        assert res.dataset.info.privacy_card["epsilon"] == pytest.approx(res.epsilon, rel=1e-6)
    assert res.metrics and all(isinstance(v, float) for v in res.metrics.values())
    assert res.card["epsilon"] == pytest.approx(res.epsilon) and "settings" in res.card
    assert "noise_seed" not in res.card["settings"]


@pytest.mark.parametrize("name", _params())
def test_ledger_epsilon_matches_an_independent_accountant_and_spends_the_budget(name, runs):
    res = runs(name)["a"]
    assert res.epsilon == pytest.approx(independent_epsilon(res.ledger), rel=1e-6)
    assert 0.9 * EPS[name] < res.epsilon <= EPS[name] * (1 + 1e-6)  # calibrated to the budget, never over it


@pytest.mark.parametrize("name", _params())
def test_noise_is_really_added_and_reproducible_noise_is_refused(name, runs):
    run = runs(name)
    a, b = (_fingerprint(name, run[k], run["data"]) for k in ("a", "b"))
    assert a.shape == b.shape and not np.allclose(a, b), "two secure runs gave the same DP output"
    r1, r2 = run["r1"], run["r2"]
    if name in FAST:  # the rest also use non-private randomness that is not pinned (torch kernels, env resets)
        np.testing.assert_allclose(_fingerprint(name, r1, run["data"]), _fingerprint(name, r2, run["data"]))
    assert r1.ledger.reproducible_noise and not r1.private and "not_dp" in r1.card
    with pytest.raises(PrivacyError, match="reproducible"):
        check_budget(r1.ledger, 1e6)


@pytest.mark.parametrize("name", _params())
def test_the_guard_refuses_the_result_over_budget(name, runs):
    res = runs(name)["a"]
    with pytest.raises(BudgetExceeded):
        check_budget(res.ledger, res.epsilon * 0.5)
    assert check_budget(res.ledger, res.epsilon * 1.01) == pytest.approx(res.epsilon)


@pytest.mark.parametrize("name", methods.names())
def test_unmarked_or_malformed_input_is_one_line(name):
    public = make_toy_dataset(lengths=(10, 10), sensitive=False, name="public-toy")
    cases = [(public, "not marked sensitive"), ({"observations": []}, "OfflineDataset"),
             (make_toy_dataset(lengths=(10, 10), sensitive=True, name="wrong-layout"), "")]
    for data, words in cases:
        with pytest.raises(PrivsynthError) as err:
            _make(name).run(data)
        assert "\n" not in str(err.value) and words in str(err.value)
    with pytest.raises(InvalidData, match="takes a"):
        _make(name).run(make_toy_dataset(sensitive=True), config=object())
    with pytest.raises(PrivacyError, match="epsilon"):
        _make(name, epsilon=-1.0).run(make_toy_dataset(sensitive=True))


def test_an_explicit_overspend_is_refused_before_release():
    ds = _example("dp-apvi")
    with pytest.raises(BudgetExceeded):
        methods.make("dp-apvi", preset="tiny", epsilon=1.0, rho=10.0).run(ds)
    ds = _example("dp-vapvi")
    with pytest.raises(BudgetExceeded):
        methods.make("dp-vapvi", preset="tiny", epsilon=1.0, rho=10.0, env={"H": 5, "A": 10}).run(ds)
    with pytest.raises(BudgetExceeded):  # reproducible noise is not DP, and its ledger must still fit the budget
        methods.make("dp-vapvi", preset="tiny", epsilon=1.0, rho=10.0, env={"H": 5, "A": 10}, noise_seed=3).run(ds)


def test_registry_names_and_bad_requests():
    assert methods.names() == ["primorl", "dp-apvi", "dp-vapvi", "expert-svt", "kickstart"]
    with pytest.raises(InvalidData, match="unknown method"):
        methods.make("nope")
    with pytest.raises(InvalidData, match="unknown setting"):
        methods.make("dp-apvi", nonsense=1)
    with pytest.raises(InvalidData, match="preset"):
        methods.make("dp-apvi", preset="huge")
    cfg = methods.make("dp-vapvi", env={"H": 7}).config
    assert cfg.env.H == 7 and cfg.env.A == 100  # a nested section is updated, not replaced


def test_laplace_variant_is_pure_epsilon():
    ds = _example("dp-apvi")
    res = methods.make("dp-apvi", preset="tiny", epsilon=3.0, mechanism="laplace").run(ds)
    assert res.ledger.events[0].mechanism == "laplace"
    assert res.epsilon == pytest.approx(independent_epsilon(res.ledger), rel=1e-6)
    assert res.epsilon <= 3.0 * (1 + 1e-6)


@pytest.mark.parametrize("name", methods.names())
def test_delta_at_or_above_one_over_n_is_refused(name):
    """δ ≥ 1/N allows publishing one unit's data; dp-apvi and dp-vapvi accepted δ = 0.5."""
    data = _example(name)
    with pytest.raises(PrivsynthError, match="delta") as err:
        _make(name, delta=0.5).run(data)
    assert "\n" not in str(err.value)


def test_a_methods_dp_dataset_carries_the_sensitive_sets_environment_facts():
    """A release keeps the environment facts of the data it stands for (invariant 8): dp-apvi's and kickstart's DP
    datasets dropped the reference scores."""
    import dataclasses

    data = _example("dp-apvi")
    data = dataclasses.replace(data, info=dataclasses.replace(data.info, ref_min_score=-3.0, ref_max_score=7.0))
    res = _make("dp-apvi").run(data)
    assert (res.dataset.info.ref_min_score, res.dataset.info.ref_max_score) == (-3.0, 7.0)
    assert res.dataset.info.privacy_card["epsilon"] == pytest.approx(res.epsilon, rel=1e-6)
