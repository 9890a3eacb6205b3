"""Benchmark cells, tables and plots: config section overrides reach every synthesizer, cost and mia cells read what
the registry cells write, tables and plots refuse keys no cell has, never pool synthesizers, and never leave stale
files behind (docs/benchmarks.md)."""
from __future__ import annotations

import json
import textwrap

import pytest

from privsynth.errors import InvalidData
from privsynth.evaluation.runner import collect_records, load_suite, run_suite


def write_suite(tmp_path, *parts: str, name: str = "s"):
    path = tmp_path / f"{name}.yaml"
    path.write_text("".join(textwrap.dedent(p) for p in parts))
    return load_suite(path, results_dir=tmp_path / "results")


DATA = """
datasets:
  public: {source: pointmaze, maze: open, steps: 400, seed: 1, dense: true, ref_episodes: 1}
  sens:   {source: pointmaze, maze: umaze, steps: 400, seed: 2, dense: true, ref_episodes: 1}
  members: {split_of: sens, fraction: 0.5, part: first, seed: 0, sensitive: true}
  holdout: {split_of: sens, fraction: 0.5, part: second, seed: 0, sensitive: true}
defaults:
  data: {public: [public], sensitive: members, holdout: holdout}
"""


# ---------------------------------------------------------------------------------------------- config overrides
def test_config_sections_apply_to_the_cells_synthesizer():
    from privsynth.evaluation.cells import _split_config, synth_config
    from privsynth.synth import registry

    preset, over = _split_config({"preset": "tiny", "finetune": {"epochs": 5}}, "privorl-n")
    assert preset == "tiny" and registry.make("privorl-n", preset=preset, **over).config.finetune.epochs == 5
    # a section under the cell's name wins; one under another synthesizer's name is left to that synthesizer
    spec = {"finetune": {"epochs": 2}, "privorl-n": {"finetune": {"epochs": 7}}, "privorl-j": {"dp": {"x": 1}}}
    assert _split_config(spec, "privorl-n")[1] == {"finetune": {"epochs": 7}}
    assert _split_config(spec, "privorl_n")[1] == {"finetune": {"epochs": 7}}  # the pipeline reads privorl-n's too
    assert _split_config({"privsyn": {"gum_rounds": 2}}, "privsyn") == ("cpu", {"gum_rounds": 2})
    # the pretrain kind takes every preset the registry takes, tiny included, and the same sections
    cfg = synth_config({"preset": "tiny", "finetune": {"epochs": 3}}, seed=4)
    assert cfg.denoiser.width == 32 and cfg.finetune.epochs == 3 and cfg.seed == 4
    with pytest.raises(InvalidData, match="config.finetun"):
        synth_config({"preset": "tiny", "finetun": {"epochs": 3}})
    with pytest.raises(InvalidData, match="unknown preset 'tinny'"):
        synth_config({"preset": "tinny"})


def test_config_overrides_change_the_dp_steps_and_typos_are_refused(tmp_path):
    suite = write_suite(tmp_path, "name: cfg\n", DATA, """
    stages:
      - name: synthesize
        kind: synthesize
        grid: {epsilon: [10.0], seed: [0]}
        params: {synthesizer: privorl-n, delta: 1.0e-3}
        cases:
          - {tag: e1, config: {preset: tiny, finetune: {epochs: 1, batch_size: 32}}}
          - {tag: e3, config: {preset: tiny, finetune: {epochs: 3, batch_size: 32}}}
          - {tag: typo, config: {preset: tiny, finetun: {epochs: 3}}}
          - {tag: baseline_typo, synthesizer: privsyn, config: {preset: tiny, privsyn: {bogus: 1}}}
    """)
    summary = run_suite(suite, progress=False, log=lambda _: None)
    done = {r.params["tag"]: r.result for r in collect_records(suite)}
    # each run derives its steps from its own DP count of the units (N is private), so 3 epochs give about 3x the
    # steps of 1 (the count's noise and the rounding of epochs / q move each by a step or two), never the same
    # steps = round(epochs / q) with q = B / Ñ of the run's own DP count: checked per cell, so the count's noise
    # (Laplace, scale 5 here) cannot fail it, while a run that drops or adds steps does
    for tag, epochs in (("e1", 1), ("e3", 3)):
        assert done[tag]["dp_steps"] == max(1, round(epochs / done[tag]["dp_sample_rate"])), (tag, done[tag])
    assert done["e1"]["dp_steps"] < done["e3"]["dp_steps"]
    assert done["e1"]["dp_steps"] > 0
    # the timings of the run on the sensitive set sit in the holder's own section (issue 36)
    assert {"pretrain_seconds", "unit"} <= set(done["e1"]) and "finetune_seconds" not in done["e1"]
    assert {"fit_seconds", "finetune_seconds", "peak_rss_mb"} <= set(done["e1"]["holder_only"])
    errors = [f.error for f in summary.failures]
    assert summary.failed == 2 and len(errors) == 2
    assert any("'config.finetun'" in e for e in errors) and any("bogus" in e for e in errors)
    assert all("\n" not in e for e in errors)  # one line


# ---------------------------------------------------------------------------------------------- cost and mia
def test_cost_and_mia_cells_read_registry_cells(tmp_path):
    suite = write_suite(tmp_path, "name: cost\n", DATA, """
      config: {preset: tiny, privorl-n: {finetune: {batch_size: 32}}}
    stages:
      - name: synthesize
        kind: synthesize
        grid: {synthesizer: [privorl-n, privsyn], epsilon: [10.0], seed: [0]}
        params: {delta: 1.0e-3, num_samples: 100}
      - name: cost
        kind: cost
        needs: {stage: synthesize, match: [synthesizer]}
        grid: {synthesizer: [privorl-n, privsyn]}
      - name: mia
        kind: mia
        needs: {stage: synthesize, match: [synthesizer]}
        grid: {synthesizer: [privorl-n]}
        params: {max_units: 20, attacks: [{name: loss, repeats: 1}]}
    tables:
      - {name: cost, stage: cost, rows: [synthesizer], values: [finetune_seconds, seconds_per_step, checkpoint_mb]}
    """)
    summary = run_suite(suite, progress=False, log=lambda _: None)
    assert summary.failed == 0, summary.failures
    cost = {r.params["synthesizer"]: r.result for r in collect_records(suite, stage="cost")}
    for name in ("privorl-n", "privsyn"):
        own = cost[name]["holder_only"]  # timings of the sensitive run: the holder's own section (issue 36)
        assert own["finetune_seconds"] > 0 and cost[name]["checkpoint_mb"] > 0 and cost[name]["private"]
    assert cost["privorl-n"]["holder_only"]["seconds_per_step"] > 0
    (mia,) = collect_records(suite, stage="mia")
    assert 0 <= mia.result["loss_auc"] <= 1


def test_cost_and_mia_say_what_is_missing(tmp_path):
    suite = write_suite(tmp_path, """
    name: nocost
    stages:
      - {name: syn, kind: echo, grid: {epsilon: [1.0]}, params: {value: 1}}
      - {name: cost, kind: cost, needs: {stage: syn, match: [epsilon]}, grid: {epsilon: [1.0]}}
      - {name: mia, kind: mia, needs: {stage: syn, match: [epsilon]}, grid: {epsilon: [1.0]},
         params: {data: {sensitive: x, holdout: y}}}
    """)
    summary = run_suite(suite, progress=False, log=lambda _: None)
    errors = [f.error for f in summary.failures]
    assert summary.failed == 2
    assert any("recorded no finetune_seconds or fit_seconds" in e for e in errors)
    assert any("left no model.pt or model.ckpt" in e for e in errors)


# ---------------------------------------------------------------------------------------------- tables
ECHO = """
name: echo
stages:
  - name: agent
    kind: echo
    grid: {synthesizer: [a, b], epsilon: [1.0, 10.0], agent: [iql, td3bc], seed: [0, 1]}
    params: {final_score: 10.0}
  - name: real
    kind: echo
    grid: {agent: [iql, td3bc], seed: [0, 1]}
    params: {synthesizer: real, final_score: 50.0}
"""


def test_tables_refuse_keys_no_cell_has_and_keep_n(tmp_path):
    suite = write_suite(tmp_path, ECHO, """
    tables:
      - {name: good, stage: agent, rows: [synthesizer, epsilon], cols: [agent], values: [final_score]}
      - {name: typo_rows, stage: agent, rows: [synthesiser, epsilon], values: [final_score]}
      - {name: typo_values, stage: agent, rows: [synthesizer], values: [final_scor]}
    """)
    summary = run_suite(suite, progress=False, log=lambda _: None)  # the run's summary survives a refused table
    assert summary.ran > 0 and summary.table_error
    msg = summary.table_error
    assert "\n" not in msg
    assert "table 'typo_rows': rows key 'synthesiser'" in msg and "table 'typo_values': values key 'final_scor'" in msg
    assert "synthesizer" in msg.split("their keys:")[1]  # lists the keys the records have
    out = suite.out / "tables"
    assert not (out / "typo_rows.md").exists() and not (out / "typo_values.html").exists()
    md = (out / "good.md").read_text()  # the good table is still written, with n, the suite and the command
    assert "| synthesizer | epsilon | iql | td3bc | n |" in md and "suite echo" in md
    assert "<title>" in (out / "good.html").read_text()


def test_stale_tables_and_plots_are_removed(tmp_path, capsys):
    body = """
    tables:
      - {name: t, stage: agent, rows: [synthesizer], values: [final_score], where: {synthesizer: %s}}
    plots:
      - {name: p, type: privacy_utility, stage: agent, y: final_score, where: {synthesizer: %s}}
    """
    suite = write_suite(tmp_path, ECHO, body % ("a", "a"))
    summary = run_suite(suite, progress=False, log=lambda _: None)
    assert (suite.out / "tables" / "t.md").exists() and (suite.out / "plots" / "p.png").exists()
    assert len(summary.plots) == 1
    suite = write_suite(tmp_path, ECHO, body % ("zz", "zz"))  # selects no current cell now
    lines: list[str] = []
    summary = run_suite(suite, progress=False, log=lines.append)
    lines += capsys.readouterr().out.splitlines()  # the writers log with print unless given a log
    assert not (suite.out / "tables" / "t.md").exists() and not (suite.out / "tables" / "t.cells.csv").exists()
    assert not (suite.out / "plots" / "p.png").exists() and summary.tables == [] and summary.plots == []
    assert any("table 't' selects no current cells" in line for line in lines)
    assert any("plot 'p' selects no current cells" in line for line in lines)


def test_where_with_a_list_keeps_cells_equal_to_any_item_null_for_a_missing_param(tmp_path):
    """``where: {synthesizer: [real, a]}`` keeps the real-data cells and synthesizer a's, not b's; ``null`` in the
    list keeps the cells that lack the param (the transfer suites' gap tables: real, public alone and one release)."""
    from privsynth.evaluation.bench.plan import records_for

    suite = write_suite(tmp_path, ECHO, """
    tables:
      - {name: t, kind: echo, rows: [synthesizer], values: [final_score], where: {synthesizer: [real, a]}}
    """)
    run_suite(suite, progress=False, log=lambda _: None)
    kept = {r.params["synthesizer"] for r in records_for(suite, {"where": {"synthesizer": ["real", "a"]}})}
    assert kept == {"real", "a"}
    assert {r.params["synthesizer"] for r in records_for(suite, {"where": {"release": [None]}})} == {"real", "a", "b"}
    assert records_for(suite, {"where": {"release": ["x"]}}) == []
    md = (suite.out / "tables" / "t.md").read_text()
    assert "| a |" in md and "| real |" in md and "| b |" not in md


# ---------------------------------------------------------------------------------------------- plots
def test_privacy_utility_keeps_synthesizers_apart_and_draws_real_data_as_a_reference(tmp_path, monkeypatch, capsys):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from privsynth.evaluation.bench import plots

    suite = write_suite(tmp_path, ECHO, """
    plots:
      - {name: pu, type: privacy_utility, kind: echo, y: final_score, series: agent}
      - {name: missing, type: privacy_utility, kind: echo, y: final_scor}
    """)
    drawn = {}
    real_savefig = plt.Figure.savefig

    def spy(fig, path, *a, **k):
        ax = fig.axes[0]
        drawn[str(path).rsplit("/", 1)[-1]] = ([t.get_text() for t in ax.get_legend().get_texts()], ax.get_ylabel(),
                                               ax.get_title())
        return real_savefig(fig, path, *a, **k)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    lines: list[str] = []
    summary = run_suite(suite, progress=False, log=lines.append)
    lines += capsys.readouterr().out.splitlines()
    assert [p.rsplit("/", 1)[-1] for p in summary.plots] == ["pu.png"]  # the plot with a missing y is not listed
    assert any("plot 'missing' not drawn: 'final_scor'" in line for line in lines)
    legend, ylabel, title = drawn["pu.png"]
    assert "real data (agent=iql)" in legend and "real data (agent=td3bc)" in legend and "no DP" not in legend
    assert {"agent=iql synthesizer=a", "agent=iql synthesizer=b", "agent=td3bc synthesizer=a"} <= set(legend)
    assert ylabel == plots.axis_label("final_score") and "100 = expert" in ylabel and title


def test_cli_prints_the_run_summary_before_refusing_a_table(tmp_path, capsys):
    from privsynth.cli import main

    write_suite(tmp_path, ECHO, """
    tables:
      - {name: typo_rows, stage: agent, rows: [synthesiser], values: [final_score]}
    """)
    rc = main(["bench", str(tmp_path / "s.yaml"), "--results-dir", str(tmp_path / "results"), "--no-progress"])
    out, err = capsys.readouterr()
    assert rc == 2 and "ran, 0 skipped, 0 failed" in out  # what ran is said first
    assert "tables not written: table 'typo_rows': rows key 'synthesiser'" in err


def test_tables_say_when_a_row_pools_cells_with_different_settings():
    from privsynth.evaluation.bench.tables import pooled_settings

    def rec(seed, trainable, eps=10.0):
        return {"id": f"c{seed}{trainable}", "params": {"epsilon": eps, "seed": seed, "synthesizer": "privorl-n",
                "config": {"dp": {"trainable": trainable}}}, "result": {"final_score": 1.0}, "seconds": 1.0}

    same = [rec(0, "all"), rec(1, "all"), rec(0, "all", eps=1.0)]
    assert pooled_settings(same, ["synthesizer", "epsilon"]) == []  # seeds only
    mixed = same + [rec(2, "bias_norm")]
    assert pooled_settings(mixed, ["synthesizer", "epsilon"]) == ["config.dp.trainable"]
