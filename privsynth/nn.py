"""The one multilayer-perceptron builder every network in privsynth uses.

``mlp(in_dim, hidden, out_dim)`` is ``Linear -> act`` for each hidden width, then a final ``Linear`` (and ``out_act``
if given), in one ``nn.Sequential``. The layout is fixed: Linear layers at even indices 0, 2, 4, ... and the
activations between them, so a state dict reads ``0.weight, 0.bias, 2.weight, ...``. Shipped checkpoints
(``pretrained/``) depend on that layout; ``tests/test_nn.py`` pins it.

This module imports nothing from privsynth, so every package (data, privacy, synth, methods, evaluation) may use it.
"""
from __future__ import annotations

from typing import Callable, Sequence

from torch import nn

__all__ = ["mlp"]


def mlp(
    in_dim: int,
    hidden: Sequence[int],
    out_dim: int,
    *,
    act: Callable[[], nn.Module] = nn.ReLU,
    out_act: nn.Module | None = None,
) -> nn.Sequential:
    """``Linear(in_dim, hidden[0]) -> act() -> ... -> Linear(hidden[-1], out_dim) [-> out_act]``.

    ``act`` is called once per hidden layer (a class such as ``nn.Tanh`` or ``functools.partial(nn.LeakyReLU, 0.2)``);
    ``hidden=()`` gives a single linear layer.
    """
    layers: list[nn.Module] = []
    width = in_dim
    for h in hidden:
        layers += [nn.Linear(width, int(h)), act()]
        width = int(h)
    layers.append(nn.Linear(width, out_dim))
    if out_act is not None:
        layers.append(out_act)
    return nn.Sequential(*layers)
