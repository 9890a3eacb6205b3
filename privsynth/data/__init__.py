"""Datasets: the model, Minari I/O, generators, normalisers. Nothing here knows about differential privacy."""
from privsynth.data.dataset import DatasetInfo, Episode, Fragments, OfflineDataset, transition_dim
from privsynth.data.normalize import Normalizer

__all__ = ["DatasetInfo", "Episode", "Fragments", "OfflineDataset", "Normalizer", "transition_dim"]
