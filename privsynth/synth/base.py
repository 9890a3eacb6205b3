"""The interface every synthesizer in privsynth implements (docs/DESIGN.md, "The synthesizer registry").

``pretrain(public)`` learns from public data without privacy; ``finetune(sensitive, epsilon, delta, unit)`` learns from
the sensitive data through an accounted DP mechanism and records it on :attr:`Synthesizer.ledger`;
``sample(n)`` returns a synthetic :class:`~privsynth.data.OfflineDataset` (un-normalised, ready for release) whose
``info.privacy_card`` carries the ledger; ``save(path)`` / ``load(path)`` round-trip everything, config included.
"""
from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Callable, Sequence

from privsynth.config_io import config_to_dict
from privsynth.data.dataset import OfflineDataset, environment_facts
from privsynth.data.normalize import refuse_sensitive
from privsynth.errors import InvalidData, PrivacyError, PrivsynthError, SpaceMismatch
from privsynth.synth.checkpoint import atomic_torch_save

__all__ = ["Synthesizer", "NetworkSynthesizer", "Unit", "check_weights_fit"]

from privsynth.data.units import DataUnit as Unit  # noqa: E402  (the one vocabulary, re-exported for callers)
_LAYER_COUNTS = ("depth", "generator_layers", "discriminator_layers")  # settings that count layers (Python objects)


def check_weights_fit(build: Callable[[], dict[str, Any]], stored: dict[str, Any], what: str,
                      settings: Any = None) -> None:
    """Refuse, in one :class:`InvalidData` line starting with ``what``, weights read from a file that are not exactly
    those of the networks its ``settings`` make, before any of those networks is allocated.

    ``build()`` makes the networks and returns them by part name, on torch's meta device (shapes without memory: a
    10^7-wide or negative width costs nothing). ``stored`` maps the part names to the file's name-to-tensor mappings:
    every name must be there with the built shape and kind (floating or not), and the networks may hold little more
    than the file (buffers it does not store). Lists and layer counts in ``settings`` may not exceed the number of
    stored tensors (each layer stores one; depth 10^9 would take hours to build even on the meta device)."""
    import torch

    if not all(isinstance(sd, dict) and all(isinstance(v, torch.Tensor) for v in sd.values())
               for sd in stored.values()):
        raise InvalidData(f"{what}: its weights are not mappings of names to tensors")
    n_tensors = sum(len(sd) for sd in stored.values())
    nodes = [settings]
    while nodes:
        node = nodes.pop()
        for key, value in node.items() if isinstance(node, dict) else ():
            counted = key in _LAYER_COUNTS and isinstance(value, int)
            big = len(value) if isinstance(value, (list, tuple)) else value if counted else 0
            if big > n_tensors:
                raise InvalidData(f"{what}: setting '{key}' asks for {big} layers; the file holds {n_tensors} tensors")
            nodes.append(value)
    try:
        with torch.device("meta"):
            built = build()
        want = {part: {k: (tuple(v.shape), v.is_floating_point()) for k, v in m.state_dict().items()
                       if isinstance(v, torch.Tensor)} for part, m in built.items()}  # not a module's extra state
        size = sum(t.numel() for m in built.values() for t in (*m.parameters(), *m.buffers()))
    except PrivsynthError:
        raise
    except (RuntimeError, ValueError, TypeError, OverflowError, ZeroDivisionError, IndexError, KeyError,
            AttributeError, AssertionError, NotImplementedError) as exc:
        text = (str(exc).strip().splitlines() or [""])[0][:120]
        raise InvalidData(f"{what}: its settings make no network ({type(exc).__name__}: {text})") from None
    for part, shapes in want.items():
        got = {k: (tuple(v.shape), v.is_floating_point()) for k, v in stored[part].items()}
        name = next((k for k in sorted({*shapes, *got}) if shapes.get(k) != got.get(k)), None)
        if name is None:
            continue
        if name not in got or name not in shapes:
            detail = f"it lacks '{name}'" if name not in got else f"its settings make no '{name}'"
        elif got[name][0] != shapes[name][0]:
            detail = f"'{name}' has shape {got[name][0]} but its settings make {shapes[name][0]}"
        else:
            detail = f"'{name}' holds {'' if got[name][1] else 'non-'}floating-point numbers, unlike its network"
        raise InvalidData(f"{what}: the '{part}' weights do not fit its settings: {detail}")
    if size > 2 * sum(v.numel() for sd in stored.values() for v in sd.values()) + (1 << 24):  # unstored masks
        raise InvalidData(f"{what}: its settings make networks of {size} numbers, far more than the file holds")


def _card_phase(phase: dict[str, Any]) -> dict[str, Any]:
    """A training phase as the card and every checkpoint show it: a phase that read sensitive data (marked private,
    or any fine-tune) without its timings. How long the DP fine-tune took is measured on the sensitive data outside
    any mechanism, so it stays in the in-memory ``history`` (reports; the bench times cells itself) and out of every
    release: the card, and the checkpoint, which :func:`~privsynth.privacy.guard.guarded_save_model` releases."""
    if not (phase.get("private") or phase.get("phase") == "finetune"):
        return dict(phase)
    return {k: v for k, v in phase.items() if "seconds" not in k}

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

    # ------------------------------------------------------------------------------ the card and saved state
    card_note: str = "dataset sizes are treated as public"
    obs_dim: int | None = None
    act_dim: int | None = None
    template: Any = None
    public_data: list[str]
    history: list[dict[str, Any]]

    def card(self) -> dict[str, Any]:
        """The privacy card of what this synthesizer releases: the ledger's card and the ledger, then how the data
        was made (docs/DESIGN.md, invariant 3: every release carries its ledger)."""
        ledger = self.ledger
        card: dict[str, Any] = {}
        if ledger is not None:
            card.update(ledger.card())
            card["ledger"] = ledger.to_dict()
        card.update({
            "private": self._released_privately(),
            "synthesizer": self.name,
            **self._card_facts(),
            "public_data": list(self.public_data),
            "phases": [_card_phase(h) for h in self.history],
            "config": config_to_dict(self.config),
            "note": self.card_note,
        })
        return card

    def _released_privately(self) -> bool:
        """True when everything sensitive went through an accounted mechanism."""
        return self.ledger is not None and self.ledger.private

    def _card_facts(self) -> dict[str, Any]:
        """What a subclass adds to the card (mechanism, released weights, sampling statistics)."""
        return {}

    def _base_state(self) -> dict[str, Any]:
        """The part of a checkpoint every synthesizer has: config, spaces, environment template, public data, phases."""
        return {
            "config": config_to_dict(self.config),
            "dims": [self.obs_dim, self.act_dim],
            "template": self.template.to_dict() if self.template else None,
            "public_data": self.public_data,
            "history": [_card_phase(h) for h in self.history],  # no timings of sensitive phases (a release)
        }

    @staticmethod
    def _public_datasets(public: OfflineDataset | Sequence[OfflineDataset]) -> list[OfflineDataset]:
        """The public datasets of a pre-training call: at least one, none marked sensitive, all of one task."""
        datasets = [public] if isinstance(public, OfflineDataset) else list(public)
        if not datasets:
            raise InvalidData("pre-training needs at least one public dataset")
        for ds in datasets:
            refuse_sensitive(ds, "pre-train a synthesizer")
            datasets[0].check_compatible(ds)
        return datasets

    def _restore_records(self, state: dict[str, Any]) -> None:
        """Public data names and phase records from a checkpoint (see :meth:`_base_state`)."""
        self.public_data = list(state.get("public_data", []))
        self.history = list(state.get("history", []))


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

    flag_columns: int = 1  # model columns after state | action | reward | next state: terminal (PrivORL-j adds end)

    @property
    def data_dim(self) -> int:
        """Width of a model row: state, action, reward, next state and the flag columns."""
        if self.obs_dim is None or self.act_dim is None:
            raise InvalidData("the synthesizer has not seen any data yet: pre-train it or load a checkpoint")
        return 2 * self.obs_dim + self.act_dim + 1 + self.flag_columns

    def _set_layout(self, obs_dim: int, act_dim: int, template: Any) -> None:
        """Fix the spaces and keep the environment template: public facts of the task, none of the records."""
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.template = dataclasses.replace(template, sensitive=False, privacy_card=None, extra={}, name="template")

    def has_trained_weights(self) -> bool:
        """Whether the network went through a training phase (pre-training or an earlier fine-tune)."""
        return any(h.get("phase") in ("pretrain", "finetune") for h in getattr(self, "history", []))

    def _freeze_except(self, module: Any, trainable: str, head: Any = None,
                       adapters: Any = None) -> tuple[str, list[Any]]:
        """Partial DP fine-tuning (Yu et al. 2021): ``requires_grad=False`` on what keeps its pre-trained value.
        ``trainable``: ``all``, ``bias_norm``, ``head`` (the modules in ``head``) or ``lora`` (the ``adapters`` of
        :func:`privsynth.synth.lora.attach`, biases, norms). Untrained: all. Returns (what trains, the frozen)."""
        allowed = ["'all'", "'bias_norm'"] + ["'head'"] * (head is not None) + ["'lora'"] * (adapters is not None)
        if f"'{trainable}'" not in allowed:
            raise InvalidData(f"unknown trainable setting '{trainable}': choose {', '.join(allowed[:-1])} or {allowed[-1]}")
        if trainable == "all" or not self.has_trained_weights():
            return "all", []
        if trainable in ("bias_norm", "lora"):
            keep = {id(p) for name, p in module.named_parameters()
                    if (name.endswith("bias") or "norm" in name) and not name.endswith("base.weight")}
            keep |= {id(p) for p in adapters or ()}
        else:
            keep = {id(p) for m in head for p in m.parameters()}
        frozen = [p for p in module.parameters() if p.requires_grad and id(p) not in keep]
        for p in frozen:
            p.requires_grad_(False)
        return trainable, frozen

    def adopt_environment(self, info: Any) -> None:
        """Samples are of ``info``'s environment from now on (its public facts replace the pre-training map's;
        :data:`privsynth.data.dataset.ENV_FACT_FIELDS`, none a statistic of the records). Fine-tuning calls it; a
        public-only sample of the pre-trained model calls it with the evaluation environment's info."""
        if self.template is not None:
            self.template = dataclasses.replace(self.template, **environment_facts(info))

    def n_parameters(self) -> int:
        return sum(p.numel() for p in self.model.parameters()) if self.model is not None else 0

    def _build(self, obs_dim: int, act_dim: int, template: Any) -> None:
        raise NotImplementedError

    def _restore(self, state: dict[str, Any]) -> None:
        """Fill a fresh instance from a checkpoint dict: normaliser, network built for the saved dims, EMA and model
        weights (float32; a checkpoint without model weights starts from its EMA), ledger, public data, history."""
        from privsynth.data.dataset import DatasetInfo
        from privsynth.privacy.ledger import Ledger
        from privsynth.synth.next_state import restore_normalizer

        if state["normalizer"] is not None:  # its own class: a Δs normaliser stays one
            self.normalizer = restore_normalizer(state["normalizer"])
        template = DatasetInfo.from_dict(state["template"] or {})
        build = lambda: self._build(*state["dims"], template) or {"ema": self.ema.shadow}  # noqa: E731
        check_weights_fit(build, {"ema": state["ema"]}, "the checkpoint is damaged", state["config"])  # meta device
        build()  # the weights fit its settings: the network is no larger than the file
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
        self._restore_records(state)

    checkpoint_format: str = ""  # the format tag of :meth:`state`, checked by ``load`` (privsynth.synth.checkpoint)
    last_sample_stats: dict[str, Any]

    def _card_facts(self) -> dict[str, Any]:
        return {
            "released_weights": "EMA",
            "normalizer": self.normalizer.source if self.normalizer is not None else None,
            "sample": dict(self.last_sample_stats),
        }

    def state(self, *, ema_only: bool = False) -> dict[str, Any]:
        """Everything :meth:`_restore` needs: weights (model and EMA, or EMA only), normaliser, config, ledger."""
        if self.model is None or self.ema is None:
            raise InvalidData("nothing to save: the synthesizer has no weights yet")
        return {
            "format": self.checkpoint_format,
            **self._base_state(),
            "normalizer": self.normalizer.to_dict() if self.normalizer is not None else None,
            "model": None if ema_only else self.model.state_dict(),
            "ema": self.ema.shadow.state_dict(),
            "ledger": self._ledger.to_json() if self._ledger is not None else None,
            "normalizer_event": self.normalizer_event.to_dict() if self.normalizer_event is not None else None,
        }

    def save(self, path: str | Path, *, ema_only: bool = False, half: bool = False) -> Path:
        """Write :meth:`state` to one file (atomic). ``ema_only`` / ``half`` (float16 weights) shrink it."""
        state = self.state(ema_only=ema_only)
        if half:
            for key in ("model", "ema"):
                if state[key] is not None:
                    state[key] = {k: v.half() if v.is_floating_point() else v for k, v in state[key].items()}
        return atomic_torch_save(state, Path(path))

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
        is charged to this synthesizer's ledger when the first DP fine-tune opens it, composed with DP-SGD's; a
        normaliser fitted after that (a refit before sampling, or before a second fine-tune) is charged at once, since
        it shapes every later sample. With ``config.next_state = "delta"`` the statistics are those of the Δs rows,
        clipped to the box :func:`~privsynth.synth.next_state.delta_bounds` derives from the public state bounds."""
        from privsynth.privacy.dp_stats import dp_normalizer_from_dataset
        from privsynth.synth.next_state import dp_delta_normalizer

        fit = dp_delta_normalizer if self.next_state == "delta" else dp_normalizer_from_dataset
        norm, event = fit(sensitive, low=low, high=high, epsilon=epsilon, delta=delta, unit=unit,
                          accountant=accountant, noise_seed=getattr(self.config, "noise_seed", None))
        if self._ledger is not None:
            self._ledger.append(event)  # refuses (and keeps the previous normaliser) an event of another unit
        self.normalizer, self.normalizer_event = norm, event
        return self

    @property
    def next_state(self) -> str:
        """How rows carry the next state: ``"absolute"`` s′ or ``"delta"`` s′ − s (:mod:`privsynth.synth.next_state`)."""
        return getattr(self.config, "next_state", "absolute")

    def _check_next_state(self) -> None:
        """A ``next_state = "delta"`` model needs a normaliser of Δs rows (fitted on public data), and vice versa."""
        from privsynth.synth.next_state import DeltaNormalizer

        if self.normalizer is None:
            return
        is_delta = isinstance(self.normalizer, DeltaNormalizer)
        if is_delta != (self.next_state == "delta"):
            raise InvalidData(
                f"config.next_state is '{self.next_state}' but the normaliser ({self.normalizer.source}) "
                f"{'encodes' if is_delta else 'does not encode'} s' - s: a delta model needs public statistics of Δs "
                "(pre-train or fit_public_stats with next_state='delta'), not fixed bounds or a DP normaliser of s'"
            )

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
        event and the warm start's summary events (if any; releases about the sensitive data, not public data)."""
        from privsynth.privacy.ledger import Ledger

        if self._ledger is None:
            public = list(self.public_data)
            dp_norm = self.normalizer_event is not None
            if self.normalizer is not None and not dp_norm and self.normalizer.source not in public:
                public.append(f"normaliser: {self.normalizer.source}")
            self._ledger = Ledger(unit=unit, accountant=accountant, delta=float(delta), public_data=public)
            if dp_norm:
                self._ledger.append(self.normalizer_event)
            self._ledger.extend(list(getattr(self, "warm_events", [])))
        return self._ledger

    @property
    def released(self) -> Any:
        """The EMA model: what is sampled, released and attacked."""
        if self.ema is None:
            raise InvalidData("the synthesizer has no weights yet: pre-train, fine-tune or load it first")
        return self.ema.shadow
