"""DP fine-tuning with low-rank adapters (``dp.trainable = "lora"``, privsynth.synth.lora): the adapters start at the
pre-trained function, merge exactly, receive the DP noise like every trained parameter, move the weight matrices only
by a rank-r update, leave a plain network (model and EMA) behind, and a failed run leaves no trace."""
from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from privsynth.privacy import dpsgd
from privsynth.synth import TransitionSynthesizer
from privsynth.synth import lora
from privsynth.synth.lora import LoRALinear
from test_finetune_rollback import _assert_same, _raise_after, _state
from test_transition_synth import public_data, sensitive_data, tiny_config

EPS, DELTA = 5.0, 1e-3


@pytest.fixture(scope="module")
def pretrained() -> TransitionSynthesizer:
    torch.manual_seed(0)
    cfg = tiny_config()
    cfg.finetune.ema_every = 1
    cfg.dp.trainable = "lora"
    cfg.dp.lora_rank = 2
    return TransitionSynthesizer(cfg).pretrain(public_data(), progress=False)


def _net() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(5, 7), nn.SiLU(), nn.Sequential(nn.LayerNorm(7), nn.Linear(7, 3)))


def test_adapters_start_at_the_pretrained_function_and_merge_exactly():
    net, x = _net(), torch.randn(4, 5)
    y0 = net(x).detach()
    params = lora.attach(net, rank=2)
    assert len(params) == 4 and sum(isinstance(m, LoRALinear) for m in net.modules()) == 2
    assert torch.allclose(net(x), y0)  # up = 0: the same function
    with torch.no_grad():
        for p in params:
            p.normal_()
    y1 = net(x).detach()
    assert not torch.allclose(y1, y0)
    lora.merge(net)
    assert not any(isinstance(m, LoRALinear) for m in net.modules())
    assert [type(m) for m in net.modules()].count(nn.Linear) == 2
    assert torch.allclose(net(x), y1, atol=1e-5)


def test_detach_restores_the_base_weights():
    net = _net()
    w = [p.clone() for p in net.parameters()]
    params = lora.attach(net, rank=3)
    with torch.no_grad():
        for p in params:
            p.normal_()
    lora.detach(net)
    assert all(torch.equal(a, b) for a, b in zip(w, net.parameters()))


def test_lora_finetune_is_a_rank_r_update_accounted_as_a_full_one(pretrained):
    synth = copy.deepcopy(pretrained)
    before = {k: v.clone() for k, v in synth.model.net.named_parameters()}
    synth.finetune(sensitive_data(), EPS, DELTA, progress=False)
    h = synth.history[-1]
    assert h["trainable"] == "lora" and h["epsilon"] <= EPS + 1e-9
    assert synth.ledger.epsilon() <= EPS + 1e-9 and len(synth.ledger.events) == 2  # the DP count, then DP-SGD
    # a plain network again, in the model and its EMA copy, with the same parameter names
    for m in (synth.model.net, synth.ema.shadow.net):
        assert not any(isinstance(x, LoRALinear) for x in m.modules())
    after = dict(synth.model.net.named_parameters())
    assert after.keys() == before.keys()
    assert all(p.requires_grad for p in synth.model.parameters())
    moved = 0
    for k, w in after.items():
        if w.ndim == 2:  # weight matrices moved only through the rank-2 adapters
            d = (w - before[k]).detach()
            moved += int(d.abs().max() > 0)
            assert torch.linalg.matrix_rank(d, atol=1e-6 * max(1.0, float(w.abs().max()))) <= 2, k
            # the EMA restarts from the model's weights, then averages the adapters: a rank-2 update of them too
            e = synth.ema.shadow.net.get_parameter(k) - before[k]
            assert torch.linalg.matrix_rank(e, atol=1e-6 * max(1.0, float(w.abs().max()))) <= 2, k
    assert moved > 0
    rows = synth.sample(50, seed=0)
    assert rows.observations.shape[0] == 50 and torch.isfinite(torch.as_tensor(rows.observations)).all()


def test_every_trained_parameter_gets_the_dp_noise(pretrained, monkeypatch):
    """The noise is drawn for exactly the adapters, the biases and the LayerNorm parameters, each with
    std σC/B > 0: the frozen base matrices get none, and no trained coordinate escapes it."""
    synth = copy.deepcopy(pretrained)
    net = synth.model.net
    n_linear = sum(isinstance(m, nn.Linear) for m in net.modules())
    r = synth.config.dp.lora_rank
    expect = sorted([r * m.in_features for m in net.modules() if isinstance(m, nn.Linear)]
                    + [m.out_features * r for m in net.modules() if isinstance(m, nn.Linear)]
                    + [p.numel() for n, p in net.named_parameters() if n.endswith("bias") or "norm" in n])
    drawn: list[tuple[int, float]] = []
    cls = next(c for c in vars(dpsgd).values() if isinstance(c, type) and hasattr(c, "_draw_noise"))
    real = cls._draw_noise

    def spy(self, buf, std):
        drawn.append((buf.numel(), std))
        real(self, buf, std)

    monkeypatch.setattr(cls, "_draw_noise", spy)
    synth.finetune(sensitive_data(), EPS, DELTA, progress=False)
    first_step = sorted(n for n, _ in drawn[: len(expect)])
    assert n_linear > 0 and first_step == expect
    assert all(std > 0 for _, std in drawn)


def test_a_failed_lora_finetune_leaves_no_trace(pretrained, monkeypatch):
    synth = copy.deepcopy(pretrained)
    before = _state(synth)
    _raise_after(synth, monkeypatch, 2, RuntimeError("disk full"))
    with pytest.raises(RuntimeError, match="disk full"):
        synth.finetune(sensitive_data(), EPS, DELTA, progress=False)
    _assert_same(before, _state(synth))
    assert not any(isinstance(m, LoRALinear) for m in synth.model.modules())
    assert not any(isinstance(m, LoRALinear) for m in synth.ema.shadow.modules())


def test_lora_without_pretrained_weights_trains_every_parameter():
    cfg = tiny_config()
    cfg.dp.trainable = "lora"
    synth = TransitionSynthesizer(cfg)
    synth.fit_public_stats([public_data()])  # the DPDM ablation: a normaliser, no trained weights
    synth.finetune(sensitive_data(), EPS, DELTA, progress=False)
    assert synth.history[-1]["trainable"] == "all"


def test_a_denoiser_with_adapters_samples_unfolded_and_folds_again_once_merged(pretrained):
    """FineCur draws pools during the DP fine-tune; with adapters attached the folded sampler read weights the
    adapters do not have ('LoRALinear' has no 'weight'). Such a network is sampled as a module, and the same function
    folds again after the merge."""
    from privsynth.synth.sampling import sampling_net

    edm = copy.deepcopy(pretrained.model)
    x, c = torch.randn(6, edm.net.proj.in_features), torch.full((6,), 0.3)
    assert edm.net.foldable and sampling_net(edm) is not edm.net
    params = lora.attach(edm.net, rank=2)
    with torch.no_grad():
        for p in params:
            p.normal_(std=0.1)
    assert not edm.net.foldable and sampling_net(edm) is edm.net
    y = edm.net(x, c).detach()
    lora.merge(edm.net)
    assert edm.net.foldable
    assert torch.allclose(sampling_net(edm)(x, c), y, atol=1e-5)
