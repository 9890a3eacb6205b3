"""Shared start of the marginal-based baselines (PGM, PrivSyn): public data fixes the discretisation grid."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, ClassVar, Sequence

from privsynth.config_io import config_from_dict
from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.synth.baselines.common import BaselineSynthesizer, as_list, public_matrix, write_json_atomic
from privsynth.synth.baselines.discretize import Discretizer, column_names

__all__ = ["GridBaseline"]


class GridBaseline(BaselineSynthesizer):
    """A baseline that discretises transitions on a grid set by public data only (bounds, categorical supports)."""

    label = "this baseline"  # used in errors
    config_cls: ClassVar[type]  # the subclass's config dataclass
    state_key: ClassVar[str]  # attribute holding the noisy measurements (DP outputs) that save/load keep
    discretizer: Discretizer | None = None

    def pretrain(self, public: OfflineDataset | Sequence[OfflineDataset], **kwargs: Any) -> "GridBaseline":
        """Public data sets the discretisation grid (bounds and categorical supports). No privacy cost."""
        pubs = as_list(public)
        rows = public_matrix(pubs)  # raises a clear error on empty or sensitive input
        self._set_dims(pubs[0])
        self.discretizer = Discretizer.from_public(
            rows,
            fine_bins=self.config.fine_bins,
            max_categories=self.config.max_categories,
            names=column_names(pubs[0].obs_dim, pubs[0].act_dim),
        )
        self.public_data += [p.info.name for p in pubs]
        return self

    def grid_from_bounds(self, grid: tuple[Any, Any, list], obs_dim: int, act_dim: int, source: str) -> "GridBaseline":
        """No public data: the grid from public bounds and categorical supports per stored column
        (:func:`privsynth.synth.warmstart.column_grid`, e.g. an environment's spaces), named ``source`` on the card."""
        self.obs_dim, self.act_dim = obs_dim, act_dim
        self.discretizer = Discretizer.from_bounds(grid[0], grid[1], categories=grid[2], fine_bins=self.config.fine_bins,
                                                   names=column_names(obs_dim, act_dim))
        self.public_data.append(f"bins: {source}")
        return self

    def _require_grid(self) -> Discretizer:
        if self.discretizer is None:
            raise InvalidData(f"{self.label} needs public data for its bins: call pretrain(public) first")
        return self.discretizer

    # ----------------------------------------------------------------------------------------- save/load
    def save(self, path: str | Path) -> Path:
        """One JSON file: config, bins, noisy measurements (all DP outputs) and ledger."""
        path = Path(path)
        state = self._base_state()
        state["discretizer"] = self.discretizer.to_dict() if self.discretizer else None
        state[self.state_key] = getattr(self, self.state_key)
        write_json_atomic(path, state)
        return path

    @classmethod
    def load(cls, path: str | Path) -> "GridBaseline":
        state = json.loads(Path(path).read_text())
        if state.get("synthesizer") != cls.name:
            raise InvalidData(f"{path} is not a {cls.name} checkpoint")
        synth = cls(config_from_dict(cls.config_cls, state["config"]))
        synth._restore_base(state)
        synth.discretizer = Discretizer.from_dict(state["discretizer"]) if state.get("discretizer") else None
        setattr(synth, cls.state_key, state.get(cls.state_key, []))
        return synth
