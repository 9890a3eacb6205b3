"""Teacher from an offline dataset: refuses sensitive data, learns the action rule, carries the dataset card."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.methods.kickstart.dirichlet import DirichletMechanism
from privsynth.methods.kickstart.experiments import smoothed_curve, steps_to_threshold
from privsynth.methods.kickstart.offline import BCConfig, discrete_actions, kickstart_utility, train_bc_teacher
from privsynth.methods.kickstart.teacher import PrivateTeacher, TeacherConfig


def _rule_dataset(sensitive: bool, card=None, n=600, onehot=False):
    rng = np.random.default_rng(0)
    obs = rng.normal(size=(n, 3)).astype(np.float32)
    a = (obs[:, 0] > 0).astype(np.int64) + (obs[:, 1] > 1).astype(np.int64)  # 3 actions
    acts = np.eye(3)[a] if onehot else a[:, None] + rng.normal(0, 0.2, size=(n, 1))  # synthetic rows are not integers
    ids = np.repeat(np.arange(n // 20), 20)
    timeouts = np.zeros(n, bool)
    timeouts[19::20] = True
    return OfflineDataset(obs, acts, np.zeros(n), obs, np.zeros(n, bool), timeouts, ids,
                          info=DatasetInfo(name="rule", sensitive=sensitive, privacy_card=card)), a


def test_bc_teacher_refuses_sensitive_data():
    ds, _ = _rule_dataset(sensitive=True)
    with pytest.raises(PrivacyError):
        train_bc_teacher(ds, 3, BCConfig(epochs=1))


@pytest.mark.parametrize("onehot", [False, True])
def test_bc_teacher_learns_and_answers_carry_dataset_card(onehot):
    card = {"epsilon": 2.0, "delta": 1e-5, "unit": "trajectory"}
    ds, a = _rule_dataset(sensitive=False, card=card, onehot=onehot)
    assert (discrete_actions(ds, 3) == a).mean() > 0.95
    net = train_bc_teacher(ds, 3, BCConfig(epochs=60, batch_size=64, hidden=(32, 32)))
    with torch.no_grad():
        acc = (net(torch.as_tensor(ds.observations)).argmax(1).numpy() == a).mean()
    assert acc > 0.85
    T = PrivateTeacher(net, DirichletMechanism(m=3, L=1.0, b=0.01), TeacherConfig(), dataset_card=ds.info.privacy_card)
    T.on_episode_start()
    assert T.query(ds.observations[0]) is not None
    c = T.ledger.card()
    assert c["teacher_training_data"]["card"] == card and c["epsilon"] != card["epsilon"]


def test_discrete_actions_rejects_wrong_width():
    ds, _ = _rule_dataset(sensitive=False)
    ds2 = dataclasses.replace(ds, actions=np.zeros((len(ds), 2)))
    with pytest.raises(InvalidData):
        discrete_actions(ds2, 3)


def test_kickstart_utility_and_curve_helpers():
    c = smoothed_curve([-500, float("nan"), -300, -100, -90], window=1)
    assert c.tolist() == [-500, -500, -300, -100, -90]
    assert steps_to_threshold(c, 1000, -100) == 4000
    assert steps_to_threshold(c, 1000, 0) == float("inf")
    u = kickstart_utility({"fast": np.array([c, c]), "slow": np.array([c - 50, c - 50])}, 1000, -100)
    assert u["fast"] == 4000 and u["slow"] == float("inf")


def test_cli_cost_prints_the_paper_headline(capsys):
    from privsynth.cli import main

    rc = main(["kickstart", "cost", "--m", "6", "--lipschitz", "1", "--b", "0.0153", "--delta-per-query", "0.0509",
               "--k", "5"])
    out = capsys.readouterr().out
    assert rc == 0 and "4.456" in out and "not dataset DP" in out


def test_teacher_from_stored_dataset_feeds_a_student(tmp_path):
    import gymnasium as gym

    from privsynth.data.minari_io import write_dataset
    from privsynth.methods.kickstart.experiments import SuiteConfig, run_student, teacher_from_dataset
    from privsynth.methods.kickstart.offline import collect_dataset
    from privsynth.methods.kickstart.ppo import PPOConfig

    torch.manual_seed(0)
    rand = torch.nn.Linear(4, 2)
    ds = collect_dataset(gym.make("CartPole-v1"), rand, 5, env_id="CartPole-v1", sensitive=False, name="cp")
    card = {"epsilon": 1.5, "delta": 1e-5, "unit": "trajectory"}
    ds = dataclasses.replace(ds, info=dataclasses.replace(ds.info, privacy_card=card))
    write_dataset(ds, "privsynth/cartpole-kick-v0")
    cfg = SuiteConfig(env_id="CartPole-v1", student=PPOConfig(epochs=1, steps_per_epoch=200, train_pi_iters=5, train_v_iters=5))
    info = teacher_from_dataset("privsynth/cartpole-kick-v0", cfg, tmp_path, epochs=2)
    assert info["dataset_card"] == card and info["lipschitz_restricted"] > 0
    rec = run_student("aware-silent", 0, cfg, tmp_path)
    assert rec["teacher_answered"] == 200 and rec["query_ledger"]["queries"] == 200
    assert (tmp_path / "runs" / "aware-silent_s0.json").exists()


def test_teacher_from_a_sensitive_dataset_is_refused_before_training(tmp_path):
    """A behaviour-cloned teacher's weights are a function of its rows: cloning one from a sensitive dataset and
    writing it would release those rows without DP and outside the guard."""
    import gymnasium as gym

    from privsynth.data.minari_io import write_dataset
    from privsynth.errors import PrivacyError
    from privsynth.methods.kickstart.experiments import SuiteConfig, teacher_from_dataset
    from privsynth.methods.kickstart.offline import collect_dataset

    torch.manual_seed(0)
    ds = collect_dataset(gym.make("CartPole-v1"), torch.nn.Linear(4, 2), 3, env_id="CartPole-v1", sensitive=True,
                         name="cp-sens")
    write_dataset(ds, "privsynth/cartpole-sens-v0")
    with pytest.raises(PrivacyError, match="marked sensitive"):
        teacher_from_dataset("privsynth/cartpole-sens-v0", SuiteConfig(env_id="CartPole-v1"), tmp_path, epochs=1)
    assert not (tmp_path / "teacher.pt").exists()
