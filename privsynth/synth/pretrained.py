"""Pre-trained synthesizers shipped in the repository's ``pretrained/`` folder, addressed by name.

``pretrained/<name>/model.pt`` is a :class:`~privsynth.synth.transition.TransitionSynthesizer` checkpoint (EMA weights
only) pre-trained on public data, and ``pretrained/<name>/card.json`` says which data, config and command made it.
The folder is found next to the package (source checkout) or through ``$PRIVSYNTH_PRETRAINED``.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from privsynth.errors import InvalidData

__all__ = ["pretrained_root", "list_pretrained", "resolve_pretrained", "pretrained_card"]


def pretrained_root() -> Path:
    env = os.environ.get("PRIVSYNTH_PRETRAINED")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "pretrained"


def list_pretrained() -> list[str]:
    root = pretrained_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "model.pt").is_file())


def resolve_pretrained(name_or_path: str | os.PathLike) -> Path:
    """A checkpoint path from a shipped model name (``pointmaze-umaze``) or an existing file path."""
    p = Path(name_or_path)
    if p.is_file():
        return p
    cand = pretrained_root() / str(name_or_path) / "model.pt"
    if cand.is_file():
        return cand
    names = ", ".join(list_pretrained()) or "none installed"
    raise InvalidData(f"no pre-trained synthesizer '{name_or_path}' (a file path or one of: {names})")


def pretrained_card(name: str) -> dict[str, Any]:
    """The ``card.json`` beside a pre-trained model ({} if it has none); a damaged card is :class:`InvalidData`."""
    path = resolve_pretrained(name).parent / "card.json"
    if not path.is_file():
        return {}
    from privsynth.data.safe_files import read_json_object

    return read_json_object(path, f"the card of pre-trained model '{name}' ({path})")
