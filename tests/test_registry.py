"""The conformance suite (scikit-learn's ``check_estimator`` idea): every registered synthesizer is built, fitted,
sampled both ways, saved and loaded, and its card and guard checked, by the same code. Registering a synthesizer in
``privsynth.synth.registry`` is all it takes to be tested here."""
from __future__ import annotations

import importlib.util

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.errors import BudgetExceeded, InvalidData, PrivsynthError
from privsynth.privacy.guard import check_budget
from privsynth.privacy.ledger import Ledger
from privsynth.synth import registry

EPS, DELTA = 5.0, 1e-3
FAST = {"privsyn"}  # the rest take seconds each: marked slow


def _params():
    out = []
    for name in registry.names():
        marks = [] if name in FAST else [pytest.mark.slow]
        if registry.entry(name).extra == "pgm" and importlib.util.find_spec("mbi") is None:
            marks.append(pytest.mark.skip(reason="the PGM baseline needs the 'pgm' extra (mbi)"))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def _data(name: str):
    if registry.entry(name).episodes:
        pub = make_toy_dataset(lengths=(12, 10, 14), seed=1, name="pub")
        sens = make_toy_dataset(lengths=(9, 8, 10, 9, 8, 10, 9, 8), seed=2, sensitive=True, name="sens")
    else:
        pub = make_toy_dataset(lengths=(100, 100), seed=1, name="pub")
        sens = make_toy_dataset(lengths=(30,) * 12, seed=2, sensitive=True, name="sens")
    return pub, sens


@pytest.fixture(scope="module")
def fitted(request):
    cache: dict = {}

    def get(name: str):
        if name not in cache:
            pub, sens = _data(name)
            synth = registry.make(name, preset="tiny")
            unit = "trajectory" if registry.entry(name).episodes else "transition"
            registry.fit(synth, sens, public=pub, epsilon=EPS, delta=DELTA, unit=unit)
            cache[name] = synth
        return cache[name]
    return get


@pytest.mark.parametrize("name", _params())
def test_samples_both_ways_as_offline_datasets(name, fitted):
    synth = fitted(name)
    rows = registry.sample(synth, n_transitions=25, seed=3)
    assert rows.n_transitions == 25 and np.isfinite(rows.observations).all()
    eps = registry.sample(synth, n_episodes=3, seed=3)
    assert eps.n_episodes == 3
    assert rows.info.privacy_card["private"] is True and rows.info.sensitive is False


@pytest.mark.parametrize("name", _params())
def test_save_load_gives_identical_samples_under_a_seed(name, fitted, tmp_path):
    synth = fitted(name)
    path = synth.save(tmp_path / "ckpt") or tmp_path / "ckpt"
    back = registry.load(path)
    assert registry.name_of(back) == name
    a = registry.sample(synth, n_transitions=16, seed=11)
    b = registry.sample(back, n_transitions=16, seed=11)
    np.testing.assert_array_equal(a.transition_matrix(), b.transition_matrix())
    assert back.card()["ledger"] == synth.card()["ledger"]


@pytest.mark.parametrize("name", _params())
def test_card_epsilon_is_recomputable_and_the_guard_refuses_over_budget(name, fitted):
    card = fitted(name).card()
    ledger = Ledger.from_dict(card["ledger"])
    assert ledger.epsilon() == pytest.approx(card["epsilon"]) and 0 < card["epsilon"] <= EPS * (1 + 1e-9)
    assert check_budget(ledger, EPS) == pytest.approx(card["epsilon"])
    with pytest.raises(BudgetExceeded):
        check_budget(ledger, card["epsilon"] * 0.5)


@pytest.mark.parametrize("name", _params())
@pytest.mark.parametrize("bad", [dict(epsilon=0.0), dict(epsilon=-1.0), dict(delta=1.0), dict(unit="household")])
def test_bad_requests_get_one_line(name, bad):
    pub, sens = _data(name)
    synth = registry.make(name, preset="tiny")
    kwargs = dict(public=pub, epsilon=EPS, delta=DELTA, unit="trajectory" if registry.entry(name).episodes else "transition")
    kwargs.update(bad)
    with pytest.raises(PrivsynthError) as err:
        registry.fit(synth, sens, **kwargs)
    assert "\n" not in str(err.value)


def test_unknown_names_presets_and_settings_are_one_line():
    with pytest.raises(InvalidData, match="unknown synthesizer"):
        registry.make("gan-of-theseus")
    with pytest.raises(InvalidData, match="unknown preset"):
        registry.make("privorl-n", preset="huge")
    with pytest.raises(InvalidData, match="unknown setting"):
        registry.make("privorl-j", preset="tiny", horizn=3)
    with pytest.raises(InvalidData, match="exactly one"):
        registry.sample(registry.make("privsyn"), n_transitions=3, n_episodes=3)


def test_a_pickled_object_is_not_a_checkpoint(tmp_path):
    import pickle

    class Boom:
        def __reduce__(self):
            return (print, ("this code ran on load",))

    path = tmp_path / "evil.pt"
    path.write_bytes(pickle.dumps({"format": "privsynth.transition-synth/1", "x": Boom()}))
    with pytest.raises(PrivsynthError) as err:  # UnsafeCheckpoint: nothing in the file ran
        registry.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("name", _params())
def test_white_box_audit_reaches_every_synthesizer(name, fitted):
    """``privsynth audit --checkpoint`` attacks any registered synthesizer through its adapter (issue 19, item 2)."""
    from privsynth.evaluation.mia import as_adapter, run_audit

    synth = fitted(name)
    pub, sens = _data(name)
    unit = "trajectory" if registry.entry(name).episodes else "transition"
    adapter = as_adapter(synth, unit)
    result = run_audit(synth, sens, pub, unit=unit, max_units=40, seed=0)
    expected = {"loss", "pia"} if adapter.has_denoiser else {"loss"}
    assert set(result["attacks"]) == expected
    for att in result["attacks"].values():
        assert 0.0 <= att["auc"] <= 1.0 and att["n_members"] > 0 and att["n_non_members"] > 0


@pytest.mark.parametrize("name", registry.names())
def test_requests_are_checked_before_any_training(name, monkeypatch):
    """Public data holding the sensitive rows, a bad budget, δ ≥ 1/N or an id instead of a dataset is refused in one
    line before pre-training (it used to pre-train on sensitive rows passed as public and card them at ε = 5)."""
    if registry.entry(name).extra == "pgm" and importlib.util.find_spec("mbi") is None:
        with pytest.raises(InvalidData, match="privsynth\\[pgm\\]"):  # refused at make, before any data is read
            registry.make(name, preset="tiny")
        return
    pub, sens = _data(name)
    synth = registry.make(name, preset="tiny")
    unit = "trajectory" if registry.entry(name).episodes else "transition"
    n_units = sens.n_episodes if unit == "trajectory" else sens.n_transitions
    monkeypatch.setattr(registry, "pretrain", lambda *a, **k: pytest.fail("pre-trained before the checks"))
    base = dict(public=pub, epsilon=EPS, delta=DELTA, unit=unit)
    for bad, words in [(dict(public=sens.mark_sensitive(False)), "shares"), (dict(public=[pub, sens]), "sensitive"),
                       (dict(epsilon=0.0), "epsilon"), (dict(delta=1.0 / n_units), "delta"),
                       (dict(public="privsynth/pub-v0"), "public must be")]:
        with pytest.raises(PrivsynthError, match=words) as err:
            registry.fit(synth, sens, **{**base, **bad})
        assert "\n" not in str(err.value)
    with pytest.raises(InvalidData, match="sensitive must be an OfflineDataset"):
        registry.fit(synth, "privsynth/sens-v0", **base)
    with pytest.raises(InvalidData, match="no weights yet|not been fitted"):
        registry.sample(synth, n_transitions=5)  # sampling before fitting is one line too


@pytest.mark.parametrize("name", _params())
def test_a_second_fit_is_refused_for_every_name(name, fitted):
    """privorl-n and privorl-j composed a second fit past the epsilon asked (5 + 5 -> 5.9); the baselines refused."""
    pub, sens = _data(name)
    synth = fitted(name)
    before = synth.ledger.epsilon()
    with pytest.raises(PrivsynthError, match="already been fitted"):
        registry.fit(synth, sens, public=None, epsilon=EPS, delta=DELTA,
                     unit="trajectory" if registry.entry(name).episodes else "transition")
    assert synth.ledger.epsilon() == before


def test_an_unregistered_object_is_named_as_such_not_taken_for_privorl_n():
    class Stranger:
        name = "my-synth"

    with pytest.raises(InvalidData, match="not a registered synthesizer"):
        registry.name_of(Stranger())


def test_the_unit_defaults_to_the_synthesizers_own_so_names_swap_alone():
    """Python defaulted to unit="transition" (the CLI infers it): swapping privsyn for privorl-j also needed a unit."""
    name = next(n for n in registry.names() if registry.entry(n).episodes)
    pub, sens = _data(name)
    synth = registry.fit(registry.make(name, preset="tiny"), sens, public=pub, epsilon=EPS, delta=DELTA)
    assert synth.ledger.unit == registry.entry(name).units[0] == "trajectory"


def test_builtin_format_tags_match_the_classes():
    from privsynth.synth import transition
    from privsynth.synth.trajectory import synthesizer as traj

    assert registry.TRANSITION_FORMAT == transition.FORMAT and registry.TRAJECTORY_FORMAT == traj.FORMAT
    for name in registry.names():
        assert registry.entry(name).formats and registry.entry(name).loader is not None, name


@pytest.fixture
def my_privsyn():
    """A synthesizer registered from outside the package: a renamed PrivSyn with its own checkpoint tag."""
    from privsynth.synth.baselines.privsyn import PrivSynConfig, PrivSynSynthesizer

    class MyPrivSyn(PrivSynSynthesizer):
        name = "my-privsyn"

    e = registry.Entry("my-privsyn", "a plug-in", ("transition",),
                       lambda preset, config, overrides: MyPrivSyn(config or PrivSynConfig(gum_rounds=3, **overrides)),
                       formats=("my-privsyn",), loader=MyPrivSyn.load)
    registry.register(e)
    yield MyPrivSyn
    registry.unregister("my-privsyn")


def test_a_registered_plugin_is_made_fitted_saved_and_loaded_through_the_registry(my_privsyn, tmp_path):
    """registry.load knew only the built-in tags: a registered synthesizer's checkpoint was 'no known format tag'."""
    pub, sens = _data("privsyn")
    synth = registry.fit(registry.make("my-privsyn"), sens, public=pub, epsilon=EPS, delta=DELTA)
    path = synth.save(tmp_path / "plugin.json")
    back = registry.load(path)
    assert type(back) is my_privsyn and registry.name_of(back) == "my-privsyn"
    assert back.ledger.epsilon() == pytest.approx(synth.ledger.epsilon())
    a, b = registry.sample(synth, n_transitions=20, seed=4), registry.sample(back, n_transitions=20, seed=4)
    np.testing.assert_array_equal(a.observations, b.observations)


def test_register_refuses_taken_names_and_half_loaders(my_privsyn):
    with pytest.raises(InvalidData, match="already registered"):
        registry.register(registry.entry("privsyn"))
    with pytest.raises(InvalidData, match="both formats and a loader"):
        registry.register(registry.Entry("half", "x", ("transition",), registry.entry("privsyn").build,
                                         formats=("half",)))
    with pytest.raises(InvalidData, match="units"):
        registry.register(registry.Entry("bad-unit", "x", ("episode",), registry.entry("privsyn").build))
    assert "half" not in registry.names() and "bad-unit" not in registry.names()
