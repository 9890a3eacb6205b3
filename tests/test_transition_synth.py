"""PrivORL-n transition synthesizer: save/load, EMA release, normaliser privacy, DP fine-tuning and its ledger."""
from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.data.normalize import Normalizer
from privsynth.errors import InvalidData, PrivacyError, SpaceMismatch
from privsynth.synth.next_state import fit_public_normalizer
from privsynth.synth import TransitionSynthesizer
from privsynth.synth.config import DenoiserConfig, TransitionSynthConfig, cpu_config
from privsynth.synth.ema import EMA
from privsynth.synth.transition import UnitLoss


def tiny_config(**kw) -> TransitionSynthConfig:
    cfg = cpu_config()
    cfg.denoiser = DenoiserConfig(width=32, depth=2, cond_dim=16)
    cfg.pretrain.max_steps = 12
    cfg.pretrain.batch_size = 32
    cfg.finetune.batch_size = 16
    cfg.finetune.epochs = 1.0
    cfg.curiosity.pool_size = 32
    cfg.curiosity.refresh_every = 4
    cfg.curiosity.sample_steps = 4
    cfg.sampler.steps = 6
    for k, v in kw.items():
        setattr(cfg, k, v)
    return cfg


def public_data(seed=1):
    ds = make_toy_dataset(lengths=(40, 30, 50, 20), seed=seed, name="public")
    info = dataclasses.replace(ds.info, action_low=[-0.5, -0.5], action_high=[0.5, 0.5], env_id="Toy-v0")
    return dataclasses.replace(ds, info=info)


def sensitive_data(seed=2):
    ds = make_toy_dataset(lengths=(30,) * 12, seed=seed, sensitive=True, name="sensitive")
    return dataclasses.replace(ds, observations=ds.observations + 5.0, next_observations=ds.next_observations + 5.0)


@pytest.fixture(scope="module")
def pretrained() -> TransitionSynthesizer:
    torch.manual_seed(0)
    return TransitionSynthesizer(tiny_config()).pretrain(public_data(), progress=False)


def test_pretrain_refuses_sensitive_data():
    with pytest.raises(PrivacyError):
        TransitionSynthesizer(tiny_config()).pretrain(sensitive_data(), progress=False)


def test_save_load_gives_identical_samples(pretrained, tmp_path):
    path = pretrained.save(tmp_path / "m.pt")
    loaded = TransitionSynthesizer.load(path)
    a = pretrained.sample(64, seed=7).transition_matrix()
    b = loaded.sample(64, seed=7).transition_matrix()
    np.testing.assert_array_equal(a, b)
    c = pretrained.sample(64, seed=8).transition_matrix()
    assert not np.array_equal(a, c)
    h = TransitionSynthesizer.load(pretrained.save(tmp_path / "h.pt", ema_only=True))
    np.testing.assert_array_equal(h.sample(64, seed=7).transition_matrix(), a)
    assert loaded.config == pretrained.config and loaded.normalizer.source == pretrained.normalizer.source


def test_mia_adapter_uses_ema_weights(pretrained, tmp_path):
    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    x, sigma, noise = torch.randn(5, synth.data_dim), torch.full((5,), 0.3), torch.randn(5, synth.data_dim)
    d1, l1 = synth.denoise(x, sigma), synth.edm_loss(x, sigma, noise)
    with torch.no_grad():  # training weights move; the released EMA weights do not
        for p in synth.model.parameters():
            p.add_(1.0)
    torch.testing.assert_close(synth.denoise(x, sigma), d1)
    torch.testing.assert_close(synth.edm_loss(x, sigma, noise), l1)
    assert l1.shape == (5,) and synth.config.sigma_data == 1.0 and isinstance(synth.normalizer, Normalizer)
    torch.testing.assert_close(synth.denoise(x, sigma), synth.released.denoise(x, sigma))


def test_sample_postprocessing_clips_actions_thresholds_terminals_and_drops_nan(pretrained, monkeypatch):
    rows = torch.randn(20, pretrained.data_dim) * 10
    rows[3, 0] = float("nan")
    rows[7, 2] = float("inf")
    monkeypatch.setattr(pretrained, "sample_normalised", lambda n, **kw: rows[:n].clone())
    ds = pretrained.sample(20)
    assert ds.n_transitions == 18 and pretrained.last_sample_stats["nan_rows_dropped"] == 2
    assert ds.actions.min() >= -0.5 and ds.actions.max() <= 0.5
    assert set(np.unique(ds.terminals)) <= {False, True}
    expect = pretrained.normalizer.unnormalize(rows.numpy())
    np.testing.assert_allclose(ds.observations[0], expect[0, :4], rtol=1e-5)  # un-normalised before release
    assert ds.info.privacy_card["sample"]["nan_rows_dropped"] == 2
    assert ds.info.sensitive is False


def test_discrete_columns_come_from_public_data_and_are_snapped(monkeypatch):
    pub = public_data()
    pub = dataclasses.replace(pub, rewards=(np.arange(pub.n_transitions) % 7 == 0).astype(np.float32))
    synth = TransitionSynthesizer(tiny_config())
    synth.config.pretrain.max_steps = 2
    synth.pretrain(pub, progress=False)
    assert synth.discrete_values == {6: [0.0, 1.0]}  # reward column of the toy layout; terminal excluded
    rows = torch.randn(30, synth.data_dim) * 3
    monkeypatch.setattr(synth, "sample_normalised", lambda n, **kw: rows[:n].clone())
    ds = synth.sample(30)
    assert set(np.unique(ds.rewards).tolist()) <= {0.0, 1.0}
    synth.config.sampler.snap_discrete = False
    assert len(np.unique(synth.sample(30).rewards)) > 2


def test_space_mismatch_is_refused(pretrained):
    other = make_toy_dataset(lengths=(30,) * 4, obs_dim=3, sensitive=True)
    with pytest.raises(SpaceMismatch):
        pretrained.finetune(other, 10.0, 1e-5)


def test_finetune_without_public_normaliser_is_refused():
    with pytest.raises(PrivacyError, match="normaliser"):
        TransitionSynthesizer(tiny_config()).finetune(sensitive_data(), 10.0, 1e-5)


def test_ema_warmup_and_reset():
    net = torch.nn.Linear(2, 2)
    ema = EMA(net, decay=0.99, every=2)
    with torch.no_grad():
        net.weight.add_(1.0)
    ema.step(net)  # call 1: skipped (every=2)
    assert not torch.equal(ema.shadow.weight, net.weight)
    ema.step(net)  # call 2: decay min(0.99, 1/10) = 0.1 -> shadow moves 90% of the way
    w0 = net.weight - 1.0
    torch.testing.assert_close(ema.shadow.weight, w0 + 0.9)
    ema.reset(net)
    torch.testing.assert_close(ema.shadow.weight, net.weight)


def test_trajectory_unit_loss_uses_only_valid_rows_without_duplicates():
    from privsynth.synth.config import EDMConfig
    from privsynth.synth.edm import EDM

    picked = []

    class Spy(EDM):
        def random_loss(self, x0, generator=None, columns=None):
            picked.append(x0.detach().clone())
            return x0[..., 0]

    edm = Spy(torch.nn.Identity(), EDMConfig())
    loss = UnitLoss(edm, multiplicity=1, per_unit=4)
    x = torch.arange(2 * 6, dtype=torch.float32).reshape(2, 6, 1).expand(2, 6, 3).contiguous()
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    out = loss(x, mask)
    sel = picked[0][..., 0]
    valid_first = sel[0][sel[0] < 3]
    assert len(set(valid_first.tolist())) == 3  # all 3 valid rows of trajectory 0, once each
    assert len(set(sel[1].tolist())) == 4 and all(6 <= v < 12 for v in sel[1].tolist())
    assert out[0].item() == pytest.approx(1.0)  # mean of rows 0, 1, 2 (padding excluded)


def test_noise_multiplicity_averages_k_draws_per_record():
    from privsynth.synth.config import EDMConfig
    from privsynth.synth.edm import EDM

    shapes = []

    class Spy(EDM):
        def random_loss(self, x0, generator=None, columns=None):
            shapes.append(tuple(x0.shape))
            return torch.ones(x0.shape[:-1])

    loss = UnitLoss(Spy(torch.nn.Identity(), EDMConfig()), multiplicity=3)
    out = loss(torch.randn(5, 4))
    assert shapes == [(5, 3, 4)] and out.shape == (5,)


def test_resume_from_checkpoint_matches_uninterrupted_run(tmp_path, monkeypatch):
    cfg = tiny_config(pretrain_curiosity=False)
    cfg.pretrain.checkpoint_every = 4
    torch.manual_seed(0)
    full = TransitionSynthesizer(cfg).pretrain(public_data(), progress=False)
    ckpt = tmp_path / "ckpt.pt"
    calls = {"n": 0}
    real_step = EMA.step

    def crash(self, model):
        calls["n"] += 1
        if calls["n"] == 7:
            raise KeyboardInterrupt
        real_step(self, model)

    monkeypatch.setattr(EMA, "step", crash)
    torch.manual_seed(0)
    with pytest.raises(KeyboardInterrupt):
        TransitionSynthesizer(cfg).pretrain(public_data(), progress=False, checkpoint=ckpt)
    assert ckpt.exists()
    monkeypatch.setattr(EMA, "step", real_step)
    torch.manual_seed(123)  # a different global state: the checkpoint restores what matters
    resumed = TransitionSynthesizer(cfg).pretrain(public_data(), progress=False, checkpoint=ckpt)
    assert not ckpt.exists()
    for a, b in zip(full.model.parameters(), resumed.model.parameters()):
        torch.testing.assert_close(a, b)


# ------------------------------------------------------------------------------------------------ DP fine-tuning
dpsgd = pytest.importorskip("privsynth.privacy.dpsgd")


@pytest.mark.parametrize("unit,columns", [("transition", "all"), ("trajectory", "all"), ("transition", "state_action")])
def test_dp_finetune_keeps_public_normaliser_and_accounts(pretrained, tmp_path, unit, columns):
    import dp_accounting as dpa
    from dp_accounting.rdp import rdp_privacy_accountant

    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    synth.config.dp.trajectory_batch_size = 4
    synth.config.dp.fit_columns = columns
    mean0, std0 = synth.normalizer.mean.clone(), synth.normalizer.std.clone()
    ref = fit_public_normalizer([public_data()], synth.config.next_state)
    sens = sensitive_data()
    synth.finetune(sens, 10.0, 1e-3, unit, progress=False)
    # the normaliser is exactly the public one, not refitted on the (shifted) sensitive data
    assert torch.equal(synth.normalizer.mean, mean0) and torch.equal(synth.normalizer.std, std0)
    torch.testing.assert_close(synth.normalizer.mean, ref.mean)
    assert synth.normalizer.source.startswith("public:")
    card = synth.sample(50, seed=0).info.privacy_card
    assert card["private"] is True and card["unit"] == unit
    assert card["epsilon"] <= 10.0 + 1e-9
    # recompute epsilon from the card's own fields with an independent RDP accountant
    # (the Laplace count of the units, then the Poisson-sampled Gaussian run whose q and steps it set)
    event = dpa.SelfComposedDpEvent(
        dpa.PoissonSampledDpEvent(card["sample_rate"], dpa.GaussianDpEvent(card["noise_multiplier"])), card["steps"]
    )
    count = next(ev for ev in card["events"] if ev["mechanism"] == "laplace")
    assert count["sensitivity"] == 1.0 and count["scale"] == pytest.approx(1 / (0.02 * 10.0))
    eps = (rdp_privacy_accountant.RdpAccountant().compose(dpa.LaplaceDpEvent(count["scale"])).compose(event)
           .get_epsilon(card["delta"]))
    assert eps == pytest.approx(card["epsilon"], rel=1e-6)
    n_noisy = count["n_units_noisy"]  # q = B/Ñ: the exact N is private under add/remove
    batch = min(16 if unit == "transition" else 4, n_noisy)
    assert card["sample_rate"] == pytest.approx(batch / n_noisy)
    assert card["noise_multiplier"] > 0 and math.isfinite(card["noise_multiplier"])
    # the private phase's timings (measured on sensitive data, outside the mechanism) stay out of the card
    private = [ph for ph in card["phases"] if ph.get("private")]
    assert private and not any("seconds" in k for ph in private for k in ph)
    assert "seconds" in synth.history[-1]  # ... but the synthesizer's own history (reports, benchmarks) keeps them
    assert synth.history[-1]["fit_columns"] == columns


def test_state_action_fit_columns_leave_the_other_columns_out_of_the_gradient(pretrained):
    """dp.fit_columns = "state_action": the per-record loss (what DP-SGD clips) has no gradient through the reward,
    next-state and flag outputs, and a full one through the state and action outputs."""
    from privsynth.synth.config import EDMConfig
    from privsynth.synth.edm import EDM

    cols = pretrained._fit_columns("state_action")
    kept = pretrained.obs_dim + pretrained.act_dim
    assert cols.shape == (pretrained.data_dim,) and cols[:kept].eq(1).all() and cols[kept:].eq(0).all()
    assert pretrained._fit_columns("all") is None
    with pytest.raises(InvalidData, match="fit_columns"):
        pretrained._fit_columns("reward")

    class Shift(torch.nn.Module):  # F(x, c) = x + b: the gradient on b is the gradient on each output column
        def __init__(self, d):
            super().__init__()
            self.b = torch.nn.Parameter(torch.zeros(d))

        def forward(self, x, c_noise):
            return x + self.b

    d = pretrained.data_dim
    grads = {}
    for name, columns in (("state_action", cols), ("all", None)):
        net = Shift(d)
        torch.manual_seed(0)
        UnitLoss(EDM(net, EDMConfig()), columns=columns, multiplicity=2)(torch.randn(8, d)).sum().backward()
        grads[name] = net.b.grad.abs()
    assert grads["state_action"][kept:].max().item() == 0.0 and grads["state_action"][:kept].min().item() > 0.0
    assert grads["all"].min().item() > 0.0
    x0, sigma, noise = torch.randn(4, d), torch.full((4,), 0.7), torch.randn(4, d)
    edm = EDM(Shift(d), EDMConfig())
    err = (edm.denoise(x0 + 0.7 * noise, sigma) - x0).pow(2)
    torch.testing.assert_close(edm.loss(x0, sigma, noise, cols) / edm.loss(x0, sigma, noise),
                               err[:, :kept].mean(-1) / err.mean(-1))


def test_nonprivate_ablation_is_marked(pretrained, tmp_path):
    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    synth.config.private = False
    synth.config.finetune.max_steps = 3
    synth.finetune(sensitive_data(), 10.0, 1e-3, progress=False)
    card = synth.sample(10).info.privacy_card
    assert card["private"] is False and card["nonprivate_finetunes"] == 1 and synth.ledger is None


@pytest.mark.parametrize("columns", ["auto", "state_action"])
def test_nonprivate_ablation_fits_the_columns_a_dp_finetune_would(pretrained, tmp_path, columns):
    """The no-privacy control differs from the DP fine-tune in DP only: an explicit dp.fit_columns reaches its loss;
    "auto" left unresolved (no release route) is every column, as for a DP fine-tune."""
    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    synth.config.private = False
    synth.config.dp.fit_columns = columns
    synth.config.finetune.max_steps = 2
    seen = []
    real = synth.model.random_loss
    synth.model.random_loss = lambda x0, generator=None, columns=None: (seen.append(columns), real(x0, generator,
                                                                                                   columns))[1]
    synth.finetune(sensitive_data(), 10.0, 1e-3, progress=False)
    assert seen and synth.history[-1]["fit_columns"] == ("all" if columns == "auto" else "state_action")
    if columns == "auto":
        assert all(c is None for c in seen)
    else:
        kept = synth.obs_dim + synth.act_dim
        assert all(c is not None and c[:kept].eq(1).all() and c[kept:].eq(0).all() for c in seen)


def test_finecur_ablation_trains_with_curiosity_rows(pretrained, tmp_path):
    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    synth.config.finetune_curiosity = True
    synth.config.curiosity.refresh_every = 2
    synth.finetune(sensitive_data(), 10.0, 1e-3, progress=False)
    assert synth.history[-1]["finetune_curiosity"] is True
    assert synth.ledger.epsilon() <= 10.0 + 1e-9


def test_fit_public_stats_for_the_no_pretraining_ablation():
    synth = TransitionSynthesizer(tiny_config()).fit_public_stats([public_data()])
    assert synth.normalizer.source.startswith("public:") and synth.public_data == ["public"]
    with pytest.raises(PrivacyError):
        TransitionSynthesizer(tiny_config()).fit_public_stats([sensitive_data()])


def test_without_pretrained_weights_every_parameter_is_fine_tuned():
    """A partial setting (biases and norms only) keeps public weights; with no pre-training (the ablation) there
    are none to keep, so every parameter trains, and the history says so."""
    sens = sensitive_data()
    synth = TransitionSynthesizer(tiny_config()).fit_public_stats([public_data()])
    synth.config.dp.trainable = "bias_norm"
    assert TransitionSynthesizer(tiny_config()).config.dp.trainable == "all"  # the cpu preset's default (issue 37)
    fresh = TransitionSynthesizer(tiny_config())
    fresh._build(sens.obs_dim, sens.act_dim, sens.info)  # the same seeded initial weights
    synth.finetune(sens, 10.0, 1e-3, "transition", progress=False)
    assert synth.history[-1]["trainable"] == "all"
    assert not torch.equal(synth.model.net.inp.weight, fresh.model.net.inp.weight)  # a weight matrix moved


@pytest.mark.slow
@pytest.mark.parametrize("trainable", ["head", "bias_norm"])
def test_partial_dp_finetune_moves_only_the_chosen_parameters(pretrained, tmp_path, trainable):
    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    synth.config.dp.trainable = trainable
    before = {k: v.clone() for k, v in synth.model.net.named_parameters()}
    synth.finetune(sensitive_data(), 10.0, 1e-3, "transition", progress=False)
    net = synth.model.net
    last = f"blocks.{len(net.blocks) - 1}."
    for name, p in net.named_parameters():
        if trainable == "head":
            keep = name.startswith(last) or name.startswith("out_norm") or name.startswith("out.")
        else:
            keep = name.endswith("bias") or "norm" in name
        moved = not torch.equal(p, before[name])
        assert moved == keep, name
        assert p.requires_grad  # restored after fine-tuning
    assert synth.history[-1]["trainable"] == trainable
    assert synth.card()["config"]["dp"]["trainable"] == trainable


def test_cpu_preset_fine_tunes_with_curiosity_on_locomotion_and_the_demo_does_not():
    """FineCur is the cpu default on MuJoCo locomotion since the tenth transfer round (issue 37: 0.50 of the Hopper
    proxy's gap against 0.33) and off on PointMaze since the eleventh (a default umaze release lost its fidelity);
    the demo keeps it off for its time, and a model learnt from scratch has no public model to be curious from
    (privsynth.synth.scratch)."""
    from privsynth.synth.config import demo_config
    from privsynth.synth.scratch import scratch_config

    assert cpu_config().finetune_curiosity == "auto"
    assert demo_config().finetune_curiosity is False
    assert scratch_config(cpu_config()).finetune_curiosity is False


def test_auto_finecur_reads_the_environment_only():
    """``"auto"`` resolves from the sensitive data's environment (a public fact): on for Hopper, off for PointMaze
    and for data without an environment; a set value is kept."""
    from test_postprocess import _hopper_rollout

    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
    from privsynth.synth.curiosity import finetune_curiosity_for

    hopper = _hopper_rollout(20, seed=1).info
    maze = generate_pointmaze(PointMazeConfig(maze="umaze", steps=20, seed=2, ref_episodes=1), progress=False).info
    assert finetune_curiosity_for("auto", hopper) is True
    assert finetune_curiosity_for("auto", maze) is False
    assert finetune_curiosity_for("auto", sensitive_data().info) is False  # no environment
    assert finetune_curiosity_for("auto", dataclasses.replace(hopper, env_id="NoSuchEnv-v0")) is False  # cannot make
    assert finetune_curiosity_for(True, maze) is True and finetune_curiosity_for(False, hopper) is False


def test_auto_fit_columns_read_public_facts_only():
    """``dp.fit_columns = "auto"`` (every preset but the paper's): the state and action columns for a transition-unit
    MuJoCo locomotion release whose post-processing recomputes next state, reward and flag above ε = 1; every column
    otherwise (PointMaze, data without an environment, an environment this machine cannot make, a schema, a
    trajectory unit, no or a partial repair, ε ≤ 1); a set value is kept."""
    from test_postprocess import _hopper_rollout

    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
    from privsynth.release.postprocess import LOW_EPSILON, SCRATCH_MAZE_DEFAULT, default_steps
    from privsynth.synth.config import demo_config, paper_config
    from privsynth.release.postprocess import fit_columns_for

    hopper = _hopper_rollout(20, seed=1).info
    maze = generate_pointmaze(PointMazeConfig(maze="umaze", steps=20, seed=2, ref_episodes=1), progress=False).info
    repair = default_steps(hopper, epsilon=10.0)

    def auto(info, steps=repair, epsilon=10.0, unit="transition"):
        return fit_columns_for("auto", info, steps=steps, epsilon=epsilon, unit=unit)

    assert auto(hopper) == "state_action" and auto(hopper, steps=True) == "state_action"
    assert auto(hopper, steps=default_steps(hopper, epsilon=LOW_EPSILON), epsilon=LOW_EPSILON) == "all"
    assert auto(hopper, steps="clip,resimulate") == "all" and auto(hopper, steps=None) == "all"
    assert auto(hopper, unit="trajectory") == "all"
    assert auto(maze, steps=SCRATCH_MAZE_DEFAULT) == "all"
    assert auto(sensitive_data().info) == "all"  # no environment
    assert auto(dataclasses.replace(hopper, env_id="NoSuchEnv-v0")) == "all"  # cannot make
    assert auto(dataclasses.replace(hopper, schema={"columns": []})) == "all"  # a schema: one-hot columns
    assert fit_columns_for("all", hopper, steps=repair, epsilon=10.0, unit="transition") == "all"
    assert fit_columns_for("state_action", maze, steps=None, epsilon=1.0, unit="transition") == "state_action"
    assert cpu_config().dp.fit_columns == demo_config().dp.fit_columns == "auto"
    assert paper_config().dp.fit_columns == "all"


def test_auto_fit_columns_outside_a_release_fit_every_column(pretrained, tmp_path):
    """A fine-tune called directly (no release, so no repair) with ``"auto"`` fits every column."""
    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    assert synth.config.dp.fit_columns == "auto"
    synth.finetune(sensitive_data(), 10.0, 1e-3, progress=False)
    assert synth.history[-1]["fit_columns"] == "all"


def test_auto_finecur_runs_the_mixer_on_locomotion_only(pretrained, tmp_path):
    """The preset's ``"auto"``: a fine-tune on data without a MuJoCo environment runs without the mixer, one on
    Hopper rows with it (the history says which)."""
    from test_postprocess import _hopper_rollout

    synth = TransitionSynthesizer.load(pretrained.save(tmp_path / "m.pt"))
    synth.config.finetune_curiosity = "auto"
    synth.config.finetune.max_steps = 3
    synth.finetune(sensitive_data(), 10.0, 1e-3, progress=False)
    assert synth.history[-1]["finetune_curiosity"] is False
    assert synth.config.finetune_curiosity == "auto"  # the setting is kept; the history holds what ran

    torch.manual_seed(0)
    hopper = TransitionSynthesizer(tiny_config()).pretrain(_hopper_rollout(120, seed=1), progress=False)
    assert hopper.config.finetune_curiosity == "auto"
    hopper.config.finetune.max_steps = 3
    hopper.finetune(_hopper_rollout(120, seed=2).mark_sensitive(), 10.0, 1e-3, progress=False)
    assert hopper.history[-1]["finetune_curiosity"] is True


def test_auto_finecur_is_off_at_a_small_budget():
    """``"auto"`` FineCur reads the budget too (public): off at ε ≤ 1 on locomotion, the bound the rollout default
    uses (docs/transfer.md, twelfth round); a set value is kept at any budget."""
    from test_postprocess import _hopper_rollout

    from privsynth.release.postprocess import LOW_EPSILON
    from privsynth.synth.curiosity import FINECUR_LOW_EPSILON, finetune_curiosity_for

    assert FINECUR_LOW_EPSILON == LOW_EPSILON
    hopper = _hopper_rollout(20, seed=1).info
    assert finetune_curiosity_for("auto", hopper, LOW_EPSILON) is False
    assert finetune_curiosity_for("auto", hopper, 0.3) is False
    assert finetune_curiosity_for("auto", hopper, LOW_EPSILON * 1.01) is True
    assert finetune_curiosity_for("auto", hopper) is True  # no budget given: the environment decides
    assert finetune_curiosity_for(True, hopper, 0.3) is True
