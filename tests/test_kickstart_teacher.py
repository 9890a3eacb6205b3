"""Private teacher: budget never exceeded, ledger kept apart from dataset ledgers, schedule, silence."""
from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from privsynth.errors import PrivacyError
from privsynth.methods.kickstart.dirichlet import DirichletMechanism
from privsynth.methods.kickstart.teacher import QUERY_UNIT, PrivateTeacher, QueryLedger, TeacherConfig
from privsynth.privacy.ledger import Ledger, LedgerEvent


def _net(d=4, m=3):
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(d, 8), torch.nn.Tanh(), torch.nn.Linear(8, m))


def _mech():
    return DirichletMechanism(m=3, L=2.0, b=0.01, eta=0.1, delta_per_query=1e-4)


def _ledger_totals_from_events(ledger):
    return (sum(ev.epsilon * ev.params["count"] for ev in ledger.events),
            sum(ev.delta * ev.params["count"] for ev in ledger.events))


@pytest.mark.parametrize("eps_budget,delta_budget", [(500.0, None), (None, 3e-3), (1e4, 5e-3)])
def test_budget_is_never_exceeded_and_teacher_stays_silent(eps_budget, delta_budget):
    T = PrivateTeacher(_net(), _mech(), TeacherConfig(k0=5, c=0.8, eps_budget=eps_budget, delta_budget=delta_budget))
    rng = np.random.default_rng(0)
    answers = []
    for step in range(400):
        if step % 25 == 0:
            T.on_episode_start()
        ans = T.query(rng.normal(size=4))
        answers.append(ans)
        eps, dlt = _ledger_totals_from_events(T.ledger)
        assert eps_budget is None or eps <= eps_budget + 1e-9
        assert delta_budget is None or dlt <= delta_budget + 1e-12
    first_none = next(i for i, a in enumerate(answers) if a is None)
    assert all(a is None for a in answers[first_none:])  # silent for good once the budget is spent
    assert T.exhausted and T.answered == first_none == T.ledger.n_queries
    assert T.ledger.totals() == pytest.approx(T.spent)
    # every answer was charged at the k it was drawn at
    for ev in T.ledger.events:
        c = T.mech.cost(ev.params["k"])
        assert ev.epsilon == c.epsilon and ev.delta == c.delta


def test_geometric_schedule_and_k_min_silence():
    T = PrivateTeacher(_net(), _mech(), TeacherConfig(k0=5, c=0.5, k_min=0.5))
    ks = []
    for _ in range(6):
        T.on_episode_start()
        ks.append(T.k)
        T.query(np.zeros(4))
    assert ks[:4] == pytest.approx([5, 2.5, 1.25, 0.625])
    assert T.silent and T.query(np.zeros(4)) is None
    assert T.answered == 4 and not T.exhausted


def test_answers_are_noisy_but_unbiased_and_nonprivate_is_exact():
    net = _net()
    T = PrivateTeacher(net, _mech(), TeacherConfig(k0=5, c=1.0))
    T.on_episode_start()
    obs = np.ones(4)
    xs = np.stack([T.query(obs) for _ in range(3000)])
    exact = T.exact(obs)
    restricted = 0.7 * exact + 0.1
    assert not np.allclose(xs[0], restricted)
    assert np.allclose(xs.mean(0), restricted, atol=0.02)
    E = PrivateTeacher(net, None, TeacherConfig(private=False))
    assert np.allclose(E.query(obs), exact) and E.ledger.n_queries == 0


def test_query_ledger_is_kept_apart_from_dataset_ledgers():
    T = PrivateTeacher(_net(), _mech(), TeacherConfig(), dataset_card={"epsilon": 3.0, "unit": "trajectory"})
    T.on_episode_start()
    T.query(np.zeros(4))
    query_event = T.ledger.events[0]
    dataset = Ledger(unit="trajectory")
    with pytest.raises(PrivacyError):
        dataset.append(query_event)  # a query answer is not a dataset event
    with pytest.raises(PrivacyError):
        T.ledger.append(LedgerEvent.gaussian("stats", sigma=1.0, sensitivity=1.0))
    with pytest.raises(PrivacyError):
        QueryLedger(unit="transition")
    card = T.ledger.card()
    assert card["unit"] == QUERY_UNIT and "NOT dataset-level" in card["neighbouring_relation"]
    assert card["epsilon"] == pytest.approx(T.mech.cost(5.0).epsilon)
    assert card["teacher_training_data"]["card"]["epsilon"] == 3.0  # shown next to, not added to
    again = QueryLedger.from_json(T.ledger.to_json())
    assert again.totals() == pytest.approx(T.ledger.totals())
    json.dumps(card)


# ------------------------------------------------------------------------------------------------ issue 21
def test_teacher_noise_is_not_replayable_and_the_switch_is_refused_by_the_guard():
    from privsynth.methods.kickstart.teacher import teacher_outputs
    from privsynth.privacy.guard import check_budget
    from privsynth.privacy.noise import NoiseSource

    queries = np.random.default_rng(0).normal(size=(5, 4))
    a = teacher_outputs(_net(), _mech(), TeacherConfig(k0=5, c=0.9), queries)
    b = teacher_outputs(_net(), _mech(), TeacherConfig(k0=5, c=0.9), queries)
    assert not np.allclose(a["answers"][0], b["answers"][0])  # OS entropy: same inputs, different answers
    assert a["ledger"].events[0].params["noise"] == "secure" and "not_dp" not in a["card"]
    assert check_budget(a["ledger"], 1e9) > 0
    r1 = teacher_outputs(_net(), _mech(), TeacherConfig(k0=5, c=0.9), queries, noise=NoiseSource.reproducible(7))
    r2 = teacher_outputs(_net(), _mech(), TeacherConfig(k0=5, c=0.9), queries, noise=NoiseSource.reproducible(7))
    assert all(np.array_equal(x, y) for x, y in zip(r1["answers"], r2["answers"]))
    assert "not_dp" in r1["card"]
    with pytest.raises(PrivacyError):
        check_budget(r1["ledger"], 1e9)
    with pytest.raises(TypeError):  # the old seed argument is gone: a seed cannot drive the answers
        PrivateTeacher(_net(), _mech(), TeacherConfig(), seed=0)


def test_teacher_card_does_not_depend_on_the_queries():
    """The neighbour relation of the teacher: one query observation moved by <= b. Everything but the answers is equal."""
    from privsynth.methods.kickstart.teacher import teacher_outputs

    q = np.random.default_rng(1).normal(size=(6, 4))
    q2 = q.copy()
    q2[3] += 0.005  # ||x - x'|| <= b = 0.01
    a = teacher_outputs(_net(), _mech(), TeacherConfig(k0=5, c=0.8), q, episode_starts=(0, 3))
    b = teacher_outputs(_net(), _mech(), TeacherConfig(k0=5, c=0.8), q2, episode_starts=(0, 3))
    assert json.dumps(a["card"], sort_keys=True) == json.dumps(b["card"], sort_keys=True)


def test_nonprivate_teacher_says_epsilon_infinity_and_cannot_be_released():
    from privsynth.privacy.guard import check_budget

    E = PrivateTeacher(_net(), None, TeacherConfig(private=False))
    E.query(np.zeros(4))
    assert E.epsilon == float("inf") and any("NOT DP" in n for n in E.ledger.notes)
    with pytest.raises(PrivacyError):
        check_budget(E.ledger, 1e9)
