"""Learning curves of the kickstarting runs: smoothing and steps to a return threshold (the learning-speed measure
of "Private Kickstarting", Exp. 1-2).

Shared by the suite (:mod:`~privsynth.methods.kickstart.experiments`) and the dataset-utility measure
(:func:`~privsynth.methods.kickstart.offline.kickstart_utility`), so neither imports the other for them.
"""
from __future__ import annotations

import math

import numpy as np

__all__ = ["smoothed_curve", "steps_to_threshold"]


def smoothed_curve(returns: list[float], window: int = 3) -> np.ndarray:
    """Per-epoch returns with NaN epochs (no episode finished) carried forward, then a trailing mean over ``window``
    epochs."""
    x = np.asarray(returns, dtype=float)
    last = np.nan
    for i in range(len(x)):
        if np.isnan(x[i]):
            x[i] = last
        else:
            last = x[i]
    out = np.full_like(x, np.nan)
    for i in range(len(x)):
        seg = x[max(0, i - window + 1): i + 1]
        seg = seg[~np.isnan(seg)]
        if len(seg):
            out[i] = seg.mean()
    return out


def steps_to_threshold(curve: np.ndarray, steps_per_epoch: int, threshold: float) -> float:
    """Env steps until the smoothed curve first reaches ``threshold`` (inf if never)."""
    hit = np.nonzero(np.nan_to_num(curve, nan=-np.inf) >= threshold)[0]
    return float((hit[0] + 1) * steps_per_epoch) if len(hit) else math.inf
