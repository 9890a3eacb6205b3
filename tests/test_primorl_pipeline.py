"""PriMORL end to end at toy scale through the CLI: data -> train (guarded, card) -> generate (Minari + card) ->
consume; the release guard refuses an over-budget release."""
from __future__ import annotations

import json

import pytest

from privsynth.cli import main
from privsynth.data.minari_io import dataset_exists, load_dataset
from privsynth.methods.primorl import primorl_epsilon

TINY = ["--rounds", "3", "--expected-batch", "10", "--sac-epochs", "1", "--sac-steps", "3", "--epsilon", "6", "--eval-episodes", "1"]


@pytest.fixture
def sensitive_id():
    assert main(["primorl", "data", "test/pendulum-v0", "--episodes", "60"]) == 0
    return "test/pendulum-v0"


def test_train_and_generate_release_with_card(sensitive_id, tmp_path):
    out = tmp_path / "run"
    assert main(["primorl", "train", sensitive_id, "--out", str(out), "--epsilon-budget", "6", *TINY]) == 0
    card = json.loads((out / "privacy_ledger.json").read_text())
    assert (out / "policy.pt").exists() and (out / "privacy_card.md").exists()
    ev = card["events"][0]
    # every trajectory is trained on (the public data are simulator rollouts, issue 21, item 7); q = qK / K~ from the
    # DP count K~ of the 60 trajectories (issue 36: K is private), whose Laplace event the run's event composes
    k_noisy = ev["params"]["trajectories_noisy"]
    assert abs(k_noisy - 60) < 200 and "trajectories" not in ev["params"]
    assert ev["params"]["sample_rate"] == pytest.approx(min(10 / k_noisy, 0.5))
    eps = primorl_epsilon(ev["params"]["noise_multiplier"], ev["params"]["sample_rate"], 3, 1e-5,
                          count_scale=ev["params"]["count_scale"])
    assert eps <= 6 * (1 + 1e-6) and eps > 5.0  # calibrated close to the target
    assert main(["primorl", "generate", sensitive_id, "test/pendulum-primorl-v0", "--from", str(out),
                 "--episodes", "12", "--horizon", "20", "--epsilon-budget", "6"]) == 0
    syn = load_dataset("test/pendulum-primorl-v0")
    assert syn.n_episodes == 12 and not syn.info.sensitive
    assert syn.info.privacy_card["unit"] == "trajectory"
    assert syn.info.privacy_card["epsilon"] == pytest.approx(eps, rel=1e-6)
    assert main(["primorl", "consume", "test/pendulum-primorl-v0", "--model-steps", "5", *TINY]) == 0


def test_generate_refuses_over_budget(sensitive_id):
    code = main(["primorl", "generate", sensitive_id, "test/over-v0", "--episodes", "4", "--horizon", "5",
                 "--epsilon-budget", "2", *TINY])
    assert code == 2  # BudgetExceeded, printed on one line by the CLI
    assert not dataset_exists("test/over-v0")


def test_no_privacy_run_cannot_be_released(sensitive_id, tmp_path):
    code = main(["primorl", "train", sensitive_id, "--out", str(tmp_path / "np"), "--epsilon-budget", "100",
                 "--no-privacy", *TINY])
    assert code == 2 and not (tmp_path / "np").exists()


def test_mopo_reference_is_unreleasable_and_policy_sees_only_the_model(monkeypatch):
    """The non-private reference fits the ensemble on the train split only, hands the policy stage the model (never
    the data), and has no ledger and ε = ∞, so nothing from it can go through the release guard."""
    import privsynth.methods.primorl.pipeline as pl
    from privsynth.methods.primorl.data import PendulumDataConfig, make_pendulum_dataset
    from privsynth.methods.primorl.pessimistic_mdp import PessimisticMDP
    from privsynth.methods.primorl.sac import SACConfig

    ds = make_pendulum_dataset(PendulumDataConfig(episodes=40, seed=1))
    seen: dict = {}
    fit = pl.train_ensemble_nonprivate

    def spy_fit(data, model, **kw):
        seen["rows"] = int(data.lengths.sum())
        return fit(data, model, **kw)

    stage = pl._policy_stage

    def spy_stage(model, info, cfg, progress):
        seen["stage_args"] = (type(model).__name__, type(info).__name__)
        mdp, sac = stage(model, info, cfg, progress)
        seen["mdp"] = mdp
        return mdp, sac

    monkeypatch.setattr(pl, "train_ensemble_nonprivate", spy_fit)
    monkeypatch.setattr(pl, "_policy_stage", spy_stage)
    cfg = pl.PriMORLConfig(sac=SACConfig(epochs=1, steps_per_epoch=2, rollout_batch=8, horizon=3), eval_episodes=1,
                           public_fraction=0.1)
    run = pl.run_mopo_reference(ds, cfg, model_steps=3, batch=16)
    train, _ = ds.split_episodes(0.9, seed=0)
    assert seen["rows"] == train.n_transitions < ds.n_transitions  # the public split is not trained on
    assert seen["stage_args"] == ("GaussianEnsemble", "DatasetInfo") and isinstance(seen["mdp"], PessimisticMDP)
    assert run.ledger is None and run.epsilon == float("inf")
