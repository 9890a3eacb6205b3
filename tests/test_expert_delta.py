"""Expert-level releases default to δ = 1/(10m) and refuse δ ≥ 1/m (m experts = privacy units).

The paper ran at δ = 1/m; privsynth requires δ < 1/N (``check_delta``), since a δ = 1/N guarantee allows publishing
one unit's data outright. Every path that releases or trains on the experts' data refuses δ ≥ 1/m before it touches
the data or writes anything; ``expert constants`` (a calculator on public inputs) accepts any δ in (0, 1)."""
from __future__ import annotations

import json

import numpy as np
import pytest

import privsynth.methods.adapters.expert_svt as adapter
import privsynth.methods.expert_envs as envs
import privsynth.methods.expert_svt as svt
from privsynth import methods
from privsynth.cli import build_parser, main
from privsynth.errors import PrivacyError
from privsynth.methods.discrete_learners import LearnerConfig
from privsynth.methods.expert_dpsgd import SelectiveConfig, selective_dpsgd
from privsynth.methods.expert_svt import DataReleaseConfig, data_release, default_delta

# the CLI's pool for `--env cartpole --per-factor 2 --n-traj 5` (24 experts); 5 trajectories per expert so that the
# exact sampler can never exhaust an expert in T = 5 rounds
TINY = ["--env", "cartpole", "--per-factor", "2", "--n-traj", "5", "-T", "5"]


@pytest.fixture(scope="module")
def pool():
    return envs.make_expert_pool(envs.ExpertPoolConfig(env="cartpole", per_factor=2, n_traj_per_expert=5,
                                                       init_sd=0.2, seed=0))


@pytest.fixture
def cli_pool(pool, monkeypatch):
    """The CLI builds `pool` (same config) without training the experts again."""
    monkeypatch.setattr(envs, "make_expert_pool", lambda cfg: pool)
    return pool


@pytest.fixture(scope="module")
def sensitive(pool):
    ex, data = pool
    ds = data.to_offline_dataset(name="cartpole-experts")
    ds.info.extra["experts"] = {"W": ex.W.tolist(), "c": ex.c.tolist(), "p_min": ex.p_min}
    ds.info.sensitive = True
    return ds


def _no_release(*a, **k):
    raise AssertionError("the sensitive data was touched before delta was checked")


def test_default_delta_is_a_tenth_of_one_over_m():
    for m in (1, 24, 3000):
        assert default_delta(m) == pytest.approx(1 / (10 * m)) and default_delta(m) < 1 / m
    with pytest.raises(PrivacyError):
        default_delta(0)
    assert adapter.ExpertSVTMethodConfig().delta is None  # None = 1/(10m) for the run's m
    assert build_parser().parse_args(["expert", "release"]).delta is None


def test_cli_release_default_delta_end_to_end(tmp_path):
    """The reported reproduction, unpatched: the ledger's δ is at most 1/(10m) < 1/m and the guard writes it."""
    out = tmp_path / "rel"
    assert main(["expert", "release", *TINY, "--out", str(out)]) == 0
    result = json.loads((out / "result.json").read_text())
    m = 24  # the CLI's pool; result.json shows only the DP count experts_noisy (issue 36: m is private)
    assert "experts" not in result and isinstance(result["experts_noisy"], int)
    ledger = json.loads((out / "ledger.json").read_text())
    assert m == 24 and ledger["delta"] <= default_delta(m) < 1 / m
    # the default δ is a public constant (1/(10m) printed m on the card; m is private, issue 36)
    assert ledger["delta"] == pytest.approx(0.9 * svt.PUBLIC_DEFAULT_DELTA)  # cartpole's paper split: δ₁ = 9δ/10


@pytest.mark.parametrize("cmd", ["release", "train"])
def test_cli_refuses_delta_one_over_m_before_anything_is_written(cmd, cli_pool, tmp_path, monkeypatch, capsys):
    m = cli_pool[1].n_experts
    monkeypatch.setattr(svt, "data_release", _no_release)
    extra = ["--steps", "2", "--batch-size", "8", "--quiet"] if cmd == "train" else []
    for delta in (1 / m, 2 / m, 0.5):
        out = tmp_path / f"{cmd}-{delta:g}"
        argv = ["expert", cmd, *TINY, *extra, "--delta", repr(delta), "--out", str(out)]
        args = build_parser().parse_args(argv)
        with pytest.raises(PrivacyError, match=r"below 1/N"):
            args.func(args)
        assert main(argv) == 2 and not out.exists()
        assert "must be below 1/N" in capsys.readouterr().err
    # just below 1/m is accepted (the rule is strict: δ < 1/m)
    monkeypatch.undo()
    monkeypatch.setattr(envs, "make_expert_pool", lambda cfg: cli_pool)
    assert main(["expert", "release", *TINY, "--delta", repr(0.99 / m), "--out", str(tmp_path / "ok")]) == 0


def test_constants_calculator_accepts_any_delta(capsys):
    # δ₁ = 0.1 ≥ 1/m for m = 24: a pure calculation on public inputs, no data, nothing released
    assert main(["expert", "constants", "--eps1", "1", "--delta1", "0.1", "--m", "24", "-T", "25", "-L", "20"]) == 0
    assert json.loads(capsys.readouterr().out)["delta1"] == 0.1


def test_data_release_refuses_delta1_of_one_over_m(pool):
    ex, data = pool
    m = data.n_experts
    with pytest.raises(PrivacyError, match=r"below 1/N"):
        data_release(data, ex, DataReleaseConfig(eps1=10.0, delta1=1 / m, n_rounds=5))
    with pytest.raises(PrivacyError, match=r"below 1/N"):
        svt.release_outputs(data, ex, DataReleaseConfig(eps1=10.0, delta1=1 / m, n_rounds=5), env="cartpole")
    out = svt.release_outputs(data, ex, DataReleaseConfig(eps1=10.0, delta1=default_delta(m), n_rounds=5),
                              env="cartpole")
    assert out["ledger"].delta <= default_delta(m)


def test_selective_dpsgd_refuses_total_delta_of_one_over_m(pool, monkeypatch):
    ex, data = pool
    m = data.n_experts
    import privsynth.methods.expert_dpsgd as dpsgd

    rel = data_release(data, ex, DataReleaseConfig(eps1=7.5, delta1=0.9 / (2 * m), n_rounds=5))
    monkeypatch.setattr(dpsgd, "make_learner", _no_release)  # refused before the learner is built
    # δ₁ + δ₂ = 1.05/m: each part alone is below 1/m, the total is refused
    cfg = SelectiveConfig(steps=3, batch_size=8, p=1.0, eps2=2.5, delta2=0.6 / m, accountant="rdp")
    with pytest.raises(PrivacyError, match=r"below 1/N"):
        selective_dpsgd(data, rel, LearnerConfig(hidden=16), cfg, n_actions=2)
    # the expert-level DP-SGD baseline (no release) alone at δ₂ = 1/m
    skipped = data_release(data, ex, DataReleaseConfig(eps1=0.0, delta1=0.0, n_rounds=5))
    with pytest.raises(PrivacyError, match=r"below 1/N"):
        selective_dpsgd(data, skipped, LearnerConfig(hidden=16),
                        SelectiveConfig(steps=3, batch_size=8, p=1.0, eps2=2.5, delta2=1 / m, accountant="rdp"),
                        n_actions=2)
    # stable-only (no noisy step): the release's δ₁ alone is checked
    monkeypatch.undo()
    res = selective_dpsgd(data, rel, LearnerConfig(hidden=16),
                          SelectiveConfig(steps=2, batch_size=8, p=0.0, eps2=0.0, delta2=0.0), n_actions=2)
    assert res.ledger.delta == pytest.approx(0.9 / (2 * m)) and res.ledger.delta < 1 / m


def test_adapter_refuses_delta_one_over_m_before_touching_the_data(sensitive, monkeypatch):
    m = len(sensitive.info.extra["experts"]["W"])
    monkeypatch.setattr(adapter, "data_release", _no_release)
    monkeypatch.setattr(adapter, "expert_view", _no_release)
    for delta in (1 / m, 0.5):
        with pytest.raises(PrivacyError, match=r"below 1/N"):
            methods.make("expert-svt", preset="tiny", epsilon=10.0, delta=delta, env="cartpole").run(sensitive)


def test_adapter_default_delta_is_a_public_constant_below_one_over_m(sensitive):
    """issue 36: the default was 1/(10m), which printed the private number of experts m on the card."""
    m = len(sensitive.info.extra["experts"]["W"])
    res = methods.make("expert-svt", preset="tiny", epsilon=10.0, split="split", env="cartpole").run(sensitive)
    assert res.card["settings"]["delta"] == pytest.approx(svt.PUBLIC_DEFAULT_DELTA)
    assert res.ledger.delta == pytest.approx(svt.PUBLIC_DEFAULT_DELTA) and res.ledger.delta < 1 / m
    assert np.isfinite(res.epsilon) and res.epsilon <= 10.0 * (1 + 1e-6)
