"""One release path for every registered synthesizer: ``privsynth synthesize --synth NAME`` on the same sensitive
dataset writes a Minari release carrying its card, spending no more than the budget."""
from __future__ import annotations

import importlib.util

import pytest

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.errors import InvalidData
from privsynth.privacy.ledger import Ledger
from privsynth.release import synthesize
from privsynth.synth import registry


@pytest.fixture
def stored():
    minari_io.write_dataset(make_toy_dataset(lengths=(40, 30, 50, 20), seed=1, name="pub"), "pub")
    sens = make_toy_dataset(lengths=(9, 8, 10, 9, 8, 10, 9, 8, 9, 10, 8, 9), seed=2, name="sens")
    minari_io.write_dataset(sens.mark_sensitive(True), "sens")


def _names():
    out = []
    for name in registry.names():
        marks = [] if name == "privsyn" else [pytest.mark.slow]
        if registry.entry(name).extra == "pgm" and importlib.util.find_spec("mbi") is None:
            marks.append(pytest.mark.skip(reason="the PGM baseline needs the 'pgm' extra (mbi)"))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


@pytest.mark.parametrize("name", _names())
def test_synthesize_any_registered_synthesizer_from_the_cli(name, stored, capsys):
    rc = main(["synthesize", "--synth", name, "--public", "pub", "--sensitive", "sens", "--epsilon", "5",
               "--delta", "1e-3", "-n", "60", "--out-dataset", f"syn-{name}", "--config", "tiny", "--quiet"])
    assert rc == 0, capsys.readouterr().err
    assert f"({name})" in capsys.readouterr().out
    back = minari_io.load_dataset(f"syn-{name}")
    card = back.info.privacy_card
    assert card["private"] is True and card["synthesizer"] == name
    assert Ledger.from_dict(card["ledger"]).epsilon() == pytest.approx(card["epsilon"]) and card["epsilon"] <= 5 + 1e-9
    assert card["unit"] == registry.entry(name).units[0]
    assert back.n_transitions == 60 and back.info.sensitive is False


def test_options_that_do_not_apply_are_refused_before_any_work(stored, capsys):
    assert main(["synthesize", "--synth", "privsyn", "--public", "pub", "--sensitive", "sens", "--epsilon", "5",
                 "--delta", "1e-3", "-n", "60", "--out-dataset", "x", "--no-curiosity", "--quiet"]) == 2
    assert "privorl-n only" in capsys.readouterr().err
    with pytest.raises(InvalidData, match="protects trajectory"):
        synthesize("sens", public=["pub"], epsilon=5, delta=1e-3, unit="transition", n=10, synth="privorl-j")
    with pytest.raises(InvalidData, match="unknown synthesizer"):
        synthesize("sens", public=["pub"], epsilon=5, delta=1e-3, n=10, synth="gan-of-theseus")
