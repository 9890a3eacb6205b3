"""The gap-closed table of the transfer suites (privsynth/evaluation/bench/gap.py, docs/transfer.md)."""
from __future__ import annotations

import numpy as np
import pytest

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.gap import gap_closed, gap_table
from privsynth.evaluation.bench.tables import records_frame


def test_point_estimate_is_the_share_of_the_gap():
    res = gap_closed([50.0, 52.0, 54.0], [2.0, 4.0, 6.0], [40.0, 42.0, 44.0])
    assert res.discriminating and res.gap == pytest.approx(48.0)
    assert res.point == pytest.approx((42.0 - 4.0) / 48.0)


def test_interval_is_the_seeded_percentile_bootstrap_over_seeds():
    real, public, dp = [50.0, 58.0, 54.0], [2.0, 9.0, 4.0], [30.0, 47.0, 41.0]
    res = gap_closed(real, public, dp, resamples=2000, seed=3)
    # the same resampling, written out: each group's seeds drawn with replacement, independently, in this order
    rng = np.random.default_rng(3)
    means = [np.asarray(x)[rng.integers(0, 3, size=(2000, 3))].mean(axis=1) for x in (real, public, dp)]
    ratios = (means[2] - means[1]) / (means[0] - means[1])
    assert (res.low, res.high) == pytest.approx(tuple(np.percentile(ratios, [2.5, 97.5])))
    assert res.low < res.point < res.high
    assert gap_closed(real, public, dp, resamples=2000, seed=3) == res  # seeded: the same interval again
    assert gap_closed(real, public, dp, resamples=2000, seed=4) != res


def test_constant_seeds_give_a_zero_width_interval():
    res = gap_closed([60.0] * 3, [10.0] * 3, [35.0] * 3)
    assert (res.point, res.low, res.high) == pytest.approx((0.5, 0.5, 0.5))


def test_gap_under_min_gap_is_non_discriminating():
    res = gap_closed([25.0, 26.0, 27.0], [8.0, 7.0, 9.0], [20.0, 21.0, 22.0])  # gap 18 < 20
    assert not res.discriminating and res.gap == pytest.approx(18.0)
    assert res.point is None and res.low is None and res.high is None
    assert gap_closed([25.0, 26.0, 27.0], [8.0, 7.0, 9.0], [20.0], min_gap=15.0).discriminating


def test_real_equal_to_public_is_non_discriminating_without_dividing():
    res = gap_closed([30.0, 30.0], [30.0, 30.0], [40.0, 45.0])
    assert not res.discriminating and res.gap == 0.0 and res.point is None
    res = gap_closed([30.0, 30.0], [30.0, 30.0], [40.0], min_gap=0.0)  # even at min_gap 0: no 0 / 0
    assert not res.discriminating and res.point is None
    assert not gap_closed([20.0], [30.0], [40.0], min_gap=-50.0).discriminating  # public ahead of real


def test_bad_inputs_are_refused():
    with pytest.raises(InvalidData, match="no finite real"):
        gap_closed([], [1.0], [2.0])
    with pytest.raises(InvalidData, match="resamples"):
        gap_closed([50.0], [1.0], [2.0], resamples=0)


def _records(real, public, nodp, dp10, dp1, agent="iql"):
    recs, i = [], 0
    for eps, synth, scores in ((None, "real", real), (0.0, "privorl-n", public), (None, "privorl-n", nodp),
                               (10.0, "privorl-n", dp10), (1.0, "privorl-n", dp1)):
        for seed, s in enumerate(scores):
            params = {"synthesizer": synth, "agent": agent, "seed": seed}
            if synth != "real":
                params["epsilon"] = eps
            recs.append({"id": f"agent-{i}", "params": params, "result": {"final_score": s}, "seconds": 1.0})
            i += 1
    return recs


SPEC = {"name": "gap", "type": "gap_closed", "kind": "agent", "value": "final_score", "by": "agent",
        "resamples": 500, "seed": 0, "min_gap": 20.0, "digits": 1}


def test_gap_table_puts_the_rows_side_by_side_per_agent_and_epsilon():
    recs = _records([54.0, 55.0, 53.0], [3.0, 4.0, 3.0], [17.0, 18.0, 19.0], [46.0, 47.0, 48.0], [30.0, 31.0, 29.0])
    recs += _records([20.0, 21.0, 22.0], [4.0, 5.0, 6.0], [9.0, 9.0, 9.0], [10.0, 11.0, 12.0], [5.0, 6.0, 7.0], "td3bc")
    table = gap_table(records_frame(recs), SPEC)
    assert list(table.columns) == ["agent", "epsilon", "real", "public alone", "no DP", "DP", "real − public",
                                   "gap closed", "no-DP gap closed"]
    assert [(r.agent, r.epsilon) for r in table.itertuples()] == [("iql", 10.0), ("iql", 1.0), ("td3bc", 10.0),
                                                                  ("td3bc", 1.0)]
    iql10 = table.iloc[0]
    assert iql10["real"] == "54.0 ± 1.0 (n=3)" and iql10["public alone"] == "3.3 ± 0.6 (n=3)"
    assert iql10["real − public"] == "50.7"
    point = (47.0 - 10.0 / 3) / (54.0 - 10.0 / 3)
    assert iql10["gap closed"].startswith(f"{point:.2f} [") and iql10["gap closed"].endswith("(95%)")
    assert iql10["no-DP gap closed"].startswith(f"{(18.0 - 10.0 / 3) / (54.0 - 10.0 / 3):.2f} [")
    td3 = table[table.agent == "td3bc"]
    assert all(v.startswith("non-discriminating (real − public = 16.0 < 20)") for v in td3["gap closed"])
    assert all(v.startswith("non-discriminating") for v in td3["no-DP gap closed"])


def test_cells_csv_frame_has_numeric_epsilon_even_with_only_real_cells():
    from privsynth.evaluation.bench.gap import numeric_epsilon

    only_real = numeric_epsilon(records_frame(_records([54.0, 55.0], [], [], [], [])))
    assert "epsilon" in only_real.columns and only_real["epsilon"].isna().all()
    mixed = numeric_epsilon(records_frame(_records([54.0], [3.0], [17.0], [46.0], [30.0])))
    assert [None if e is None or e != e else e for e in mixed["epsilon"]] == [None, 0.0, None, 10.0, 1.0]


def test_gap_table_with_rows_missing_says_so_rather_than_failing():
    recs = _records([54.0, 55.0], [3.0, 4.0], [], [], [])
    table = gap_table(records_frame(recs), SPEC)
    assert len(table) == 1 and table.iloc[0]["epsilon"] == "–" and table.iloc[0]["gap closed"] == "–"
    with pytest.raises(InvalidData, match="unknown key"):
        gap_table(records_frame(recs), {**SPEC, "valu": "x"})


SUITE = """
name: gapsuite
stages:
  - name: real
    kind: echo
    grid: {agent: [iql], final_score: [50.0, 54.0, 58.0]}
    params: {synthesizer: real}
  - name: public
    kind: echo
    grid: {agent: [iql], final_score: [2.0, 4.0, 6.0]}
    params: {synthesizer: privorl-n, epsilon: 0.0}
  - name: nodp
    kind: echo
    grid: {agent: [iql], final_score: [20.0, 22.0]}
    params: {synthesizer: privorl-n, epsilon: null}
  - name: dp
    kind: echo
    grid: {agent: [iql], final_score: [40.0, 44.0, 48.0]}
    params: {synthesizer: privorl-n, epsilon: 10.0}
tables:
  - {name: gap, type: gap_closed, kind: echo, value: final_score, by: agent, resamples: 300, seed: 1, min_gap: 20.0}
"""


def test_suite_writes_the_gap_table_and_tables_only_rebuilds_it(tmp_path, capsys):
    from privsynth.cli import main

    (tmp_path / "gapsuite.yaml").write_text(SUITE)
    args = ["bench", str(tmp_path / "gapsuite.yaml"), "--results-dir", str(tmp_path / "results"), "--no-progress"]
    assert main(args) == 0
    md_path = tmp_path / "results" / "gapsuite" / "tables" / "gap.md"
    md = md_path.read_text()
    header = "| agent | epsilon | real | public alone | no DP | DP | real − public | gap closed | no-DP gap closed |"
    assert header in md
    row = "| iql | 10.0 | 54.0 ± 4.0 (n=3) | 4.0 ± 2.0 (n=3) | 21.0 ± 1.4 (n=2) | 44.0 ± 4.0 (n=3) | 50.0 | 0.80 ["
    assert row in md
    assert (md_path.with_suffix(".html")).exists() and (md_path.parent / "gap.cells.csv").exists()
    import pandas as pd

    cells = pd.read_csv(md_path.parent / "gap.cells.csv")
    assert {"synthesizer", "epsilon", "agent", "final_score"} <= set(cells.columns)
    by_eps = {synth: sorted(g["epsilon"].fillna(-1).tolist()) for synth, g in cells.groupby("synthesizer")}
    assert by_eps == {"real": [-1, -1, -1], "privorl-n": [-1, -1, 0.0, 0.0, 0.0, 10.0, 10.0, 10.0]}
    md_path.unlink()
    assert main(args + ["--tables-only"]) == 0
    assert md_path.read_text() == md  # seeded: the same intervals again
    capsys.readouterr()
