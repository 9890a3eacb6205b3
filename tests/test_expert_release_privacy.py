"""Issue 21 for expert-level DP: secure randomness, the analysed sampler by default, a public horizon cap L, and the
non-private baseline reported as ε = ∞ and refused by the guard."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsynth.errors import BudgetExceeded, PrivacyError
from privsynth.methods.discrete_learners import LearnerConfig
from privsynth.methods.expert_dpsgd import SelectiveConfig, selective_dpsgd
from privsynth.methods.expert_envs import get_spec
from privsynth.methods.expert_svt import (APPROX_SAMPLER_CAVEAT, DataReleaseConfig, ReleaseResult, data_release,
                                          release_outputs)
from privsynth.privacy.guard import check_budget


@pytest.fixture(scope="module")
def pool(expert_pool):
    return expert_pool


def _outcome(res):
    return [(r["episode"], r["k"], r["threshold"]) for r in res.rounds]


def test_svt_draws_are_not_replayable_from_a_seed(pool):
    ex, data = pool
    cfg = DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20)
    a, b = data_release(data, ex, cfg), data_release(data, ex, cfg)
    assert _outcome(a) != _outcome(b)  # OS entropy: two identical calls differ
    assert a.ledger_event().params["noise"] == "secure"
    r_cfg = DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20, noise_seed=4)
    c, d = data_release(data, ex, r_cfg), data_release(data, ex, r_cfg)
    assert _outcome(c) == _outcome(d)
    out = release_outputs(data, ex, r_cfg, env="cartpole")
    assert out["ledger"].reproducible_noise and "not_dp" in out["ledger"].card()
    with pytest.raises(PrivacyError):
        check_budget(out["ledger"], 100.0)


def test_default_sampler_is_the_analysed_one_and_the_approximation_is_caveated(pool):
    ex, data = pool
    assert DataReleaseConfig().sampler == "expert"
    exact = release_outputs(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20), env="cartpole")
    # events[0] is the Laplace count of the experts (issue 36), events[-1] the SVT release
    assert "caveat" not in exact["ledger"].events[-1].params and not exact["ledger"].notes
    approx = release_outputs(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20, sampler="trajectory"),
                             env="cartpole")
    assert approx["ledger"].events[-1].params["caveat"] == APPROX_SAMPLER_CAVEAT
    assert "approximate" in approx["ledger"].render_markdown()


def test_horizon_cap_is_public_not_the_longest_logged_trajectory(pool):
    ex, data = pool
    assert data.max_len < get_spec("cartpole").horizon
    res = data_release(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20))
    assert res.const.max_len == get_spec("cartpole").horizon != data.max_len
    capped = data_release(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20, max_len=5))
    assert capped.const.max_len == 5 and max(r["k"] for r in capped.rounds) <= 5
    # the written summary holds the public cap, and no size of the logged data (old: "transitions": len(data))
    out = release_outputs(data, ex, DataReleaseConfig(eps1=15.0, delta1=1e-3, n_rounds=20), env="cartpole")
    assert out["result"]["constants"]["max_len"] == get_spec("cartpole").horizon
    assert "transitions" not in out["result"] and "expert" not in out["d_stable"]


def test_nonprivate_baseline_reports_infinite_epsilon_and_cannot_be_released(pool):
    ex, data = pool
    rel = ReleaseResult(None, np.arange(len(data)), np.zeros(0, np.int64), private=False)
    res = selective_dpsgd(data, rel, LearnerConfig(hidden=8), SelectiveConfig(steps=2, batch_size=8, p=0.0, eps2=0.0,
                                                                              delta2=0.0), n_actions=2)
    assert res.epsilon == float("inf") and res.ledger.epsilon() == float("inf") and not res.ledger.private
    with pytest.raises(BudgetExceeded):
        check_budget(res.ledger, 1e9)
    empty = selective_dpsgd(data, ReleaseResult(None, np.zeros(0, np.int64), np.zeros(0, np.int64)), LearnerConfig(hidden=8),
                            SelectiveConfig(steps=1, batch_size=8, p=0.0, eps2=0.0, delta2=0.0), n_actions=2)
    assert empty.epsilon == float("inf")  # nothing accounted: never reported as 0


@pytest.mark.slow
def test_expert_dpsgd_noise_is_not_replayable_from_the_seed(pool):
    ex, data = pool
    rel = ReleaseResult(None, np.zeros(0, np.int64), np.arange(len(data)))

    def weights(**kw):
        cfg = SelectiveConfig(steps=2, batch_size=16, p=1.0, eps2=5.0, delta2=1e-5, accountant="rdp", seed=0, **kw)
        res = selective_dpsgd(data, rel, LearnerConfig(hidden=8), cfg, n_actions=2)
        return torch.cat([p.detach().flatten() for p in res.model.parameters()]), res.ledger

    (a, la), (b, _) = weights(), weights()
    assert not torch.equal(a, b) and la.private
    (c, lc), (d, _) = weights(noise_seed=2), weights(noise_seed=2)
    assert torch.equal(c, d) and lc.reproducible_noise
    with pytest.raises(PrivacyError):
        check_budget(lc, 100.0)


@pytest.mark.slow
def test_cli_release_goes_through_the_guard_and_nonprivate_train_is_refused(pool, monkeypatch, tmp_path, capsys):
    import json

    import privsynth.methods.expert_envs as envs
    from privsynth.cli import main

    ex, data = pool
    monkeypatch.setattr(envs, "make_expert_pool", lambda cfg: (ex, data))
    out = tmp_path / "rel"
    assert main(["expert", "release", "--env", "cartpole", "--epsilon", "20", "-T", "10", "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    assert (out / "privacy_card.md").is_file() and (out / "privacy_ledger.json").is_file()
    assert "transitions" not in result and result["constants"]["max_len"] == get_spec("cartpole").horizon
    assert result["sampler"] == "expert"
    capsys.readouterr()
    code = main(["expert", "train", "--env", "cartpole", "--method", "nonprivate", "--steps", "2", "--batch-size", "8",
                 "--quiet", "--out", str(tmp_path / "np")])
    captured = capsys.readouterr()
    assert code == 2 and not (tmp_path / "np").exists()  # the guard refuses epsilon = inf: nothing written
    summary = json.loads(captured.out[: captured.out.rindex("}") + 1])
    assert summary["ledger_epsilon"] == float("inf") and "not_dp" in summary


def test_release_epsilon_is_the_count_plus_the_svt_and_the_count_is_noisy():
    """Issue 36: m is private. The release spends eps_count = 2% of eps1 on a Laplace count of the experts and runs the
    SVT at eps1 - eps_count; the ledger composes them (basic) to eps1 and two releases draw different counts."""
    from privsynth.methods.expert_envs import LinearExperts, collect_expert_data
    from privsynth.methods.expert_svt import DataReleaseConfig, release_outputs
    from privsynth.privacy.count import count_epsilon

    rng = np.random.default_rng(0)
    m = 57
    W, c = rng.normal(size=(m, 2, 4)), rng.normal(size=(m, 2))
    ex = LinearExperts(W, c, p_min=0.02)
    data = collect_expert_data("cartpole", ex, 4, seed=0, horizon=10)
    cfg = DataReleaseConfig(eps1=10.0, delta1=1e-3, n_rounds=4)
    outs = [release_outputs(data, ex, cfg, env="cartpole") for _ in range(4)]
    for out in outs:
        count, svt = out["ledger"].events
        assert count.epsilon == pytest.approx(count_epsilon(10.0)) and count.delta == 0
        assert svt.epsilon == pytest.approx(10.0 - count_epsilon(10.0)) and svt.delta == pytest.approx(1e-3)
        assert out["ledger"].epsilon() == pytest.approx(count_epsilon(10.0) + svt.epsilon, rel=1e-12)
        assert out["ledger"].epsilon() <= 10.0 * (1 + 1e-12)
        assert out["result"]["experts_noisy"] == count.params["n_units_noisy"] and "experts" not in out["result"]
    # Laplace scale 1/0.2 = 5: four equal counts have probability well under 1e-2
    assert len({o["result"]["experts_noisy"] for o in outs}) > 1
