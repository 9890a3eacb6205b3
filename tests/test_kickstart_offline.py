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
