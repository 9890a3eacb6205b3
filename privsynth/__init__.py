"""privsynth: differentially private synthetic offline-RL datasets, and the audits that show what they leak.

Data flows one way through the sub-packages: ``data -> privacy -> synth -> release -> evaluation``.
"""
from __future__ import annotations

__version__ = "0.1.0"

from privsynth.errors import PrivsynthError

__all__ = ["__version__", "PrivsynthError"]
