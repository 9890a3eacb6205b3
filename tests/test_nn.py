"""The one MLP builder (privsynth.nn.mlp): layer layout, activations, and the layouts shipped checkpoints rely on."""
from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest
import torch
from torch import nn

from privsynth.nn import mlp
from privsynth.synth.transition import TransitionSynthesizer
from privsynth.synth.trajectory.layers import mlp2


def test_layout_is_linear_at_even_indices():
    net = mlp(5, (7, 3), 2)
    assert [type(m) for m in net] == [nn.Linear, nn.ReLU, nn.Linear, nn.ReLU, nn.Linear]
    assert list(net.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias", "4.weight", "4.bias"]
    assert [tuple(net[i].weight.shape) for i in (0, 2, 4)] == [(7, 5), (3, 7), (2, 3)]


def test_activation_factory_called_once_per_hidden_layer():
    net = mlp(4, (8, 8, 8), 1, act=functools.partial(nn.LeakyReLU, 0.2))
    acts = [m for m in net if isinstance(m, nn.LeakyReLU)]
    assert len(acts) == 3 and len({id(a) for a in acts}) == 3 and all(a.negative_slope == 0.2 for a in acts)


def test_no_hidden_layer_and_output_activation():
    assert [type(m) for m in mlp(3, (), 2)] == [nn.Linear]
    net = mlp(3, (4,), 2, out_act=nn.Tanh())
    assert isinstance(net[-1], nn.Tanh)
    assert torch.all(net(torch.randn(10, 3)).abs() <= 1)


def test_same_seed_same_weights_as_a_hand_built_sequential():
    """The builder creates its layers in the order a hand-written Sequential would, so seeded inits are unchanged."""
    torch.manual_seed(0)
    a = mlp(6, (16,), 4, act=nn.GELU)
    torch.manual_seed(0)
    b = nn.Sequential(nn.Linear(6, 16), nn.GELU(), nn.Linear(16, 4))
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))
    torch.manual_seed(0)
    c = mlp2(6, 16, 4)
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), c.state_dict().values()))


REFERENCE = Path(__file__).with_name("pretrained_reference.json")
PRETRAINED = Path(__file__).resolve().parents[1] / "pretrained"


STUDY_CHECKPOINTS = Path(__file__).resolve().parents[1] / "evaluation" / "results" / "utility_study" / "checkpoints"


@pytest.mark.parametrize("name", ["umaze", "medium", "large", "umaze-absolute", "umaze-delta-5ep"])
def test_shipped_pointmaze_synthesizer_gives_the_outputs_it_gave_before_the_shared_builder(name):
    """The denoiser (whose noise MLP is built by ``mlp``) loads its shipped weights strictly and reproduces recorded
    outputs: those of the absolute umaze model were recorded with the code before the builder was shared, the Δs
    models' when they were shipped, and the utility study's kept 5-epoch umaze model (the shipped one until the
    10-epoch rebuild) still gives its recorded outputs (tests/pretrained_reference.json says which)."""
    root = STUDY_CHECKPOINTS if name == "umaze-delta-5ep" else PRETRAINED
    path = root / f"pointmaze-{name}" / "model.pt"
    if not path.is_file():
        pytest.skip("shipped pre-trained synthesizers not present")
    synth = TransitionSynthesizer.load(path)
    x = torch.randn(8, synth.data_dim, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = synth.denoise(x, torch.full((8,), 0.7))
    expected = torch.tensor(json.loads(REFERENCE.read_text())["outputs"][name])
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-6)
