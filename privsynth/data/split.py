"""Random member / non-member splits of a dataset, as membership-inference audits need (``privsynth datasets split``).

A split draws, under a seed, a random ``fraction`` of the units (episodes, or transitions) as *members* (the records
a model is then trained on) and keeps the rest as *non-members* (held out). Both parts keep the source's
:class:`~privsynth.data.dataset.DatasetInfo` (its ``sensitive`` flag, environment facts, reference scores) under
their own name, and record where they came from in ``info.extra["split"]``.

The seed is a non-private seed of the split: it drives no privacy noise. What it buys is the randomness an audit
relies on: a membership audit's ε lower bound assumes every unit was a member at random, independently of the data,
so draw the split before training and do not pick the seed after looking at results, and draw it at the unit the
audit tests (:func:`split_for_unit`): a transition-level claim needs a split by transition, a trajectory-level one a
split by episode.
"""
from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from privsynth.data.dataset import ARRAY_FIELDS, DatasetInfo, OfflineDataset
from privsynth.data.units import check_unit
from privsynth.errors import InvalidData, PrivsynthError

__all__ = ["SPLIT_UNITS", "split_for_unit", "check_split", "split_dataset", "split_transitions", "named_part", "write_split"]

SPLIT_UNITS = ("episode", "transition")  # how a split record names its layout: 'episode' = unit 'trajectory'


def split_for_unit(unit: str) -> str:
    """The split an audit at privacy unit ``unit`` needs: ``'transition'`` for one transition, ``'episode'`` for one
    trajectory (each unit's membership must be its own random draw; a split by episode gives every transition of an
    episode the same one, a split by transition leaves episodes partly member)."""
    return "transition" if check_unit(unit) == "transition" else "episode"


def check_split(fraction: float, by: str) -> None:
    """One-line errors for a fraction outside (0, 1) (NaN included) and an unknown unit."""
    if not 0.0 < fraction < 1.0:
        raise InvalidData(f"split fraction must be in (0, 1), got {fraction:g}")
    check_unit(by, what="split unit", aliases=True)  # 'trajectory' or 'transition' ('episode': trajectory)


def split_dataset(ds: OfflineDataset, fraction: float, *, by: str = "episode",
                  seed: int = 0) -> tuple[OfflineDataset, OfflineDataset]:
    """(members, non-members): a random ``fraction`` of the episodes (:meth:`OfflineDataset.split_episodes`) or of
    the transitions (:func:`split_transitions`: rows keep their episode ids, so episodes become gappy)."""
    check_split(fraction, by)
    if by in ("episode", "trajectory"):
        return ds.split_episodes(fraction, seed=seed)
    if ds.n_transitions < 2:
        raise InvalidData(f"dataset '{ds.info.name}' has {ds.n_transitions} transition(s); a split needs at least 2")
    return split_transitions(ds, fraction, seed)


def split_transitions(ds: OfflineDataset, fraction: float, seed: int = 0) -> tuple[OfflineDataset, OfflineDataset]:
    """Random split of the *transitions* (PrivORL's ``train_test_split`` on rows): the unit of transition-level DP.

    Rows keep their episode ids (episodes become gappy, which transition-level consumers do not mind).
    """
    if not 0.0 < fraction < 1.0:
        raise InvalidData(f"split fraction must be in (0, 1), got {fraction}")
    n = ds.n_transitions
    perm = np.random.default_rng(seed).permutation(n)
    k = min(max(int(round(fraction * n)), 1), n - 1)

    def take(idx: np.ndarray) -> OfflineDataset:
        idx = np.sort(idx)
        return OfflineDataset(**{a: getattr(ds, a)[idx] for a in ARRAY_FIELDS}, info=DatasetInfo.from_dict(ds.info.to_dict()))

    return take(perm[:k]), take(perm[k:])


def named_part(part: OfflineDataset, name: str, *, source: str, role: str, fraction: float, by: str,
               seed: int) -> OfflineDataset:
    """``part`` of a split renamed ``name``, with ``info.extra["split"]`` recording its source and the split's settings
    (arrays shared, info copied; the sensitive flag and environment facts unchanged)."""
    extra: dict[str, Any] = {**part.info.extra,
                             "split": {"source": source, "part": role, "fraction": fraction, "by": by, "seed": seed}}
    return dataclasses.replace(part, info=dataclasses.replace(part.info, name=name, extra=extra))


Written = tuple[str, OfflineDataset]  # (full id, the dataset written under it)


def write_split(source_id: str, members_id: str, non_members_id: str, *, fraction: float = 0.8, by: str = "episode",
                seed: int = 0, overwrite: bool = False) -> tuple[Written, Written]:
    """Split the local dataset ``source_id`` and write both parts to the store; returns ``((members_id, members),
    (non_members_id, non_members))`` with full ids.

    Every request error (unknown source, fraction, unit, equal output ids, an output naming the source, an existing
    output without ``overwrite``) is raised before any row is read.
    """
    from privsynth.data import minari_io

    source = minari_io.resolve_id(source_id)
    check_split(fraction, by)
    outputs = (minari_io.resolve_id(members_id, for_write=True), minari_io.resolve_id(non_members_id, for_write=True))
    if outputs[0] == outputs[1]:
        raise PrivsynthError(f"members and non-members need different ids, both are '{outputs[0]}'")
    for out in outputs:
        if out == source:
            raise PrivsynthError(f"output '{out}' is the dataset being split; choose another id")
        if minari_io.dataset_exists(out) and not overwrite:
            raise PrivsynthError(f"dataset '{out}' already exists; pass --overwrite to replace it")
    parts = split_dataset(minari_io.load_dataset(source), fraction, by=by, seed=seed)
    written = []
    for out, role, part in zip(outputs, ("members", "non-members"), parts):
        named = named_part(part, out, source=source, role=role, fraction=fraction, by=by, seed=seed)
        minari_io.write_dataset(named, out, overwrite=overwrite)
        written.append((out, named))
    return written[0], written[1]
