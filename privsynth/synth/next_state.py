"""How the next state is written in a transition row: absolute ``s′`` (PrivORL / SynthER) or the step ``Δs = s′ − s``.

A transition row is ``state | action | reward | next state | terminal``. With ``next_state = "delta"`` the diffusion
model sees ``state | action | reward | s′ − s | terminal`` instead and the sample is decoded as ``s′ = s + Δs``: a
small, nearly state-independent quantity for a point mass, where an absolute ``s′`` has to be generated to within a
step size from a copy of ``s`` (the dynamics error of docs/synthesizers.md, "Downstream utility study").

:class:`DeltaNormalizer` is a :class:`~privsynth.data.normalize.Normalizer` whose ``normalize`` encodes and whose
``unnormalize`` decodes, so every caller that normalises rows (training, MIA adapters, sampling) sees one consistent
representation. Its statistics are fitted on **public** data only (:meth:`DeltaNormalizer.fit_public` refuses
sensitive data); the encoding itself is a fixed per-row map, so a DP-SGD unit is still one row (or one trajectory) and
the accounting is unchanged.
"""
from __future__ import annotations

from typing import Literal, Sequence

import numpy as np
import torch

from privsynth.data.dataset import OfflineDataset
from privsynth.data.normalize import Normalizer, refuse_sensitive
from privsynth.errors import InvalidData

__all__ = ["NextState", "DeltaNormalizer", "fit_public_normalizer", "delta_bounds", "dp_delta_normalizer"]

NextState = Literal["absolute", "delta"]


class DeltaNormalizer(Normalizer):
    """Z-score of rows whose next-state block is ``s′ − s`` (statistics of the encoded rows, public data only)."""

    def __init__(self, dim: int, obs_dim: int, *, source: str = "identity") -> None:
        super().__init__(dim, source=source)
        if dim < 2 * obs_dim + 1:
            raise InvalidData(f"rows of {dim} columns cannot hold two states of {obs_dim}")
        self.obs_dim = int(obs_dim)

    def _next_cols(self) -> slice:
        """Columns of the next state: the block before the terminal flag."""
        return slice(self.dim - 1 - self.obs_dim, self.dim - 1)

    def encode(self, rows: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """``s′`` -> ``s′ − s`` in un-normalised rows (a copy)."""
        out = rows.clone() if isinstance(rows, torch.Tensor) else np.array(rows, copy=True)
        out[..., self._next_cols()] = rows[..., self._next_cols()] - rows[..., : self.obs_dim]
        return out

    def decode(self, rows: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        """``Δs`` -> ``s + Δs`` in un-normalised rows (a copy)."""
        out = rows.clone() if isinstance(rows, torch.Tensor) else np.array(rows, copy=True)
        out[..., self._next_cols()] = rows[..., self._next_cols()] + rows[..., : self.obs_dim]
        return out

    def normalize(self, x: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        enc = self.encode(x)
        if isinstance(enc, np.ndarray):
            return super().normalize(enc)
        return (enc - self.mean) / self.std

    def unnormalize(self, x: torch.Tensor | np.ndarray) -> torch.Tensor | np.ndarray:
        return self.decode(super().unnormalize(x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # noqa: D102
        return self.normalize(x)

    def to_dict(self) -> dict:
        return {**super().to_dict(), "next_state": "delta", "obs_dim": self.obs_dim}

    @classmethod
    def from_dict(cls, d: dict) -> "DeltaNormalizer":
        base = Normalizer.from_dict(d)
        return cls._from_base(base, int(d["obs_dim"]))

    @classmethod
    def _from_base(cls, base: Normalizer, obs_dim: int) -> "DeltaNormalizer":
        norm = cls(base.dim, obs_dim, source=base.source)
        norm.mean.copy_(base.mean)
        norm.std.copy_(base.std)
        return norm

    def get_extra_state(self) -> dict:
        return {**super().get_extra_state(), "obs_dim": self.obs_dim}

    def set_extra_state(self, state: dict) -> None:
        super().set_extra_state(state)
        self.obs_dim = int(state.get("obs_dim", self.obs_dim))


def fit_public_normalizer(datasets: Sequence[OfflineDataset], next_state: NextState) -> Normalizer:
    """The row normaliser of a transition synthesizer, fitted on public datasets (refuses sensitive ones)."""
    if next_state == "absolute":
        return Normalizer.fit_public(datasets)
    if next_state != "delta":
        raise InvalidData(f"unknown next_state '{next_state}': choose 'absolute' or 'delta'")
    for ds in datasets:
        refuse_sensitive(ds, "fit a normaliser")
    obs_dim = datasets[0].obs_dim
    probe = DeltaNormalizer(datasets[0].transition_matrix().shape[1], obs_dim)
    rows = np.concatenate([probe.encode(ds.transition_matrix()) for ds in datasets]).astype(np.float64)
    mean, std = rows.mean(axis=0), rows.std(axis=0) + 1e-3  # the eps of Normalizer.fit_public
    mean[-1], std[-1] = 0.0, 1.0  # terminal flag untouched, as Normalizer.fit_public's default skip
    names = ",".join(ds.info.name for ds in datasets)
    return DeltaNormalizer._from_base(Normalizer.from_stats(mean, std, source=f"public:{names}"), obs_dim)


def delta_bounds(low: np.ndarray, high: np.ndarray, obs_dim: int) -> tuple[np.ndarray, np.ndarray]:
    """The public clipping box of Δs rows from that of absolute rows: each step lies in ``[lo − hi, hi − lo]`` of its
    state column (both states are inside the box), so the bound is as public as the state box it comes from."""
    lo, hi = np.array(low, dtype=np.float64), np.array(high, dtype=np.float64)
    cols = slice(lo.shape[0] - 1 - obs_dim, lo.shape[0] - 1)
    span = hi[:obs_dim] - lo[:obs_dim]
    lo[cols], hi[cols] = -span, span
    return lo, hi


def dp_delta_normalizer(sensitive: OfflineDataset, *, low: np.ndarray | float, high: np.ndarray | float, **kwargs) -> tuple[
        "DeltaNormalizer", object]:
    """A :class:`DeltaNormalizer` (source ``"dp"``) whose statistics are DP estimates on the sensitive Δs rows, and the
    ledger event: the Gaussian mechanism of :func:`privsynth.privacy.dp_stats.dp_normalizer_stats` on the encoded
    rows, clipped to :func:`delta_bounds` of the absolute box ``low``/``high`` (per column, or one scalar for all). ``kwargs`` go to it unchanged
    (``epsilon``, ``delta``, ``unit``, ``accountant``, ``noise_seed``)."""
    from privsynth.privacy.dp_stats import dp_normalizer_stats

    rows = sensitive.transition_matrix()
    obs_dim, dim = sensitive.obs_dim, rows.shape[1]
    probe = DeltaNormalizer(dim, obs_dim)
    lo, hi = delta_bounds(np.broadcast_to(np.asarray(low, dtype=np.float64), (dim,)),
                          np.broadcast_to(np.asarray(high, dtype=np.float64), (dim,)), obs_dim)
    kwargs.setdefault("episode_ids", sensitive.episode_ids)
    mean, std, event = dp_normalizer_stats(probe.encode(rows), low=lo, high=hi, **kwargs)
    return DeltaNormalizer._from_base(Normalizer.from_stats(mean, std, source="dp"), obs_dim), event


def restore_normalizer(d: dict) -> Normalizer:
    """A saved normaliser dict -> the right class (a plain :class:`Normalizer` unless it was a delta one)."""
    return DeltaNormalizer.from_dict(d) if d.get("next_state") == "delta" else Normalizer.from_dict(d)
