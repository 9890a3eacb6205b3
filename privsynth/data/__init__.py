"""Datasets: the model, Minari I/O, generators, normalisers. Nothing here knows about differential privacy.

Minari I/O lives in :mod:`privsynth.data.minari_io` and the PointMaze generator in :mod:`privsynth.data.pointmaze`;
they are imported on demand (they pull in minari / gymnasium-robotics).
"""
from privsynth.data.dataset import DatasetInfo, Episode, Fragments, OfflineDataset, transition_dim
from privsynth.data.normalize import Normalizer

__all__ = ["DatasetInfo", "Episode", "Fragments", "OfflineDataset", "Normalizer", "transition_dim"]
