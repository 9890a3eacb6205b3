"""Built-in cell kinds of the benchmark runner; each is one small function ``fn(params, ctx) -> dict``.

The kinds call library functions and only glue them: synthesis (``privsynth.synth``), downstream agents
(``privsynth.evaluation.agents``), fidelity (``privsynth.evaluation.fidelity``), membership inference
(:mod:`privsynth.evaluation.mia`) and resource cost. Imports are local so that a missing optional part only fails the
cells that need it.
"""
from __future__ import annotations

from typing import Any

from privsynth.evaluation.runner import CellContext, load_dataset_file, register_cell, save_dataset


def _source_data(params: dict[str, Any], ctx: CellContext):
    """The training data of a downstream cell: the real sensitive data for ``synthesizer: real``, else the
    synthetic dataset written by the upstream ``synthesize`` cell."""
    if params.get("synthesizer") == "real":
        return ctx.dataset(params["data"]["sensitive"])
    return load_dataset_file(ctx.upstream_dir / "synthetic.npz")
