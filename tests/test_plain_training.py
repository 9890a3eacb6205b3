"""The shared non-private training loop: it trains, reports its phase, and resumes from its checkpoint exactly."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from privsynth.synth.config import TrainConfig
from privsynth.synth.ema import EMA
from privsynth.synth.plain_training import train_plain

DATA = torch.randn(64, 3, generator=torch.Generator().manual_seed(0)) @ torch.tensor([[1.0], [-2.0], [0.5]])
X = torch.cat([torch.randn(64, 3, generator=torch.Generator().manual_seed(0)), DATA], 1)
TC = TrainConfig(epochs=100, batch_size=16, lr=1e-2, max_steps=12, ema_every=1, checkpoint_every=5)


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Linear(3, 1)


def _loss(model):
    return lambda b: ((model(b[:, :3]) - b[:, 3:]) ** 2).mean()


def test_trains_and_reports_the_phase():
    model = _model()
    ema = EMA(model, decay=0.9, every=1)
    first = _loss(model)(X).item()
    stats = train_plain(model, ema, X, TC, loss=_loss(model), seed=0)
    assert stats["steps"] == 12 and stats["batch_size"] == 16 and stats["epochs"] == 3.0
    assert stats["final_loss"] < first and stats["curiosity_refreshes"] == 0


def test_resume_from_checkpoint_matches_an_uninterrupted_run(tmp_path):
    ckpt = tmp_path / "ckpt.pt"
    ref = _model()
    train_plain(ref, EMA(ref, decay=0.9, every=1), X, TC, loss=_loss(ref), seed=0, checkpoint=ckpt)
    assert not ckpt.exists()  # removed at the end

    crashed = _model()
    calls = {"n": 0}

    def failing(b):
        calls["n"] += 1
        if calls["n"] == 8:
            raise RuntimeError("killed")
        return _loss(crashed)(b)

    with pytest.raises(RuntimeError):
        train_plain(crashed, EMA(crashed, decay=0.9, every=1), X, TC, loss=failing, seed=0, checkpoint=ckpt)
    assert ckpt.exists()  # the state at step 5

    resumed = _model()
    ema = EMA(resumed, decay=0.9, every=1)
    stats = train_plain(resumed, ema, X, TC, loss=_loss(resumed), seed=0, checkpoint=ckpt)
    assert stats["steps"] == 12
    for a, b in zip(ref.state_dict().values(), resumed.state_dict().values()):
        assert torch.equal(a, b)
