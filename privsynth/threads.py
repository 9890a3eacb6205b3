"""Thread counts for CPU work on a shared machine: the cores other jobs leave idle, and torch's (and the native
pools') threads set for a block. Used by the demo and by the CLI's global ``--threads``.

Why our own: torch sets one intra-op thread per core whatever else runs, and a thread per busy core stalls every
parallel op behind a descheduled thread; no library we depend on measures the idle cores.
"""
from __future__ import annotations

import contextlib
import os
import time
from typing import Iterator

__all__ = ["idle_cores", "busy_cores", "torch_threads"]


def idle_cores(window: float = 0.3) -> int:
    """Cores free right now: busy time over ``window`` seconds from ``/proc/stat`` (Linux), else the 1-minute load
    average. The load average remembers the last minute (a ``pip install`` just before ``make demo`` reads as a busy
    machine and halves the demo's threads: fine-tune 25 s at 2 threads vs 38 s at 1, measured), so it is the
    fallback only."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    busy = busy_cores(window)
    if busy is None:
        try:
            busy = os.getloadavg()[0]
        except OSError:  # not available on this platform
            return cores
    return max(1, min(cores, int(cores - busy + 0.5)))


def busy_cores(window: float) -> float | None:
    """Cores' worth of busy time over ``window`` seconds from the kernel's counters (None where there are none)."""
    def sample() -> tuple[int, int, int] | None:
        try:
            with open("/proc/stat") as f:
                lines = f.read().splitlines()
        except OSError:
            return None
        ticks = [int(v) for v in lines[0].split()[1:]]
        n_cpus = sum(1 for line in lines if line.startswith("cpu") and line[3:4].isdigit())
        return sum(ticks), ticks[3] + (ticks[4] if len(ticks) > 4 else 0), n_cpus  # total, idle + iowait, cpus

    first = sample()
    if first is None:
        return None
    time.sleep(window)
    second = sample()
    if second is None or second[0] <= first[0]:
        return None
    total, idle = second[0] - first[0], second[1] - first[1]
    # iowait is not monotonic on every kernel (proc(5)): clamp so a step back never reads as more cores than exist
    return min(max(1.0 - idle / total, 0.0), 1.0) * second[2]


@contextlib.contextmanager
def torch_threads(threads: int, *, native_pools: bool = False) -> Iterator[None]:
    """torch's intra-op threads set to ``threads`` for the block; with ``native_pools`` also the OpenMP and BLAS
    pools of other libraries (scikit-learn's t-SNE)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        if native_pools:
            from threadpoolctl import threadpool_limits

            with threadpool_limits(limits=threads):
                yield
        else:
            yield
    finally:
        torch.set_num_threads(before)
