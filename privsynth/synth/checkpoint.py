"""Checkpoint file helpers shared by every synthesizer: atomic writes and format-checked reads."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from privsynth.errors import InvalidData

__all__ = ["atomic_torch_save", "read_checkpoint"]


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to a temporary sibling, then rename: a crash never leaves a half-written checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
    return path


def read_checkpoint(path: str | Path, fmt: str, what: str) -> dict[str, Any]:
    """Load a checkpoint written by :func:`atomic_torch_save`; raise one clear error if it is missing or not ``fmt``."""
    path = Path(path)
    if not path.exists():
        raise InvalidData(f"no synthesizer checkpoint at {path}")
    state = torch.load(path, weights_only=False, map_location="cpu")
    if not isinstance(state, dict) or state.get("format") != fmt:
        raise InvalidData(f"{path} is not a privsynth {what} checkpoint")
    return state
