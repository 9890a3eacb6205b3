"""The release-level transfer table (scripts/transfer_releases.py): which study rows count as the default, and the
committed files are what the studies give."""
from __future__ import annotations

import json

import pytest

from conftest import load_script


def _script():
    return load_script("transfer_releases")


def test_only_default_rows_count():
    m = _script()
    base = {"schedule": {"epochs": 150.0, "seed": 7.0, "route": 1.0, "share": 0.1, "pair": 1.0},
            "policy": {"mode": "residual"}}
    assert m.is_default(base)
    assert not m.is_default({**base, "variant": "no relabel"})  # the unrelabelled twin of a pair
    assert not m.is_default({**base, "rows_from": "x"})  # a diagnosis on saved rows
    assert not m.is_default({**base, "schedule": {**base["schedule"], "chain": 5.0}})
    assert not m.is_default({**base, "schedule": {**base["schedule"], "share": 0.3}})
    assert not m.is_default({**base, "schedule": {"epochs": 150.0, "seed": 1.0}})  # no release route
    assert not m.is_default({**base, "policy": {}})  # no relabel
    finecur = {**base, "schedule": {**base["schedule"], "finecur": 1.0}}  # the default fine-tune since round 10
    assert m.is_default(finecur) and m.finetune(finecur["schedule"]) == m.FINECUR
    assert m.finetune(base["schedule"]) == m.PLAIN
    assert not m.is_default({**base, "schedule": {**base["schedule"], "finecur": 0.0}})
    # the state-action loss (round 14): asked for with cols=1, or resolved by the route and recorded on the line
    sa = {**finecur, "schedule": {**finecur["schedule"], "cols": 1.0}}
    assert m.is_default(sa) and m.finetune(sa["schedule"]) == m.FINECUR + m.STATE_ACTION
    assert m.finetune(finecur["schedule"], "state_action") == m.FINECUR + m.STATE_ACTION
    assert m.finetune(finecur["schedule"], "all") == m.FINECUR
    assert m.finetune({**finecur["schedule"], "cols": 0.0}) == m.FINECUR


def test_gap_over_releases_uses_release_means(tmp_path):
    m = _script()
    suite = tmp_path / "gap.cells.csv"
    suite.write_text("synthesizer,agent,seed,final_score,epsilon\n"
                     "real,iql,0,60,\nreal,iql,1,60,\nprivorl-n,iql,0,0,0.0\nprivorl-n,iql,1,0,0.0\n"
                     "privorl-n,iql,0,99,10.0\n")  # the suite's own DP row is not a default release: left out
    studies = tmp_path / "studies.jsonl"
    sched = {"epochs": 150.0, "route": 1.0}
    studies.write_text("\n".join(json.dumps(x) for x in [
        {"env": "hopper", "epsilon": 10.0, "schedule": {**sched, "seed": 1.0}, "policy": {"m": 1}, "iql_final": [30, 30, 30]},
        {"env": "hopper", "epsilon": 10.0, "schedule": {**sched, "seed": 2.0}, "policy": {"m": 1}, "iql_final": [60, 60, 60]},
        {"env": "hopper", "epsilon": 10.0, "schedule": {**sched, "seed": 2.0}, "policy": {"m": 1}, "variant": "x",
         "iql_final": [0, 0, 0]},
    ]) + "\n")
    rows = m.cells(studies, {"hopper": suite}, {})  # no ablation suite
    assert len(rows) == 4 + 6
    md, figures = m.table(rows)
    (f,) = figures
    assert f["per_release_gap"] == {1: 0.5, 2: 1.0}
    assert abs(f["gap"].point - 0.75) < 1e-12
    assert "| hopper | iql | 10 | dp | repair | 60.0 | 0.0 | 2 |" in md


def test_rolled_out_rows_count_as_the_rollout_option_under_their_release():
    """Route rows that rolled out at 100 steps, and a saved default release re-read with chain=100, count as the
    rollout option, under the release's own seed and ε; other horizons and non-default sources do not."""
    m = _script()
    src = {"env": "hopper", "epsilon": 1.0, "schedule": {"epochs": 150.0, "seed": 9.0, "route": 1.0, "share": 0.1},
           "policy": {"m": 1}, "postprocess": {"rows_kept": 5}}
    rolled = {**src, "schedule": {**src["schedule"], "seed": 20.0}, "postprocess": {"chain_horizon": 100}}
    reread = {"env": "hopper", "epsilon": 10.0, "rows_from": "hopper_20000_epochs150_seed9_route1_share0.1",
              "schedule": {"chain": 100.0}, "policy": {}}
    lines = [src, rolled, reread]
    assert m.configuration(src, lines) == (m.DEFAULT, src)
    assert m.configuration(rolled, lines) == (m.ROLLOUT, rolled)
    assert m.configuration(reread, lines) == (m.ROLLOUT, src)  # the source's seed 9 and ε = 1
    assert m.configuration({**rolled, "postprocess": {"chain_horizon": 5}}, lines) is None
    assert m.configuration({**reread, "schedule": {"chain": 5.0}}, lines) is None
    assert m.configuration({**reread, "rows_from": reread["rows_from"] + "_norelabel"}, lines) is None
    alone = {**reread, "rows_from": "hopper_20000_epochs150_seed4_route1_share0.1"}  # its own line not kept
    assert m.configuration(alone, lines) == (m.ROLLOUT, {"env": "hopper", "epsilon": 10.0, "schedule": {
        "epochs": 150.0, "seed": 4.0, "route": 1.0, "share": 0.1}})
    assert m.configuration({**alone, "rows_from": "hopper_20000_epochs150_seed4_route1_share0.3"}, lines) is None


def test_a_saved_release_given_agents_later_counts_under_its_own_fine_tune():
    """A saved default release re-read as it was (schedule: its own seed and finecur) counts as that release: under
    its source line if the studies hold it, else on its own, at the ε the re-read line records."""
    m = _script()
    name = "hopper_20000_epochs150_seed50_route1_finecur1"
    reread = {"env": "hopper", "epsilon": 10.0, "rows_from": name, "schedule": {"seed": 50.0, "finecur": 1.0}}
    post, release = m.configuration(reread, [reread])
    assert post == m.DEFAULT and release["epsilon"] == 10.0 and m.finetune(release["schedule"]) == m.FINECUR
    assert release["schedule"]["seed"] == 50.0
    src = {"env": "hopper", "epsilon": 1.0, "policy": {"m": 1},
           "schedule": {"epochs": 150.0, "seed": 50.0, "route": 1.0, "finecur": 1.0}}
    assert m.configuration(reread, [src, reread]) == (m.DEFAULT, src)
    assert m.configuration({**reread, "schedule": {"seed": 51.0, "finecur": 1.0}}, [reread]) is None  # not its seed
    assert m.configuration({**reread, "schedule": {"seed": 50.0}}, [reread]) is None  # not its fine-tune
    assert m.configuration({**reread, "epsilon": "path.npz"}, [reread]) is None  # no ε on record
    assert m.configuration({**reread, "rows_from": name + "_lora4"}, [reread]) is None  # not a default


def test_committed_table_is_up_to_date():
    assert _script().main(["--check"]) == 0


def test_paired_change_uses_releases_measured_both_ways():
    m = _script()
    figures = [{"env": "hopper", "agent": "iql", "epsilon": 10.0, "postprocess": m.ROLLOUT,
                "per_release_gap": {5: 0.5, 7: 0.7}},
               {"env": "hopper", "agent": "iql", "epsilon": 10.0, "postprocess": m.DEFAULT,
                "per_release_gap": {5: 0.1, 6: 0.9, 7: 0.3}}]
    (row,) = [line for line in m.paired(figures) if line.startswith("| hopper")]
    assert row == "| hopper | iql | 10 | dp | 2 | 0.20 | 0.60 | +0.40 |"  # seed 6 only one way: left out


def test_ablation_suite_default_releases_count_under_their_fine_tune(tmp_path):
    """The ablation suite's `default` and `finecur` releases count as default releases (repair, their fine-tune);
    its other variants, its real and public-alone cells do not; a study release with the same seed is refused."""
    m = _script()
    suite = tmp_path / "gap.cells.csv"
    suite.write_text("synthesizer,agent,seed,final_score,epsilon\nreal,iql,0,60,\nprivorl-n,iql,0,0,0.0\n")
    abl = tmp_path / "abl.cells.csv"
    abl.write_text("synthesizer,agent,seed,final_score,epsilon,variant,release\n"
                   "real,iql,0,60,,,\nprivorl-n,iql,0,0,0 (public only),,\n"
                   "privorl-n,iql,0,30,10.0,default,1.0\nprivorl-n,iql,0,45,10.0,finecur,1.0\n"
                   "privorl-n,iql,0,50,10.0,finecur,2.0\nprivorl-n,iql,0,12,10.0,no_pretrain,1.0\n")
    studies = tmp_path / "studies.jsonl"
    studies.write_text("")
    rows = m.cells(studies, {"hopper": suite}, {"hopper": abl})
    extra = [r for r in rows if r["round"] == "ablations"]
    assert [(r["finetune"], r["release_seed"], r["final_score"]) for r in extra] == [
        (m.PLAIN, 1, 30.0), (m.FINECUR, 1, 45.0), (m.FINECUR, 2, 50.0)]
    assert {r["postprocess"] for r in extra} == {m.DEFAULT}
    _md, figures = m.table(rows)
    assert {(f["finetune"], len(f["releases"])) for f in figures} == {(m.PLAIN, 1), (m.FINECUR, 2)}
    line = {"env": "hopper", "epsilon": 10.0, "schedule": {"epochs": 150.0, "route": 1.0, "seed": 2.0, "finecur": 1.0},
            "policy": {"m": 1}, "iql_final": [1.0]}
    studies.write_text(json.dumps(line) + "\n")
    with pytest.raises(ValueError, match="share seeds"):
        m.cells(studies, {"hopper": suite}, {"hopper": abl})
