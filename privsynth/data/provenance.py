"""Where a dataset's records come from: refuse public data that holds sensitive records by construction.

Datasets are described by *specs*: ``{name: spec}``, a spec being either ``{"split_of": parent}`` (a part of another
dataset) or what generated the records (a benchmark suite's dataset spec, or ``{"generator": ..., "config": ...}`` as
a generated dataset's info and a pre-trained model's card record it). Two datasets share records when their
``split_of`` chains end at the same root or at roots with the same generating spec. Reads descriptions only, never
rows: the benchmark's cells (:mod:`privsynth.evaluation.cell_guards`) and the release path
(:func:`privsynth.release.checks.check_pretrained_public`) both decide with :func:`check_public_specs`.
"""
from __future__ import annotations

from typing import Any

from privsynth.errors import InvalidData, PrivacyError

__all__ = ["data_origin", "check_public_specs", "info_specs"]


def data_origin(name: str, specs: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The dataset ``name`` derives from through its ``split_of`` chain (itself when it is no split), with that root's
    spec without the ``sensitive`` flag (two roots with one generating spec hold the same records)."""
    seen: list[str] = []
    while True:
        if name not in specs:
            raise InvalidData(f"dataset '{name}' is not declared in the suite")
        if name in seen:
            raise InvalidData(f"datasets {' -> '.join(seen + [name])} form a cycle")
        seen.append(name)
        spec = specs[name]
        if "split_of" not in spec:
            return name, {k: v for k, v in spec.items() if k != "sensitive"}
        name = spec["split_of"]


def check_public_specs(public: list[str], sensitive: str, specs: dict[str, Any]) -> None:
    """Refuse public datasets that share records with ``sensitive`` by construction: the same root dataset of their
    ``split_of`` chains (a sibling split, a parent or a child of it), or roots with the same generating spec.

    Protects: pre-training and public statistics never see a sensitive record (a suite need not mark every split of the
    sensitive data ``sensitive: true``). Reads only the specs, never the sensitive rows."""
    root, spec = data_origin(sensitive, specs)
    for name in public:
        p_root, p_spec = data_origin(name, specs)
        if p_root == root or p_spec == spec:
            raise PrivacyError(
                f"public dataset '{name}' derives from '{p_root}', as the sensitive dataset '{sensitive}' does (from "
                f"'{root}'{'' if p_root == root else ', same spec'}): public data must not contain sensitive records")


def info_specs(name: str, extra: dict[str, Any]) -> dict[str, Any]:
    """The specs of a dataset from its own description (``DatasetInfo.extra``): a split's ``{"split_of": source}``
    (:mod:`privsynth.data.split`) and the generating spec of its root, ``{"generator", "config"}`` as the generators
    record it; a root that records no generator is known by its name only (``{"id": name}``)."""
    made = ({"generator": extra["generator"], "config": extra.get("config")} if isinstance(extra.get("generator"), str)
            else None)
    split = extra.get("split")
    source = split.get("source") if isinstance(split, dict) else None
    if isinstance(source, str) and source and source != name:
        return {name: {"split_of": source}, source: made or {"id": source}}
    return {name: made or {"id": name}}
