"""Shared start of the marginal-based baselines (PGM, PrivSyn): public data fixes the discretisation grid."""
from __future__ import annotations

from typing import Any, Sequence

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.synth.baselines.common import BaselineSynthesizer, as_list, public_matrix
from privsynth.synth.baselines.discretize import Discretizer, column_names

__all__ = ["GridBaseline"]


class GridBaseline(BaselineSynthesizer):
    """A baseline that discretises transitions on a grid set by public data only (bounds, categorical supports)."""

    label = "this baseline"  # used in errors
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

    def _require_grid(self) -> Discretizer:
        if self.discretizer is None:
            raise InvalidData(f"{self.label} needs public data for its bins: call pretrain(public) first")
        return self.discretizer
