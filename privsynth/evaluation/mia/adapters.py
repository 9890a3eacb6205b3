"""Adapters: what a membership-inference attack sees of a diffusion synthesizer (the PIA ``EpsGetter`` idea).

An attack talks only to a :class:`DiffusionAdapter`; one adapter per synthesizer decouples the attacks from how the
model is built. The adapter

* turns released-format records into the model's normalised rows (:meth:`DiffusionAdapter.encode`),
* exposes the EDM denoiser ``D(x; σ)`` and the per-sample λ(σ)-weighted loss (Karras et al. 2022, eq. 2 and Table 1),
* says what one *unit* is (:meth:`DiffusionAdapter.records`): a transition, or a whole trajectory, and how per-row
  scores add up to a unit score (:meth:`DiffusionAdapter.aggregate`).

Attacks use the EMA weights, i.e. the weights that are released and that sampling uses (DESIGN invariant 4).
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData

__all__ = ["EDMModel", "DiffusionAdapter", "EDMAdapter", "TrajectoryAdapter", "as_adapter"]


@runtime_checkable
class EDMModel(Protocol):
    """The surface a transition synthesizer exposes to audits (``privsynth.synth``)."""

    normalizer: Any  # .normalize(np.ndarray) -> np.ndarray

    def denoise(self, x_norm: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor: ...

    def edm_loss(self, x_norm: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor: ...


class DiffusionAdapter:
    """Base adapter; subclasses wrap one synthesizer type."""

    unit: str = "transition"

    def encode(self, rows: np.ndarray) -> torch.Tensor:
        """Raw transition rows ``[N, D]`` -> normalised model input ``[N, D]`` (float32)."""
        raise NotImplementedError

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """EDM denoiser ``D(x; σ)``, ``sigma`` of shape ``[B]``."""
        raise NotImplementedError

    def loss(self, x: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Per-sample weighted denoising loss ``λ(σ)·mean_d (D(x + σn; σ) − x)²`` of shape ``[B]``."""
        raise NotImplementedError

    def eps_hat(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """Noise the model believes is in ``x`` at level σ: ``(x − D(x; σ)) / σ`` (the EDM analogue of ε_θ)."""
        return (x - self.denoise(x, sigma)) / sigma[:, None]

    # -- units -------------------------------------------------------------------------------------------------
    def records(self, data: OfflineDataset | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows [N, D], unit_ids [N])``: one unit per transition."""
        rows = data.transition_matrix() if isinstance(data, OfflineDataset) else np.asarray(data)
        if rows.ndim != 2 or rows.shape[0] == 0:
            raise InvalidData(f"expected a non-empty [N, D] matrix of transitions, got shape {rows.shape}")
        return rows.astype(np.float32), np.arange(rows.shape[0])

    def aggregate(self, row_scores: np.ndarray, unit_ids: np.ndarray) -> np.ndarray:
        """Per-row scores -> per-unit scores, in the order of first appearance of each unit."""
        return np.asarray(row_scores, dtype=np.float64)


class EDMAdapter(DiffusionAdapter):
    """Wraps a transition synthesizer exposing ``normalizer``, ``denoise`` and ``edm_loss`` (EMA weights, no grad)."""

    def __init__(self, synth: EDMModel) -> None:
        for name in ("normalizer", "denoise", "edm_loss"):
            if not hasattr(synth, name):
                raise InvalidData(f"the synthesizer has no '{name}': it cannot be audited by the EDM attacks")
        self.synth = synth

    def encode(self, rows: np.ndarray) -> torch.Tensor:
        dim = getattr(self.synth.normalizer, "dim", rows.shape[1])
        if rows.shape[1] != dim:
            raise InvalidData(f"records have {rows.shape[1]} columns but the synthesizer models {dim}")
        return torch.as_tensor(np.asarray(self.synth.normalizer.normalize(rows), dtype=np.float32))

    @torch.no_grad()
    def denoise(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return self.synth.denoise(x, sigma)

    @torch.no_grad()
    def loss(self, x: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.synth.edm_loss(x, sigma, noise)


class TrajectoryAdapter(DiffusionAdapter):
    """Trajectory-level unit over a transition adapter: a trajectory's score is the sum (or mean) of its rows'.

    With trajectory-level DP one user is one trajectory, so the attacker's question is whether a whole trajectory was
    in the fine-tuning set; summing per-transition log-likelihood-like scores is the natural joint test.
    """

    unit = "trajectory"

    def __init__(self, inner: DiffusionAdapter, reduce: str = "sum") -> None:
        if reduce not in ("sum", "mean"):
            raise InvalidData(f"trajectory reduction must be 'sum' or 'mean', got '{reduce}'")
        self.inner, self.reduce = inner, reduce

    def encode(self, rows: np.ndarray) -> torch.Tensor:
        return self.inner.encode(rows)

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        return self.inner.denoise(x, sigma)

    def loss(self, x: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return self.inner.loss(x, sigma, noise)

    def records(self, data: OfflineDataset | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(data, OfflineDataset):
            raise InvalidData("trajectory-level audits need an OfflineDataset (episode ids), not a bare matrix")
        return data.transition_matrix().astype(np.float32), np.asarray(data.episode_ids)

    def aggregate(self, row_scores: np.ndarray, unit_ids: np.ndarray) -> np.ndarray:
        _, first, inverse = np.unique(unit_ids, return_index=True, return_inverse=True)
        sums = np.bincount(inverse, weights=np.asarray(row_scores, dtype=np.float64))
        if self.reduce == "mean":
            sums = sums / np.bincount(inverse)
        return sums[np.argsort(first, kind="stable")]  # order units by first appearance


def as_adapter(model: Any, unit: str = "transition") -> DiffusionAdapter:
    """An adapter for ``model`` (an adapter is returned as is) at the given privacy unit."""
    adapter = model if isinstance(model, DiffusionAdapter) else EDMAdapter(model)
    if unit == "transition":
        return adapter
    if unit == "trajectory":
        return adapter if isinstance(adapter, TrajectoryAdapter) else TrajectoryAdapter(adapter)
    raise InvalidData(f"unknown privacy unit '{unit}': use 'transition' or 'trajectory'")
