"""The neighbour test (issue 21): a releasing path run on D and on D plus one unit may differ only in its DP outputs.

A *releasing path* is a function ``run(dataset) -> dict`` returning everything it writes or hands to the user that is
not itself a DP output: cards, ledgers, Minari metadata, configs, checkpoint state without weights. :func:`leaks`
flattens two such views into ``path -> value`` and lists every path whose value differs between the neighbours,
except the paths the releasing path declares as DP outputs (noisy values and their post-processing) and the public
facts every card names (the number of privacy units N and what DP-SGD derives from it: sample rate, steps, σ, ε).
Arrays are compared by shape and dtype only, so weights and synthetic rows never count, while a shape that depends
on the data does.
"""
from __future__ import annotations

import dataclasses
import json
from fnmatch import fnmatch
from typing import Any

import numpy as np

from privsynth.data import OfflineDataset

# Functions of N (treated as public on every card) and of wall-clock time.
PUBLIC_FACTS = (
    "*n_units", "*sample_rate", "*.steps", "steps", "*noise_multiplier", "*.epsilon", "epsilon", "*epsilon_spent",
    "*dp_event*", "*units", "*trajectories", "*.epochs", "*batch_size",
    "*seconds*", "*wall*", "*created*", "*date*",  # timings (not "*time*": it would hide e.g. timeouts)
)
_MISSING = object()


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """``{"a.b.0": value}`` of a nested structure; arrays and tensors become ``<array shape dtype>``."""
    if hasattr(obj, "detach") and hasattr(obj, "shape"):
        return {prefix: f"<array {tuple(obj.shape)} {obj.dtype}>"}
    if isinstance(obj, np.ndarray):
        return {prefix: f"<array {obj.shape} {obj.dtype}>"}
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        obj = {f.name: getattr(obj, f.name) for f in dataclasses.fields(obj)}
    if isinstance(obj, dict):
        out: dict[str, Any] = {}
        for k, v in obj.items():
            out.update(flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out or {prefix: "{}"}
    if isinstance(obj, (list, tuple)):
        out = {}
        for i, v in enumerate(obj):
            out.update(flatten(v, f"{prefix}.{i}"))
        return out or {prefix: "[]"}
    if isinstance(obj, str) and obj[:1] in "{[":
        try:  # JSON stored as a string (e.g. a ledger inside a checkpoint) is compared field by field
            return flatten(json.loads(obj), prefix)
        except (json.JSONDecodeError, TypeError):
            pass
    if hasattr(obj, "item") and callable(obj.item):
        obj = obj.item()
    return {prefix: obj}


def leaks(a: Any, b: Any, *, dp_outputs: tuple[str, ...] = (), public_facts: tuple[str, ...] = PUBLIC_FACTS) -> list[str]:
    """Paths whose values differ between the two views and are neither DP outputs nor public facts."""
    fa, fb = flatten(a), flatten(b)
    out = []
    for key in sorted(fa.keys() | fb.keys()):
        va, vb = fa.get(key, _MISSING), fb.get(key, _MISSING)
        if _same(va, vb):
            continue
        if any(fnmatch(key, p) for p in (*dp_outputs, *public_facts)):
            continue
        out.append(f"{key}: {_show(va)} != {_show(vb)}")
    return out


def _same(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float) and np.isnan(x) and np.isnan(y):
        return True
    return x is y or (x is not _MISSING and y is not _MISSING and type(x) is type(y) and x == y)


def _show(v: Any) -> str:
    return "<missing>" if v is _MISSING else repr(v)[:60]


def add_episode(ds: OfflineDataset, length: int, *, offset: float = 3.0, seed: int = 99) -> OfflineDataset:
    """``ds`` plus one new episode (a new unit at either privacy unit) of ``length`` transitions, unlike the others."""
    rng = np.random.default_rng(seed)
    obs = (rng.normal(size=(length, ds.obs_dim)) + offset).astype(ds.observations.dtype)
    act = np.clip(rng.normal(size=(length, ds.act_dim)), -0.5, 0.5).astype(ds.actions.dtype)
    term = np.zeros(length, dtype=bool)
    term[-1] = True
    new_id = int(np.max(ds.episode_ids)) + 1
    return dataclasses.replace(
        ds,
        observations=np.concatenate([ds.observations, obs]),
        actions=np.concatenate([ds.actions, act]),
        rewards=np.concatenate([ds.rewards, rng.normal(size=length).astype(ds.rewards.dtype) + offset]),
        next_observations=np.concatenate([ds.next_observations, obs + 0.1]),
        terminals=np.concatenate([ds.terminals, term]),
        timeouts=np.concatenate([ds.timeouts, np.zeros(length, dtype=bool)]),
        episode_ids=np.concatenate([ds.episode_ids, np.full(length, new_id, dtype=ds.episode_ids.dtype)]),
    )


def minari_metadata(dataset_id: str) -> dict[str, Any]:
    """What a plain Minari user reads besides the arrays: the dataset's metadata and its episodes' layout."""
    import minari

    d = minari.load_dataset(dataset_id)
    meta = dict(d.storage.metadata)
    meta.pop("dataset_id", None)
    return meta
