"""Draw a large synthetic dataset in shards, each in its own worker with its own recorded seed.

Sampling a DP fine-tuned synthesizer is post-processing (no privacy cost), and PrivORL-n draws every transition
independently, so a draw of ``n`` rows splits into ``k`` shards of about ``n / k`` rows that any worker can make.
Shard ``i`` uses the seed ``SeedSequence(seed).spawn(k)[i]`` (NumPy's scheme for independent parallel streams), so
the shards are statistically independent, the whole draw is reproducible from ``(seed, k)``, and the seeds are
recorded on the dataset (``info.extra["sample"]["shards"]``).

Shard ``i`` equals ``synth.sample(n_i, seed=seed_i)``; the shards are concatenated in shard order, whatever order the
workers finish in. The executor is anything with ``map(fn, payloads, cpus)`` (e.g.
:mod:`privsynth.evaluation.executors`; passed in, not imported, since synth sits left of evaluation); each worker
loads the checkpoint from ``model_path``, which on a cluster must be readable from every node.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData

__all__ = ["shard_seeds", "shard_sizes", "sample_shard", "sample_sharded"]


class _Executor(Protocol):
    def map(self, fn: Any, payloads: list[Any], cpus: list[float] | None = None) -> Any: ...


def shard_seeds(seed: int, shards: int) -> list[int]:
    """Independent 32-bit seeds for ``shards`` workers from one base seed (``numpy.random.SeedSequence.spawn``)."""
    return [int(s.generate_state(1)[0]) for s in np.random.SeedSequence(int(seed)).spawn(int(shards))]


def shard_sizes(n: int, shards: int) -> list[int]:
    """``n`` split into ``shards`` near-equal parts (the first ``n % shards`` get one more row)."""
    base, extra = divmod(int(n), int(shards))
    return [base + (i < extra) for i in range(int(shards))]


def sample_shard(payload: dict[str, Any]) -> dict[str, Any]:
    """One shard in a worker: load the checkpoint, draw ``n`` rows with ``seed``, un-normalise them."""
    from privsynth.synth.transition import TransitionSynthesizer

    synth = TransitionSynthesizer.load(payload["model"])
    if payload.get("order") is not None:  # the caller's solver order (a checkpoint may predate the setting)
        synth.config.sampler.solver_order = int(payload["order"])
    t0 = time.perf_counter()
    raw = synth.sample_normalised(payload["n"], seed=payload["seed"], method=payload.get("method"),
                                  steps=payload.get("steps")).numpy()
    rows, dropped = synth.postprocess(raw)
    return {"index": payload["index"], "rows": rows, "seed": payload["seed"], "n": payload["n"],
            "returned": int(rows.shape[0]), "nan_rows_dropped": dropped, "seconds": time.perf_counter() - t0}


def sample_sharded(
    synth: Any,
    model_path: str | Path,
    n: int,
    *,
    shards: int,
    executor: _Executor,
    seed: int | None = None,
    method: str | None = None,
    steps: int | None = None,
    name: str | None = None,
) -> OfflineDataset:
    """``n`` synthetic transitions from the checkpoint ``model_path`` (already loaded as ``synth``) in ``shards``
    independent shards run by ``executor``. Sets ``synth.last_sample_stats`` (with the per-shard seeds)."""
    if n < 1 or shards < 1:
        raise InvalidData(f"number of samples and shards must be positive, got n={n}, shards={shards}")
    if shards > n:
        raise InvalidData(f"{shards} shards for {n} rows: use at most one shard per row")
    base = synth.config.seed if seed is None else int(seed)
    t0 = time.perf_counter()
    order = synth.config.sampler.solver_order
    payloads = [{"index": i, "model": str(model_path), "n": k, "seed": s, "method": method, "steps": steps,
                 "order": order}
                for i, (k, s) in enumerate(zip(shard_sizes(n, shards), shard_seeds(base, shards)))]
    parts = sorted(executor.map(sample_shard, payloads, [1.0] * shards), key=lambda r: r["index"])
    rows = np.concatenate([p["rows"] for p in parts], axis=0)
    if rows.shape[0] == 0:
        raise InvalidData(f"all {n} sampled rows were NaN or inf; the model diverged")
    used = method or synth.config.sampler.method
    synth.last_sample_stats = {
        "requested": n,
        "returned": int(rows.shape[0]),
        "nan_rows_dropped": sum(p["nan_rows_dropped"] for p in parts),
        "sampler": used,
        "sampler_steps": synth.sampler_steps(used, steps),
        "solver_order": order if used == "dpm" else None,
        "seconds": time.perf_counter() - t0,
        "seed": base,
        "shards": [{k: p[k] for k in ("index", "seed", "n", "returned", "nan_rows_dropped", "seconds")} for p in parts],
    }
    return synth.rows_to_dataset(rows, name)
