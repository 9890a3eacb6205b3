"""The ``method`` cell kind: any registered DP offline-RL method through the method protocol (docs/methods.md).

Params::

    name: dp-apvi                 # a name of privsynth.methods.names()
    epsilon: 2.0                  # the budget the run must fit (the guard checks the ledger against it)
    delta: 1.0e-5                 # optional (the method's default otherwise)
    seed: 0                       # non-private randomness
    config: {preset: tiny, env: {kind: gridworld}, dp-vapvi: {env: {H: 5}}}   # overrides; a section named after a
                                  # method applies to that method only (one grid may mix methods)
    data: {sensitive: NAME}       # a suite dataset marked sensitive

The record holds ε and δ of the ledger, the privacy unit, whether the ledger is DP, the method's metrics and the run
time; the ledger (JSON) and the card are written to the cell's artifact folder, and a DP dataset the method returns
as ``synthetic.npz`` (so ``agent`` and ``fidelity`` cells can consume it downstream).

The dataset source ``method_example`` builds a method's example sensitive dataset (the adapters' ``example_dataset``:
Pendulum for PriMORL, the public tabular / linear MDPs for DP-APVI / DP-VAPVI, an expert pool for expert SVT,
Acrobot episodes for kickstarting), with the spec's other keys as its arguments.
"""
from __future__ import annotations

import importlib
import json
import time
from typing import Any

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.bench.context import CellContext
from privsynth.evaluation.bench.registry import register_cell, register_dataset_source
from privsynth.evaluation.bench.sources import save_dataset

__all__ = ["method_cell", "method_example_dataset"]


@register_dataset_source("method_example")
def method_example_dataset(method: str, **spec: Any) -> OfflineDataset:
    """The example sensitive dataset of a registered method (``{source: method_example, method: dp-apvi, ...}``)."""
    from privsynth.methods import registry

    module = importlib.import_module(registry.entry(method).adapter.split(":")[0])
    spec.pop("name", None)
    return module.example_dataset(**spec)


def _overrides(name: str, spec: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    from privsynth.methods import registry

    spec = dict(spec)
    preset = spec.pop("preset", "paper")
    own = spec.pop(name, {}) or {}
    flat = {k: v for k, v in spec.items() if k not in registry.REGISTRY}
    return preset, {**flat, **own}


@register_cell("method")
def method_cell(params: dict[str, Any], ctx: CellContext) -> dict[str, Any]:
    """Run one registered method on the suite's sensitive dataset at ``epsilon`` and record its ledger and metrics."""
    from privsynth.methods import registry

    name = params.get("name")
    if name not in registry.REGISTRY:
        raise InvalidData(f"cell {ctx.cell_id}: unknown method '{name}': choose one of {', '.join(registry.names())}")
    if params.get("epsilon") is None:
        raise InvalidData(f"cell {ctx.cell_id}: the method cell needs an epsilon")
    preset, overrides = _overrides(name, params.get("config") or {})
    overrides.update(epsilon=float(params["epsilon"]), seed=int(params.get("seed", 0)))
    if params.get("delta") is not None:
        overrides["delta"] = float(params["delta"])
    method = registry.make(name, preset=preset, **overrides)
    sensitive = ctx.dataset(params["data"]["sensitive"])
    t0 = time.perf_counter()
    result = method.run(sensitive)
    seconds = time.perf_counter() - t0
    (ctx.artifact_dir / "ledger.json").write_text(result.ledger.to_json())
    (ctx.artifact_dir / "card.json").write_text(json.dumps(result.card, indent=1, default=str))
    out: dict[str, Any] = {"dp_epsilon": result.epsilon, "dp_delta": result.ledger.delta, "unit": result.ledger.unit,
                           "private": result.private, "seconds": seconds, **result.metrics}
    if result.dataset is not None:
        save_dataset(result.dataset, ctx.artifact_dir / "synthetic.npz")
        out["n_synthetic"] = len(result.dataset)
    from privsynth.evaluation.bench.records import holder_only

    return holder_only(out, "seconds")  # the run's time on the sensitive set, outside DP: the holder's own

