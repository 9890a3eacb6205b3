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

__all__ = ["atomic_torch_save", "read_checkpoint", "load_weights_only", "check_network_state", "NETWORK_FORMATS"]


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
    if fmt in NETWORK_FORMATS:
        check_network_state(state, path)
    return state


# formats of the network synthesizers (privsynth.synth.base.NetworkSynthesizer): state laid out by its ``state()``
NETWORK_FORMATS = ("privsynth.transition-synth/1", "privsynth.trajectory-synth/1")


def _tensors(value: Any) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in value.items())


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def check_network_state(state: dict[str, Any], path: str | Path) -> None:
    """Refuse (one line) a network-synthesizer checkpoint whose parts have the wrong types: the file is someone
    else's data, and a part of the wrong type would otherwise fail later with a traceback (or allocate what it says).

    Checks what :meth:`NetworkSynthesizer.state` writes: ``config`` a mapping, ``dims`` two positive counts, ``ema``
    (and ``model`` unless None) name-to-tensor mappings with the same names and shapes, ``template``, ``normalizer``
    and ``normalizer_event`` mappings or None, a normaliser with one mean and std per transition column,
    ``ledger`` None or a JSON object, ``public_data``/``history`` lists, ``discrete_values`` column-to-list."""
    import json

    def bad(what: str) -> InvalidData:
        return InvalidData(f"{path} is a damaged synthesizer checkpoint: {what}")

    if not isinstance(state.get("config"), dict):
        raise bad("'config' is not a mapping of settings")
    dims = state.get("dims")
    if not (isinstance(dims, (list, tuple)) and len(dims) == 2 and all(_count(d) for d in dims)):
        raise bad(f"'dims' must be two positive whole numbers (observation and action widths), got {dims!r:.60}")
    if not _tensors(state.get("ema")):
        raise bad("'ema' is not a mapping of parameter names to tensors")
    model = state.get("model")
    if model is not None:
        if not _tensors(model):
            raise bad("'model' is not a mapping of parameter names to tensors")
        if {k: tuple(v.shape) for k, v in model.items()} != {k: tuple(v.shape) for k, v in state["ema"].items()}:
            raise bad("'model' and 'ema' hold different parameters")
    for key in ("template", "normalizer", "normalizer_event"):
        if state.get(key) is not None and not isinstance(state[key], dict):
            raise bad(f"'{key}' is not a mapping")
    norm = state.get("normalizer")
    if norm is not None:
        width = 2 * dims[0] + dims[1] + 2  # state | action | reward | next state | terminal
        template = state.get("template") or {}
        if template.get("schema"):  # a declared schema's discrete columns are one-hot in the model's rows
            from privsynth.data.schema import RowCodec

            try:
                width = RowCodec(template["schema"]).width  # terminal flag included
            except (InvalidData, KeyError, TypeError, ValueError) as exc:
                raise bad(f"its template's schema is not valid ({exc})") from None
        for key in ("mean", "std"):
            column = norm.get(key)
            if not (isinstance(column, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                    for x in column)):
                raise bad(f"normaliser '{key}' is not a list of numbers")
            if len(column) != width:
                raise bad(f"normaliser '{key}' has {len(column)} columns but dims {list(dims)} make rows of {width}")
        if not isinstance(norm.get("source"), str):
            raise bad("normaliser 'source' is not a string")
        if norm.get("next_state") == "delta" and not (_count(norm.get("obs_dim")) and norm["obs_dim"] == dims[0]):
            raise bad("the next-state normaliser's 'obs_dim' does not match 'dims'")
    ledger = state.get("ledger")
    if ledger is not None:
        try:
            parsed = json.loads(ledger) if isinstance(ledger, str) else None
        except ValueError:
            parsed = None
        events = parsed.get("events", []) if isinstance(parsed, dict) else None
        if not (isinstance(events, list) and all(isinstance(e, dict) for e in events)):
            raise bad("'ledger' is not a JSON ledger object")
    for key in ("public_data", "history"):
        if key in state and not isinstance(state[key], list):
            raise bad(f"'{key}' is not a list")
    if not all(isinstance(h, dict) for h in state.get("history", [])):
        raise bad("'history' holds entries that are not mappings")
    discrete = state.get("discrete_values", {})
    if not (isinstance(discrete, dict) and all(isinstance(k, (str, int)) and str(k).lstrip("-").isdigit()
                                               and isinstance(v, list) for k, v in discrete.items())):
        raise bad("'discrete_values' must map column numbers to lists of values")
    if "nonprivate_finetunes" in state and not (isinstance(state["nonprivate_finetunes"], int)
                                                and not isinstance(state["nonprivate_finetunes"], bool)):
        raise bad("'nonprivate_finetunes' is not a whole number")
