"""Synthesizers: one interface (:class:`Synthesizer`), PrivORL-n transition synthesis (:class:`TransitionSynthesizer`)."""
from privsynth.synth.base import Synthesizer
from privsynth.synth.config import (
    TransitionSynthConfig,
    cpu_config,
    demo_config,
    paper_config,
)
from privsynth.synth.transition import TransitionSynthesizer

__all__ = [
    "Synthesizer",
    "TransitionSynthesizer",
    "TransitionSynthConfig",
    "cpu_config",
    "demo_config",
    "paper_config",
]
