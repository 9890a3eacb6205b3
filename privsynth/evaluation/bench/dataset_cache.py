"""A suite's dataset cache: each dataset prepared once into ``<results>/<suite>/data/<name>-<hash>.npz`` (arrays and
info JSON, never pickled), and where a dataset's file lies. Apart from :mod:`privsynth.evaluation.bench.sources` (which
registers the sources with the bench registry) so that a cell's context can read the cache without importing the
registry that types it (no import circle)."""
from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from privsynth.data.dataset import ARRAY_FIELDS, DatasetInfo, OfflineDataset
from privsynth.evaluation.bench.suite import canonical

__all__ = ["save_dataset", "load_dataset_file", "load_dataset_info", "resolved_spec", "dataset_path"]


def save_dataset(ds: OfflineDataset, path: Path) -> None:
    """Cache a dataset as one ``.npz`` (arrays + info JSON), written atomically. A cache, not a release format."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp.npz")
    np.savez(tmp, info=np.array(json.dumps(ds.info.to_dict(), default=str)), **{k: getattr(ds, k) for k in ARRAY_FIELDS})
    os.replace(tmp, path)


def load_dataset_file(path: Path) -> OfflineDataset:
    """A dataset cached by :func:`save_dataset` (read as arrays and JSON, never unpickled)."""
    with np.load(path, allow_pickle=False) as z:
        return OfflineDataset(**{k: z[k] for k in ARRAY_FIELDS}, info=DatasetInfo.from_dict(json.loads(str(z["info"]))))


def load_dataset_info(path: Path) -> DatasetInfo:
    """Only the :class:`DatasetInfo` of a cached dataset: none of its arrays is read (an ``.npz`` loads members on
    access)."""
    with np.load(path, allow_pickle=False) as z:
        return DatasetInfo.from_dict(json.loads(str(z["info"])))


def resolved_spec(name: str, specs: dict[str, Any]) -> Any:
    """A dataset's spec with the specs of the datasets it derives from inlined (so the cache key covers them)."""
    spec = dict(specs[name])
    if "split_of" in spec:
        spec["split_of"] = resolved_spec(spec["split_of"], specs)
    return spec


def dataset_path(suite_dir: Path, name: str, specs: dict[str, Any]) -> Path:
    """Where dataset ``name`` of a suite is cached: its name plus a hash of its resolved spec."""
    digest = hashlib.sha1(canonical(resolved_spec(name, specs)).encode()).hexdigest()[:10]
    return suite_dir / "data" / f"{name}-{digest}.npz"
