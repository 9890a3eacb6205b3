"""Data-only membership inference on a release: each attack on a toy case whose answer is known, the CLI, the report."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia import (
    CalibratedDCRAttack,
    DCRAttack,
    DOMIASAttack,
    TrajectoryScore,
    bootstrap_intervals,
    make_data_attack,
    run_data_audit,
)
from privsynth.evaluation.mia.data_attacks import gaussian_kde_logpdf, nearest_distance

D = 5


def rows(n, seed, scale=1.0):
    return np.random.default_rng(seed).normal(size=(n, D)) * scale


@pytest.fixture(scope="module")
def population():
    """Members, non-members and reference rows: three independent draws of one Gaussian population."""
    return rows(200, 1), rows(400, 2), rows(2000, 3)


def leaky_release(members, seed=4, copies=1, jitter=0.02):
    """A release that memorised its members: ``copies`` near-copies of each mixed into fresh population rows."""
    rng = np.random.default_rng(seed)
    near = np.repeat(members, copies, axis=0)
    near = near + jitter * rng.normal(size=near.shape)
    return np.concatenate([rows(2000, seed + 1), near])


# -- known answers -----------------------------------------------------------------------------------------------------
def test_nearest_distance_and_kde_match_brute_force():
    q, p = rows(7, 10), rows(50, 11)
    brute = np.sqrt(((q[:, None, :] - p[None]) ** 2).sum(-1)).min(1)
    assert np.allclose(nearest_distance(q, p), brute)
    h = 0.7
    dens = np.exp(-((q[:, None, :] - p[None]) ** 2).sum(-1) / (2 * h**2)).mean(1) / (2 * np.pi * h**2) ** (D / 2)
    assert np.allclose(gaussian_kde_logpdf(q, p, h), np.log(dens))
    # 1-d, Scott's bandwidth on unit-variance data: scipy's gaussian_kde gives the same density
    from scipy.stats import gaussian_kde

    x = np.random.default_rng(0).normal(size=300)
    x = (x - x.mean()) / x.std(ddof=1)
    grid = np.linspace(-2, 2, 9)
    assert np.allclose(gaussian_kde_logpdf(grid[:, None], x[:, None]), gaussian_kde(x).logpdf(grid), rtol=1e-8)


# one near-copy per member: the nearest-record attacks see it at once; a smooth KDE (Scott's bandwidth) sees one
# extra point per member only partly, DOMIAS needs over-density (next test)
@pytest.mark.parametrize("attack,auc,tpr", [(DCRAttack(), 0.95, 0.8), (CalibratedDCRAttack(), 0.95, 0.8),
                                            (DOMIASAttack(), 0.7, 0.03)])
def test_memorising_release_is_caught(population, attack, auc, tpr):
    members, non_members, reference = population
    res = run_data_audit(leaky_release(members), members, non_members, [attack], reference=reference, n_boot=50)
    att = res["attacks"][attack.name]
    assert att["auc"] > auc and att["tpr_at_fpr"]["0.01"] > tpr


@pytest.mark.parametrize("attack", [DCRAttack(), CalibratedDCRAttack(), DOMIASAttack()])
def test_release_independent_of_members_is_chance(population, attack):
    members, non_members, reference = population
    res = run_data_audit(rows(2000, 20), members, non_members, [attack], reference=reference, n_boot=200)
    att = res["attacks"][attack.name]
    assert abs(att["auc"] - 0.5) < 0.08
    lo, hi = att["ci"]["auc"]
    assert lo < 0.5 < hi or abs(att["auc"] - 0.5) < 0.05


def test_calibration_removes_density_confound():
    """Members sit in a dense region and the release is an honest draw of the population: plain DCR is fooled
    (members are closer to everything), the reference-calibrated scores are not."""
    rng = np.random.default_rng(0)
    population = lambda n, s: np.random.default_rng(s).normal(size=(n, D)) * np.where(  # noqa: E731
        np.random.default_rng(s + 100).random((n, 1)) < 0.5, 0.3, 3.0)
    release, reference = population(3000, 1), population(3000, 2)
    members = rng.normal(size=(200, D)) * 0.3  # from the dense component
    non_members = np.concatenate([rng.normal(size=(200, D)) * 0.3, rng.normal(size=(200, D)) * 3.0])
    auc = {}
    for attack in (DCRAttack(), CalibratedDCRAttack(), DOMIASAttack()):
        auc[attack.name] = run_data_audit(release, members, non_members, [attack], reference=reference,
                                          n_boot=0)["attacks"][attack.name]["auc"]
    assert auc["dcr"] > 0.7
    assert abs(auc["dcr_ref"] - 0.5) < 0.1 and abs(auc["domias"] - 0.5) < 0.1


def test_domias_sees_local_overdensity_dcr_ref_agrees():
    """Over-density at the members (several noisy copies each) is what DOMIAS' ratio measures."""
    members, non_members, reference = rows(100, 1), rows(300, 2), rows(3000, 3)
    release = leaky_release(members, copies=5, jitter=0.3)
    res = run_data_audit(release, members, non_members, [DOMIASAttack(), CalibratedDCRAttack()], reference=reference,
                         n_boot=0)
    assert res["attacks"]["domias"]["auc"] > 0.7 and res["attacks"]["dcr_ref"]["auc"] > 0.7


def test_trajectory_score_averages_episodes_and_aggregates_signal():
    ds = make_toy_dataset(lengths=(5, 3, 7), obs_dim=1, act_dim=1)
    attack = DCRAttack().fit(make_toy_dataset(lengths=(20,), obs_dim=1, act_dim=1, seed=9))
    per_row = attack.score(ds)
    traj = TrajectoryScore(DCRAttack()).fit(make_toy_dataset(lengths=(20,), obs_dim=1, act_dim=1, seed=9))
    assert np.allclose(traj.score(ds), [per_row[:5].mean(), per_row[5:8].mean(), per_row[8:].mean()])
    assert np.allclose(TrajectoryScore(attack, reduce="sum").score(ds)[1], per_row[5:8].sum())
    with pytest.raises(InvalidData, match="OfflineDataset"):
        traj.score(np.zeros((3, ds.transition_dim)))


def _as_dataset(matrix, episode_len, name):
    n = matrix.shape[0]
    return OfflineDataset(observations=matrix[:, :2], actions=matrix[:, 2:3], rewards=matrix[:, 3],
                          next_observations=matrix[:, 4:6], terminals=np.zeros(n, bool), timeouts=np.zeros(n, bool),
                          episode_ids=np.arange(n) // episode_len, info=DatasetInfo(name=name))


def test_trajectory_unit_beats_transition_unit_on_weak_per_row_leak():
    """Each member episode leaks a little in every row (a few of its rows are copied): per episode the evidence adds up."""
    rng = np.random.default_rng(0)
    mem = rng.normal(size=(40 * 10, 7)).astype(np.float32)
    mem[:, 6] = 0
    non = rng.normal(size=(40 * 10, 7)).astype(np.float32)
    non[:, 6] = 0
    pool = rng.normal(size=(4000, 7)).astype(np.float32)
    pool[:, 6] = 0
    copied = mem[rng.random(mem.shape[0]) < 0.3] + 0.05 * rng.normal(size=(1, 7)).astype(np.float32)
    copied[:, 6] = 0
    release = np.concatenate([pool, copied])
    members, non_members = _as_dataset(mem, 10, "m"), _as_dataset(non, 10, "n")
    per_tr = run_data_audit(release, members, non_members, [make_data_attack("dcr")], n_boot=0)["attacks"]["dcr"]
    per_ep = run_data_audit(release, members, non_members, [make_data_attack("dcr", "trajectory")], unit="trajectory",
                            n_boot=0)["attacks"]["dcr_traj"]
    assert per_ep["n_members"] == 40 and per_tr["n_members"] == 400
    assert per_ep["auc"] > per_tr["auc"] and per_ep["auc"] > 0.95


# -- metrics, validation -----------------------------------------------------------------------------------------------
def test_bootstrap_intervals_bracket_the_estimate():
    rng = np.random.default_rng(0)
    s_in, s_out = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 300)
    ci = bootstrap_intervals(s_in, s_out, n_boot=150)
    from sklearn.metrics import roc_auc_score

    auc = roc_auc_score(np.r_[np.ones(300), np.zeros(300)], np.r_[s_in, s_out])
    assert ci["auc"][0] < auc < ci["auc"][1] and ci["auc"][1] - ci["auc"][0] < 0.12
    perfect = bootstrap_intervals(np.arange(10.0) + 100, np.arange(10.0), n_boot=20)
    assert perfect["auc"] == [1.0, 1.0] and perfect["tpr_at_fpr"]["0.01"] == [1.0, 1.0]


def test_data_attacks_validate_at_the_door(population):
    members, non_members, _ = population
    with pytest.raises(InvalidData, match="reference"):
        run_data_audit(rows(100, 5), members, non_members, [DOMIASAttack()])
    with pytest.raises(InvalidData, match="columns"):
        DCRAttack().fit(rows(100, 5)).score(np.zeros((3, D + 1)))
    with pytest.raises(InvalidData, match="fitted"):
        DCRAttack().score(members)
    with pytest.raises(InvalidData, match="unknown data-only attack"):
        make_data_attack("lira")
    with pytest.raises(InvalidData, match="OfflineDataset"):
        run_data_audit(rows(100, 5), members, non_members, unit="trajectory")


# -- CLI and report ----------------------------------------------------------------------------------------------------
def test_audit_cli_release(tmp_path, capsys):
    from privsynth.cli import main
    from privsynth.data import minari_io

    def r7(n, seed):  # state 2 | action 1 | reward | next state 2 | terminal 0
        m = np.random.default_rng(seed).normal(size=(n, 7)).astype(np.float32)
        m[:, 6] = 0
        return m

    mem7, non7, ref7 = r7(100, 1), r7(200, 2), r7(600, 3)
    rel7 = np.concatenate([r7(600, 4), mem7 + 0.01])  # memorised
    for m, name in ((mem7, "toy/members-v0"), (non7, "toy/non-v0"), (ref7, "toy/ref-v0"), (rel7, "toy/release-v0")):
        minari_io.write_dataset(_as_dataset(m, 1, name.split("/")[1]), name)
    out = tmp_path / "audit.json"
    assert main(["audit", "--release", "toy/release-v0", "--members", "toy/members-v0", "--non-members", "toy/non-v0",
                 "--reference", "toy/ref-v0", "--out", str(out), "--bootstrap", "20"]) == 0
    printed = capsys.readouterr().out
    assert "data-only attacks" in printed and "TPR@1%" in printed
    res = json.loads(out.read_text())
    assert set(res["data_only"]["attacks"]) == {"dcr", "dcr_ref", "domias"}
    atts = res["data_only"]["attacks"]
    assert atts["dcr"]["tpr_at_fpr"]["0.01"] > 0.9 and atts["dcr_ref"]["tpr_at_fpr"]["0.01"] > 0.9
    assert atts["domias"]["auc"] > 0.6 and len(atts["domias"]["ci"]["tpr_at_fpr"]["0.01"]) == 2
    md = (tmp_path / "audit.md").read_text()
    for heading in ("What was attacked", "Threat model", "Data-only attacks", "Caveats", "toy/release-v0"):
        assert heading in md
    assert (tmp_path / "audit-roc.png").stat().st_size > 1000
    # without reference data only the plain DCR runs; no target at all is a one-line error
    assert main(["audit", "--release", "toy/release-v0", "--members", "toy/members-v0", "--non-members", "toy/non-v0",
                 "--out", str(out), "--bootstrap", "0", "--overwrite"]) == 0
    assert set(json.loads(out.read_text())["data_only"]["attacks"]) == {"dcr"}
    assert main(["audit", "--members", "toy/members-v0", "--non-members", "toy/non-v0", "--out", str(out)]) == 2
    assert main(["audit", "--release", "toy/release-v0", "--members", "toy/members-v0", "--non-members", "toy/non-v0",
                 "--out", str(out), "--data-attacks", "domias"]) == 2


@pytest.mark.slow
def test_bench_mia_cell_runs_data_only_attacks_on_the_upstream_release(tmp_path):
    """The suite path (evaluation/suites/audit_release.yaml): synthesize writes a release, mia attacks its rows."""
    import textwrap

    from privsynth.evaluation.runner import collect_records, load_suite, run_suite

    path = tmp_path / "a.yaml"
    path.write_text(textwrap.dedent("""
        name: a
        workers: 1
        datasets:
          pub: {source: random, episodes: 8, length: 10, seed: 1}
          base: {source: random, episodes: 12, length: 10, seed: 2}
          members: {split_of: base, fraction: 0.25, part: first, sensitive: true}
          rest: {split_of: base, fraction: 0.25, part: second, sensitive: true}
          ref: {split_of: rest, fraction: 0.5, part: first, sensitive: true}
          hold: {split_of: rest, fraction: 0.5, part: second, sensitive: true}
        defaults:
          synthesizer: privorl_n
          data: {public: [pub]}
          config: {preset: cpu, denoiser: {width: 32, depth: 1}, pretrain: {epochs: 1, batch_size: 32},
                   pretrain_curiosity: false, sampler: {steps: 4}}
        stages:
          - {name: pretrain, kind: pretrain, grid: {seed: [0]}}
          - name: synthesize
            kind: synthesize
            needs: {stage: pretrain, match: [seed]}
            grid: {seed: [0], epsilon: [null]}
            params: {num_samples: 300, data: {sensitive: members}, config: {finetune: {epochs: 2, batch_size: 32}}}
          - name: audit
            kind: mia
            needs: {stage: synthesize, match: [seed, epsilon]}
            grid: {seed: [0], epsilon: [null]}
            params: {data: {sensitive: members, holdout: hold, reference: ref}, bootstrap: 20, attacks: [],
                     data_attacks: [{name: dcr}, {name: dcr_ref}]}
        plots:
          - {name: roc, type: roc, stage: audit, audit: data_audit, label: [epsilon]}
    """))
    suite = load_suite(path, results_dir=tmp_path / "results")
    run_suite(suite, progress=False)
    rec = collect_records(suite, stage="audit")[0]["result"]
    assert set(rec["data_audit"]["attacks"]) == {"dcr", "dcr_ref"} and "audit" not in rec
    assert 0.0 <= rec["dcr_tpr@1%_lo"] <= rec["dcr_tpr@1%_hi"] <= 1.0 and "dcr_ref_auc" in rec
    assert (tmp_path / "results" / "a" / "plots" / "roc.png").exists()
