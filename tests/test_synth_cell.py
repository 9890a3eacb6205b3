"""One benchmark cell for every registered synthesizer: a suite is a grid over names, written as one table."""
from __future__ import annotations

import textwrap

import pytest

from privsynth.evaluation.runner import collect_records, load_suite, run_suite

SUITE = """
name: synth_cell
workers: 1
datasets:
  public: {{source: pointmaze, maze: open, steps: 1500, seed: 1, dense: true, ref_episodes: 1}}
  sens:   {{source: pointmaze, maze: umaze, steps: 1500, seed: 2, dense: true, ref_episodes: 1, sensitive: true}}
defaults:
  data: {{public: [public], sensitive: sens}}
  config: {{preset: tiny}}
stages:
  - name: synthesize
    kind: synthesize
    grid: {{synthesizer: {names}, epsilon: [10.0], seed: [0]}}
    params: {{delta: 1.0e-4, num_samples: 300}}
  - name: fidelity
    kind: fidelity
    needs: {{stage: synthesize, match: [synthesizer, epsilon]}}
    grid: {{synthesizer: {names}, epsilon: [10.0]}}
tables:
  - {{name: fidelity, stage: fidelity, rows: [synthesizer, epsilon], values: [marginal, correlation]}}
"""


def _run(tmp_path, names):
    path = tmp_path / "s.yaml"
    path.write_text(textwrap.dedent(SUITE.format(names=names)))
    suite = load_suite(path, results_dir=tmp_path / "results")
    res = run_suite(suite, progress=False, log=lambda _: None)
    return res, collect_records(suite)


def _check(records, names):
    synth = {r["params"]["synthesizer"]: r for r in records if r["stage"] == "synthesize"}
    assert set(synth) == set(names)
    for name, r in synth.items():
        assert 0 < r["result"]["dp_epsilon"] <= 10.0 and r["result"]["n_synthetic"] == 300
    fid = [r for r in records if r["stage"] == "fidelity"]
    assert len(fid) == len(names) and all(0 <= r["result"]["marginal"] <= 1 for r in fid)


def test_a_baseline_through_the_generic_cell(tmp_path):
    _, records = _run(tmp_path, "[privsyn]")
    _check(records, ["privsyn"])
    assert any((tmp_path / "results").rglob("fidelity*"))  # the table


@pytest.mark.slow
def test_diffusion_and_gan_synthesizers_through_the_same_cell(tmp_path):
    names = ["privorl-n", "privorl-j", "pategan"]
    _, records = _run(tmp_path, "[" + ", ".join(names) + "]")
    _check(records, names)


PUBLIC_ONLY = """
name: public_only
workers: 1
datasets:
  public: {{source: pointmaze, maze: open, steps: 600, seed: 1, dense: true, ref_episodes: 1}}
  sens:   {{source: pointmaze, maze: umaze, steps: 600, seed: {sens_seed}, dense: true, ref_episodes: 1, sensitive: true}}
defaults:
  data: {{public: [public], sensitive: sens}}
  config: {{preset: cpu, denoiser: {{width: 32, depth: 1}}, pretrain: {{epochs: 1, batch_size: 64}},
           pretrain_curiosity: false, sampler: {{steps: 4}}}}
stages:
  - {{name: pretrain, kind: pretrain, grid: {{seed: [0]}}}}
  - name: synthesize
    kind: synthesize
    needs: {{stage: pretrain}}
    grid: {{epsilon: [{eps}], seed: [0]}}
    params: {{synthesizer: privorl-n, finetune: none, num_samples: 200}}
"""


def _public_only(tmp_path, sens_seed, eps="0.0"):
    path = tmp_path / f"p{sens_seed}-{eps}.yaml"
    path.write_text(textwrap.dedent(PUBLIC_ONLY.format(sens_seed=sens_seed, eps=eps)))
    suite = load_suite(path, results_dir=tmp_path / f"results{sens_seed}")
    res = run_suite(suite, progress=False, log=lambda _: None)
    return res, suite


@pytest.mark.slow
def test_the_public_only_row_reads_no_sensitive_record(tmp_path):
    """finetune: none samples the pre-trained model: on two different sensitive datasets the samples are identical
    (nothing computed from the records), no ledger is written, and it must say epsilon 0."""
    import numpy as np

    from privsynth.evaluation.bench.sources import load_dataset_file

    samples = []
    for sens_seed in (2, 3):
        res, suite = _public_only(tmp_path, sens_seed)
        assert res.failed == 0
        (rec,) = [r for r in collect_records(suite) if r["stage"] == "synthesize"]
        assert rec["result"]["public_only"] is True and rec["result"]["n_synthetic"] == 200
        art = next(suite.out.rglob("synthetic.npz"))
        assert not list(art.parent.glob("ledger.json"))
        ds = load_dataset_file(art)
        assert ds.info.env_id == "PointMaze_UMazeDense-v3"  # labelled with the environment it is evaluated in
        samples.append(ds.transition_matrix())
    np.testing.assert_array_equal(samples[0], samples[1])
    res, _ = _public_only(tmp_path, 2, eps="1.0")  # the pretrain cell is reused
    assert res.failed == 1 and "epsilon: 0.0" in res.failures[0].error


@pytest.mark.slow
def test_synthesize_cell_postprocesses_and_tops_up_to_num_samples(tmp_path):
    """``postprocess: [goals, walls]`` on a synthesize cell: every row of the saved sample has its state, next state
    and goal in free cells of the sensitive task's map, and more draws make up the dropped rows (200 kept)."""
    import numpy as np

    from privsynth.data.env_adapters import adapter_for
    from privsynth.evaluation.bench.sources import load_dataset_file

    path = tmp_path / "post.yaml"
    text = PUBLIC_ONLY.format(sens_seed=2, eps="0.0").replace(
        "num_samples: 200}", "num_samples: 200, postprocess: [goals, walls]}")
    path.write_text(textwrap.dedent(text))
    suite = load_suite(path, results_dir=tmp_path / "results")
    assert run_suite(suite, progress=False, log=lambda _: None).failed == 0
    (rec,) = [r for r in collect_records(suite) if r["stage"] == "synthesize"]
    post = rec["result"]["postprocess"]
    assert rec["result"]["n_synthetic"] == 200 and post["rows_kept"] == 200 and post["rows_in"] > 200
    ds = load_dataset_file(next(suite.out.rglob("synthetic.npz")))
    adapter = adapter_for(ds.info, ds.observations)
    try:
        bad = adapter.in_wall(ds.observations) | adapter.in_wall(ds.next_observations)
        bad |= adapter.goal_in_wall(ds.observations)
        assert ds.n_transitions == 200 and not np.any(bad)
    finally:
        adapter.close()


def test_cells_refuse_sensitive_data_as_public():
    """A cell's public datasets (pre-training data, normaliser) can be neither its sensitive set nor marked sensitive."""
    from types import SimpleNamespace

    from conftest import make_toy_dataset
    from privsynth.errors import PrivacyError
    from privsynth.evaluation.cells import _public

    data = {"pub": make_toy_dataset(seed=1, name="pub"), "sens": make_toy_dataset(seed=2, name="sens").mark_sensitive(True)}
    ctx = SimpleNamespace(dataset=data.__getitem__)
    assert len(_public({"data": {"public": ["pub"], "sensitive": "sens"}}, ctx)) == 1
    with pytest.raises(PrivacyError, match="both public and sensitive"):
        _public({"data": {"public": ["pub", "sens"], "sensitive": "sens"}}, ctx)
    with pytest.raises(PrivacyError, match="marked sensitive"):
        _public({"data": {"public": "sens"}}, ctx)


J_PUBLIC_ONLY = """
name: j_public_only
workers: 1
datasets:
  public: {{source: pointmaze, maze: open, steps: 400, seed: 1, dense: true, ref_episodes: 1}}
  sens:   {{source: pointmaze, maze: umaze, steps: 400, seed: {sens_seed}, dense: true, ref_episodes: 1, sensitive: true}}
defaults:
  data: {{public: [public], sensitive: sens}}
stages:
  - name: synthesize
    kind: synthesize
    grid: {{epsilon: [{eps}], seed: [0]}}
    params: {{synthesizer: privorl-j, finetune: none, num_samples: 100, config: {{preset: tiny}}}}
"""


@pytest.mark.slow
def test_registry_public_only_row_reads_no_sensitive_record(tmp_path):
    """``finetune: none`` for a registry synthesizer (PrivORL-j): the public model alone, identical samples on two
    different sensitive sets, labelled with the sensitive task's environment, no ledger; epsilon must be 0."""
    import numpy as np

    from privsynth.evaluation.bench.sources import load_dataset_file

    samples = []
    for sens_seed in (2, 3):
        path = tmp_path / f"j{sens_seed}.yaml"
        path.write_text(textwrap.dedent(J_PUBLIC_ONLY.format(sens_seed=sens_seed, eps="0.0")))
        suite = load_suite(path, results_dir=tmp_path / f"jres{sens_seed}")
        res = run_suite(suite, progress=False, log=lambda _: None)
        assert res.failed == 0, res.failures
        (rec,) = collect_records(suite)
        assert rec["result"]["public_only"] is True and "dp_epsilon" not in rec["result"]
        art = next(suite.out.rglob("synthetic.npz"))
        assert not list(art.parent.glob("ledger.json"))
        ds = load_dataset_file(art)
        assert ds.info.env_id == "PointMaze_UMazeDense-v3"
        samples.append(ds.transition_matrix())
    np.testing.assert_array_equal(samples[0], samples[1])
    path = tmp_path / "jbad.yaml"
    path.write_text(textwrap.dedent(J_PUBLIC_ONLY.format(sens_seed=2, eps="1.0")))
    res = run_suite(load_suite(path, results_dir=tmp_path / "jbad"), progress=False, log=lambda _: None)
    assert res.failed == 1 and "epsilon: 0.0" in res.failures[0].error


CHECKPOINT_DAY = PUBLIC_ONLY.split("stages:")[0].format(sens_seed=2) + """
stages:
  - {name: pretrain, kind: pretrain, grid: {seed: [0]}, params: {config: {finetune: {epochs: 99.0, lr: 0.5}}}}
  - name: synthesize
    kind: synthesize
    needs: {stage: pretrain}
    grid: {epsilon: [null], seed: [0]}
    params: {synthesizer: privorl-n, num_samples: 50, config: {finetune: {max_steps: 2}}}
"""


def test_a_synthesize_cell_fine_tunes_with_its_own_configuration_not_the_checkpoints(tmp_path):
    """A checkpoint saves the fine-tune settings of the day it was pre-trained; a synthesize cell fine-tunes with its
    own (the preset as it resolves now, and its settings), as the release route takes its caller's, and keeps only
    what the checkpoint fixed (network, EDM, pre-training, next-state layout)."""
    from privsynth.synth import TransitionSynthesizer, registry

    path = tmp_path / "day.yaml"
    path.write_text(CHECKPOINT_DAY)
    suite = load_suite(path, results_dir=tmp_path / "results")
    res = run_suite(suite, progress=False, log=lambda _: None)
    assert res.failed == 0, res.failures
    pre = TransitionSynthesizer.load(next(suite.out.glob("artifacts/pretrain-*/model.pt")))
    assert pre.config.finetune.epochs == 99.0 and pre.config.finetune.lr == 0.5  # the checkpoint's own day
    tuned = TransitionSynthesizer.load(next(suite.out.glob("artifacts/synthesize-*/model.pt")))
    cpu = registry.make("privorl-n", preset="cpu").config
    assert tuned.config.finetune.epochs == cpu.finetune.epochs and tuned.config.finetune.lr == cpu.finetune.lr
    assert tuned.config.finetune.max_steps == 2 and tuned.config.finetune_curiosity == cpu.finetune_curiosity
    assert tuned.config.denoiser == pre.config.denoiser and tuned.config.pretrain == pre.config.pretrain


J_NO_DP = J_PUBLIC_ONLY.replace("finetune: none, ", "").replace("privorl-j,", "{synth},")


def test_a_registry_no_dp_row_fine_tunes_without_a_ledger_and_others_refuse_it(tmp_path):
    """``epsilon: null`` for PrivORL-j: the no-DP control (a fine-tune without clipping or noise, saved as it is, no
    ledger, no dp_epsilon); a synthesizer without a no-privacy switch refuses it in one line."""
    from privsynth.evaluation.bench.sources import load_dataset_file

    path = tmp_path / "j.yaml"
    path.write_text(textwrap.dedent(J_NO_DP.format(sens_seed=2, eps="null", synth="privorl-j")))
    suite = load_suite(path, results_dir=tmp_path / "jres")
    res = run_suite(suite, progress=False, log=lambda _: None)
    assert res.failed == 0, res.failures
    (rec,) = collect_records(suite)
    assert "dp_epsilon" not in rec["result"] and rec["result"]["n_synthetic"] > 0
    art = next(suite.out.rglob("synthetic.npz"))
    assert not list(art.parent.glob("ledger.json"))
    card = load_dataset_file(art).info.privacy_card
    assert card["private"] is False and [p["private"] for p in card["phases"] if p["phase"] == "finetune"] == [False]
    path = tmp_path / "bad.yaml"
    path.write_text(textwrap.dedent(J_NO_DP.format(sens_seed=2, eps="null", synth="privsyn")))
    res = run_suite(load_suite(path, results_dir=tmp_path / "bad"), progress=False, log=lambda _: None)
    assert res.failed == 1 and "no no-privacy fine-tune" in res.failures[0].error
