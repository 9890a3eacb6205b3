"""The neighbour test (issue 21): a releasing path run on D and on D plus one unit may differ only in its DP outputs.

A *releasing path* is a function ``run(dataset) -> dict`` returning everything it writes or hands to the user that is
not itself a DP output: cards, ledgers, Minari metadata, configs, checkpoint state without weights. :func:`leaks`
flattens two such views into ``path -> value`` and lists every path whose value differs between the neighbours,
except the paths the releasing path declares as DP outputs (noisy values and their post-processing) and the public
facts named by whole field (:data:`N_DERIVED`: the number of privacy units N and what DP-SGD derives from it;
:data:`TIMINGS`). Arrays are compared by shape and dtype only, so weights and synthetic rows never count, while a
shape that depends on the data does; :func:`minari_files` reads every file of a Minari release.
"""
from __future__ import annotations

import dataclasses
import json
import re
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

import numpy as np

from privsynth.data import OfflineDataset

# Public facts are named by exact field: a plain pattern ``a.b`` matches a flattened key whose LAST components are
# ``a`` and ``b`` (so ``steps`` matches ``card.steps`` and ``phases.1.steps`` but not ``steps_max`` or ``n_steps``);
# only a pattern holding ``*``, ``?`` or ``[`` is a glob, and then it must match the whole key. Public facts take the
# exact form; globs are for a path's declared DP outputs.

# Functions of the number of privacy units N. N is private under the cards' add/remove relation (issue 36): a release
# counts its units with DP (privsynth.privacy.count) and derives all of these from the noisy count, so they are DP
# outputs (they differ between any two runs), and :func:`mentions_count` checks that the exact N appears nowhere.
# A path whose method still takes N as given says so with ``exact_n_public=True`` and keeps them as public facts.
N_DERIVED = (
    "n_units", "units", "trajectories", "n_units_noisy", "units_noisy", "trajectories_noisy",  # N or Ñ (the event's, the DP phase's, trajectory-level methods')
    "sample_rate", "sampling_probability",  # q = B / N
    "batch_size",  # min(B, N): at unit = trajectory the expected batch is capped by N
    "steps", "epochs", "dp_event.count",  # steps = epochs / q
    "noise_multiplier",  # σ calibrated to (ε, δ) at q and steps
    "epsilon", "epsilon_spent",  # ε of the calibrated σ (a hair below the budget, by N)
    "dp_epsilon", "dp_noise_multiplier", "dp_steps", "dp_sample_rate",  # the same, in a bench cell's record
)
# Wall-clock and machine facts: how long a step took, when a file was written, the process' peak memory.
TIMINGS = ("seconds", "seconds_per_epoch", "cpu_seconds_per_epoch", "curiosity_sampling_seconds", "created_at",
           "fit_seconds", "pretrain_seconds", "finetune_seconds", "sample_seconds", "peak_rss_mb")
PUBLIC_FACTS = N_DERIVED + TIMINGS
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
        if any(matches(key, p) for p in (*dp_outputs, *public_facts)):
            continue
        out.append(f"{key}: {_show(va)} != {_show(vb)}")
    return out


def matches(key: str, pattern: str) -> bool:
    """Whether a flattened key is named by a pattern: a glob (holding ``*?[``) matching the whole key, or dotted field
    names equal to the key's last components (``steps`` names ``card.phases.1.steps``, never ``steps_max``)."""
    if any(c in pattern for c in "*?["):
        return fnmatchcase(key, pattern)
    want, have = pattern.split("."), key.split(".")
    return len(have) >= len(want) and have[-len(want):] == want


def mentions_count(view: Any, n: int) -> list[str]:
    """Flattened paths of ``view`` whose value is the exact integer ``n`` or a string naming it as a whole number.

    For the privacy model where N is private: the exact count must appear nowhere in a release (floats derived from
    it, such as B / N, are out of scope here)."""
    word = re.compile(rf"(?<![\w.]){int(n)}(?![\w]|\.\d)")
    out = []
    for key, value in flatten(view).items():
        if isinstance(value, bool) or (isinstance(value, str) and value.startswith("<array")):
            continue  # array shapes are compared between the neighbours by :func:`leaks`
        if (isinstance(value, (int, np.integer)) and int(value) == n) or (isinstance(value, str) and word.search(value)):
            out.append(key)
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
    """What a plain Minari user reads besides the arrays: the dataset's metadata and, under ``files``, what each of
    its files holds (:func:`minari_files`)."""
    import minari

    d = minari.load_dataset(dataset_id)
    meta = dict(d.storage.metadata)
    meta.pop("dataset_id", None)
    meta["files"] = minari_files(dataset_id)
    return meta


_EPISODE = re.compile(r"episode_\d+")


def minari_files(dataset_id: str) -> dict[str, Any]:
    """Every file of a Minari dataset, as data: HDF5 files walked with h5py (every group and dataset by name, their
    attributes, arrays by shape and dtype), ``.npz`` arrays by shape and dtype, JSON parsed; any other file by name.

    Episode groups (``episode_<i>``) are summarised so the synthetic rows' episode layout is one field: ``episodes``
    holds their ``count`` and ``total_steps`` (a DP output where the synthesizer draws episode ends), ``schema`` (each
    member's name, dtype and trailing shape, and the attribute names) and ``attrs`` (the distinct values of every
    episode attribute other than ``id`` and ``total_steps``), so a data-dependent attribute still shows up."""
    import h5py
    from minari.storage import get_dataset_path

    root = Path(get_dataset_path(dataset_id))
    out: dict[str, Any] = {}
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        rel = path.relative_to(root).as_posix()
        if path.suffix == ".hdf5":
            with h5py.File(path, "r") as f:
                out[rel] = _walk_hdf5(f)
        elif path.suffix == ".npz":
            with np.load(path, allow_pickle=False) as z:
                out[rel] = {k: f"<array {z[k].shape} {z[k].dtype}>" for k in sorted(z.files)}
        elif path.suffix == ".json":
            data = json.loads(path.read_text())
            if isinstance(data, dict):
                data.pop("dataset_id", None)
            out[rel] = data
        else:
            out[rel] = "<file>"
    return out


def _attrs(obj: Any) -> dict[str, Any]:
    return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in sorted(obj.attrs.items())}


def _walk_hdf5(f: Any) -> dict[str, Any]:
    import h5py

    items: dict[str, Any] = {"/": {"attrs": _attrs(f)}}
    steps: list[int] = []
    schema: set[str] = set()
    episode_attrs: set[str] = set()

    def visit(name: str, obj: Any) -> None:
        top = name.split("/")[0]
        if _EPISODE.fullmatch(top):
            member = name[len(top):] or "/"
            if isinstance(obj, h5py.Dataset):
                schema.add(f"{member} {obj.dtype} {tuple(obj.shape[1:])} attrs={sorted(obj.attrs)}")
            else:
                schema.add(f"{member} group attrs={sorted(obj.attrs)}")
            for k, v in obj.attrs.items():
                if member == "/" and k == "total_steps":
                    steps.append(int(v))
                elif not (member == "/" and k == "id"):
                    episode_attrs.add(f"{member}@{k}={v!r}")
            return
        entry: dict[str, Any] = {"attrs": _attrs(obj)}
        if isinstance(obj, h5py.Dataset):
            entry["array"] = f"<array {obj.shape} {obj.dtype}>"
        items[name] = entry

    f.visititems(visit)
    n = sum(1 for k in f.keys() if _EPISODE.fullmatch(k))
    items["episodes"] = {"count": n, "total_steps": sorted(steps), "schema": sorted(schema),
                         "attrs": sorted(episode_attrs)}
    return items
