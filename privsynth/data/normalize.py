"""Normalisers for transition vectors, fitted on public data or on fixed bounds, never on sensitive data.

A :class:`Normalizer` is a ``torch.nn.Module`` whose statistics are buffers (the SynthER pattern), so it is saved and
loaded with whatever model uses it. Fitting on a dataset whose ``info.sensitive`` flag is set raises
:class:`~privsynth.errors.PrivacyError`: a DP estimate of the statistics, charged to a ledger, lives in
:mod:`privsynth.privacy` and enters through :meth:`Normalizer.from_stats`.

Columns in ``skip`` (by default the terminal flag) keep mean 0 and std 1, so a {0, 1} flag stays thresholdable at 0.5.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
import torch
from torch import nn

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError

__all__ = ["Normalizer", "refuse_sensitive"]


def refuse_sensitive(dataset: OfflineDataset, what: str) -> None:
    """Raise if ``dataset`` is marked sensitive: ``what`` would compute an unaccounted statistic of it."""
    if dataset.info.sensitive:
        raise PrivacyError(
            f"refusing to {what} on sensitive dataset '{dataset.info.name}': fit on public data, use fixed bounds, "
            "or use a DP estimate charged to the ledger (privsynth.privacy.dp_normalizer_stats)"
        )


class Normalizer(nn.Module):
    """Per-column z-score: ``(x - mean) / std``; statistics are buffers saved with the owning model."""

    mean: torch.Tensor
    std: torch.Tensor

    def __init__(self, dim: int, *, source: str = "identity") -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(dim))
        self.register_buffer("std", torch.ones(dim))
        self.source = source  # human-readable provenance, recorded on privacy cards

    @classmethod
    def from_stats(cls, mean: Sequence[float] | np.ndarray, std: Sequence[float] | np.ndarray, *, source: str) -> "Normalizer":
        mean_t = torch.as_tensor(np.asarray(mean, dtype=np.float32))
        std_t = torch.as_tensor(np.asarray(std, dtype=np.float32))
        if mean_t.shape != std_t.shape or mean_t.ndim != 1:
            raise InvalidData(f"normaliser mean and std must be 1-D of equal length, got {tuple(mean_t.shape)} and {tuple(std_t.shape)}")
        if not torch.all(std_t > 0):
            raise InvalidData("normaliser std must be positive in every column")
        norm = cls(mean_t.numel(), source=source)
        norm.mean.copy_(mean_t)
        norm.std.copy_(std_t)
        return norm

    @classmethod
    def fit_public(
        cls, data: OfflineDataset | Sequence[OfflineDataset], *, skip: Sequence[int] | None = (-1,), eps: float = 1e-3
    ) -> "Normalizer":
        """Fit on the transition matrix of one or more **public** datasets (raises on sensitive data)."""
        datasets = [data] if isinstance(data, OfflineDataset) else list(data)
        if not datasets:
            raise InvalidData("no public dataset to fit the normaliser on")
        for ds in datasets:
            refuse_sensitive(ds, "fit a normaliser")
        x = np.concatenate([ds.transition_matrix() for ds in datasets], axis=0).astype(np.float64)
        mean, std = x.mean(axis=0), x.std(axis=0) + eps
        for j in skip or ():
            mean[j], std[j] = 0.0, 1.0
        names = ",".join(ds.info.name for ds in datasets)
        return cls.from_stats(mean, std, source=f"public:{names}")

    @classmethod
    def from_bounds(cls, low: Sequence[float] | np.ndarray, high: Sequence[float] | np.ndarray, *, source: str = "bounds") -> "Normalizer":
        """Map the box [low, high] to [-1, 1] (mean = centre, std = half-width): uses no data at all."""
        low_a, high_a = np.asarray(low, dtype=np.float64), np.asarray(high, dtype=np.float64)
        if np.any(~np.isfinite(low_a)) or np.any(~np.isfinite(high_a)) or np.any(high_a <= low_a):
            raise InvalidData("normaliser bounds must be finite with high > low in every column")
        return cls.from_stats((low_a + high_a) / 2, (high_a - low_a) / 2, source=source)

    def to_dict(self) -> dict:
        """Plain-JSON form of the statistics and their provenance (for checkpoints and cards)."""
        return {"mean": self.mean.tolist(), "std": self.std.tolist(), "source": self.source}

    @classmethod
    def from_dict(cls, d: dict) -> "Normalizer":
        """Inverse of :meth:`to_dict`; a dict read from a file with missing or mistyped parts is :class:`InvalidData`."""
        if not isinstance(d, dict) or not all(k in d for k in ("mean", "std", "source")):
            raise InvalidData("a saved normaliser must be a mapping with 'mean', 'std' and 'source'")
        for key in ("mean", "std"):
            if not (isinstance(d[key], (list, tuple)) and all(isinstance(x, (int, float)) and not isinstance(x, bool)
                                                              for x in d[key])):
                raise InvalidData(f"a saved normaliser's '{key}' must be a list of numbers")
        if not isinstance(d["source"], str):
            raise InvalidData("a saved normaliser's 'source' must be a string")
        return cls.from_stats(d["mean"], d["std"], source=d["source"])

    @property
    def dim(self) -> int:
        return int(self.mean.numel())

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return (x - self.mean) / self.std

    def normalize(self, x: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        if isinstance(x, np.ndarray):
            return ((x - self.mean.numpy()) / self.std.numpy()).astype(np.float32)
        return self(x)

    def unnormalize(self, x: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        if isinstance(x, np.ndarray):
            return (x * self.std.numpy() + self.mean.numpy()).astype(np.float32)
        return x * self.std + self.mean

    def get_extra_state(self) -> dict:
        return {"source": self.source}

    def set_extra_state(self, state: dict) -> None:
        self.source = state.get("source", self.source)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, source={self.source!r}"
