"""Datasets: the model, Minari I/O, generators, normalisers. Nothing here knows about differential privacy.

Minari I/O lives in :mod:`privsynth.data.minari_io` and the PointMaze generator in :mod:`privsynth.data.pointmaze`;
they are imported on demand (they pull in minari / gymnasium-robotics).
"""
from typing import Any

from privsynth.data.dataset import DatasetInfo, Episode, Fragments, OfflineDataset, transition_dim
from privsynth.data.normalize import Normalizer


def _from_pandas(cls: type[OfflineDataset], df: Any, **kwargs: Any) -> OfflineDataset:
    """A dataset from a pandas DataFrame; column layout, schema and options in
    :func:`privsynth.data.tabular.from_pandas`.

    Marked sensitive unless ``sensitive=False``; ``env_id=...`` checks the widths against the environment.
    """
    from privsynth.data.tabular import from_pandas

    return from_pandas(df, **kwargs)


# ``OfflineDataset.from_pandas(df, schema=...)`` is attached here, not defined in data.dataset: the reader builds
# OfflineDatasets, reads schemas and checks environments, so a method in data.dataset that imports it closes an
# import circle through every reader module (issue 38). The package runs before any of its modules is used.
OfflineDataset.from_pandas = classmethod(_from_pandas)  # type: ignore[attr-defined]

__all__ = ["DatasetInfo", "Episode", "Fragments", "OfflineDataset", "Normalizer", "transition_dim"]
