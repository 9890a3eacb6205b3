"""White-box membership-inference attacks on EDM synthesizers; one attack per class, each overriding one step.

Every attack maps normalised rows to a per-row score where **higher means more member-like**. :meth:`Attack.score`
handles batching, the adapter and the unit (transition or trajectory); a subclass overrides :meth:`Attack.row_scores`.

* :class:`LossAttack`: the loss-threshold attack (Matsumoto et al. 2023; PrivORL §IX-D ``forward_mia``): the
  λ(σ)-weighted EDM loss at one fixed σ averaged over R noise draws; score = −loss.
* :class:`PIAAttack`: proximal initialisation (Kong et al., ICLR 2024) adapted to EDM. ε̂(x, σ) = (x − D(x; σ))/σ
  plays ε_θ; ε₀ = ε̂(x₀, σ_min) is the model's own noise at the clean record, x_σ = x₀ + σ·ε₀, and the distance is
  ‖ε̂(x_σ, σ) − ε₀‖₄⁴ (p = 4 as in PIA), averaged over the σ grid; score = −distance. Deterministic, two queries per σ.
  The EDM mapping is ours (``anchors_code.md`` §5.3), not in the PIA code.
* :class:`ScoreNormAttack`: SimA-style (Rao et al.): ‖ε̂(x₀, σ)‖₄⁴ at the clean record, score = −norm.
* :class:`ReferenceAttack`: a calibrated attack (Carlini et al. 2022, "LiRA offline, one reference"; Watson et al.
  2022): score_target − score_reference with the same noise, where the reference is a model trained on public data
  only (e.g. the public pre-trained checkpoint the sensitive model was fine-tuned from). It cancels how hard a
  record is for *any* model and keeps what fine-tuning on it added.

Written here rather than imported: the public implementations (PIA, SecMI, mia-diffusion) are DDPM/image scripts with
hard-coded paths, not libraries.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from privsynth.evaluation.mia.adapters import DiffusionAdapter

__all__ = ["Attack", "LossAttack", "PIAAttack", "ScoreNormAttack", "ReferenceAttack", "make_attack", "ATTACKS"]


class Attack:
    """Base class: batching and units; subclasses override :meth:`row_scores`."""

    name: str = "attack"
    batch_size: int = 2048

    def row_scores(self, adapter: DiffusionAdapter, x: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
        """Per-row membership scores for normalised rows ``x`` ``[B, D]`` (higher = more member-like)."""
        raise NotImplementedError

    def score_rows(self, adapter: DiffusionAdapter, rows: np.ndarray, seed: int = 0) -> np.ndarray:
        """Scores of raw transition rows, in batches; the noise stream depends only on ``seed`` and the row order."""
        gen = torch.Generator().manual_seed(seed)
        out = []
        with torch.no_grad():
            for start in range(0, rows.shape[0], self.batch_size):
                x = adapter.encode(rows[start : start + self.batch_size])
                out.append(self.row_scores(adapter, x, gen).double().cpu().numpy())
        return np.concatenate(out)

    def score(self, adapter: DiffusionAdapter, data, seed: int = 0) -> np.ndarray:
        """Per-unit scores of ``data`` (an OfflineDataset or a transition matrix)."""
        rows, units = adapter.records(data)
        return adapter.aggregate(self.score_rows(adapter, rows, seed), units)

    def describe(self) -> dict:
        return {"name": self.name, **{k: v for k, v in vars(self).items() if not k.startswith("_") and k != "reference"}}


def _full(x: torch.Tensor, value: float) -> torch.Tensor:
    return torch.full((x.shape[0],), float(value), dtype=x.dtype)


@dataclass
class LossAttack(Attack):
    """Loss threshold at a fixed σ, averaged over ``repeats`` noise draws (PrivORL: σ ≈ 0.1 on maze2d, R = 64)."""

    sigma: float = 0.1
    repeats: int = 64
    name: str = "loss"

    def row_scores(self, adapter, x, generator):
        sig = _full(x, self.sigma)
        total = torch.zeros(x.shape[0], dtype=torch.float64)
        repeats = 1 if getattr(adapter, "deterministic_loss", False) else self.repeats  # σ/noise ignored: one draw
        for _ in range(repeats):
            noise = torch.randn(x.shape, generator=generator, dtype=x.dtype)
            total += adapter.loss(x, sig, noise).double()
        return -total / repeats


@dataclass
class PIAAttack(Attack):
    """Proximal initialisation on EDM: ‖ε̂(x₀ + σε₀, σ) − ε₀‖_p^p with ε₀ = ε̂(x₀, σ₀) (PIA, p = 4)."""

    sigmas: Sequence[float] = (0.05, 0.1)  # σ grid (PIA's small t); best of a sweep on PrivORL-n, evaluation/README
    sigma0: float = 0.002  # EDM σ_min: the model's noise estimate at (almost) clean input
    p: float = 4.0
    name: str = "pia"

    def row_scores(self, adapter, x, generator):
        eps0 = adapter.eps_hat(x, _full(x, self.sigma0))
        dist = torch.zeros(x.shape[0], dtype=torch.float64)
        for s in self.sigmas:
            x_s = x + s * eps0
            diff = adapter.eps_hat(x_s, _full(x, s)) - eps0
            dist += diff.abs().pow(self.p).sum(dim=1).double()
        return -dist / len(self.sigmas)


@dataclass
class ScoreNormAttack(Attack):
    """Norm of the model's noise estimate at the clean record, ‖ε̂(x₀, σ)‖_p^p (SimA-style), averaged over σ."""

    sigmas: Sequence[float] = (0.01, 0.05)
    p: float = 4.0
    name: str = "score_norm"

    def row_scores(self, adapter, x, generator):
        total = torch.zeros(x.shape[0], dtype=torch.float64)
        for s in self.sigmas:
            total += adapter.eps_hat(x, _full(x, s)).abs().pow(self.p).sum(dim=1).double()
        return -total / len(self.sigmas)


class ReferenceAttack(Attack):
    """Calibrated attack: ``base`` score on the target minus ``base`` score on a public-data reference model.

    Both models see the same rows and the same noise draws (the same seed), so the difference is low-variance.
    """

    def __init__(self, base: Attack, reference: DiffusionAdapter, name: str | None = None) -> None:
        self.base, self.reference = base, reference
        self.name = name or f"{base.name}_ref"
        self.batch_size = base.batch_size

    def score_rows(self, adapter, rows, seed=0):
        return self.base.score_rows(adapter, rows, seed) - self.base.score_rows(self.reference, rows, seed)

    def describe(self) -> dict:
        return {"name": self.name, "base": self.base.describe(), "calibrated_by": "public reference model"}


ATTACKS: dict[str, type[Attack]] = {"loss": LossAttack, "pia": PIAAttack, "score_norm": ScoreNormAttack}


def make_attack(name: str, **kwargs) -> Attack:
    """Build a registered attack by name (``loss``, ``pia``, ``score_norm``) with keyword overrides."""
    from privsynth.errors import InvalidData

    if name not in ATTACKS:
        raise InvalidData(f"unknown attack '{name}': choose from {', '.join(sorted(ATTACKS))}")
    return ATTACKS[name](**kwargs)
