"""Curiosity (RND): scoring is pure, training lowers the score, exactly round(ρ·B) batch rows are replaced by
top-scored synthetic rows (PrivORL section V-B)."""
from __future__ import annotations

import pytest
import torch

from privsynth.synth.config import CuriosityConfig
from privsynth.synth.curiosity import RND, CuriosityMixer, n_replaced


def test_rnd_shapes_and_deeper_target():
    cfg = CuriosityConfig()
    rnd = RND(7, cfg)
    n_target = sum(isinstance(m, torch.nn.Linear) for m in rnd.target)
    n_pred = sum(isinstance(m, torch.nn.Linear) for m in rnd.predictor)
    assert n_target > n_pred
    assert rnd.target[-1].out_features == rnd.predictor[-1].out_features == 32
    assert all(not p.requires_grad for p in rnd.target.parameters())
    assert rnd.score(torch.randn(11, 7)).shape == (11,)


def test_scoring_does_not_train_and_fit_lowers_scores():
    rnd = RND(5, CuriosityConfig(lr=1e-2))
    x = torch.randn(64, 5)
    before = [p.clone() for p in rnd.predictor.parameters()]
    s1, s2 = rnd.score(x), rnd.score(x)
    torch.testing.assert_close(s1, s2)
    assert all(torch.equal(a, b) for a, b in zip(before, rnd.predictor.parameters()))
    rnd.fit(x, steps=200)
    assert float(rnd.score(x).mean()) < 0.5 * float(s1.mean())
    # rows far from what the predictor saw stay novel
    assert float(rnd.score(x + 5).mean()) > float(rnd.score(x).mean())


@pytest.mark.parametrize("rate,batch", [(0.3, 128), (0.3, 10), (0.5, 7), (0.0, 16), (1.0, 8)])
def test_mixer_replaces_exactly_rate_of_the_batch_with_top_scored_rows(rate, batch):
    cfg = CuriosityConfig(rate=rate, pool_size=200)
    rnd = RND(4, cfg)
    mixer = CuriosityMixer(rnd, cfg, generator=torch.Generator().manual_seed(0))
    pool = torch.randn(200, 4) * torch.linspace(0.1, 3, 200)[:, None]  # varied novelty
    scores = rnd.score(pool)
    mixer.refresh(lambda n: pool[:n])
    k_top = max(1, round(rate * 200))
    expected_top = set(torch.argsort(scores, descending=True)[:k_top].tolist())
    kept = {int(torch.nonzero((pool == r).all(1))[0]) for r in mixer.top}
    assert kept == expected_top
    real = torch.full((batch, 4), 1234.0)
    out, mask = mixer.mix(real)
    assert int(mask.sum()) == n_replaced(batch, rate) == round(rate * batch)
    assert torch.all(out[~mask] == 1234.0)
    for row in out[mask]:
        assert any(torch.equal(row, t) for t in mixer.top)


def test_mixer_without_pool_leaves_batch_and_drops_nan_rows():
    cfg = CuriosityConfig(rate=0.3, pool_size=10)
    mixer = CuriosityMixer(RND(3, cfg), cfg)
    b = torch.randn(10, 3)
    out, mask = mixer.mix(b)
    assert torch.equal(out, b) and not mask.any()
    pool = torch.randn(10, 3)
    pool[2] = float("nan")
    top = mixer.refresh(lambda n: pool)
    assert torch.isfinite(top).all() and top.shape[0] == 3
