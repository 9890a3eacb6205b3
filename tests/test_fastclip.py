"""Book-keeping clipping (privsynth.privacy.fastclip) against a naive per-unit loop: norms and clipped sums to 1e-5."""
from __future__ import annotations

import pytest
import torch
from torch import nn

from privsynth.privacy.fastclip import BookKeepingClipper


class Net(nn.Module):
    """Linear layers with and without bias, an affine LayerNorm, one without bias, a layer called twice."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(5, 12)
        self.n1 = nn.LayerNorm(12)
        self.b = nn.Linear(12, 12, bias=False)
        self.n2 = nn.LayerNorm(12, bias=False)
        self.c = nn.Linear(12, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x [B, D] or [B, T, D]; one loss per unit
        h = torch.tanh(self.n1(self.a(x)))
        h = h + torch.sin(self.n2(self.b(h)))
        h = h + 0.5 * torch.tanh(self.b(h))  # second call of b: its per-unit gradient is the sum of both calls
        out = (self.c(h) - x[..., :3]).pow(2).sum(-1)
        return out if x.ndim == 2 else out.sum(-1)


def _naive(model: nn.Module, x: torch.Tensor, clip: float) -> tuple[torch.Tensor, list[torch.Tensor]]:
    params = [p for p in model.parameters() if p.requires_grad]
    total = [torch.zeros_like(p, dtype=torch.float64) for p in params]
    norms = []
    for i in range(x.shape[0]):
        grads = torch.autograd.grad(model(x[i : i + 1]).sum(), params)
        norm = torch.sqrt(sum(g.double().pow(2).sum() for g in grads))
        norms.append(norm)
        c = min(1.0, clip / (float(norm) + 1e-6))
        for t, g in zip(total, grads):
            t += c * g.double()
    return torch.stack(norms), total


@pytest.mark.parametrize("shape", [(9, 5), (6, 4, 5)])  # one row per unit (T = 1), then sequences (T = 4)
@pytest.mark.parametrize("frozen", [(), ("b.weight", "n1.bias")])
def test_clipped_sum_and_norms_match_a_per_unit_loop(shape, frozen):
    torch.manual_seed(0)
    model = Net()
    for name, p in model.named_parameters():
        p.requires_grad_(name not in frozen)
    x = torch.randn(*shape) * 2
    clip = float(_naive(model, x, float("inf"))[0].median())  # half the units are clipped
    ref_norms, ref = _naive(model, x, clip)
    assert (ref_norms > clip).any() and (ref_norms < clip).any()  # both sides of the clip are exercised
    clipper = BookKeepingClipper(model, clip)
    norms = clipper.backward(clipper.forward(x))
    torch.testing.assert_close(norms.double(), ref_norms, rtol=1e-5, atol=1e-5)
    params = [p for p in model.parameters() if p.requires_grad]
    for p, r in zip(params, ref):
        torch.testing.assert_close(p.grad.double(), r, rtol=1e-5, atol=1e-5)
    # the DP engine's path: scaled, added into a gradient already holding the noise
    noise = [torch.randn_like(p) for p in params]
    for p, z in zip(params, noise):
        p.grad = z.clone()
    clipper.backward(clipper.forward(x), scale=0.25, accumulate=True)
    for p, z, r in zip(params, noise, ref):
        torch.testing.assert_close(p.grad.double(), z.double() + 0.25 * r, rtol=1e-5, atol=1e-5)
    assert all(p.grad is None for p in model.parameters() if not p.requires_grad)
    clipper.close()
