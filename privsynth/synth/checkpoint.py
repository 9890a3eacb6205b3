"""Checkpoint file helpers shared by every synthesizer: atomic writes and format-checked, weights-only reads.

Reading never runs code from the file: :func:`load_weights_only` uses ``torch.load(weights_only=True)``, whose
unpickler accepts tensors, state dicts and plain containers (dict, list, tuple, str, numbers, None) and refuses any
other object, so a checkpoint from an untrusted source cannot execute anything when it is opened. Everything a
privsynth checkpoint holds besides tensors (config, normaliser, template, ledger, history) is plain data.
"""
from __future__ import annotations

import os
import pickle
from pathlib import Path
from typing import Any

import torch

from privsynth.errors import InvalidData, UnsafeCheckpoint

__all__ = ["atomic_torch_save", "read_checkpoint", "load_weights_only"]


def atomic_torch_save(obj: Any, path: str | Path) -> Path:
    """``torch.save`` to a temporary sibling, then rename: a crash never leaves a half-written checkpoint."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)
    return path


def load_weights_only(path: str | Path) -> Any:
    """``torch.load`` restricted to tensors and plain data; a file holding any other pickled object is refused with
    :class:`~privsynth.errors.UnsafeCheckpoint` naming the file (nothing in it is executed)."""
    path = Path(path)
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except pickle.UnpicklingError as e:
        text = str(e)
        if "GLOBAL" not in text and "global" not in text:  # garbage, not a refused object: a damaged file
            raise InvalidData(f"{path} is corrupted or truncated: not a readable checkpoint") from None
        first = next((ln.strip() for ln in text.splitlines() if "GLOBAL" in ln or "global" in ln), type(e).__name__)
        raise UnsafeCheckpoint(
            f"refusing to load {path}: it holds objects other than tensors and plain data, which could run code "
            f"when unpickled ({first[:160]})"
        ) from None
    except (RuntimeError, EOFError, OSError, ValueError) as e:
        raise InvalidData(f"{path} is corrupted or truncated: not a readable checkpoint ({type(e).__name__})") from None


def read_checkpoint(path: str | Path, fmt: str, what: str) -> dict[str, Any]:
    """Load a checkpoint written by :func:`atomic_torch_save`; raise one clear error if it is missing, unsafe, or not
    ``fmt``."""
    path = Path(path)
    if not path.exists():
        raise InvalidData(f"no synthesizer checkpoint at {path}")
    state = load_weights_only(path)
    if not isinstance(state, dict) or state.get("format") != fmt:
        raise InvalidData(f"{path} is not a privsynth {what} checkpoint")
    return state
