"""The fragment models (diffusion transformer, temporal U-Net, DP-Transformer) train, sample, save and load; the
fragment items carry the right link conditions."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.errors import SpaceMismatch
from privsynth.synth.config import EDMConfig
from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config
from privsynth.synth.trajectory.config import TransformerConfig, UNetConfig
from privsynth.synth.trajectory.transformer import DiffusionTransformer
from privsynth.synth.trajectory.unet import TemporalConv, TemporalUNet

O, A = 3, 2


@pytest.fixture(scope="module")
def data():
    pub = make_toy_dataset(lengths=(9, 6, 11, 8, 7), obs_dim=O, act_dim=A, seed=1)
    sens = make_toy_dataset(lengths=(7, 5, 10, 4, 6, 8, 9, 5), obs_dim=O, act_dim=A, seed=2, sensitive=True, name="s")
    return pub, sens


@pytest.mark.parametrize("backbone", ["transformer", "unet", "dp-transformer"])
def test_backbone_trains_a_few_steps_samples_and_round_trips(backbone, data, tmp_path):
    pub, sens = data
    synth = TrajectorySynthesizer(tiny_config(backbone)).pretrain(pub, progress=False)
    before = [p.detach().clone() for p in synth.model.parameters()]
    synth.finetune(sens, 5.0, 1e-3, progress=False)
    moved = sum(float((p.detach() - b).abs().sum()) for p, b in zip(synth.model.parameters(), before))
    assert moved > 0
    assert synth.history[-1]["steps"] >= 1 and np.isfinite(synth.last_finetune_loss)
    ds = synth.sample(3, seed=5)
    assert ds.n_episodes == 3 and (ds.obs_dim, ds.act_dim) == (O, A)
    assert np.isfinite(ds.transition_matrix()).all()
    path = synth.save(tmp_path / "s.pt")
    again = TrajectorySynthesizer.load(path)
    assert again.name == synth.name and again.ledger.to_dict() == synth.ledger.to_dict()
    ds2 = again.sample(3, seed=5)
    np.testing.assert_allclose(ds2.observations, ds.observations, rtol=1e-5, atol=1e-5)


def test_fragment_items_link_to_previous_transition(data):
    pub, _ = data
    synth = TrajectorySynthesizer(tiny_config()).pretrain(pub, progress=False)
    items = synth.fragment_items(pub)
    rows = synth.model_rows(pub)
    h = synth.config.horizon
    assert items.data.shape[1:] == (h, synth.data_dim)
    first = items.cond[:, -1] == 0
    assert first.sum() == pub.n_episodes  # one link-less fragment per trajectory
    # fragment 2 of episode 0 (offset h) links to row h-1 of that episode
    np.testing.assert_allclose(items.cond[1, :-1].numpy(), rows[h - 1], rtol=1e-6)
    np.testing.assert_allclose(items.data[1, 0].numpy(), rows[h], rtol=1e-6)
    # end flag: 1 exactly at each trajectory's last transition
    assert rows[:, -1].sum() == pub.n_episodes
    per = items.per_trajectory()
    assert per[0].shape[0] == pub.n_episodes and int(per[2].sum()) == pub.n_transitions


@pytest.mark.parametrize("tokens", ["component", "step"])
def test_transformer_shapes_and_leading_batch_dims(tokens):
    torch.manual_seed(0)
    net = DiffusionTransformer(O, A, 4, TransformerConfig(width=16, depth=1, heads=2, tokens=tokens, fourier_dim=8))
    d = 2 * O + A + 3
    assert net.n_tokens == (1 + 5 + 20 if tokens == "component" else 1 + 1 + 4)
    x, c, cond = torch.randn(2, 3, 4, d), torch.randn(2, 3), torch.randn(2, 3, d + 1)
    out = net(x, c, cond)
    assert out.shape == x.shape
    flat = net(x.reshape(6, 4, d), c.reshape(6), cond.reshape(6, d + 1))
    torch.testing.assert_close(flat.reshape(2, 3, 4, d), out, rtol=1e-5, atol=1e-6)


def test_temporal_conv_equals_conv1d():
    torch.manual_seed(0)
    tc = TemporalConv(3, 5, kernel=3, stride=2)
    conv = torch.nn.Conv1d(3, 5, 3, stride=2, padding=1)
    with torch.no_grad():
        conv.weight.copy_(tc.proj.weight.reshape(5, 3, 3))
        conv.bias.copy_(tc.proj.bias)
    x = torch.randn(2, 8, 3)
    torch.testing.assert_close(tc(x), conv(x.transpose(1, 2)).transpose(1, 2), rtol=1e-5, atol=1e-6)


def test_unet_rejects_bad_horizon_and_spaces_are_checked(data):
    with pytest.raises(ValueError):
        TemporalUNet(9, 5, UNetConfig(mults=(1, 2)))
    pub, _ = data
    synth = TrajectorySynthesizer(tiny_config()).pretrain(pub, progress=False)
    other = make_toy_dataset(lengths=(5, 5), obs_dim=O + 1, act_dim=A, sensitive=True)
    with pytest.raises(SpaceMismatch):
        synth.finetune(other, 1.0, 1e-3, progress=False)
    _ = EDMConfig
