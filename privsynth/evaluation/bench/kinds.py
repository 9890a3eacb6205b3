"""Kind names to cell functions: a registered kind, else ``"package.module:function"`` imported on demand.

The built-in cell modules register their kinds when imported; :func:`load_builtin_kinds` imports them on the first
lookup of a name not registered yet, so listing a suite or running ``echo`` cells never imports them. This module
also holds ``echo``, the trivial kind the runner's own tests use.
"""
from __future__ import annotations

import importlib
import importlib.util
import os
import time
from typing import Any

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.context import CellContext
from privsynth.evaluation.bench.registry import (CellFn, GroupFn, GroupKey, SourceFn, cell_kind, cell_kinds,
                                                 dataset_source, dataset_sources, group_kind, register_cell)
from privsynth.evaluation.bench.sources import prepare_datasets

__all__ = ["BUILTIN_KIND_MODULES", "load_builtin_kinds", "resolve_kind", "resolve_source", "known_sources",
           "prepare_suite_datasets", "group_runner", "echo_cell"]

# modules whose import registers cell kinds; a listed module that does not exist (yet) is skipped
BUILTIN_KIND_MODULES = ("privsynth.evaluation.cells", "privsynth.evaluation.method_cells")


def load_builtin_kinds() -> None:
    """Import every built-in cell module that exists (each registers its kinds; a second call costs nothing)."""
    for module in BUILTIN_KIND_MODULES:
        if importlib.util.find_spec(module) is not None:
            importlib.import_module(module)


def resolve_kind(name: str) -> CellFn:
    """A registered kind, or ``"package.module:function"`` imported on demand."""
    if cell_kind(name) is None:
        load_builtin_kinds()
    fn = cell_kind(name)
    if fn is not None:
        return fn
    if ":" in name:
        module, _, attr = name.partition(":")
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise InvalidData(f"cannot import cell kind '{name}': {exc}") from exc
    raise InvalidData(f"unknown cell kind '{name}': registered kinds are {', '.join(cell_kinds())}")


def resolve_source(name: str) -> SourceFn | None:
    """The dataset source registered as ``name``, importing the built-in cell modules first if it is not registered
    yet (``method_example`` is registered by :mod:`privsynth.evaluation.method_cells`); None for an unknown name."""
    if dataset_source(name) is None:
        load_builtin_kinds()
    return dataset_source(name)


def known_sources() -> list[str]:
    """Every dataset source name, the built-in cell modules' included."""
    load_builtin_kinds()
    return dataset_sources()


def prepare_suite_datasets(suite: Any) -> None:
    """:func:`~privsynth.evaluation.bench.sources.prepare_datasets` with every built-in source registered."""
    prepare_datasets(suite, source_of=resolve_source)


def group_runner(name: str) -> tuple[GroupKey, GroupFn] | None:
    """``(key, fn)`` of kind ``name``'s group runner, loading the built-in kinds first; None for a kind without one
    (or an unknown kind, which its cells then report)."""
    if group_kind(name) is None:
        try:
            resolve_kind(name)
        except InvalidData:
            pass
    return group_kind(name)


@register_cell("echo")
def echo_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Trivial kind for testing the runner: returns its numeric params (optionally sleeps or fails)."""
    started = time.time()
    if params.get("sleep"):
        time.sleep(float(params["sleep"]))
    if params.get("fail"):
        raise RuntimeError("echo cell asked to fail")
    out = {k: v for k, v in params.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
    out.update(pid=os.getpid(), started=started, ended=time.time())
    if ctx.upstream is not None:
        out["upstream_value"] = ctx.upstream.result.get("value")
    return out
