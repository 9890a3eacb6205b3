"""The classic DP tabular baselines of PrivORL (section VIII-B, appendix E), adapted to transitions.

=============  ================================================  =====================================
name           class                                             native accounting
=============  ================================================  =====================================
``pgm``        :class:`~.pgm.PGMSynthesizer` (MST + Private-PGM)  zCDP (Gaussian + exponential mech.)
``privsyn``    :class:`~.privsyn.PrivSynSynthesizer`             zCDP (Gaussian)
``pategan``    :class:`~.pategan.PATEGANSynthesizer`             RDP of Gaussian teacher-vote counts
``prepategan`` :class:`~.pategan.PrePATEGANSynthesizer`          RDP of Gaussian teacher-vote counts
=============  ================================================  =====================================

All four implement :class:`privsynth.synth.base.Synthesizer`: ``pretrain(public)`` (bins / normaliser / public GAN),
``finetune(sensitive, epsilon, delta)`` (the only access to sensitive data, recorded on the ledger), ``sample(n)``,
``save``/``load``. :func:`make_baseline` builds one by name with config overrides. See docs/baselines.md.
"""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from privsynth.errors import InvalidData
from privsynth.synth.baselines.common import BaselineSynthesizer
from privsynth.synth.baselines.pategan import PATEGANConfig, PATEGANSynthesizer, PrePATEGANSynthesizer
from privsynth.synth.baselines.pgm import PGMConfig, PGMSynthesizer
from privsynth.synth.baselines.privsyn import PrivSynConfig, PrivSynSynthesizer

__all__ = [
    "BASELINES",
    "BaselineSynthesizer",
    "PATEGANConfig",
    "PATEGANSynthesizer",
    "PGMConfig",
    "PGMSynthesizer",
    "PrePATEGANSynthesizer",
    "PrivSynConfig",
    "PrivSynSynthesizer",
    "load_baseline",
    "make_baseline",
]

BASELINES: dict[str, tuple[type[BaselineSynthesizer], type]] = {
    "pgm": (PGMSynthesizer, PGMConfig),
    "privsyn": (PrivSynSynthesizer, PrivSynConfig),
    "pategan": (PATEGANSynthesizer, PATEGANConfig),
    "prepategan": (PrePATEGANSynthesizer, PATEGANConfig),
}
_DEFAULT_OVERRIDES: dict[str, dict[str, Any]] = {"prepategan": {"pretrain_steps": 2000}}


def make_baseline(name: str, **overrides: Any) -> BaselineSynthesizer:
    """A baseline by name with config fields overridden, e.g. ``make_baseline("pgm", iters=1000, seed=1)``."""
    if name not in BASELINES:
        raise InvalidData(f"unknown baseline '{name}': choose one of {', '.join(BASELINES)}")
    cls, cfg_cls = BASELINES[name]
    fields = {f.name: f for f in dataclasses.fields(cfg_cls)}
    unknown = sorted(set(overrides) - set(fields))
    if unknown:
        raise InvalidData(f"unknown {name} setting(s): {', '.join(unknown)}")
    values = {**_DEFAULT_OVERRIDES.get(name, {}), **overrides}
    return cls(cfg_cls(**values))


def load_baseline(path: str | Path) -> BaselineSynthesizer:
    """Load any baseline checkpoint written by ``save`` (JSON for PGM/PrivSyn, torch for the PATE-GANs)."""
    path = Path(path)
    if not path.exists():
        raise InvalidData(f"no baseline checkpoint at {path}")
    if path.suffix == ".json":
        import json

        name = json.loads(path.read_text()).get("synthesizer")
        if name not in ("pgm", "privsyn"):
            raise InvalidData(f"{path} is not a baseline checkpoint")
        return BASELINES[name][0].load(path)
    return PATEGANSynthesizer.load(path)
