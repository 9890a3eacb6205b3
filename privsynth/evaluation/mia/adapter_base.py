"""The surface every white-box attack talks to: :class:`DiffusionAdapter` (its own module so that the adapters of
the diffusion models (``adapters.py``) and of the baselines (``baseline_adapters.py``) share it without a circle)."""
from __future__ import annotations

import numpy as np
import torch

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData

__all__ = ["DiffusionAdapter"]


class DiffusionAdapter:
    """Base adapter; subclasses wrap one synthesizer type."""

    unit: str = "transition"
    has_denoiser: bool = True  # False: only the loss attack applies (baselines, the autoregressive DP-Transformer)
    deterministic_loss: bool = False  # True: loss() ignores σ and the noise, so one draw is enough

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
