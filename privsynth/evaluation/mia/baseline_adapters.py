"""White-box adapters for the classic DP baselines: what an auditor holding the released *model* can score.

The diffusion adapters (:mod:`privsynth.evaluation.mia.adapters`) expose a denoiser. The baselines release other
objects, so each gets the white-box attack its model family has in the literature, behind the same
:class:`~privsynth.evaluation.mia.adapters.DiffusionAdapter` surface; the ``loss`` attack scores any of them
(σ and the noise draws are ignored: :attr:`deterministic_loss`, one draw suffices), while ``pia`` and ``score_norm``
refuse, since there is no denoiser.

* :class:`MarginalAdapter` (PrivSyn, PGM): the released object is a set of noisy marginal tables over the
  discretised columns. A record's loss is its negative log-likelihood under those tables,
  ``−Σ_t log(max(ŷ_t[cell(x)], 1) / Σ max(ŷ_t, 0))``: a member added one count to each of its cells before the
  noise, so at large ε members score higher. This is the "density" white-box test of marginal-based synthesizers
  (Stadler et al., "Synthetic Data – Anonymisation Groundhog Day", USENIX Security 2022, §4: the attacker knows the
  model's marginals); the fine one-way histograms and every measured pair/clique table are used.
* :class:`GeneratorAdapter` (PATE-GAN, pre-trained PATE-GAN): only the generator is released (teachers and the
  student stay inside ``finetune``). The full white-box GAN-Leaks attack (Chen et al., CCS 2020, §5.2) scores a
  record by how well the generator can reconstruct it: ``min_z ‖G(z) − x‖² / D``, found by Adam on ``z`` from a few
  fixed random starts (deterministic, so the target and a reference model see the same starts).

Written here: no maintained library implements these attacks for tabular synthesizers.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from privsynth.errors import InvalidData
from privsynth.evaluation.mia.adapter_base import DiffusionAdapter

__all__ = ["MarginalAdapter", "GeneratorAdapter"]


class _NoDenoiser(DiffusionAdapter):
    """Adapters whose model has no denoiser: only the ``loss`` attack applies."""

    deterministic_loss = True
    has_denoiser = False

    def denoise(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        raise InvalidData(f"{self.kind} has no denoiser: use the 'loss' attack (pia and score_norm need one)")

    kind = "this synthesizer"


class MarginalAdapter(_NoDenoiser):
    """Negative log-likelihood of a record under a marginal-based synthesizer's noisy tables (PrivSyn, PGM)."""

    def __init__(self, synth: Any) -> None:
        disc = getattr(synth, "discretizer", None)
        if disc is None or not getattr(disc, "fitted", False):
            raise InvalidData(f"{getattr(synth, 'name', 'the synthesizer')} has not been fitted: nothing to audit")
        self.synth, self.disc = synth, disc
        self.kind = getattr(synth, "label", type(synth).__name__)
        self.tables: list[tuple[tuple[int, ...], np.ndarray, bool]] = []  # (columns, noisy counts, fine one-way?)
        for j in range(disc.dim):
            self.tables.append(((j,), np.asarray(disc.fine_counts[j], dtype=np.float64), True))
        for m in getattr(synth, "marginals", None) or []:  # PrivSyn's pair tables
            self.tables.append((tuple(m["cols"]), np.asarray(m["y"], dtype=np.float64), False))
        for m in getattr(synth, "measurements", None) or []:  # PGM's cliques (one-way ones are the fine ones, merged)
            if len(m["clique"]) > 1:
                self.tables.append((tuple(m["clique"]), np.asarray(m["y"], dtype=np.float64), False))
        self._logp = [np.log(np.maximum(y, 1.0) / max(float(np.clip(y, 0.0, None).sum()), 1.0))
                      for _, y, _ in self.tables]

    def encode(self, rows: np.ndarray) -> torch.Tensor:
        if rows.shape[1] != self.disc.dim:
            raise InvalidData(f"records have {rows.shape[1]} columns but the synthesizer models {self.disc.dim}")
        return torch.as_tensor(np.asarray(rows, dtype=np.float64))

    def loss(self, x: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        rows = x.detach().cpu().numpy()
        fine = self.disc.fine_index(rows)
        codes = self.disc.coarse_of(fine)
        nll = np.zeros(rows.shape[0])
        for (cols, y, is_fine), logp in zip(self.tables, self._logp):
            if is_fine:
                idx = fine[:, cols[0]]
            else:
                shape = tuple(int(self.disc.sizes[c]) for c in cols)
                idx = np.ravel_multi_index(tuple(codes[:, c] for c in cols), shape)
            nll -= logp[idx]
        return torch.as_tensor(nll)


class GeneratorAdapter(_NoDenoiser):
    """GAN-Leaks full white-box: reconstruction error ``min_z ‖G(z) − x‖² / D`` of a GAN synthesizer's generator."""

    def __init__(self, synth: Any, *, restarts: int = 4, steps: int = 100, lr: float = 0.05, seed: int = 0) -> None:
        if getattr(synth, "generator", None) is None or getattr(synth, "normalizer", None) is None:
            raise InvalidData(f"{getattr(synth, 'name', 'the synthesizer')} has no generator: fit or load it first")
        self.synth, self.generator = synth, synth.generator.eval()
        self.kind = getattr(synth, "label", type(synth).__name__)
        self.noise_dim = int(synth.config.noise_dim)
        self.restarts, self.steps, self.lr, self.seed = restarts, steps, lr, seed

    def encode(self, rows: np.ndarray) -> torch.Tensor:
        dim = self.synth.dim
        if rows.shape[1] != dim:
            raise InvalidData(f"records have {rows.shape[1]} columns but the synthesizer models {dim}")
        return self.synth.normalizer.normalize(torch.as_tensor(np.asarray(rows, dtype=np.float32)))

    def loss(self, x: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        gen = torch.Generator().manual_seed(self.seed)  # the same starts for every batch and every model
        params = list(self.generator.parameters())
        flags = [p.requires_grad for p in params]
        best = torch.full((x.shape[0],), float("inf"))
        try:
            for p in params:
                p.requires_grad_(False)
            with torch.enable_grad():
                for _ in range(self.restarts):
                    z = torch.randn(x.shape[0], self.noise_dim, generator=gen).requires_grad_(True)
                    opt = torch.optim.Adam([z], lr=self.lr)
                    for _ in range(self.steps):
                        err = ((self.generator(z) - x) ** 2).mean(dim=1)
                        opt.zero_grad()
                        err.sum().backward()
                        opt.step()
                    with torch.no_grad():
                        best = torch.minimum(best, ((self.generator(z) - x) ** 2).mean(dim=1))
        finally:
            for p, f in zip(params, flags):
                p.requires_grad_(f)
        return best.double()
