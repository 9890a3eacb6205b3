"""What a cell function may use besides its params (docs/benchmarks.md, "Cell kinds")."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.bench.records import CellRecord
from privsynth.evaluation.bench.dataset_cache import dataset_path, load_dataset_file, load_dataset_info

__all__ = ["CellContext"]


@dataclass
class CellContext:
    """The suite's datasets, the cell's artifact folder, and the record of its upstream cell (None without one).

    ``upstream`` is a :class:`~privsynth.evaluation.bench.records.CellRecord`; ``upstream["result"]`` reads it as the
    dict it was before records were typed.
    """

    suite_dir: Path
    cell_id: str
    datasets: dict[str, dict[str, Any]]
    upstream: CellRecord | None = None

    def __post_init__(self) -> None:
        if isinstance(self.upstream, dict):  # a record as stored (JSON)
            self.upstream = CellRecord.from_json(self.upstream)

    @property
    def artifact_dir(self) -> Path:
        d = self.suite_dir / "artifacts" / self.cell_id
        d.mkdir(parents=True, exist_ok=True)
        return d

    @property
    def upstream_dir(self) -> Path:
        if self.upstream is None:
            raise InvalidData(f"cell {self.cell_id} has no upstream cell")
        return self.suite_dir / "artifacts" / self.upstream.id

    def dataset(self, name: str) -> OfflineDataset:
        """A suite dataset by name (prepared before the stages run)."""
        return load_dataset_file(self._dataset_path(name))

    def dataset_info(self, name: str) -> DatasetInfo:
        """Only the info (environment, spaces, name) of a suite dataset; none of its records is read."""
        return load_dataset_info(self._dataset_path(name))

    def _dataset_path(self, name: str) -> Path:
        if name not in self.datasets:
            raise InvalidData(f"dataset '{name}' is not declared in the suite")
        return dataset_path(self.suite_dir, name, self.datasets)
