"""The DP action relabel (privsynth.synth.dp_policy, privsynth.release.relabel; issue 37, round 5): its DP-SGD is
accounted (ε against an independent dp-accounting recompute, composed on the release's ledger within the budget),
noise is really added, the normaliser never sees sensitive rows, the guard refuses an over-budget release, and the
default applies where rows are re-simulated only."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.release.postprocess import LOCOMOTION_DEFAULT
from privsynth.release.relabel import POLICY_SHARE, resolve_policy_share
from privsynth.synth.dp_policy import DPPolicyConfig, fit_dp, fit_plain, relabel_actions

_BOX = dict(action_low=[-1.0, -1.0], action_high=[1.0, 1.0])


def _rows(n: int, seed: int, *, sensitive: bool, shift: float = 0.0) -> OfflineDataset:
    """Rows whose action is a smooth function of the state (a learnable behaviour), inside the box [-1, 1]^2."""
    rng = np.random.default_rng(seed)
    obs = rng.normal(size=(n, 3)).astype(np.float32) + shift
    act = np.tanh(np.stack([obs[:, 0] - obs[:, 1], 0.5 * obs[:, 2]], 1)).astype(np.float32)
    return OfflineDataset(obs, act, np.zeros(n, np.float32), obs + 0.1, np.zeros(n, bool), np.zeros(n, bool),
                          np.arange(n), info=DatasetInfo(name=f"rows{seed}", sensitive=sensitive, **_BOX))


SHARE = 0.1
_CFG = DPPolicyConfig(epochs=4.0, batch_size=64, width=16, depth=1, warm_epochs=2)


def test_policy_epsilon_matches_an_independent_accountant_and_composes_on_a_ledger():
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant as rdp

    from privsynth.privacy import accounting as acc
    from privsynth.privacy.ledger import Ledger

    sens, rel = _rows(600, 0, sensitive=True), _rows(400, 1, sensitive=False)
    start = fit_plain(rel, _CFG)
    policy, res = fit_dp(sens, start, _CFG, epsilon=2.0, delta=1e-4, n_units_noisy=590)
    q = 64 / 590
    assert res.sample_rate == q and res.steps == round(4.0 / q)
    sigma = acc.calibrate_noise_multiplier(2.0, 1e-4, q, res.steps, "rdp")
    assert res.noise_multiplier == pytest.approx(sigma)
    indep = rdp.RdpAccountant()
    indep.compose(dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma)), res.steps))
    assert res.epsilon == pytest.approx(indep.get_epsilon(1e-4), rel=1e-9) and res.epsilon <= 2.0
    assert res.event.params["noise"] == "secure"  # OS entropy by default, never a readable seed
    led = Ledger(unit="transition", delta=1e-4).append(res.event)
    assert led.epsilon() == pytest.approx(res.epsilon, rel=1e-9)


def test_noise_moves_a_policy_whose_data_gradient_is_zero():
    """Every sensitive action equals the start policy's own output, so each clipped gradient is zero: whatever the
    DP-SGD run changes is its Gaussian noise."""
    rel = _rows(400, 1, sensitive=False)
    start = fit_plain(rel, _CFG)
    sens = _rows(600, 0, sensitive=True)
    sens = dataclasses.replace(sens, actions=start.act(sens.observations))
    policy, res = fit_dp(sens, start, _CFG, epsilon=2.0, delta=1e-4, n_units_noisy=600)
    assert res.noise_multiplier > 0
    moved = sum(float((p - q).abs().sum()) for p, q in zip(policy.net.parameters(), start.net.parameters()))
    assert moved > 1e-3
    # the start is untouched (fit_dp trains a copy)
    assert all(torch.equal(a, b) for a, b in zip(start.state_dict().values(), fit_plain(rel, _CFG).state_dict().values()))


def test_the_policy_learns_the_behaviour_and_normalises_by_the_release_rows_only():
    rel = _rows(800, 1, sensitive=False, shift=0.3)  # the release's states: a shifted copy of the behaviour
    sens = _rows(4000, 0, sensitive=True)
    start = fit_plain(rel, _CFG)
    cfg = dataclasses.replace(_CFG, epochs=20.0, batch_size=400)
    policy, _ = fit_dp(sens, start, cfg, epsilon=8.0, delta=1e-5, n_units_noisy=4000)
    np.testing.assert_allclose(policy.mean.numpy(), rel.observations.mean(0), rtol=1e-5)
    np.testing.assert_allclose(policy.std.numpy(), rel.observations.std(0) + 1e-6, rtol=1e-5)
    test = _rows(2000, 5, sensitive=False)

    def r2(p):
        pred = p.act(test.observations)
        return 1 - ((test.actions - pred) ** 2).sum() / ((test.actions - test.actions.mean(0)) ** 2).sum()

    assert r2(policy) > 0.6
    with pytest.raises(PrivacyError):
        fit_plain(sens, _CFG)  # the plain fit is for DP outputs only


def test_relabel_modes_and_the_action_box():
    rel = _rows(300, 1, sensitive=False)
    start = fit_plain(rel, _CFG)
    shifted = dataclasses.replace(rel, actions=rel.actions + 0.5)
    same = relabel_actions(shifted, start, mode="residual", reference=start)  # π̃ = π̂: the rows keep their actions
    np.testing.assert_allclose(same.actions, np.clip(shifted.actions, -1, 1), atol=1e-6)
    rep = relabel_actions(shifted, start, mode="replace")
    np.testing.assert_allclose(rep.actions, start.act(rel.observations), atol=1e-6)
    assert rep.actions.min() >= -1 and rep.actions.max() <= 1
    np.testing.assert_array_equal(rep.next_observations, shifted.next_observations)  # re-simulation is the repair's
    with pytest.raises(InvalidData):
        relabel_actions(shifted, start, mode="residual")


def test_the_default_share_applies_where_rows_are_resimulated_only():
    assert resolve_policy_share("auto", steps=LOCOMOTION_DEFAULT, unit="transition", n=100) == POLICY_SHARE
    assert resolve_policy_share(SHARE, steps=LOCOMOTION_DEFAULT, unit="transition", n=100) == SHARE
    assert resolve_policy_share("auto", steps=None, unit="transition", n=100) == 0.0  # PointMaze, own data
    assert resolve_policy_share("auto", steps="all", unit="transition", n=100,
                                repaired_by_default=False) == 0.0  # asked
    assert resolve_policy_share("auto", steps="terminal,healthy", unit="transition", n=100) == 0.0
    assert resolve_policy_share("auto", steps=LOCOMOTION_DEFAULT, unit="trajectory", n=100) == 0.0
    assert resolve_policy_share("auto", steps=LOCOMOTION_DEFAULT, unit="transition", n=0) == 0.0
    assert resolve_policy_share(0.3, steps="clip,resimulate,reward", unit="transition", n=100) == 0.3
    assert resolve_policy_share(0, steps=None, unit="transition", n=100) == 0.0
    with pytest.raises(InvalidData, match="resimulate"):
        resolve_policy_share(0.2, steps="terminal", unit="transition", n=100)
    with pytest.raises(InvalidData):
        resolve_policy_share(0.2, steps=LOCOMOTION_DEFAULT, unit="trajectory", n=100)
    with pytest.raises(PrivacyError):
        resolve_policy_share(1.0, steps=LOCOMOTION_DEFAULT, unit="transition", n=100)


def test_a_registered_synthesizer_refuses_a_policy_share():
    from privsynth.release import synthesize

    sens = _rows(200, 0, sensitive=True)
    with pytest.raises(InvalidData, match="policy_share"):
        synthesize(sens, epsilon=5.0, delta=1e-3, synth="privsyn", n=10, policy_share=0.2, progress=False)


def test_cli_passes_the_policy_share(monkeypatch):
    from privsynth.commands import synth as cmd

    seen = {}

    def fake(*args, **kwargs):
        seen.update(kwargs)
        raise SystemExit(0)

    monkeypatch.setattr("privsynth.release.synthesize", fake)
    for argv, want in ((["--policy-share", "0.25"], 0.25), ([], "auto")):
        args = cmd.synthesize_args(["--sensitive", "x", "--public", "y", "--epsilon", "5", *argv])
        with pytest.raises(SystemExit):
            cmd.run_synthesize(args)
        assert seen["policy_share"] == want


@pytest.mark.slow
def test_a_locomotion_release_spends_the_share_on_the_policy_within_the_budget(tmp_path, monkeypatch):
    """Through the one release route: the fine-tune gets ε·(1 − share), the policy's DP-SGD event follows it on the
    ledger, the composed ε stays within the budget, the card records the relabel, and every released row is one
    simulator step from its (s, a). A policy fitted at the whole budget on top makes the guard refuse."""
    from test_postprocess import _hopper_rollout
    from test_transition_synth import tiny_config

    from privsynth.data.env_adapters import adapter_for
    from privsynth.release import synthesize
    from privsynth.release.guarded import release_dataset
    from privsynth.release.relabel import fit_relabeller

    monkeypatch.chdir(tmp_path)
    sens = dataclasses.replace(_hopper_rollout(300, seed=1), info=DatasetInfo(name="hopper-s", env_id="Hopper-v5"))
    res = synthesize(sens, public=[_hopper_rollout(300, seed=2)], epsilon=8.0, delta=1e-3, config=tiny_config(),
                     n=60, progress=False, policy_share=SHARE)
    ds, ledger = res.dataset, res.ledger
    finetune = [h for h in res.synthesizer.history if h.get("phase") == "finetune"][-1]
    assert finetune["target_epsilon"] == pytest.approx(8.0 * (1 - SHARE))
    assert ledger.events[-1].name.startswith("DP-SGD behaviour policy")
    assert ledger.events[-1].params["epsilon_spent"] == pytest.approx(ds.info.extra["policy_relabel"]["epsilon"])
    # composition spends less than the sum of the parts: the policy gets what the fine-tune's share left unspent,
    # so the whole budget is used (to the bisection's 1% in σ) and never exceeded
    assert ds.info.extra["policy_relabel"]["epsilon"] > 8.0 * SHARE
    assert 0.97 * 8.0 <= ledger.epsilon() <= 8.0 and res.epsilon == pytest.approx(ledger.epsilon())
    assert ds.info.privacy_card["policy_relabel"]["costs_privacy"] is True
    assert ds.info.privacy_card["ledger"] == ledger.to_dict()
    adapter = adapter_for(ds.info, ds.observations)
    try:  # the repair after the relabel: each row's s' is the simulator's step from its (s, a)
        for i in range(0, len(ds), 7):
            nxt = adapter.step_from(ds.observations[i], ds.actions[i])[0]
            np.testing.assert_allclose(nxt, ds.next_observations[i], atol=1e-5)
    finally:
        adapter.close()
    # a second policy at the whole budget on top of the same ledger: the guard refuses the release
    fit_relabeller(res.synthesizer, sens.mark_sensitive(), ds, epsilon=8.0, delta=1e-3)
    with pytest.raises(PrivacyError):
        release_dataset(ds, res.synthesizer.ledger, None, epsilon_budget=8.0, delta=1e-3)


def test_cli_summary_reports_the_relabel(monkeypatch, capsys):
    from types import SimpleNamespace

    import privsynth.release
    from privsynth.cli import main

    rel = _rows(50, 1, sensitive=False)
    rec = {"mode": "residual", "epsilon": 3.5, "noise_multiplier": 2.23, "steps": 977}
    rel = dataclasses.replace(rel, info=dataclasses.replace(rel.info, extra={"policy_relabel": rec}))
    monkeypatch.setattr(privsynth.release, "synthesize", lambda *a, **k: SimpleNamespace(
        dataset=rel, epsilon=10.0, seconds={}, synthesizer=None, warnings=[]))
    cli = ["synthesize", "--sensitive", "s", "--public", "p", "--epsilon", "10", "--out-dataset", "o", "--quiet",
           "--policy-share", "0.1"]
    assert main(cli) == 0
    assert "actions relabelled by a DP policy (sigma 2.23" in capsys.readouterr().out


@pytest.mark.slow
def test_a_maze_release_from_scratch_spends_the_share_on_the_policy_and_rolls_out(tmp_path, monkeypatch):
    """The from-scratch PointMaze default (issue 37, seventh round) through the one release route: the policy's DP-SGD
    event is on the ledger, the composed ε is within the budget, and the card records the relabel and the rollouts;
    the released rows are episodes whose next states start the next rows."""
    from test_transition_synth import tiny_config

    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
    from privsynth.release import synthesize

    monkeypatch.chdir(tmp_path)
    sens = generate_pointmaze(PointMazeConfig(maze="umaze", steps=300, seed=2, dense=True, ref_episodes=1),
                              progress=False).mark_sensitive()
    res = synthesize(sens, epsilon=8.0, delta=1e-3, n=60, config=tiny_config(), obs_bounds=(-1.5, 1.5),
                     reward_bounds=(-5.0, 5.0), progress=False)
    ds, ledger = res.dataset, res.ledger
    assert ledger.events[-1].name.startswith("DP-SGD behaviour policy")
    assert ledger.events[-1].params["epsilon_spent"] == pytest.approx(ds.info.extra["policy_relabel"]["epsilon"])
    assert 0.97 * 8.0 <= ledger.epsilon() <= 8.0
    card = ds.info.privacy_card
    assert card["policy_relabel"]["costs_privacy"] is True and card["postprocess"]["rollout"]["costs_privacy"] is False
    same = np.flatnonzero(ds.episode_ids[1:] == ds.episode_ids[:-1])  # consecutive rows of one chain
    assert len(same) > len(ds) // 2
    np.testing.assert_allclose(ds.next_observations[same], ds.observations[same + 1], atol=1e-5)
