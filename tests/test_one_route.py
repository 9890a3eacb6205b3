"""issue 38, one route: the deprecated aliases run ``privsynth synthesize``'s handler, and release.synthesize covers
what the bench cells and ``baseline`` need (no rows for n=0, nothing written without out_dataset, whole episodes)."""
from __future__ import annotations

import pytest

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.errors import InvalidData


@pytest.fixture
def stored():
    minari_io.write_dataset(make_toy_dataset(lengths=(120, 120), seed=1, name="pub"), "pub")
    minari_io.write_dataset(make_toy_dataset(lengths=(100, 100, 50), seed=2, name="sens"), "sens")


def _err_lines(err: str) -> list[str]:
    return [ln for ln in err.strip().splitlines() if ln.strip() and "is deprecated" not in ln]


def test_baseline_alias_without_out_dataset_prints_the_card_and_writes_nothing(capsys, stored):
    before = set(minari_io.list_datasets())
    code = main(["baseline", "privsyn", "--sensitive", "sens", "--public", "pub", "--epsilon", "2",
                 "--num-samples", "80", "--set", "gum_rounds=2", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "nothing written (no --out-dataset)" in out and "Privacy card" in out
    assert "'baseline' is deprecated" in err and "synthesize --synth NAME" in err
    assert set(minari_io.list_datasets()) == before


def test_synthesize_traj_from_checkpoint_is_one_line(capsys, stored, tmp_path):
    code = main(["synthesize-traj", "--sensitive", "sens", "--public", "pub", "--from-checkpoint",
                 str(tmp_path / "m.pt"), "--epsilon", "1", "--out", "x-v0", "--quiet"])
    lines = _err_lines(capsys.readouterr().err)
    assert code == 2 and len(lines) == 1 and "--from-checkpoint" in lines[0] and "no equivalent" in lines[0]


def test_the_aliases_have_no_pipeline_of_their_own():
    """Both aliases call the synthesize handler; neither fine-tunes, samples or releases itself."""
    import inspect

    from privsynth.commands import baselines, synth_traj

    for fn in (baselines._run, synth_traj.run):
        src = inspect.getsource(fn)
        assert "run_synthesize(synthesize_args(" in src
        assert not any(w in src for w in (".finetune(", ".pretrain(", "release_dataset", ".sample("))


def test_release_synthesize_n0_fits_and_checks_the_ledger_without_rows():
    from privsynth.release import synthesize

    pub = make_toy_dataset(lengths=(120, 120), seed=1, name="pub")
    sens = make_toy_dataset(lengths=(100, 100, 50), seed=2, name="sens")
    res = synthesize(sens, public=[pub], synth="privsyn", preset="tiny", epsilon=1.0, delta=1e-5, n=0,
                     progress=False)
    assert res.dataset is None and 0 < res.epsilon <= 1.0 and res.ledger.events
    assert {"pretrain", "finetune", "fit", "total"} <= set(res.seconds) and "sample" not in res.seconds
    with pytest.raises(InvalidData, match="n=0"):
        synthesize(sens, public=[pub], synth="privsyn", preset="tiny", epsilon=1.0, delta=1e-5, n=0, out_dataset="x-v0")
    with pytest.raises(InvalidData, match="episodes"):  # privsyn makes transitions, not episodes
        synthesize(sens, public=[pub], synth="privsyn", preset="tiny", epsilon=1.0, delta=1e-5, n=10, episodes=3)
