"""Exponential moving average of a model's weights; the EMA copy is what is sampled and released.

A tiny class instead of ``ema_pytorch``/``swa_utils.AveragedModel`` because it must (a) follow a module that Opacus
wraps in place (we read the live parameters each update), (b) warm up so that a few hundred DP steps on CPU still move
the average (decay_t = min(decay, (1 + t) / (10 + t)), TensorFlow's ExponentialMovingAverage ``num_updates`` rule),
and (c) restart at the beginning of fine-tuning. EMA of DP weights is post-processing: no privacy cost.
"""
from __future__ import annotations

import copy

import torch
from torch import nn

__all__ = ["EMA"]


class EMA:
    """Keeps ``shadow``, a frozen copy of ``model`` updated as ``shadow ← d·shadow + (1 − d)·model``."""

    def __init__(self, model: nn.Module, *, decay: float = 0.995, every: int = 10, warmup: bool = True) -> None:
        self.decay = decay
        self.every = max(int(every), 1)
        self.warmup = warmup
        self.shadow = copy.deepcopy(model).eval().requires_grad_(False)
        self.updates = 0  # number of averaging updates since the last reset
        self.calls = 0

    def reset(self, model: nn.Module, *, decay: float | None = None, every: int | None = None) -> None:
        """Start a new phase: the shadow becomes the current weights (used at the start of fine-tuning)."""
        self.copy_from(model)
        self.updates, self.calls = 0, 0
        if decay is not None:
            self.decay = decay
        if every is not None:
            self.every = max(int(every), 1)

    def current_decay(self) -> float:
        if not self.warmup:
            return self.decay
        return min(self.decay, (1 + self.updates) / (10 + self.updates))

    @torch.no_grad()
    def copy_from(self, model: nn.Module) -> None:
        for s, p in zip(self.shadow.parameters(), model.parameters()):
            s.copy_(p)
        for s, b in zip(self.shadow.buffers(), model.buffers()):
            s.copy_(b)

    @torch.no_grad()
    def step(self, model: nn.Module) -> None:
        """Call once per optimiser step; averages every ``every`` calls."""
        self.calls += 1
        if self.calls % self.every:
            return
        d = self.current_decay()
        for s, p in zip(self.shadow.parameters(), model.parameters()):
            s.lerp_(p.detach(), 1.0 - d)
        for s, b in zip(self.shadow.buffers(), model.buffers()):
            s.copy_(b)
        self.updates += 1
