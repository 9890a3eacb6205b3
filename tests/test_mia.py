"""Membership inference: metric conventions, adapters, attacks against a tiny memorising EDM stand-in."""
from __future__ import annotations

import json

import numpy as np
import pytest

from conftest import make_toy_dataset
from mia_standin import TinyEDM, gaussian_rows
from privsynth.errors import InvalidData
from privsynth.evaluation.mia import (
    EDMAdapter,
    LossAttack,
    PIAAttack,
    ReferenceAttack,
    ScoreNormAttack,
    TrajectoryAdapter,
    as_adapter,
    attack_metrics,
    plot_roc,
    roc,
    run_audit,
    tpr_at_fpr,
)

DIM = 4


@pytest.fixture(scope="module")
def overfit():
    """A width-256 EDM trained 1500 full-batch steps on 32 members: it memorises them."""
    members = gaussian_rows(32, DIM, seed=1)
    model = TinyEDM(DIM, width=256).fit(members, steps=1500)
    reference = TinyEDM(DIM, width=256, seed=3).fit(gaussian_rows(32, DIM, seed=7), steps=1500)
    return model, reference, members, gaussian_rows(200, DIM, seed=2)


# -- metrics ---------------------------------------------------------------------------------------------------------
def test_tpr_at_fpr_is_last_point_at_or_below_alpha():
    rng = np.random.default_rng(0)
    s_in, s_out = rng.normal(1.0, 1.0, 300), rng.normal(0.0, 1.0, 400)
    fpr, tpr, _ = roc(s_in, s_out)
    for alpha in (0.0, 0.001, 0.01, 0.05, 0.1, 0.5):
        # brute force over every threshold: best TPR among thresholds whose FPR does not exceed alpha
        best = max((np.mean(s_in >= t) for t in np.concatenate([s_in, s_out, [np.inf]]) if np.mean(s_out >= t) <= alpha))
        assert tpr_at_fpr(fpr, tpr, alpha) == pytest.approx(best)


def test_members_are_the_positive_class():
    perfect, _ = attack_metrics(np.array([5.0, 6.0, 7.0]), np.array([0.0, 1.0, 2.0]))
    assert perfect.auc == 1.0 and perfect.tpr_at_fpr["0.01"] == 1.0 and perfect.balanced_accuracy == 1.0
    inverted, _ = attack_metrics(np.array([0.0, 1.0, 2.0]), np.array([5.0, 6.0, 7.0]))
    assert inverted.auc == 0.0 and inverted.tpr_at_fpr["0.1"] == 0.0


def test_metrics_reject_bad_scores():
    with pytest.raises(InvalidData):
        attack_metrics(np.array([np.nan, 1.0]), np.array([0.0]))
    with pytest.raises(InvalidData):
        attack_metrics(np.array([]), np.array([0.0]))


def test_same_distribution_is_near_chance():
    rng = np.random.default_rng(1)
    m, _ = attack_metrics(rng.normal(size=5000), rng.normal(size=5000))
    assert abs(m.auc - 0.5) < 0.03 and m.tpr_at_fpr["0.01"] < 0.03


# -- attacks on the stand-in -------------------------------------------------------------------------------------------
def test_loss_attack_detects_memorisation(overfit):
    model, _, members, non_members = overfit
    res = run_audit(model, members, non_members, [LossAttack(sigma=0.1, repeats=16)])
    att = res["attacks"]["loss"]
    assert att["auc"] > 0.75 and att["tpr_at_fpr"]["0.1"] > 0.3
    assert att["n_members"] == 32 and att["n_non_members"] == 200


# the stand-in's memorisation shows at larger σ than the real synthesizer's (whose defaults the attacks carry)
@pytest.mark.parametrize("attack", [PIAAttack(sigmas=(0.25, 0.5)), ScoreNormAttack()])
def test_stronger_attacks_detect_memorisation(overfit, attack):
    model, _, members, non_members = overfit
    att = run_audit(model, members, non_members, [attack])["attacks"][attack.name]
    assert att["auc"] > 0.7


def test_reference_attack_calibrates_with_public_model(overfit):
    model, reference, members, non_members = overfit
    attack = ReferenceAttack(LossAttack(repeats=16), as_adapter(reference))
    att = run_audit(model, members, non_members, [attack])["attacks"]["loss_ref"]
    assert att["auc"] > 0.75
    # the target scored against itself as reference carries no signal at all
    null = ReferenceAttack(LossAttack(repeats=4), as_adapter(model), name="self")
    assert np.allclose(null.score(as_adapter(model), members), 0.0)


def test_model_that_never_saw_members_is_near_chance():
    """A model trained on other rows from the same distribution: members and non-members look alike."""
    members, non_members = gaussian_rows(200, DIM, seed=1), gaussian_rows(200, DIM, seed=2)
    model = TinyEDM(DIM, width=64).fit(gaussian_rows(200, DIM, seed=9), steps=300)
    res = run_audit(model, members, non_members, [LossAttack(repeats=8), PIAAttack(), ScoreNormAttack()])
    for att in res["attacks"].values():
        assert abs(att["auc"] - 0.5) < 0.12


def test_loss_attack_is_deterministic_given_seed(overfit):
    model, _, members, _ = overfit
    adapter = as_adapter(model)
    a = LossAttack(repeats=4).score(adapter, members, seed=3)
    b = LossAttack(repeats=4).score(adapter, members, seed=3)
    c = LossAttack(repeats=4).score(adapter, members, seed=4)
    assert np.array_equal(a, b) and not np.array_equal(a, c)


# -- adapters and units ------------------------------------------------------------------------------------------------
def test_trajectory_adapter_sums_rows_per_episode():
    ds = make_toy_dataset(lengths=(5, 3, 7), obs_dim=1, act_dim=1)  # transition width 2*1+1+2 = 5
    model = TinyEDM(5, width=16)
    inner = as_adapter(model)
    traj = as_adapter(model, "trajectory")
    assert isinstance(traj, TrajectoryAdapter)
    attack = LossAttack(repeats=2)
    per_row = attack.score(inner, ds, seed=0)
    per_traj = attack.score(traj, ds, seed=0)
    assert per_traj.shape == (3,)
    assert np.allclose(per_traj, [per_row[:5].sum(), per_row[5:8].sum(), per_row[8:].sum()])
    mean_traj = TrajectoryAdapter(inner, reduce="mean")
    assert np.allclose(attack.score(mean_traj, ds, seed=0)[1], per_row[5:8].mean())


def test_trajectory_audit_counts_trajectories():
    members = make_toy_dataset(lengths=(4,) * 6, obs_dim=1, act_dim=1, seed=0)
    non_members = make_toy_dataset(lengths=(4,) * 8, obs_dim=1, act_dim=1, seed=1)
    res = run_audit(TinyEDM(5, width=16), members, non_members, [LossAttack(repeats=2)], unit="trajectory", max_units=5)
    att = res["attacks"]["loss"]
    assert res["unit"] == "trajectory" and att["n_members"] == 5 and att["n_non_members"] == 5


def test_adapter_validates_at_the_door():
    with pytest.raises(InvalidData, match="no 'normalizer'"):
        EDMAdapter(object())
    with pytest.raises(InvalidData, match="columns"):
        as_adapter(TinyEDM(DIM)).encode(np.zeros((3, DIM + 1), dtype=np.float32))
    with pytest.raises(InvalidData, match="unit"):
        as_adapter(TinyEDM(DIM), "user")
    with pytest.raises(InvalidData, match="OfflineDataset"):
        as_adapter(TinyEDM(DIM), "trajectory").records(np.zeros((3, DIM)))


def test_audit_result_is_json_and_plots(overfit, tmp_path):
    model, _, members, non_members = overfit
    res = run_audit(model, members, non_members, [LossAttack(repeats=2), PIAAttack()], max_units=20)
    text = json.dumps(res)
    back = json.loads(text)
    assert set(back["attacks"]) == {"loss", "pia"} and back["attacks"]["loss"]["n_members"] == 20
    roc_ = back["attacks"]["loss"]["roc"]
    assert roc_["fpr"][0] == 0.0 and roc_["fpr"][-1] == 1.0 and roc_["tpr"][-1] == 1.0
    assert np.all(np.diff(roc_["tpr"]) >= 0)
    plot_roc({"overfit": res}, str(tmp_path / "roc.png"))
    assert (tmp_path / "roc.png").stat().st_size > 1000


# -- CLI ---------------------------------------------------------------------------------------------------------------
def test_audit_cli(overfit, tmp_path, monkeypatch, capsys):
    from privsynth.cli import main
    from privsynth.commands import audit as audit_cmd
    from privsynth.data import DatasetInfo, OfflineDataset
    from privsynth.evaluation.runner import save_dataset

    model, reference, members, non_members = overfit

    def as_dataset(rows, name):  # the 4 toy columns as state(1) | action(1) | reward | next state(1)
        n = rows.shape[0]
        return OfflineDataset(observations=rows[:, :1], actions=rows[:, 1:2], rewards=rows[:, 2],
                              next_observations=rows[:, 3:4], terminals=np.zeros(n, bool),
                              timeouts=np.ones(n, bool), episode_ids=np.arange(n), info=DatasetInfo(name=name))

    # a 5-wide transition model for the 1-d toy rows (state 1, action 1, reward, next state 1, terminal)
    m5 = TinyEDM(5, width=128)
    mem = np.concatenate([members, np.zeros((members.shape[0], 1), np.float32)], axis=1)
    m5.fit(mem, steps=600)
    save_dataset(as_dataset(members, "members"), tmp_path / "members.npz")
    save_dataset(as_dataset(non_members, "non"), tmp_path / "non.npz")
    monkeypatch.setattr(audit_cmd, "_load_synth", lambda path: m5)
    out = tmp_path / "audit.json"
    code = main(["audit", "--checkpoint", "x.pt", "--members", str(tmp_path / "members.npz"), "--non-members",
                 str(tmp_path / "non.npz"), "--out", str(out), "--repeats", "4", "--bootstrap", "20", "--plot", str(tmp_path / "roc.png"),
                 "--reference", "ref.pt"])
    assert code == 0
    res = json.loads(out.read_text())["white_box"]
    assert set(res["attacks"]) == {"loss", "pia", "loss_ref"} and res["attacks"]["loss"]["n_members"] == 32
    assert "TPR@1%" in capsys.readouterr().out and (tmp_path / "roc.png").exists()
    assert main(["audit", "--checkpoint", "x.pt", "--members", str(tmp_path / "members.npz"), "--non-members",
                 str(tmp_path / "non.npz"), "--out", str(out), "--attacks", "loss_ref", "--overwrite"]) == 2
    # Minari ids work too (the store is the test's own MINARI_DATASETS_PATH)
    from privsynth.data import minari_io

    minari_io.write_dataset(as_dataset(members, "members"), "toy/members-v0")
    minari_io.write_dataset(as_dataset(non_members, "non"), "toy/non-v0")
    assert main(["audit", "--checkpoint", "x.pt", "--members", "toy/members-v0", "--non-members", "toy/non-v0",
                 "--out", str(out), "--attacks", "loss", "--repeats", "2", "--max-units", "50", "--overwrite"]) == 0
    assert json.loads(out.read_text())["white_box"]["attacks"]["loss"]["n_non_members"] == 50
