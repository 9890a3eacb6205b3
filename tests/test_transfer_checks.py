"""scripts/transfer_checks.py: which release lines it pools, the within-group correlation, the committed file."""
from __future__ import annotations

from conftest import load_script


def _script():
    return load_script("transfer_checks")


def _line(seed: float, r2: float, gap: float, eps: float = 10.0, **extra) -> dict:
    return {"env": "hopper", "epsilon": eps, "schedule": {"epochs": 150.0, "seed": seed, "route": 1.0},
            "policy": {"m": 1}, "checks": {"policy_r2": r2, "coverage_jaccard": 0.7, "reward_mean": 3.0 + seed,
                                           "terminal_rate": 0.01 * seed},
            "iql_gap_closed": gap, **extra}


def test_groups_keep_default_releases_once_and_correlate_within_groups():
    m = _script()
    lines = [_line(s, r2, g) for s, r2, g in [(1, 0.5, 0.2), (2, 0.6, 0.4), (3, 0.7, 0.6), (4, 0.8, 0.8)]]
    lines += [_line(s, r2, g, eps=1.0) for s, r2, g in [(5, 0.5, 0.9), (6, 0.6, 0.7), (7, 0.7, 0.5), (8, 0.8, 0.3)]]
    lines.append({**_line(1, 0.9, 0.0), "variant": "no relabel"})  # not a default release
    # release 1 re-read as it was, with agents given later: the same release, counted once (its first line's checks)
    lines.append({**_line(1, 0.1, 0.0), "schedule": {"seed": 1.0}, "rows_from": "hopper_20000_epochs150_seed1_route1"})
    lines.append({**_line(9, 0.9, 0.0), "schedule": {"epochs": 30.0, "seed": 9.0, "route": 1.0}})  # not a default
    by = m.groups(lines)
    assert sorted(len(v) for v in by.values()) == [4, 4]
    rows, pooled = m.correlations(by)
    per = {key[2]: p for key, _, p in rows}
    assert abs(per[10.0]["policy_r2"] - 1.0) < 1e-9 and abs(per[1.0]["policy_r2"] + 1.0) < 1e-9
    assert per[10.0]["coverage_jaccard"] is None  # a constant check has no correlation
    r, n = pooled["policy_r2"]
    assert n == 8 and abs(r) < 1e-9  # +1 in one group, -1 in the other: the groups' levels do not count
    assert "| pooled within groups |" in m.render(rows, pooled)


def test_small_groups_give_no_correlation():
    m = _script()
    rows, pooled = m.correlations(m.groups([_line(s, 0.1 * s, 0.1 * s) for s in (1, 2, 3)]))
    assert rows == [] and pooled["policy_r2"] == (None, 0)


def test_committed_checks_are_up_to_date():
    assert _script().main(["--check"]) == 0
