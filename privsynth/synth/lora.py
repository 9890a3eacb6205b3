"""Low-rank adapters for DP fine-tuning (LoRA, Hu et al. 2022; under DP-SGD, Yu et al. 2021, section 4).

DP-SGD adds noise of norm about σC·√d / B to the mean gradient of d trained parameters, so fewer trained dimensions
mean less noise for the same privacy. ``dp.trainable = "lora"`` keeps every pre-trained weight matrix W frozen and
trains ``W + (α/r)·U·D`` instead, with D (r × in, default initialisation) and U (out × r, zero at the start, so the
fine-tune starts from the pre-trained function), plus every bias and LayerNorm parameter. On the ``cpu`` denoiser of
Walker2d's 42-dim rows that is 20,946 trained numbers instead of 201,258.

The adapters are two ``nn.Linear`` layers without bias, so the book-keeping clipper (:mod:`privsynth.privacy.fastclip`)
and Opacus see ordinary layers. After the fine-tune :func:`merge` folds ``(α/r)·U·D`` into W and removes them: the
saved checkpoint, the EMA copy and the folded sampler see the plain network again. Our own code because peft wraps
whole transformer models by name patterns, and the adapters here must live only for the length of one DP run, in the
model and in its EMA copy alike.
"""
from __future__ import annotations

import torch
from torch import nn

__all__ = ["LoRALinear", "attach", "detach", "merge"]


class LoRALinear(nn.Module):
    """``base(x) + scale · up(down(x))``: a frozen ``nn.Linear`` with a trainable rank-``rank`` update."""

    def __init__(self, base: nn.Linear, rank: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.down = nn.Linear(base.in_features, rank, bias=False)  # nn.Linear's default (Kaiming-uniform) init
        self.up = nn.Linear(rank, base.out_features, bias=False)
        nn.init.zeros_(self.up.weight)  # the update starts at zero: the pre-trained function
        self.scale = float(alpha) / float(rank)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + self.scale * self.up(self.down(x))

    @torch.no_grad()
    def merged_weight(self) -> torch.Tensor:
        return self.base.weight + self.scale * (self.up.weight @ self.down.weight)


def _children(module: nn.Module, kind: type) -> list[tuple[nn.Module, str, nn.Module]]:
    """(parent, name, child) for every child of exactly type ``kind``, parents in module order."""
    return [(parent, name, child) for parent in module.modules() for name, child in parent.named_children()
            if type(child) is kind]


def attach(module: nn.Module, rank: int, alpha: float | None = None, *, like: nn.Module | None = None
           ) -> list[nn.Parameter]:
    """Wrap every ``nn.Linear`` inside ``module`` in a :class:`LoRALinear` of ``rank`` (``alpha`` default
    ``rank``: scale 1). ``like``: a module of the same structure already adapted, whose adapter values are copied (the
    EMA copy follows the model). Returns the adapters' parameters, in module order."""
    if rank < 1:
        raise ValueError(f"LoRA rank must be at least 1, got {rank}")
    sources = [c for _, _, c in _children(like, LoRALinear)] if like is not None else None
    params: list[nn.Parameter] = []
    for k, (parent, name, lin) in enumerate(_children(module, nn.Linear)):
        wrapped = LoRALinear(lin, rank, float(alpha if alpha is not None else rank)).to(lin.weight.dtype)
        if sources is not None:
            wrapped.load_state_dict(sources[k].state_dict())
        setattr(parent, name, wrapped)
        params += [wrapped.down.weight, wrapped.up.weight]
    return params


def _unwrap(module: nn.Module, fold: bool) -> None:
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, LoRALinear):
                if fold:
                    child.base.weight.copy_(child.merged_weight())
                setattr(parent, name, child.base)


@torch.no_grad()
def merge(module: nn.Module) -> None:
    """Fold every adapter into its base weight and remove it (the network is plain ``nn.Linear`` again)."""
    _unwrap(module, fold=True)


@torch.no_grad()
def detach(module: nn.Module) -> None:
    """Remove every adapter without folding it (a failed run: the base weights are what they were)."""
    _unwrap(module, fold=False)
