"""``privsynth audit`` tests its result against the claimed ε (one-run bound on member/non-member pairs), and refuses
in one line what would give silent nonsense (shared records, another environment, too few units, bad paths)."""
from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.bench.sources import save_dataset, split_transitions
from privsynth.evaluation.mia.audit import check_disjoint, infer_split, withhold_unsupported
from privsynth.evaluation.mia.epsilon import (
    EpsilonTest,
    add_remove_lower_bound,
    assess_claim,
    best_possible_bound,
    epsilon_test,
    members_needed,
    pair_units,
)
from privsynth.privacy.audit import SEARCH_CAP, design_size_needed, epsilon_lower_bound

O, A = 2, 1
CARD = {"epsilon": 0.1, "delta": 1e-5, "unit": "transition", "accountant": "rdp", "private": True,
        "neighbouring_relation": "add/remove one transition"}


def walks(episodes: int, length: int, seed: int, env: str | None = "Toy-v0", name: str = "pool") -> OfflineDataset:
    """Random-walk episodes: each row's next observation is the next row's observation (as in real rollouts)."""
    rng = np.random.default_rng(seed)
    obs, nxt, act = [], [], []
    for _ in range(episodes):
        path = np.cumsum(rng.normal(size=(length + 1, O)), axis=0)
        obs.append(path[:-1]), nxt.append(path[1:]), act.append(rng.uniform(-1, 1, (length, A)))
    n = episodes * length
    timeouts = np.zeros(n, bool)
    timeouts[length - 1 :: length] = True
    return OfflineDataset(observations=np.concatenate(obs), actions=np.concatenate(act), rewards=rng.normal(size=n),
                          next_observations=np.concatenate(nxt), terminals=np.zeros(n, bool), timeouts=timeouts,
                          episode_ids=np.repeat(np.arange(episodes), length),
                          info=DatasetInfo(name=name, env_id=env))


def with_card(ds: OfflineDataset, card: dict | None, name: str = "release") -> OfflineDataset:
    return dataclasses.replace(ds, info=dataclasses.replace(ds.info, name=name, privacy_card=card))


def as_release(ds: OfflineDataset, card: dict | None) -> OfflineDataset:
    """A release of ``ds``'s rows (one transition per episode, as synthetic releases are)."""
    rows = ds.transition_matrix()
    return OfflineDataset.from_transition_matrix(rows, O, A, info=DatasetInfo(name="release", env_id=ds.info.env_id,
                                                                                privacy_card=card))


@pytest.fixture(scope="module")
def split():
    """A pool of 2,000 transitions split at random by transition (the unit of a transition-level card)."""
    return split_transitions(walks(40, 50, seed=0), 0.5, seed=1)


def _cli(tmp_path, capsys, release, members, non_members, *extra):
    from privsynth.cli import main

    paths = []
    for ds, name in ((release, "rel"), (members, "mem"), (non_members, "non")):
        save_dataset(ds, tmp_path / f"{name}.npz")
        paths.append(str(tmp_path / f"{name}.npz"))
    out = tmp_path / "audit.json"
    code = main(["audit", "membership", "--release", paths[0], "--members", paths[1], "--non-members", paths[2],
                 "--out", str(out), "--bootstrap", "0", "--overwrite", *extra])  # several audits per test
    printed = capsys.readouterr()
    return code, json.loads(out.read_text()) if out.exists() else None, printed


# -- the bound ---------------------------------------------------------------------------------------------------------
def test_pairs_are_fixed_by_the_counts_and_guesses_default_to_a_tenth():
    d = pair_units(800, 300, None, seed=0)
    assert d["pairs"] == 300 and d["k"] == 30 and len(set(d["members"])) == 300 and d["members"].max() < 800
    assert 0.35 < d["first_is_member"].mean() < 0.65
    again = pair_units(800, 300, None, seed=0)
    assert all(np.array_equal(d[k], again[k]) for k in ("members", "non_members", "first_is_member"))
    with pytest.raises(InvalidData, match="--guesses"):
        pair_units(800, 300, 151, seed=0)


def test_add_remove_bound_is_half_the_replace_one_bound_without_delta():
    for r, v in ((200, 200), (200, 180), (100, 90)):
        replace = epsilon_lower_bound(1000, r, v, 0.0)
        assert add_remove_lower_bound(1000, r, v, 0.0, 0.95) == pytest.approx(replace / 2, abs=1e-6)
    # with δ the group step costs (1 + e^ε)δ, so the add/remove bound is at most half the replace-one one
    assert add_remove_lower_bound(1000, 200, 200, 1e-3, 0.95) <= epsilon_lower_bound(1000, 200, 200, 1e-3) / 2
    assert add_remove_lower_bound(1000, 200, 100, 1e-5, 0.95) == 0.0


def test_unbalanced_split_without_leak_gives_no_bound_and_a_perfect_attack_the_cap():
    """800 members vs 200 non-members (an 80/20 split): independent scores must not look like a leak."""
    test = EpsilonTest(epsilon=0.01, delta=1e-5)
    design = pair_units(800, 200, None, seed=3)
    hits = 0
    for rep in range(150):
        rng = np.random.default_rng(rep)
        res = epsilon_test(rng.normal(size=800), rng.normal(size=200), design, test)
        hits += res["exceeds_claim"]
    assert hits <= 0.08 * 150  # about 5% false alarms (4.7% over 2,000 draws), whatever the imbalance
    perfect = epsilon_test(np.full(800, 5.0) + np.arange(800) * 1e-6, np.zeros(200), design, test)
    assert perfect["correct"] == perfect["guesses"] == 40
    assert perfect["epsilon_lower_bound"] == pytest.approx(perfect["max_bound"]) and perfect["exceeds_claim"]


def test_the_verdict_needs_a_comparable_card():
    bounds = {"data-only": {"attacks": {"dcr": {"epsilon_test": {
        "epsilon_lower_bound": 1.5, "correct": 20, "guesses": 20, "pairs": 100, "max_bound": 1.5}}}}}
    assert assess_claim(CARD, "transition", None, bounds)["status"] == "violation"
    assert "VIOLATION" in assess_claim(CARD, "transition", None, bounds)["line"]
    traj = assess_claim(CARD, "trajectory", None, bounds)
    assert traj["status"] == "not_applicable" and "about transitions" in traj["notes"][0]
    by_episode = assess_claim(CARD, "transition", {"by": "episode", "evidence": "x"}, bounds)
    assert by_episode["status"] == "not_applicable" and "split by episode" in by_episode["notes"][0]
    assert assess_claim({}, "transition", None, bounds)["line"] == \
        "not a DP release (no privacy card): no claimed ε to test"
    # a design capped at 1.5 cannot test a claim of 2: uninformative, not "consistent" (issue 36)
    assert assess_claim({**CARD, "epsilon": 2.0}, "transition", None, bounds)["status"] == "uninformative"
    bounds["data-only"]["attacks"]["dcr"]["epsilon_test"]["max_bound"] = 2.5
    assert assess_claim({**CARD, "epsilon": 2.0}, "transition", None, bounds)["status"] == "consistent"


# -- the CLI: known answers ------------------------------------------------------------------------------------------
def test_release_of_the_members_is_a_violation_exit_1(tmp_path, capsys, split):
    members, non_members = split
    code, res, printed = _cli(tmp_path, capsys, as_release(members, CARD), members, non_members)
    assert code == 1
    ea = res["epsilon_audit"]
    assert ea["status"] == "violation" and ea["claimed_epsilon"] == 0.1
    t = res["data_only"]["attacks"]["dcr"]["epsilon_test"]
    assert t["pairs"] == 1000 and t["guesses"] == 200 and t["correct"] == 200 and t["epsilon_lower_bound"] > 1.5
    assert sum("VIOLATION" in line for line in printed.out.splitlines()) == 1
    md = (tmp_path / "audit.md").read_text()
    assert sum("VIOLATION" in line for line in md.splitlines()) == 1 and "Assumption" in md
    assert "not covered" in md or "does not cover" in md  # the report itself is not DP


def test_release_independent_of_the_members_is_consistent_exit_0(tmp_path, capsys, split):
    members, non_members = split
    fresh = walks(40, 50, seed=9)
    code, res, printed = _cli(tmp_path, capsys, as_release(fresh, CARD), members, non_members)
    assert code == 0 and res["epsilon_audit"]["status"] == "consistent"
    assert "VIOLATION" not in printed.out and "VIOLATION" not in (tmp_path / "audit.md").read_text()
    assert res["data_only"]["attacks"]["dcr"]["epsilon_test"]["epsilon_lower_bound"] <= 0.1


# -- an audit that cannot refute the claim does not say "consistent" (issue 36) --------------------------------------
def test_verbatim_copy_carded_at_eps_8_is_uninformative_exit_3(tmp_path, capsys, split):
    """The members verbatim as the release: every guess right, bound 1.98, which can never refute ε = 8."""
    members, non_members = split
    code, res, printed = _cli(tmp_path, capsys, as_release(members, {**CARD, "epsilon": 8.0}), members, non_members)
    assert code == 3
    ea = res["epsilon_audit"]
    t = res["data_only"]["attacks"]["dcr"]["epsilon_test"]
    assert t["correct"] == t["guesses"] == 200 and t["epsilon_lower_bound"] == pytest.approx(1.98, abs=0.01)
    assert ea["status"] == "uninformative" and ea["best_possible_bound"] == pytest.approx(1.98, abs=0.01)
    # at δ = 1e-5 the δ term grows with the pairs: no design up to the cap refutes ε = 8
    assert ea["members_needed"] == {"units": None, "guesses_per_side": None, "more_than": SEARCH_CAP}
    line = [s for s in printed.out.splitlines() if s.startswith("uninformative")]
    assert len(line) == 1 and "more than 1,000,000 members" in line[0] and "at most ε ≥ 1.98" in line[0]
    assert "consistent" not in printed.out and "VIOLATION" not in printed.out
    assert "**uninformative" in (tmp_path / "audit.md").read_text()


def test_leaky_release_carded_at_eps_1_is_still_a_violation(tmp_path, capsys, split):
    members, non_members = split
    code, res, printed = _cli(tmp_path, capsys, as_release(members, {**CARD, "epsilon": 1.0}), members, non_members)
    ea = res["epsilon_audit"]
    assert code == 1 and ea["status"] == "violation" and printed.out.count("VIOLATION") == 1
    assert ea["best_possible_bound"] == pytest.approx(1.98, abs=0.01) and ea["members_needed"] is None


def test_release_independent_of_the_members_is_consistent_where_the_design_can_test(tmp_path, capsys, split):
    members, non_members = split
    fresh = walks(40, 50, seed=9)
    code, res, printed = _cli(tmp_path, capsys, as_release(fresh, {**CARD, "epsilon": 1.0}), members, non_members)
    ea = res["epsilon_audit"]
    assert code == 0 and ea["status"] == "consistent" and ea["best_possible_bound"] > 1.0
    assert ea["members_needed"] is None and "could have shown ε ≥ 1.98" in printed.out
    # the same release scored on 100 pairs (best possible 0.91) cannot test ε = 1
    code, res, printed = _cli(tmp_path, capsys, as_release(fresh, {**CARD, "epsilon": 1.0}), members, non_members,
                              "--max-units", "100")
    assert code == 3 and res["epsilon_audit"]["status"] == "uninformative"


def test_members_needed_is_the_smallest_design_whose_best_bound_exceeds_the_claim(tmp_path, capsys, split):
    """200 pairs cannot test ε = 1.5 (best bound 1.21); the figure the report gives can, and one fewer cannot."""
    members, non_members = split
    card = {**CARD, "epsilon": 1.5}
    code, res, printed = _cli(tmp_path, capsys, as_release(members, card), members, non_members, "--max-units", "200")
    ea = res["epsilon_audit"]
    assert code == 3 and ea["status"] == "uninformative" and ea["best_possible_bound"] < 1.5
    need = ea["members_needed"]
    n, k = need["units"], need["guesses_per_side"]
    assert n == 330 and k == 33 and need["more_than"] is None
    assert "needs 330 members and as many non-members (66 guesses), scored with --max-units 330" in printed.out
    test = EpsilonTest(epsilon=1.5, delta=1e-5)  # one attack at 95%, the card's add/remove relation
    assert best_possible_bound(n, n // 10, test) > 1.5 >= best_possible_bound(n - 1, (n - 1) // 10, test)
    # the audit at that size is informative: the verbatim copy is now refuted
    code, res, _ = _cli(tmp_path, capsys, as_release(members, card), members, non_members, "--max-units", str(n))
    assert code == 1 and res["epsilon_audit"]["status"] == "violation"


def test_design_size_search_matches_a_scan_of_the_bound_function():
    for eps, relation, delta, pairs, k in ((2.05, "add/remove", 1e-5, 1000, 100), (0.5, "add/remove", 1e-5, 1000, 100),
                                            (4.0, "replace-one", 1e-5, 1000, 100), (3.0, "add/remove", 0.0, 1000, 100),
                                            (1.0, "add/remove", 1e-5, 1000, 25)):
        test = EpsilonTest(epsilon=eps, delta=delta, relation=relation)
        need = members_needed(test, pairs, k)

        def best(n):
            return best_possible_bound(n, n * k // pairs, test) if n * k // pairs else 0.0

        n = need["units"]
        assert need["guesses_per_side"] == n * k // pairs and best(n) > eps
        assert all(best(m) <= eps for m in range(max(1, n - 60), n)), (eps, relation, n)
    assert members_needed(EpsilonTest(epsilon=3.0, delta=1e-5), 1000, 100)["more_than"] == SEARCH_CAP
    assert design_size_needed(lambda n, k: k >= 7, units=100, guesses=10) == \
        {"units": 70, "guesses_per_side": 7, "more_than": None}
    with pytest.raises(ValueError):
        design_size_needed(lambda n, k: True, units=10, guesses=6)


def test_split_by_episode_gives_no_transition_level_verdict_but_a_trajectory_level_one(tmp_path, capsys):
    members, non_members = walks(60, 10, seed=0).split_episodes(0.5, seed=2)
    assert infer_split(members, non_members)["by"] == "episode"
    code, res, printed = _cli(tmp_path, capsys, as_release(members, CARD), members, non_members, "--max-units", "200")
    assert code == 0 and res["epsilon_audit"]["status"] == "not_applicable"
    assert "split by episode" in printed.out and "VIOLATION" not in printed.out
    traj_card = {**CARD, "unit": "trajectory", "neighbouring_relation": "add/remove one trajectory"}
    rel = with_card(members, traj_card)
    code, res, _ = _cli(tmp_path, capsys, rel, members, non_members, "--unit", "trajectory")
    assert code == 1 and res["epsilon_audit"]["status"] == "violation"
    # a transition-level card audited per trajectory: a note, no verdict
    code, res, printed = _cli(tmp_path, capsys, with_card(members, CARD), members, non_members, "--unit", "trajectory")
    assert code == 0 and "guarantee is about transitions" in printed.out
    assert "trajectorys" not in printed.out and "trajectories" in printed.out


def test_a_release_without_card_says_so(tmp_path, capsys, split):
    members, non_members = split
    code, res, printed = _cli(tmp_path, capsys, as_release(members, None), members, non_members)
    line = "not a DP release (no privacy card): no claimed ε to test"
    assert code == 0 and line in printed.out and line in (tmp_path / "audit.md").read_text()


def test_too_few_non_members_report_tpr_as_not_available(tmp_path, capsys, split):
    members, non_members = split
    code, res, printed = _cli(tmp_path, capsys, as_release(members, CARD), members, non_members, "--max-units", "50")
    t = res["data_only"]["attacks"]["dcr"]
    assert t["tpr_at_fpr"]["0.001"] is None and t["tpr_at_fpr"]["0.01"] is None and t["tpr_at_fpr"]["0.1"] == 1.0
    assert "1000" in t["not_available"]["0.001"] and "n/a" in printed.out
    assert "n/a: needs ≥ 1000 non-members" in (tmp_path / "audit.md").read_text()
    r = withhold_unsupported({"attacks": {"a": {"n_non_members": 1000, "tpr_at_fpr": {"0.001": 0.2}}}})
    assert r["attacks"]["a"]["tpr_at_fpr"]["0.001"] == 0.2


def test_export_format_npz_is_accepted(tmp_path, capsys, split):
    from privsynth.cli import main
    from privsynth.data import minari_io

    members, non_members = split
    minari_io.write_dataset(members, "toy/mem-v0")
    minari_io.write_dataset(non_members, "toy/non-v0")
    assert main(["datasets", "export", "toy/mem-v0", str(tmp_path / "m.npz")]) == 0
    assert main(["datasets", "export", "toy/non-v0", str(tmp_path / "n.npz")]) == 0
    save_dataset(as_release(members, CARD), tmp_path / "rel.npz")
    capsys.readouterr()
    assert main(["audit", "membership", "--release", str(tmp_path / "rel.npz"), "--members", str(tmp_path / "m.npz"),
                 "--non-members", str(tmp_path / "n.npz"), "--out", str(tmp_path / "a.json"),
                 "--bootstrap", "0"]) == 1
    assert json.loads((tmp_path / "a.json").read_text())["data_only"]["attacks"]["dcr"]["n_members"] == 1000


# -- one-line refusals ------------------------------------------------------------------------------------------------
def _refused(capsys, argv, match):
    from privsynth.cli import main

    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert match in err and "\n" not in err and "Traceback" not in err, err


def test_bad_requests_are_one_line_errors_before_any_data_is_read(tmp_path, capsys, split):
    members, non_members = split
    for ds, name in ((as_release(members, CARD), "rel"), (members, "mem"), (non_members, "non")):
        save_dataset(ds, tmp_path / f"{name}.npz")
    base = ["audit", "membership", "--release", str(tmp_path / "rel.npz"), "--members", str(tmp_path / "mem.npz"),
            "--non-members", str(tmp_path / "non.npz")]
    out = ["--out", str(tmp_path / "a.json")]
    (tmp_path / "afile").write_text("")
    _refused(capsys, base + ["--out", str(tmp_path / "afile" / "a.json")], "is a file, not a directory")
    _refused(capsys, base + ["--out", str(tmp_path / "a.md")], "give a .json path")
    _refused(capsys, base + out + ["--report", str(tmp_path / "a.json")], "same file")
    _refused(capsys, base + out + ["--max-units", "0"], "--max-units must be at least 1")
    _refused(capsys, base + out + ["--bootstrap", "-1"], "--bootstrap must be 0")
    _refused(capsys, base + out + ["--guesses", "0"], "--guesses must be at least 1")
    _refused(capsys, base + out + ["--guesses", "501"], "--guesses must be between 1 and half")
    mode = ["audit", "membership", "--release", str(tmp_path / "rel.npz")]
    _refused(capsys, mode + ["--members", str(tmp_path / "missing.npz"), "--non-members", str(tmp_path / "non.npz")]
             + out, "file not found")
    _refused(capsys, mode + ["--members", str(tmp_path / "mem.npz"), "--non-members", str(tmp_path / "mem.npz")]
             + out, "same dataset")
    # canary requests
    _refused(capsys, ["audit", "canary", "--canaries", "-5"] + out, "--canaries must be at least 2")
    canary = ["audit", "canary", "--canaries", "50", "--sensitive", "x/y-v0"]
    _refused(capsys, canary + ["--public", "x/p-v0", "--epsilon", "0"] + out, "--epsilon must be a positive")
    _refused(capsys, canary + ["--pretrained", "pointmaze-umaze"] + out, "--canaries needs --public")
    assert not (tmp_path / "a.json").exists()


def test_sets_that_share_records_or_environments_are_refused(tmp_path, capsys, split):
    members, non_members = split
    save_dataset(as_release(members, CARD), tmp_path / "rel.npz")
    save_dataset(members, tmp_path / "mem.npz")
    save_dataset(dataclasses.replace(members, info=dataclasses.replace(members.info, name="copy")),
                 tmp_path / "copy.npz")
    other_env = walks(10, 50, seed=5, env="Other-v0")
    save_dataset(other_env, tmp_path / "other.npz")
    out = ["--out", str(tmp_path / "a.json")]
    rel = ["audit", "membership", "--release", str(tmp_path / "rel.npz"), "--members", str(tmp_path / "mem.npz")]
    _refused(capsys, rel + ["--non-members", str(tmp_path / "copy.npz")] + out, "share 1000 of the 1000")
    _refused(capsys, rel + ["--non-members", str(tmp_path / "other.npz")] + out, "Other-v0")
    save_dataset(non_members, tmp_path / "non.npz")
    _refused(capsys, rel + ["--non-members", str(tmp_path / "non.npz"), "--reference", str(tmp_path / "non.npz")]
             + out, "reference data hold")
    # discrete data: equal rows by chance are not refused, a contained set is
    rows = np.random.default_rng(0).integers(0, 2, size=(200, 6)).astype(float)
    check_disjoint(rows[:100], rows[100:])
    with pytest.raises(InvalidData, match="share"):
        check_disjoint(rows, rows[:50])


def test_roc_plot_draws_the_claimed_guarantee(tmp_path):
    from privsynth.evaluation.mia import plot_roc

    rng = np.random.default_rng(0)
    from privsynth.evaluation.mia.audit import summarise_scores

    att = summarise_scores(rng.normal(1, 1, 200), rng.normal(0, 1, 200), {}, 0.0)
    plot_roc({"attacks": {"dcr": att}}, str(tmp_path / "r.png"), title="MIA audit of " + "x" * 120,
             dp_bound=(0.1, 1e-5))
    assert (tmp_path / "r.png").stat().st_size > 1000
    assert math.isfinite(att["auc"])
