"""Minari's ``main_data.hdf5`` for the standard layout, written in one pass with h5py's low-level API.

The file has the groups, datasets and attributes Minari's own writer makes (``episode_{i}`` with attributes ``id``
and ``total_steps``, ``observations`` [T+1] (a group of one dataset per key for Dict spaces), ``actions``,
``rewards``, ``terminations``, ``truncations`` and, when given, ``infos/episode_id``), so ``minari.load_dataset``
reads it unchanged. What makes it cheap at one Minari episode per transition (a release of 20,000 independent
transitions is 180,000 HDF5 objects):

* every array is converted once for the whole dataset (the observation space's dtypes and Dict split), and each
  episode writes row slices of those arrays, never its own conversions;
* datatypes, dataspaces and property lists are made once and reused; attributes are written without h5py's
  high-level wrappers (which cost more than the HDF5 call itself);
* small datasets use HDF5's compact layout (the data sits in the object header: no separate allocation);
* identical tiny flag arrays (``terminations``/``truncations`` of short episodes, e.g. ``[False]``) are stored once
  and hard-linked from the other episodes: an HDF5 hard link is a name of the same object, and readers see an
  ordinary dataset under each name. The file is a release, read, not appended to.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import OfflineDataset

__all__ = ["minari_episode_bounds", "write_standard_hdf5"]

_COMPACT_BYTES = 8192  # datasets up to this size live in their object header (HDF5's limit is 64 KiB)
_SHARED_FLAG_ROWS = 4  # bool arrays up to this length are stored once per distinct value and hard-linked


def minari_episode_bounds(ds: OfflineDataset) -> tuple[np.ndarray, np.ndarray]:
    """(starts, ends) of the standard layout's Minari episodes: maximal chained runs of one dataset episode.

    A run ends at an episode boundary, at a terminal, at a timeout, or where ``next_observations[t]`` differs from
    ``observations[t+1]`` (independent synthetic transitions: one run per transition).
    """
    n = ds.n_transitions
    cut = np.zeros(n, dtype=bool)  # cut[t]: a Minari episode ends after row t
    cut[-1] = True
    if n > 1:
        cut[:-1] = (
            (ds.episode_ids[1:] != ds.episode_ids[:-1])
            | ds.terminals[:-1]
            | ds.timeouts[:-1]
            | np.any(ds.next_observations[:-1] != ds.observations[1:], axis=1)
        )
    ends = np.flatnonzero(cut) + 1
    starts = np.concatenate([[0], ends[:-1]])
    return starts, ends


class _Writer:
    """Creates datasets, groups and attributes under open HDF5 ids, reusing types, spaces and property lists."""

    def __init__(self, fid: Any) -> None:
        from h5py import h5a, h5d, h5g, h5p, h5s, h5t

        self.fid = fid
        self._types: dict[np.dtype, Any] = {}
        self._spaces: dict[tuple[int, ...], Any] = {}
        self._shared: dict[tuple[tuple[int, ...], bytes], bytes] = {}
        self._compact = h5p.create(h5p.DATASET_CREATE)
        self._compact.set_layout(h5d.COMPACT)
        self._contiguous = h5p.create(h5p.DATASET_CREATE)
        self._gcpl = h5p.create(h5p.GROUP_CREATE)
        self._scalar = h5s.create(h5s.SCALAR)
        self._h5a, self._h5d, self._h5g, self._h5t, self._h5s = h5a, h5d, h5g, h5t, h5s

    def _type(self, dtype: np.dtype) -> Any:
        tid = self._types.get(dtype)
        if tid is None:
            tid = self._types[dtype] = self._h5t.py_create(dtype, logical=True)
        return tid

    def _space(self, shape: tuple[int, ...]) -> Any:
        sid = self._spaces.get(shape)
        if sid is None:
            sid = self._spaces[shape] = self._h5s.create_simple(shape)
        return sid

    def group(self, parent: Any, name: bytes) -> Any:
        return self._h5g.create(parent, name, gcpl=self._gcpl)

    def int_attr(self, obj: Any, name: bytes, value: int) -> None:
        arr = np.array(value, dtype=np.int64)
        self._h5a.create(obj, name, self._type(arr.dtype), self._scalar).write(arr)

    def array(self, parent: Any, name: bytes, arr: np.ndarray, path: bytes) -> None:
        """Write ``arr`` as dataset ``name`` of ``parent`` (whose path in the file is ``path``)."""
        if arr.dtype == np.bool_ and arr.size <= _SHARED_FLAG_ROWS:
            key = (arr.shape, arr.tobytes())
            first = self._shared.get(key)
            if first is not None:
                parent.links.create_hard(name, self.fid, first)
                return
            self._shared[key] = path + b"/" + name
        plist = self._compact if arr.nbytes <= _COMPACT_BYTES else self._contiguous
        dset = self._h5d.create(parent, name, self._type(arr.dtype), self._space(arr.shape), dcpl=plist)
        dset.write(self._h5s.ALL, self._h5s.ALL, np.ascontiguousarray(arr))


def write_standard_hdf5(
    file_path: Path,
    ds: OfflineDataset,
    obs_fn: Callable[[np.ndarray], Any],
    act_space: gym.Space,
) -> tuple[int, int]:
    """Write every Minari episode of the standard layout into ``file_path``; returns (episodes, steps).

    ``obs_fn`` turns flat observation rows [R, D] into what Minari stores for them (an array, or a dict of arrays
    for Dict spaces). ``infos/episode_id`` is written unless every dataset episode id is its Minari episode index.
    """
    from h5py import h5f, h5p

    starts, ends = minari_episode_bounds(ds)
    n_eps, n = len(starts), ds.n_transitions
    lengths = ends - starts
    with_ids = not np.array_equal(ds.episode_ids, np.repeat(np.arange(n_eps), lengths))
    # all observation rows at once: episode k's rows s..e-1, then next_observations[e-1], at offset s + k
    episode_of_row = np.repeat(np.arange(n_eps), lengths)
    rows = np.empty((n + n_eps, ds.obs_dim), dtype=ds.observations.dtype)
    rows[np.arange(n) + episode_of_row] = ds.observations
    rows[ends + np.arange(n_eps)] = ds.next_observations[ends - 1]
    obs = obs_fn(rows)
    obs_parts = {k.encode(): np.ascontiguousarray(v) for k, v in obs.items()} if isinstance(obs, dict) else None
    obs_flat = None if obs_parts is not None else np.ascontiguousarray(obs)
    act_dtype = act_space.dtype if act_space.dtype is not None else np.float32
    discrete = isinstance(act_space, gym.spaces.Discrete)  # actions stored as indices, shape [T]
    actions = (np.rint(ds.actions[:, 0]) if discrete else ds.actions).astype(act_dtype)
    truncations = np.zeros(n, dtype=bool)
    truncations[ends - 1] = ~ds.terminals[ends - 1]
    columns = ((b"actions", actions), (b"rewards", ds.rewards), (b"terminations", ds.terminals),
               (b"truncations", truncations))

    fcpl = h5p.create(h5p.FILE_CREATE)  # creation order tracked and indexed, as h5py's track_order=True
    fcpl.set_link_creation_order(h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED)
    fcpl.set_attr_creation_order(h5p.CRT_ORDER_TRACKED | h5p.CRT_ORDER_INDEXED)
    fid = h5f.create(str(file_path).encode(), h5f.ACC_TRUNC, fcpl=fcpl)
    try:
        w = _Writer(fid)
        for i, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
            path = f"episode_{i}".encode()
            g = w.group(fid, path)
            w.int_attr(g, b"id", i)
            w.int_attr(g, b"total_steps", e - s)
            if obs_parts is None:
                w.array(g, b"observations", obs_flat[s + i : e + i + 1], path)
            else:
                og = w.group(g, b"observations")
                for key, arr in obs_parts.items():
                    w.array(og, key, arr[s + i : e + i + 1], path + b"/observations")
            for name, col in columns:
                w.array(g, name, col[s:e], path)
            if with_ids:
                w.array(w.group(g, b"infos"), b"episode_id", ds.episode_ids[s:e], path + b"/infos")
    finally:
        fid.close()
    return n_eps, n
