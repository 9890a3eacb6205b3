"""Adapters: what a membership-inference attack sees of a diffusion synthesizer (the PIA ``EpsGetter`` idea).

An attack talks only to a :class:`DiffusionAdapter`; one adapter per synthesizer decouples the attacks from how the
model is built. The adapter

* turns released-format records into the model's normalised rows (:meth:`DiffusionAdapter.encode`),
* exposes the EDM denoiser ``D(x; σ)`` and the per-sample λ(σ)-weighted loss (Karras et al. 2022, eq. 2 and Table 1),
* says what one *unit* is (:meth:`DiffusionAdapter.records`): a transition, or a whole trajectory, and how per-row
  scores add up to a unit score (:meth:`DiffusionAdapter.aggregate`).

Attacks use the EMA weights, i.e. the weights that are released and that sampling uses (docs/DESIGN.md invariant 4).
"""
from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import torch

from privsynth.data.units import DATA_UNITS, check_unit
from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia.adapter_base import DiffusionAdapter

__all__ = ["EDMModel", "DiffusionAdapter", "EDMAdapter", "TrajectoryAdapter", "FragmentAdapter", "ADAPTERS",
           "register_adapter", "as_adapter"]


@runtime_checkable
class EDMModel(Protocol):
    """The surface a transition synthesizer exposes to audits (``privsynth.synth``)."""

    normalizer: Any  # .normalize(np.ndarray) -> np.ndarray

    def denoise(self, x_norm: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor: ...

    def edm_loss(self, x_norm: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor: ...


def per_unit(row_scores: np.ndarray, unit_ids: np.ndarray, reduce: str = "sum") -> np.ndarray:
    """Per-row scores -> one score per unit (sum or mean of its rows), units in order of first appearance."""
    _, first, inverse = np.unique(unit_ids, return_index=True, return_inverse=True)
    sums = np.bincount(inverse, weights=np.asarray(row_scores, dtype=np.float64))
    if reduce == "mean":
        sums = sums / np.bincount(inverse)
    return sums[np.argsort(first, kind="stable")]


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
        self.has_denoiser, self.deterministic_loss = inner.has_denoiser, inner.deterministic_loss

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
        return per_unit(row_scores, unit_ids, self.reduce)


class FragmentAdapter(DiffusionAdapter):
    """Trajectory synthesizers (PrivORL-j, PrivORL-j-U, DP-Transformer): one model input is one *fragment*.

    The synthesizer models fragments of H rows with a link condition (``TrajectorySynthesizer.fragment_items``). So
    that every attack keeps working on ``[B, width]`` matrices, a fragment is packed into one flat record
    ``data [H·D] | cond [D + 1] | mask [H]`` (:meth:`records`); :meth:`loss` and :meth:`denoise` unpack it and act on
    the data part only (the condition and the padding are returned unchanged, so ε̂ is zero there). The unit is the
    trajectory (these synthesizers are trained under trajectory-level DP): fragment scores are summed, or averaged,
    over each episode (:meth:`aggregate`).

    The diffusion backbones expose the EDM denoiser, so ``loss``, ``pia`` and ``score_norm`` all apply. The
    DP-Transformer is autoregressive: its :meth:`loss` is the fragment's Gaussian negative log-likelihood (σ and the
    noise are ignored, so the loss attack is the likelihood attack) and it has no denoiser (PIA refuses).
    """

    unit = "trajectory"

    def __init__(self, synth: Any, reduce: str = "sum") -> None:
        if reduce not in ("sum", "mean"):
            raise InvalidData(f"trajectory reduction must be 'sum' or 'mean', got '{reduce}'")
        if getattr(synth, "model", None) is None:
            raise InvalidData("the trajectory synthesizer has no weights: pre-train, fine-tune or load it first")
        self.synth, self.reduce = synth, reduce
        self.h, self.d = synth.config.horizon, synth.data_dim
        self.model = synth.released.eval()  # EMA weights: what is sampled and released

    @property
    def has_denoiser(self) -> bool:  # type: ignore[override]
        return hasattr(self.model, "denoise")

    @property
    def deterministic_loss(self) -> bool:  # type: ignore[override]
        return not self.has_denoiser  # the Gaussian NLL ignores σ and the noise

    def records(self, data: OfflineDataset | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        if not isinstance(data, OfflineDataset):
            raise InvalidData("trajectory synthesizers are audited on an OfflineDataset (episodes), not a bare matrix")
        items = self.synth.fragment_items(data)
        f = items.data.shape[0]
        packed = torch.cat([items.data.reshape(f, -1), items.cond, items.mask.to(torch.float32)], dim=1)
        return packed.numpy().astype(np.float32), items.episode.numpy()

    def encode(self, rows: np.ndarray) -> torch.Tensor:
        width = self.h * self.d + self.d + 1 + self.h
        if rows.shape[1] != width:
            raise InvalidData(f"packed fragments have {rows.shape[1]} columns, expected {width} (use records())")
        return torch.as_tensor(rows)

    def _unpack(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        hd = self.h * self.d
        data = x[:, :hd].reshape(-1, self.h, self.d)
        return data, x[:, hd : hd + self.d + 1], x[:, hd + self.d + 1 :] > 0.5

    @torch.no_grad()
    def denoise(self, x: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        if not self.has_denoiser:
            raise InvalidData(f"{self.synth.name} is autoregressive (no denoiser): use the 'loss' attack")
        data, cond, mask = self._unpack(x)
        den = self.model.denoise(data, sigma, cond)
        den = torch.where(mask[..., None], den, data)  # padding is left as is
        return torch.cat([den.reshape(x.shape[0], -1), x[:, self.h * self.d :]], dim=1)

    @torch.no_grad()
    def loss(self, x: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        data, cond, mask = self._unpack(x)
        if self.has_denoiser:
            return self.model.loss(data, cond, mask, sigma, noise[:, : self.h * self.d].reshape(data.shape))
        return self.model.random_loss(data, cond, mask)  # Gaussian NLL, deterministic

    def aggregate(self, row_scores: np.ndarray, unit_ids: np.ndarray) -> np.ndarray:
        return per_unit(row_scores, unit_ids, self.reduce)


# Adapters by synthesizer class (the most derived registered class wins): where a new synthesizer type is made
# auditable. Every name of ``privsynth.synth.names()`` has one (tests/test_audit_any_synth.py).
ADAPTERS: dict[type, Any] = {}


def register_adapter(synth_cls: type, factory: Any) -> None:
    """Audit instances of ``synth_cls`` through ``factory(synth, unit) -> DiffusionAdapter``."""
    ADAPTERS[synth_cls] = factory


def _register_builtin() -> None:
    from privsynth.evaluation.mia.baseline_adapters import GeneratorAdapter, MarginalAdapter
    from privsynth.synth.baselines.pategan import PATEGANSynthesizer
    from privsynth.synth.baselines.pgm import PGMSynthesizer
    from privsynth.synth.baselines.privsyn import PrivSynSynthesizer
    from privsynth.synth.trajectory.synthesizer import TrajectorySynthesizer
    from privsynth.synth.transition import TransitionSynthesizer

    def transition(synth: Any, unit: str) -> DiffusionAdapter:
        inner = EDMAdapter(synth)
        return TrajectoryAdapter(inner) if unit == "trajectory" else inner

    def trajectory(synth: Any, unit: str) -> DiffusionAdapter:
        if unit != "trajectory":
            raise InvalidData(f"{synth.name} releases whole trajectories under trajectory-level DP: audit with "
                              "unit 'trajectory'")
        return FragmentAdapter(synth)

    def baseline(factory: Any) -> Any:
        def make(synth: Any, unit: str) -> DiffusionAdapter:
            inner = factory(synth)
            return TrajectoryAdapter(inner) if unit == "trajectory" else inner

        return make

    ADAPTERS.setdefault(TransitionSynthesizer, transition)
    ADAPTERS.setdefault(TrajectorySynthesizer, trajectory)
    ADAPTERS.setdefault(PrivSynSynthesizer, baseline(MarginalAdapter))
    ADAPTERS.setdefault(PGMSynthesizer, baseline(MarginalAdapter))
    ADAPTERS.setdefault(PATEGANSynthesizer, baseline(GeneratorAdapter))  # and PrePATEGAN, a subclass


def as_adapter(model: Any, unit: str = "transition") -> DiffusionAdapter:
    """An adapter for ``model`` at the given privacy unit: an adapter is returned as is (wrapped per trajectory when
    asked), a registered synthesizer class gets its adapter, anything else exposing the EDM surface the EDM adapter."""
    check_unit(unit, DATA_UNITS)
    if isinstance(model, DiffusionAdapter):
        if unit == "trajectory" and model.unit != "trajectory":
            return TrajectoryAdapter(model)
        return model
    _register_builtin()
    for cls in type(model).__mro__:
        if cls in ADAPTERS:
            return ADAPTERS[cls](model, unit)
    adapter = EDMAdapter(model)
    return TrajectoryAdapter(adapter) if unit == "trajectory" else adapter
