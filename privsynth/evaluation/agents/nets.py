"""Small network blocks shared by the agents: plain MLPs (:func:`privsynth.nn.mlp`) and a vectorised ensemble of MLPs.

:class:`EnsembleLinear` holds ``E`` linear layers as one weight tensor ``[E, in, out]`` and applies them with one
batched matrix multiply (``torch.baddbmm``), as CORL's ``VectorizedLinear`` does for EDAC (An et al. 2021). We use the
same block for the twin critics of IQL and TD3+BC (E=2): one batched call instead of two networks halves the number of
kernel launches, which is what limits small-network training speed on a CPU.

**bf16 matrix products** (issue 17): :func:`set_matmul_precision` switches an agent's wide layers (both widths at
least :data:`BF16_MIN_WIDTH`: the 256x256 hidden layers, which hold nearly all of an update's arithmetic) to bfloat16
operands with float32 accumulation (oneDNN's bf16 GEMM on CPUs with ``avx512_bf16`` or AMX). Inputs, weights, biases,
activations, losses and the optimiser stay float32; only the product is rounded to bf16 (8 mantissa bits) before it
is added to the bias. The thin input and output layers stay float32, so Q-values and actions keep full precision.
Written with differentiable torch ops (casts and ``matmul``), so autograd forms the backward in bf16 as well and EDAC's
double backward works unchanged. Why our own: torch's CPU autocast would also cast the thin layers and keep
activations and losses in bf16, and ``torch.set_float32_matmul_precision`` does not reach the MKL batched GEMMs.
"""
from __future__ import annotations

import math
import warnings
from typing import Sequence

import torch
from torch import nn

from privsynth.nn import mlp  # the shared builder, re-exported for the agents

__all__ = ["mlp", "EnsembleLinear", "EnsembleMLP", "MATMUL_PRECISIONS", "BF16_MIN_WIDTH", "Bf16Linear",
           "bf16_matmul_add", "check_precision", "native_bf16", "set_matmul_precision"]

#: matrix-product precisions an agent can train with: float32 everywhere, or bf16 products in the wide layers
MATMUL_PRECISIONS = ("fp32", "bf16")
#: a layer runs its product in bf16 only if both its input and output widths are at least this
BF16_MIN_WIDTH = 64


def check_precision(precision: str) -> str:
    """``precision`` if it is one of :data:`MATMUL_PRECISIONS`, else a ValueError naming them."""
    if precision not in MATMUL_PRECISIONS:
        raise ValueError(f"unknown matmul precision '{precision}'; choose one of {', '.join(MATMUL_PRECISIONS)}")
    return precision


def native_bf16() -> bool:
    """Whether this CPU runs bf16 matrix products natively (oneDNN: ``avx512_bf16`` or AMX)."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):  # a torch build without oneDNN
        return False


def bf16_matmul_add(x: torch.Tensor, weight_in_out: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """``x @ weight_in_out + bias`` with bf16 operands, float32 accumulation and a float32 result."""
    return torch.matmul(x.to(torch.bfloat16), weight_in_out.to(torch.bfloat16)).float() + bias


class _Bf16Capable(nn.Module):
    """A linear layer that can run its product in bf16 (``self.bf16``, set by :func:`set_matmul_precision`)."""

    bf16 = False

    def min_width(self) -> int:  # pragma: no cover - implemented by subclasses
        raise NotImplementedError


class Bf16Linear(nn.Linear):
    """``nn.Linear`` whose product runs in bf16 (same parameters and state dict; set by :func:`set_matmul_precision`)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return bf16_matmul_add(x, self.weight.t(), self.bias)


def set_matmul_precision(module: nn.Module, precision: str) -> nn.Module:
    """Run the products of ``module``'s wide linear layers in ``precision`` (``"fp32"`` or ``"bf16"``), in place.

    Wide = both widths at least :data:`BF16_MIN_WIDTH`. ``nn.Linear`` layers become :class:`Bf16Linear` (and back),
    ensemble and stacked layers switch their ``bf16`` flag. Warns once if the CPU has no native bf16 products (they
    still run, emulated, usually slower than float32).
    """
    bf16 = check_precision(precision) == "bf16"
    if bf16 and not native_bf16():
        warnings.warn("this CPU has no native bf16 matrix products (avx512_bf16 or AMX): bf16 agents will run, "
                      "but likely slower than fp32", RuntimeWarning, stacklevel=2)
    for m in module.modules():
        if isinstance(m, _Bf16Capable):
            m.bf16 = bf16 and m.min_width() >= BF16_MIN_WIDTH
        elif isinstance(m, nn.Linear):
            wide = min(m.in_features, m.out_features) >= BF16_MIN_WIDTH
            m.__class__ = Bf16Linear if bf16 and wide else nn.Linear
    return module


class _EnsembleHeadFn(torch.autograd.Function):
    """``y[k] = b[k] + x[k]·W[k]`` for a one-output ensemble layer (``W [E, in, 1]``: a critic's Q head), one slice
    at a time.

    Why not ``baddbmm`` and autograd: MKL's batched kernels run these matrix-vector products (and the outer product
    ``∂x = g·Wᵀ`` of the backward) at 2 GFLOP/s, 5-15x slower than one ``addmm``/``mm`` per slice
    (``scripts/bench_agents.py --batched``, issue 17), while an autograd loop over slices scatters every slice's
    gradient into a full-size buffer. Per slice, each member's result is also independent of how many members share
    the layer, so a critic stacked with other agents' (:mod:`.batched`) computes exactly what it computes alone.
    ``∂x`` is an outer product (one multiplication per element, no sum), so the broadcast product equals the matmul.
    The backward is written with differentiable ops, so EDAC's double backward runs through it.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:  # noqa: D102
        ctx.save_for_backward(x, weight)
        return torch.stack([torch.addmm(bias[k], x[k], weight[k]) for k in range(weight.shape[0])])

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # noqa: D102
        x, weight = ctx.saved_tensors
        gx = grad * weight.transpose(1, 2) if ctx.needs_input_grad[0] else None
        gw = (torch.stack([torch.mm(x[k].t(), grad[k]) for k in range(weight.shape[0])])
              if ctx.needs_input_grad[1] else None)
        gb = grad.sum(1, keepdim=True) if ctx.needs_input_grad[2] else None
        return gx, gw, gb


class EnsembleLinear(_Bf16Capable):
    """``E`` independent linear layers applied at once: ``x [E, B, in] -> [E, B, out]``.

    Each member is initialised exactly like ``nn.Linear`` (Kaiming-uniform weight, uniform bias with bound
    ``1/sqrt(in)``), so an ensemble of one behaves like one ``nn.Linear`` (weight stored transposed).
    """

    def __init__(self, in_features: int, out_features: int, ensemble_size: int) -> None:
        super().__init__()
        self.in_features, self.out_features, self.ensemble_size = in_features, out_features, ensemble_size
        self.weight = nn.Parameter(torch.empty(ensemble_size, in_features, out_features))
        self.bias = nn.Parameter(torch.empty(ensemble_size, 1, out_features))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        bound = 1.0 / math.sqrt(self.in_features)
        for k in range(self.ensemble_size):
            # nn.Linear's init on the [out, in] view of member k
            nn.init.kaiming_uniform_(self.weight[k].T, a=math.sqrt(5))
        nn.init.uniform_(self.bias, -bound, bound)

    def min_width(self) -> int:
        return min(self.in_features, self.out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.bf16:
            return bf16_matmul_add(x, self.weight, self.bias)
        if self.out_features == 1:
            return _EnsembleHeadFn.apply(x, self.weight, self.bias)
        return torch.baddbmm(self.bias, x, self.weight)

    def member_forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """Member ``k`` alone on ``x [B, in]`` (no ensemble axis)."""
        if self.bf16:
            return bf16_matmul_add(x, self.weight[k], self.bias[k])
        return torch.addmm(self.bias[k], x, self.weight[k])

    def extra_repr(self) -> str:
        return f"ensemble_size={self.ensemble_size}, in_features={self.in_features}, out_features={self.out_features}"


class EnsembleMLP(nn.Module):
    """An ensemble of ``E`` MLPs with ReLU hidden layers, evaluated with batched matrix multiplies.

    ``forward(x)`` takes ``[B, in]`` (shared by all members) or ``[E, B, in]`` and returns ``[E, B, out]``.
    """

    def __init__(self, in_dim: int, hidden: Sequence[int], out_dim: int, ensemble_size: int) -> None:
        super().__init__()
        dims = [in_dim, *hidden, out_dim]
        self.layers = nn.ModuleList(EnsembleLinear(a, b, ensemble_size) for a, b in zip(dims[:-1], dims[1:]))
        self.ensemble_size = ensemble_size

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.dim() == 2:
            x = x.unsqueeze(0).expand(self.ensemble_size, *x.shape)
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i < last:
                x = torch.relu(x)
        return x

    def member_forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """Member ``k`` alone on ``x [B, in]`` -> ``[B, out]`` (TD3+BC's actor loss uses the first critic only)."""
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer.member_forward(x, k)
            if i < last:
                x = torch.relu(x)
        return x
