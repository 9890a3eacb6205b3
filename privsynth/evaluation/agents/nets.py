"""Small network blocks shared by the agents: plain MLPs (:func:`privsynth.nn.mlp`) and a vectorised ensemble of MLPs.

:class:`EnsembleLinear` holds ``E`` linear layers as one weight tensor ``[E, in, out]`` and applies them with one
batched matrix multiply (``torch.baddbmm``), as CORL's ``VectorizedLinear`` does for EDAC (An et al. 2021). We use the
same block for the twin critics of IQL and TD3+BC (E=2): one batched call instead of two networks halves the number of
kernel launches, which is what limits small-network training speed on a CPU.
"""
from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from privsynth.nn import mlp  # the shared builder, re-exported for the agents

__all__ = ["mlp", "EnsembleLinear", "EnsembleMLP"]


class EnsembleLinear(nn.Module):
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

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.baddbmm(self.bias, x, self.weight)

    def member_forward(self, x: torch.Tensor, k: int) -> torch.Tensor:
        """Member ``k`` alone on ``x [B, in]`` (no ensemble axis)."""
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
