"""Where independent tasks (benchmark cells, sampling shards) run: a local process pool (default) or Ray.

Both executors take a picklable top-level function and a list of payloads and yield results as they finish. The
local one is the process pool the runner always had (``spawn``, one torch thread per worker; inline when
``workers == 1``). The Ray one submits every payload as a Ray task with its own CPU need (``num_cpus``), so a Ray
cluster that people already operate does the scheduling; we keep no scheduler of our own.

Ray is optional (``pip install privsynth[ray]``) and imported only when chosen. With no ``address`` and no running
Ray in this process, :class:`RayExecutor` starts a local instance (no dashboard) and shuts it down on close; with an
``address`` (``auto`` or ``ray://host:10001``) it joins that cluster and leaves it running. Every task writes its
artifacts under the suite's results folder, so on a multi-node cluster that folder must be on a shared filesystem.
"""
from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from privsynth.errors import InvalidData

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "RayExecutor", "make_executor", "init_worker"]

EXECUTORS = ("local", "ray")


def init_worker() -> None:
    """One BLAS/torch thread per task: parallelism comes from running tasks side by side."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def _call_in_worker(fn: Callable[[Any], Any], payload: Any) -> Any:
    init_worker()
    return fn(payload)


class Executor:
    """Runs ``fn(payload)`` for every payload; ``cpus[i]`` is what payload ``i`` needs (a hint locally)."""

    name = "base"

    def map(self, fn: Callable[[Any], Any], payloads: Sequence[Any], cpus: Sequence[float] | None = None) -> Iterator[Any]:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalExecutor(Executor):
    """A ``spawn`` process pool of ``workers`` processes; inline (in order) when ``workers == 1``."""

    name = "local"

    def __init__(self, workers: int = 1) -> None:
        self.workers = max(1, int(workers))

    def map(self, fn, payloads, cpus=None):
        if self.workers == 1:
            for p in payloads:
                yield fn(p)
            return
        with cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                    initializer=init_worker) as ex:
            futures = [ex.submit(fn, p) for p in payloads]
            for fut in cf.as_completed(futures):
                yield fut.result()


class RayExecutor(Executor):
    """Each payload becomes a Ray task with ``num_cpus`` = its CPU need; results are yielded as tasks finish."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None) -> None:
        try:
            import ray
        except ImportError:
            raise InvalidData("the ray executor needs Ray: pip install 'privsynth[ray]'") from None
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
            if address:
                kwargs["address"] = address
            elif num_cpus:
                kwargs["num_cpus"] = int(num_cpus)
            ray.init(**kwargs)
            self.started = address is None  # a cluster we joined keeps running; a local instance we made stops

    def map(self, fn, payloads, cpus=None):
        ray = self.ray
        task = ray.remote(_call_in_worker)
        pending = [task.options(num_cpus=float(cpus[i]) if cpus else 1.0).remote(fn, p) for i, p in enumerate(payloads)]
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            yield ray.get(done[0])

    def close(self) -> None:
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
        self.started = False


def make_executor(name: str = "local", *, workers: int = 1, address: str | None = None) -> Executor:
    """``local`` (a process pool of ``workers``) or ``ray`` (``address`` of a running cluster, else a local Ray
    instance with ``workers`` CPUs)."""
    if name == "local":
        if address:
            raise InvalidData("--address is for the ray executor; the local executor runs on this machine")
        return LocalExecutor(workers)
    if name == "ray":
        return RayExecutor(address=address, num_cpus=workers if workers > 1 else None)
    raise InvalidData(f"unknown executor '{name}': choose {' or '.join(EXECUTORS)}")
