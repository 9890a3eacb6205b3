"""PrivORL-j partial DP fine-tuning: with ``dp.trainable = "bias_norm"`` only biases and normalisation parameters
move and the DP event is accounted as for full fine-tuning."""
from __future__ import annotations

import pytest
import torch

from conftest import make_toy_dataset
from privsynth.errors import InvalidData
from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config


def _data():
    pub = make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=3, act_dim=2, seed=1)
    sens = make_toy_dataset(lengths=(7, 5, 10, 4, 8, 6), obs_dim=3, act_dim=2, seed=2, sensitive=True)
    return pub, sens


def _cfg(trainable):
    cfg = tiny_config()
    cfg.pretrain_curiosity = False
    cfg.dp.trainable = trainable
    return cfg


def test_bias_norm_moves_only_biases_and_norms_and_is_accounted():
    pub, sens = _data()
    torch.manual_seed(0)
    s = TrajectorySynthesizer(_cfg("bias_norm")).pretrain(pub, progress=False)
    before = {k: v.clone() for k, v in s.model.named_parameters()}
    s.finetune(sens, 3.0, 1e-3, progress=False)
    moved = {k for k, v in s.model.named_parameters() if not torch.equal(v, before[k])}
    keep = {k for k in before if k.endswith("bias") or "norm" in k}
    assert moved and moved <= keep
    assert all(p.requires_grad for p in s.model.parameters())  # restored
    h = s.history[-1]
    assert h["trainable"] == "bias_norm" and h["epsilon"] <= 3.0 + 1e-9
    assert s.ledger.epsilon() == pytest.approx(h["epsilon"])


def test_an_unknown_trainable_setting_is_refused_before_any_step():
    pub, sens = _data()
    s = TrajectorySynthesizer(_cfg("head")).pretrain(pub, progress=False)  # "head" is a PrivORL-n setting
    with pytest.raises(InvalidData, match="'all' or 'bias_norm'"):
        s.finetune(sens, 3.0, 1e-3, progress=False)
    assert s.ledger is None or s.ledger.epsilon() == 0.0  # nothing was spent


def test_cpu_preset_fine_tunes_what_the_transfer_suite_chose():
    """PrivORL-j's cpu preset DP fine-tunes every parameter for 100 epochs (docs/transfer.md, ninth round:
    transfer_privorl_j.yaml chose it over biases and norms for 10); the unscreened backbones keep the earlier preset."""
    from privsynth.synth.trajectory.config import cpu_config

    cfg = cpu_config()
    assert (cfg.dp.trainable, cfg.finetune.epochs, cfg.dp.batch_size) == ("all", 100.0, 32)
    for backbone in ("unet", "dp-transformer"):
        other = cpu_config(backbone)
        assert (other.dp.trainable, other.finetune.epochs) == ("bias_norm", 10.0)


def test_the_no_privacy_ablation_runs_the_dp_schedule_without_a_ledger(tmp_path):
    """``private = False`` (the no-DP control): as many steps as the DP fine-tune's schedule (epochs x trajectories /
    batch), the same parameters trainable, no ledger, a card that says not private, and no loss on it."""
    pub, sens = _data()
    torch.manual_seed(0)
    cfg = _cfg("bias_norm")
    cfg.private = False
    cfg.finetune.epochs = 4.0
    s = TrajectorySynthesizer(cfg).pretrain(pub, progress=False)
    before = {k: v.clone() for k, v in s.model.named_parameters()}
    s.finetune(sens, 3.0, 1e-3, progress=False)
    moved = {k for k, v in s.model.named_parameters() if not torch.equal(v, before[k])}
    assert moved and moved <= {k for k in before if k.endswith("bias") or "norm" in k}
    assert all(p.requires_grad for p in s.model.parameters())
    h = s.history[-1]
    assert h["private"] is False and h["trajectories"] == sens.n_episodes == 6
    assert h["steps"] == max(1, round(4.0 * 6 / cfg.dp.batch_size))
    assert s.ledger is None
    card = s.sample(2, seed=0).info.privacy_card
    assert card["private"] is False
    fin = [p for p in card["phases"] if p["phase"] == "finetune"]
    assert fin and not any("loss" in k for p in fin for k in p)
    from privsynth.errors import PrivacyError
    from privsynth.privacy.guard import guarded_save_model

    with pytest.raises(PrivacyError):  # a control: the release guard refuses to write it as a DP model
        guarded_save_model(s, tmp_path / "nodp.pt", 10.0, 1e-3)
    assert not (tmp_path / "nodp.pt").exists()
