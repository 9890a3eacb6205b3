"""Loading checkpoints without running code from them.

``torch.load`` unpickles by default, and unpickling a file runs whatever the file asks for: a checkpoint someone else
wrote (a downloaded release, a shared run directory) could execute arbitrary code on the loading machine. Every
checkpoint the methods write is a plain state dict of tensors, so it is read with ``weights_only=True`` (PyTorch's
restricted unpickler: tensors, containers and numbers only); non-tensor state lives in JSON next to it. A file that
holds anything else is refused with a one-line :class:`~privsynth.errors.InvalidData` naming it.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch

from privsynth.errors import InvalidData

__all__ = ["load_state_dict_file"]


def load_state_dict_file(path: str | os.PathLike) -> dict[str, Any]:
    """A state dict from ``path`` read with ``torch.load(weights_only=True)``; one-line error otherwise."""
    p = Path(path)
    if not p.is_file():
        raise InvalidData(f"checkpoint {p} does not exist")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # the restricted unpickler's UnpicklingError, or a corrupt file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InvalidData(f"refusing to load checkpoint {p}: it is not a plain tensor state dict "
                          f"(weights_only load failed: {first[:160]})") from None
    if not isinstance(state, dict):
        raise InvalidData(f"refusing to load checkpoint {p}: expected a state dict, found {type(state).__name__}")
    return state
