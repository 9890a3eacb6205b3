"""What every classic DP baseline shares: input checks at the door, the public template, the ledger and the card.

Each baseline keeps its own mechanism and its own native accountant (zCDP for PGM and PrivSyn, RDP of the Gaussian
vote aggregator for PATE-GAN) and records every accounted release on a :class:`~privsynth.privacy.ledger.Ledger`
with the RDP accountant, which composes Gaussian and zCDP events exactly; the card states the native analysis.
"""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivacyError, SpaceMismatch
from privsynth.privacy import accounting as acc
from privsynth.privacy.ledger import Ledger

from privsynth.synth.base import Synthesizer

__all__ = ["BaselineSynthesizer", "as_list", "check_budget_args", "public_matrix"]

NATIVE = {
    "zcdp": "zCDP (Bun & Steinke 2016): rho of every Gaussian / exponential-mechanism step added, converted to "
    "(epsilon, delta) through the RDP curve",
    "rdp-gaussian-votes": "RDP of the Gaussian mechanism on teacher vote counts (GNMax, Papernot et al. 2018), "
    "data-independent; composed over all student queries",
}


def as_list(public: OfflineDataset | Sequence[OfflineDataset] | None) -> list[OfflineDataset]:
    if public is None:
        return []
    if isinstance(public, OfflineDataset):
        return [public]
    return list(public)


def public_matrix(public: Sequence[OfflineDataset]) -> np.ndarray:
    """Stacked transition matrices of public datasets; refuses data flagged sensitive."""
    if not public:
        raise InvalidData("no public data given")
    for p in public:
        if p.info.sensitive:
            raise PrivacyError(f"dataset '{p.info.name}' is marked sensitive and cannot be used as public data")
        public[0].check_compatible(p)
    return np.concatenate([p.transition_matrix() for p in public], 0)


def check_budget_args(sensitive: OfflineDataset, epsilon: float, delta: float, unit: str) -> None:
    """One-sentence errors for the usual mistakes: ε ≤ 0, δ outside (0, 1/N), an empty dataset, the trajectory unit."""
    acc.check_epsilon(epsilon)
    if not isinstance(sensitive, OfflineDataset):
        raise InvalidData("the sensitive data must be an OfflineDataset")
    if sensitive.n_transitions == 0:
        raise InvalidData("the sensitive dataset is empty")
    acc.check_delta(delta, sensitive.n_transitions)
    if unit != "transition":
        raise PrivacyError(
            f"the classic baselines protect single transitions only (PrivORL appendix E); unit '{unit}' is not supported"
        )


class BaselineSynthesizer(Synthesizer):
    """State and bookkeeping common to the four baselines; subclasses implement the mechanism."""

    name = "baseline"
    native_accounting = "zcdp"
    mechanism = ""

    def __init__(self, config: Any) -> None:
        self.config = config
        self.obs_dim: int | None = None
        self.act_dim: int | None = None
        self.template: DatasetInfo | None = None
        self.public_data: list[str] = []
        self._ledger: Ledger | None = None
        self.history: list[dict[str, Any]] = []

    # --------------------------------------------------------------------------------------------- helpers
    @property
    def ledger(self) -> Ledger | None:
        return self._ledger

    def _set_dims(self, ds: OfflineDataset) -> None:
        if self.obs_dim is None:
            self.obs_dim, self.act_dim = ds.obs_dim, ds.act_dim
        elif (ds.obs_dim, ds.act_dim) != (self.obs_dim, self.act_dim):
            raise SpaceMismatch(
                f"dataset '{ds.info.name}' has obs/action dims {ds.obs_dim}/{ds.act_dim} but the synthesizer was "
                f"built for {self.obs_dim}/{self.act_dim}"
            )

    def _set_template(self, ds: OfflineDataset) -> None:
        """Environment, spaces and reference scores: public facts about the task, not about the records."""
        self.template = dataclasses.replace(ds.info, sensitive=False, privacy_card=None, extra={}, name="template")

    def _start_ledger(self, delta: float, unit: str) -> Ledger:
        if self._ledger is not None:
            raise PrivacyError(f"{self.name} has already been fitted on sensitive data; make a new synthesizer")
        # N is not taken as given (issue 36): the record count is the caller's n, PGM's and PrivSyn's totals come from
        # the noisy marginals, PATE-GAN's teacher parts are never published; the delta < 1/N check is a refusal shown
        # only to the data holder (docs/privacy.md, "Refusals")
        treated = ["observation and action dimensions"]
        self._ledger = Ledger(
            unit=unit, accountant="rdp", delta=float(delta), public_data=list(self.public_data), treated_as_public=treated
        )
        self._ledger.notes.append(f"native accounting: {NATIVE[self.native_accounting]}")
        return self._ledger

    def _card_facts(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "native_accounting": NATIVE[self.native_accounting]}

    def _to_dataset(self, rows: np.ndarray, name: str | None, extra: dict[str, Any]) -> OfflineDataset:
        if self.template is None or self.obs_dim is None:
            raise InvalidData(f"{self.name} has not been fitted yet")
        rows = np.asarray(rows, dtype=np.float32)
        keep = np.isfinite(rows).all(1)
        rows = rows[keep]
        if rows.shape[0] == 0:
            raise InvalidData(f"{self.name} produced no finite rows")
        info = dataclasses.replace(
            self.template,
            name=name or f"synthetic-{self.name}",
            sensitive=False,
            privacy_card=self.card(),
            extra={"synthesizer": self.name, "sample": {**extra, "nan_rows_dropped": int((~keep).sum())}},
        )
        return OfflineDataset.from_transition_matrix(rows, self.obs_dim, self.act_dim, info=info)

    # ------------------------------------------------------------------------------------------ persistence
    def _base_state(self) -> dict[str, Any]:
        return {"synthesizer": self.name, **super()._base_state(),
                "ledger": self._ledger.to_dict() if self._ledger is not None else None}

    def _restore_base(self, state: dict[str, Any]) -> None:
        self.obs_dim, self.act_dim = state["dims"]
        self.template = DatasetInfo.from_dict(state["template"]) if state.get("template") else None
        self._ledger = Ledger.from_dict(state["ledger"]) if state.get("ledger") else None
        self._restore_records(state)


def write_json_atomic(path: Path, obj: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(obj))
    os.replace(tmp, path)
