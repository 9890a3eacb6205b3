"""Layers and an optimiser over the stacked weights of K agents, the parts :mod:`.batched` builds its learners from.

:class:`StackedMLP` holds the MLPs of K agents as one stack of layers (:class:`StackedLinear` in ``nn.Linear``'s
layout, :class:`~privsynth.evaluation.agents.nets.EnsembleLinear` in its own), :class:`SliceAdam` steps every agent's
slice as its own tensor, and the helpers feed each agent's slice its own inputs and random draws. Each piece keeps
the arithmetic of the unbatched network it stacks, so a batched agent reproduces its own run (see :mod:`.batched`
for why and how that is tested).
"""
from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from privsynth.evaluation.agents.common import Batch
from privsynth.evaluation.agents.nets import EnsembleLinear, _Bf16Capable, bf16_matmul_add

__all__ = ["SliceAdam", "StackedLinear", "StackedMLP", "stack_batches", "stacked_linears", "member_forward",
           "repeat_members", "randn_per_agent"]

def stack_batches(batches: Sequence[Batch]) -> Batch:
    """K minibatches of equal size -> one :class:`Batch` with a leading agent axis."""
    return Batch(*(torch.stack(parts) for parts in zip(*batches)))


# ------------------------------------------------------------------------------------------------ stacked layers
class _StackedLinearFn(torch.autograd.Function):
    """``y = b + x·Wᵀ`` per slice with ``W [E, out, in]``, whose backward forms the gradients in ``nn.Linear``'s
    orientation (``∂W = gᵀ·x``, ``∂x = g·W``). Plain autograd through ``baddbmm`` would compute ``∂W`` as
    ``(xᵀ·g)ᵀ``: the same sums in another order, which differs from ``nn.Linear`` in the last bits for thin layers
    (a 6-wide input layer), so K = 1 would not reproduce the unbatched learner exactly."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        if weight.shape[1] == 1 and weight.shape[0] > 1:
            # a one-output head (IQL's V): MKL's batched kernel sums these dot products in another order than
            # nn.Linear's addmm once the batch has more than one slice; K tiny addmm calls keep every slice exact
            return torch.stack([torch.addmm(bias[k], x[k], weight[k].t()) for k in range(weight.shape[0])])
        return torch.baddbmm(bias, x, weight.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        x, weight = ctx.saved_tensors
        if weight.shape[1] == 1:  # a one-output head: per slice, as nn.Linear's mm (MKL's batched kernels are
            # 5-15x slower on these outer and matrix-vector products, nets._EnsembleHeadFn); ∂x has no sums
            gx = grad * weight if ctx.needs_input_grad[0] else None
            gw = (torch.stack([torch.mm(grad[k].t(), x[k]) for k in range(weight.shape[0])])
                  if ctx.needs_input_grad[1] else None)
        else:
            gx = torch.bmm(grad, weight) if ctx.needs_input_grad[0] else None
            gw = torch.bmm(grad.transpose(1, 2), x) if ctx.needs_input_grad[1] else None
        gb = grad.sum(1, keepdim=True) if ctx.needs_input_grad[2] else None
        return gx, gw, gb


class StackedLinear(_Bf16Capable):
    """``E`` ``nn.Linear`` layers in their own layout: weight ``[E, out, in]``, bias ``[E, 1, out]``;
    ``x [E, B, in] -> [E, B, out]``. With ``bf16`` set (:func:`~privsynth.evaluation.agents.nets.set_matmul_precision`)
    the product runs in bf16 as :class:`~privsynth.evaluation.agents.nets.Bf16Linear`'s does."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor) -> None:
        super().__init__()
        self.weight = nn.Parameter(weight.clone())
        self.bias = nn.Parameter(bias.clone())

    def min_width(self) -> int:
        return min(self.weight.shape[1], self.weight.shape[2])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bf16:
            return bf16_matmul_add(x, self.weight.transpose(1, 2), self.bias)
        return _StackedLinearFn.apply(x, self.weight, self.bias)


class StackedMLP(nn.Module):
    """The MLPs of K agents as one stack of layers; ReLU between layers (and after the last if asked).

    ``forward(x [E, B, in]) -> [E, B, out]`` with E = K·members. Layers stacked from ``nn.Linear`` keep its layout
    (:class:`StackedLinear`), layers stacked from :class:`EnsembleLinear` keep theirs, so each agent's slice runs
    the same kernels as its unbatched network. :meth:`load_into` writes the stack back into the per-agent layers.
    """

    def __init__(self, layers: Sequence[nn.Module], *, relu_last: bool = False) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)
        self.relu_last = relu_last

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last or self.relu_last:
                x = x.relu_()  # in place: neither layer's backward reads its output; saves a [K, B, width] buffer
        return x

    @classmethod
    def from_members(cls, members: Sequence[Sequence[nn.Module]], *, relu_last: bool = False) -> "StackedMLP":
        """``members[j]`` is agent j's list of layers (``nn.Linear`` or ``EnsembleLinear``), in order."""
        layers: list[nn.Module] = []
        for i, first in enumerate(members[0]):
            parts = [m[i] for m in members]
            if isinstance(first, EnsembleLinear):
                layer = EnsembleLinear(first.in_features, first.out_features, sum(p.ensemble_size for p in parts))
                with torch.no_grad():
                    layer.weight.copy_(torch.cat([p.weight for p in parts]))
                    layer.bias.copy_(torch.cat([p.bias for p in parts]))
            elif isinstance(first, nn.Linear):
                layer = StackedLinear(torch.stack([p.weight.detach() for p in parts]),
                                      torch.stack([p.bias.detach() for p in parts]).unsqueeze(1))
            else:
                raise TypeError(f"cannot stack a {type(first).__name__}")
            layers.append(layer)
        return cls(layers, relu_last=relu_last)

    @torch.no_grad()
    def load_into(self, members: Sequence[Sequence[nn.Module]]) -> None:
        """Write the stack back into per-agent layers (the inverse of :meth:`from_members`)."""
        for i, layer in enumerate(self.layers):
            start = 0
            for m in members:
                target = m[i]
                e = target.ensemble_size if isinstance(target, EnsembleLinear) else 1
                if isinstance(target, EnsembleLinear):
                    target.weight.copy_(layer.weight[start:start + e])
                    target.bias.copy_(layer.bias[start:start + e])
                else:
                    target.weight.copy_(layer.weight[start])
                    target.bias.copy_(layer.bias[start, 0])
                start += e


def stacked_linears(module: nn.Module) -> list[nn.Module]:
    return [m for m in module.modules() if isinstance(m, (nn.Linear, EnsembleLinear))]


def member_forward(stack: StackedMLP, x: torch.Tensor, k: int, members: int) -> torch.Tensor:
    """Member ``j`` of every agent (agent-major stack of ``members`` per agent) on ``x [K, B, in]``."""
    last = len(stack.layers) - 1
    for i, layer in enumerate(stack.layers):
        w = layer.weight.unflatten(0, (-1, members))[:, k]
        b = layer.bias.unflatten(0, (-1, members))[:, k]
        if layer.bf16:
            x = bf16_matmul_add(x, w, b)
        elif w.shape[2] == 1 and w.shape[0] > 1:  # one-output head: per-slice addmm, as in _StackedLinearFn
            x = torch.stack([torch.addmm(b[j], x[j], w[j]) for j in range(w.shape[0])])
        else:
            x = torch.baddbmm(b, x, w)
        if i < last:
            x = torch.relu(x)
    return x


def repeat_members(x: torch.Tensor, members: int) -> torch.Tensor:
    """``[K, B, d] -> [K·members, B, d]``: each agent's input for each of its members (agent-major)."""
    return x.unsqueeze(1).expand(x.shape[0], members, *x.shape[1:]).reshape(-1, *x.shape[1:])


def randn_per_agent(generators: Sequence[torch.Generator | None], shape: Sequence[int]) -> torch.Tensor:
    """Standard normals ``[K, *shape]``, agent k's slice from agent k's generator (as its unbatched learner draws)."""
    return torch.stack([torch.randn(tuple(shape), generator=g) for g in generators])


class SliceAdam:
    """Adam over stacked parameters that steps every agent's slice as its own tensor (torch's fused CPU kernel).

    The fused kernel vectorises each tensor it is given and finishes odd-sized tails in scalar code, so one update of
    a stacked ``[K, 1, A]`` log σ would round some elements differently from the unbatched learner's ``[A]``. Handing
    the kernel one view per agent (rows ``j·M … (j+1)·M`` of every stacked tensor) gives each agent exactly the
    arithmetic of its own ``torch.optim.Adam(fused=True)``. Defaults as torch's: β (0.9, 0.999), ε 1e-8.
    """

    def __init__(self, groups: Sequence[dict], k: int, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-8) -> None:
        self.k, self.betas, self.eps = k, betas, eps
        self.param_groups = []
        for g in groups:
            params = list(g["params"])
            exp_avg = [torch.zeros_like(x) for x in params]
            exp_avg_sq = [torch.zeros_like(x) for x in params]
            self.param_groups.append({
                "params": params, "lr": float(g["lr"]), "step": torch.zeros((), dtype=torch.float32),
                "views": [(x.detach().chunk(k), a.chunk(k), s.chunk(k)) for x, a, s in zip(params, exp_avg, exp_avg_sq)],
            })

    def zero_grad(self, set_to_none: bool = True) -> None:
        for g in self.param_groups:
            for x in g["params"]:
                x.grad = None

    @torch.no_grad()
    def step(self) -> None:
        for g in self.param_groups:
            ps, grads, avgs, sqs = [], [], [], []
            for x, (pv, av, sv) in zip(g["params"], g["views"]):
                if x.grad is None:
                    continue
                ps += pv
                grads += x.grad.chunk(self.k)
                avgs += av
                sqs += sv
            if not ps:
                continue
            g["step"] += 1
            torch._fused_adam_(ps, grads, avgs, sqs, [], [g["step"]] * len(ps), lr=g["lr"], beta1=self.betas[0],
                               beta2=self.betas[1], weight_decay=0.0, eps=self.eps, amsgrad=False, maximize=False)
