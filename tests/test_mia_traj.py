"""White-box attacks on the trajectory synthesizers (PrivORL-j, DP-Transformer) through their registered adapter."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia import LossAttack, PIAAttack, as_adapter, run_audit
from privsynth.evaluation.mia.adapters import ADAPTERS, FragmentAdapter
from privsynth.synth.config import TrainConfig
from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config

O, A = 2, 1


def memorising(backbone: str, members):
    """Plain (non-private) training on the members themselves, to memorisation: the known positive case."""
    cfg = tiny_config(backbone)
    cfg.pretrain_curiosity = False
    cfg.pretrain = TrainConfig(epochs=1000.0, batch_size=16, lr=3e-3, ema_every=1, ema_decay=0.9, max_steps=300)
    return TrajectorySynthesizer(cfg).pretrain(members, progress=False)


@pytest.fixture(scope="module")
def sets():
    members = make_toy_dataset(lengths=(8,) * 8, obs_dim=O, act_dim=A, seed=1, name="m")
    non_members = make_toy_dataset(lengths=(8,) * 8, obs_dim=O, act_dim=A, seed=2, name="n")
    return members, non_members


def test_registry_picks_the_fragment_adapter(sets):
    members, _ = sets
    synth = TrajectorySynthesizer(tiny_config()).pretrain(members, progress=False)
    adapter = as_adapter(synth, "trajectory")
    assert isinstance(adapter, FragmentAdapter) and TrajectorySynthesizer in ADAPTERS
    with pytest.raises(InvalidData, match="trajectory"):
        as_adapter(synth, "transition")
    # packing is lossless: the adapter's loss is the model's loss on the same fragments, σ and noise
    rows, units = adapter.records(members)
    items = synth.fragment_items(members)
    assert rows.shape[0] == items.data.shape[0] and np.array_equal(units, items.episode.numpy())
    x = adapter.encode(rows)
    sigma = torch.full((x.shape[0],), 0.3)
    noise = torch.randn(x.shape, generator=torch.Generator().manual_seed(0))
    direct = synth.released.eval().loss(items.data, items.cond, items.mask, sigma,
                                        noise[:, : items.data[0].numel()].reshape(items.data.shape))
    assert torch.allclose(adapter.loss(x, sigma, noise), direct)
    # ε̂ is zero on the condition, the mask and the padding
    eps = adapter.eps_hat(x, sigma)
    hd = items.data[0].numel()
    assert torch.all(eps[:, hd:] == 0)


@pytest.mark.slow
@pytest.mark.parametrize("backbone", ["transformer", "dp-transformer"])
def test_memorised_trajectories_are_found(sets, backbone):
    members, non_members = sets
    synth = memorising(backbone, members)
    attacks = [LossAttack(sigma=0.1, repeats=8)] + ([PIAAttack(sigmas=(0.25, 0.5))] if backbone != "dp-transformer" else [])
    res = run_audit(synth, members, non_members, attacks, unit="trajectory", n_boot=0)["attacks"]
    assert res["loss"]["n_members"] == 8 and res["loss"]["auc"] > 0.85
    if "pia" in res:
        assert res["pia"]["auc"] > 0.7
    if backbone == "dp-transformer":
        with pytest.raises(InvalidData, match="autoregressive"):
            run_audit(synth, members, non_members, [PIAAttack()], unit="trajectory")


def test_untrained_on_members_is_chance(sets):
    members, non_members = sets
    other = make_toy_dataset(lengths=(8,) * 8, obs_dim=O, act_dim=A, seed=3, name="o")
    synth = TrajectorySynthesizer(tiny_config()).pretrain(other, progress=False)
    res = run_audit(synth, members, non_members, [LossAttack(sigma=0.1, repeats=4)], unit="trajectory")["attacks"]
    assert abs(res["loss"]["auc"] - 0.5) < 0.3  # 8 vs 8 trajectories: wide null band


def test_audit_cli_loads_a_trajectory_checkpoint(sets, tmp_path):
    import json

    from privsynth.cli import main
    from privsynth.evaluation.runner import save_dataset

    members, non_members = sets
    synth = TrajectorySynthesizer(tiny_config("dp-transformer")).pretrain(members, progress=False)
    path = synth.save(tmp_path / "traj.pt")
    save_dataset(members, tmp_path / "m.npz")
    save_dataset(non_members, tmp_path / "n.npz")
    out = tmp_path / "a.json"
    assert main(["audit", "--checkpoint", str(path), "--members", str(tmp_path / "m.npz"), "--non-members",
                 str(tmp_path / "n.npz"), "--unit", "trajectory", "--attacks", "loss", "--repeats", "1",
                 "--bootstrap", "10", "--out", str(out)]) == 0
    res = json.loads(out.read_text())["white_box"]
    assert res["unit"] == "trajectory" and res["attacks"]["loss"]["n_members"] == 8
    assert main(["audit", "--checkpoint", str(path), "--members", str(tmp_path / "m.npz"), "--non-members",
                 str(tmp_path / "n.npz"), "--attacks", "loss", "--out", str(out)]) == 2  # transition unit refused
