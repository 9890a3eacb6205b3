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
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from privsynth.errors import InvalidData

__all__ = ["EXECUTORS", "Executor", "LocalExecutor", "RayExecutor", "make_executor", "init_worker", "init_pool_worker"]

EXECUTORS = ("local", "ray")


def init_worker() -> None:
    """One BLAS/torch thread per task: parallelism comes from running tasks side by side."""
    os.environ["OMP_NUM_THREADS"] = "1"
    os.environ["MKL_NUM_THREADS"] = "1"
    import torch

    torch.set_num_threads(1)


def _exit_with_parent(parent_pid: int) -> None:
    """End this worker when the process that started it dies (even by SIGKILL): on Linux the kernel sends SIGKILL
    (``PR_SET_PDEATHSIG``); everywhere a daemon thread checks every second whether the parent is still there."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(1.0)

    if os.getppid() != parent_pid:  # the parent died before we got here
        os._exit(1)
    threading.Thread(target=watch, name="exit-with-parent", daemon=True).start()


def init_pool_worker(parent_pid: int) -> None:
    """Initializer of a local pool worker: :func:`init_worker`, Ctrl-C left to the parent (which cancels the queue
    and ends the workers; a worker catching it would just move on to the next task), and death with the parent."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    _exit_with_parent(parent_pid)
    init_worker()


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
    """A ``spawn`` process pool of ``workers`` processes; inline (in order) when ``workers == 1``.

    If the caller stops early (Ctrl-C in the parent, an error, or closing the generator), the queued payloads are
    cancelled and the running workers terminated at once; on Ctrl-C the results that had already finished are still
    yielded before ``KeyboardInterrupt`` propagates. Workers ignore Ctrl-C themselves and die with the parent."""

    name = "local"

    def __init__(self, workers: int = 1) -> None:
        self.workers = max(1, int(workers))

    def map(self, fn, payloads, cpus=None):
        if self.workers == 1:
            for p in payloads:
                yield fn(p)
            return
        ex = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=mp.get_context("spawn"),
                                    initializer=init_pool_worker, initargs=(os.getpid(),))
        futures = [ex.submit(fn, p) for p in payloads]
        given: set[cf.Future] = set()
        try:
            for fut in cf.as_completed(futures):
                given.add(fut)
                yield fut.result()
        except KeyboardInterrupt:
            _stop_pool(ex)
            for fut in futures:  # finished before the interrupt: hand them over so they are kept
                if fut not in given and fut.done() and not fut.cancelled() and fut.exception() is None:
                    given.add(fut)
                    yield fut.result()
            raise
        except BaseException:  # an error, or the consumer closed the generator (GeneratorExit)
            _stop_pool(ex)
            raise
        ex.shutdown(wait=True)


def _stop_pool(ex: cf.ProcessPoolExecutor) -> None:
    """Cancel the queued tasks and end the running workers now (``shutdown`` alone would wait for them)."""
    procs = list((getattr(ex, "_processes", None) or {}).values())  # private, but the only handle on the workers
    ex.shutdown(wait=False, cancel_futures=True)
    for p in procs:
        if p.is_alive():
            p.terminate()
    deadline = time.monotonic() + 5.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
        if p.is_alive():
            p.kill()


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
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                yield ray.get(done[0])
        except BaseException:  # Ctrl-C, an error, or the consumer stopped: cancel what has not finished
            for ref in pending:
                try:
                    ray.cancel(ref, force=True)
                except Exception:  # noqa: BLE001 - best effort
                    pass
            raise

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
