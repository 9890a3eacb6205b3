"""Names of the benchmark's parts: cell kinds, group runners and dataset sources (docs/benchmarks.md, "Cell kinds").

Cell modules (``privsynth.evaluation.cells``, ``privsynth.commands.baselines``, ...) import this module to register
themselves; it imports none of them, so registering never closes an import circle. Turning a kind name into a
function, importing the built-in cell modules on first use, is :func:`privsynth.evaluation.bench.kinds.resolve_kind`.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

if TYPE_CHECKING:
    from privsynth.data.dataset import OfflineDataset
    from privsynth.evaluation.bench.context import CellContext

__all__ = ["CellFn", "GroupFn", "register_cell", "register_group", "register_dataset_source", "cell_kind",
           "group_kind", "dataset_source", "cell_kinds", "dataset_sources"]

CellFn = Callable[[dict[str, Any], "CellContext"], dict[str, Any]]
GroupFn = Callable[[list[dict[str, Any]], list["CellContext"]], list[dict[str, Any]]]
GroupKey = Callable[[dict[str, Any]], Any]
SourceFn = Callable[..., "OfflineDataset"]

_CELL_KINDS: dict[str, CellFn] = {}
_GROUP_KINDS: dict[str, tuple[GroupKey, GroupFn]] = {}
_DATASET_SOURCES: dict[str, SourceFn] = {}


def register_cell(name: str) -> Callable[[CellFn], CellFn]:
    """Decorator: register ``fn(params, ctx) -> dict`` as the cell kind ``name``."""

    def deco(fn: CellFn) -> CellFn:
        _CELL_KINDS[name] = fn
        return fn

    return deco


def register_group(name: str, key: GroupKey) -> Callable[[GroupFn], GroupFn]:
    """Decorator: ``fn(params_list, ctx_list) -> results`` runs several cells of kind ``name`` as one job.

    Cells of one stage whose params give equal ``key(params)`` are compatible; the runner hands up to the stage's
    ``group`` of them to ``fn`` at once (e.g. agent cells trained as one batched model). If ``fn`` raises, each cell
    of the group runs alone, so one bad cell fails only itself.
    """

    def deco(fn: GroupFn) -> GroupFn:
        _GROUP_KINDS[name] = (key, fn)
        return fn

    return deco


def register_dataset_source(name: str) -> Callable[[SourceFn], SourceFn]:
    """Decorator: register ``fn(**spec) -> OfflineDataset`` as a dataset source usable as ``{source: name}``."""

    def deco(fn: SourceFn) -> SourceFn:
        _DATASET_SOURCES[name] = fn
        return fn

    return deco


def cell_kind(name: str) -> CellFn | None:
    """The cell function registered as ``name``, or None."""
    return _CELL_KINDS.get(name)


def group_kind(name: str) -> tuple[GroupKey, GroupFn] | None:
    """``(key, fn)`` of the group runner registered for kind ``name``, or None."""
    return _GROUP_KINDS.get(name)


def dataset_source(name: str) -> SourceFn | None:
    """The dataset source registered as ``name``, or None."""
    return _DATASET_SOURCES.get(name)


def cell_kinds() -> list[str]:
    return sorted(_CELL_KINDS)


def dataset_sources() -> list[str]:
    return sorted(_DATASET_SOURCES)
