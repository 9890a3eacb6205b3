"""The interface every synthesizer in privsynth implements (docs/DESIGN.md, "The synthesizer registry").

``pretrain(public)`` learns from public data without privacy; ``finetune(sensitive, epsilon, delta, unit)`` learns from
the sensitive data through an accounted DP mechanism and records it on :attr:`Synthesizer.ledger`;
``sample(n)`` returns a synthetic :class:`~privsynth.data.OfflineDataset` (un-normalised, ready for release) whose
``info.privacy_card`` carries the ledger; ``save(path)`` / ``load(path)`` round-trip everything, config included.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Literal, Sequence

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError, SpaceMismatch

__all__ = ["Synthesizer", "NetworkSynthesizer", "Unit"]

Unit = Literal["transition", "trajectory"]


class Synthesizer(ABC):
    """Common verbs: pretrain, finetune, sample, save, load."""

    name: str = "synthesizer"
    config: Any

    @abstractmethod
    def pretrain(self, public: OfflineDataset | Sequence[OfflineDataset], **kwargs: Any) -> "Synthesizer":
        """Fit on public data (no privacy). Returns ``self``."""

    @abstractmethod
    def finetune(
        self, sensitive: OfflineDataset, epsilon: float, delta: float, unit: Unit = "transition", **kwargs: Any
    ) -> "Synthesizer":
        """Fit on sensitive data with (ε, δ)-DP at the given privacy unit; the spent budget goes to the ledger."""

    @abstractmethod
    def sample(self, n: int, **kwargs: Any) -> OfflineDataset:
        """``n`` synthetic records, un-normalised, with the privacy card in ``info.privacy_card``."""

    @abstractmethod
    def save(self, path: str | Path) -> Path:
        """Write a self-contained checkpoint (weights, normaliser, config, ledger)."""

    @classmethod
    @abstractmethod
    def load(cls, path: str | Path) -> "Synthesizer":
        """Inverse of :meth:`save`."""

    @property
    def ledger(self) -> Any:
        """The privacy ledger of everything sensitive this synthesizer has seen (None before fine-tuning)."""
        return getattr(self, "_ledger", None)


class NetworkSynthesizer(Synthesizer):
    """A synthesizer with one torch network ``model``, its EMA copy ``ema`` and fixed obs/action dims.

    Shared by the transition (PrivORL-n) and trajectory (PrivORL-j) diffusion synthesizers."""

    model: Any = None
    ema: Any = None
    obs_dim: int | None = None
    act_dim: int | None = None

    def _check_dims(self, ds: OfflineDataset) -> None:
        """Refuse a dataset whose spaces differ from the ones the network was built for."""
        if (ds.obs_dim, ds.act_dim) != (self.obs_dim, self.act_dim):
            raise SpaceMismatch(
                f"dataset '{ds.info.name}' has obs/action dims {ds.obs_dim}/{ds.act_dim} but the synthesizer was "
                f"built for {self.obs_dim}/{self.act_dim}"
            )

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters()) if self.model is not None else 0

    def _build(self, obs_dim: int, act_dim: int, template: Any) -> None:
        raise NotImplementedError

    def _restore(self, state: dict[str, Any]) -> None:
        """Fill a fresh instance from a checkpoint dict: normaliser, network built for the saved dims, EMA and model
        weights (float32; a checkpoint without model weights starts from its EMA), ledger, public data, history."""
        from privsynth.data.dataset import DatasetInfo
        from privsynth.data.normalize import Normalizer
        from privsynth.privacy.ledger import Ledger

        if state["normalizer"] is not None:
            self.normalizer = Normalizer.from_dict(state["normalizer"])
        self._build(*state["dims"], DatasetInfo.from_dict(state["template"] or {}))
        assert self.model is not None and self.ema is not None
        as_float = lambda sd: {k: v.float() if v.is_floating_point() else v for k, v in sd.items()}  # noqa: E731
        ema_state = as_float(state["ema"])
        self.ema.shadow.load_state_dict(ema_state)
        self.model.load_state_dict(ema_state if state["model"] is None else as_float(state["model"]))
        if state["ledger"] is not None:
            self._ledger = Ledger.from_json(state["ledger"])
        if state.get("normalizer_event") is not None:
            from privsynth.privacy.ledger import LedgerEvent

            self.normalizer_event = LedgerEvent.from_dict(state["normalizer_event"])
        self.public_data = list(state.get("public_data", []))
        self.history = list(state.get("history", []))

    # ------------------------------------------------------------------------------ DP normaliser and ledger
    normalizer: Any = None
    normalizer_event: Any = None  # the LedgerEvent of a normaliser estimated with DP on sensitive data
    public_data: list[str]

    def fit_dp_normalizer(
        self,
        sensitive: OfflineDataset,
        *,
        low: Any,
        high: Any,
        epsilon: float,
        delta: float,
        unit: Unit = "transition",
        accountant: str = "pld",
    ) -> "NetworkSynthesizer":
        """Normalise with DP statistics of the sensitive data (no public data): clipped mean and std under the
        Gaussian mechanism (:mod:`privsynth.privacy.dp_stats`), noise from the synthesizer's noise source. The event
        is charged to this synthesizer's ledger at fine-tuning, composed with DP-SGD's."""
        from privsynth.privacy.dp_stats import dp_normalizer_from_dataset

        norm, event = dp_normalizer_from_dataset(
            sensitive, low=low, high=high, epsilon=epsilon, delta=delta, unit=unit, accountant=accountant,
            noise_seed=getattr(self.config, "noise_seed", None),
        )
        self.normalizer, self.normalizer_event = norm, event
        return self

    def _check_normalizer_accounted(self, unit: str) -> None:
        """A normaliser fitted with DP on sensitive data must bring its ledger event (else its cost is unaccounted)."""
        if self.normalizer is None or getattr(self.normalizer, "source", None) != "dp":
            return
        ev = self.normalizer_event
        if ev is None:
            raise PrivacyError(
                "the normaliser was estimated on sensitive data (source 'dp') but its ledger event is missing: pass "
                "normalizer_event= or use fit_dp_normalizer, so that its cost is charged to the ledger"
            )
        if ev.params.get("unit", unit) != unit:
            raise PrivacyError(f"the DP normaliser protects unit '{ev.params.get('unit')}' but fine-tuning is at '{unit}'")

    def _open_ledger(self, unit: str, accountant: str, delta: float) -> Any:
        """The ledger of this synthesizer, created on the first DP fine-tune: public data, then the DP normaliser's
        event (if any; it is a release about the sensitive data, not public data)."""
        from privsynth.privacy.ledger import Ledger

        if self._ledger is None:
            public = list(self.public_data)
            dp_norm = self.normalizer_event is not None
            if self.normalizer is not None and not dp_norm and self.normalizer.source not in public:
                public.append(f"normaliser: {self.normalizer.source}")
            self._ledger = Ledger(unit=unit, accountant=accountant, delta=float(delta), public_data=public)
            if dp_norm:
                self._ledger.append(self.normalizer_event)
        return self._ledger

    @property
    def released(self) -> Any:
        """The EMA model: what is sampled, released and attacked."""
        if self.ema is None:
            raise InvalidData("the synthesizer has no weights yet: pre-train, fine-tune or load it first")
        return self.ema.shadow
