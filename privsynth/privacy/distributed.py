"""Data-parallel DP-SGD across processes (``torchrun``), with the same privacy analysis as one process.

:func:`privsynth.privacy.dpsgd.dp_train` calls into this module when ``torch.distributed`` is initialised with more
than one rank; with one process nothing here runs. The scheme (Abadi et al. 2016, Algorithm 1, split by data):

1. **One Poisson draw per step, shared.** Every rank holds the same items and the same generator (keyed by rank 0
   from OS entropy and broadcast, :func:`broadcast_key`), so every
   rank draws the *same* mask over all N units with rate q = B / N. The sampled units are dealt round-robin
   (``idx[rank::world]``): each sampled unit is used by exactly one rank, each unit is sampled once per step with the
   unchanged rate q, and the accountant sees exactly the single-process (σ, q, steps).
2. **Clip locally, sum globally.** Each rank computes the clipped per-unit gradients of its shard (any clipping mode)
   and their sum; one all-reduce (SUM) gives the clipped sum over the whole Poisson batch.
3. **Noise once per step.** The noise N(0, σ²C²I) is added *after* the all-reduce, drawn from the shared generator,
   so every rank adds the identical vector: the update carries one noise draw, not ``world`` of them. The update is
   then divided by the expected batch B, as in one process.

Why not Opacus' ``DPDDP`` / ``DistributedDPOptimizer``: they assume a ``DistributedSampler``-style split where each
rank Poisson-samples its own shard with the per-rank batch and rank 0 adds the noise; the scaling and accounting then
depend on the world size, and they do not cover our own book-keeping clipping (``bk``). Sharing the mask and the noise
generator keeps one code path for ghost/hooks/bk and makes a 2-process run equal (up to float summation order) to the
1-process run with the same seed, which the tests check. The price: every rank holds all items (fine for transition
matrices; memory, not privacy) and draws the noise itself (cheap next to a backward pass).

Ranks must agree on everything that drives the shared randomness; :func:`check_agreement` compares them at the start
and :func:`check_in_sync` compares the parameters at the end, so a drift fails loudly instead of silently breaking
the noise-once guarantee.
"""
from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import distributed as dist

from privsynth.errors import PrivacyError

__all__ = [
    "Group", "current_group", "init_from_env", "shard", "check_agreement", "broadcast_parameters", "allreduce_sum_",
    "check_in_sync", "is_main_process", "shutdown",
]


@dataclass(frozen=True)
class Group:
    """This process' place in the job."""

    rank: int
    world_size: int


def current_group() -> Group | None:
    """The process group when ``torch.distributed`` is initialised with more than one rank, else ``None``."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    world = dist.get_world_size()
    return Group(dist.get_rank(), world) if world > 1 else None


def init_from_env(backend: str | None = None) -> Group | None:
    """Join the job ``torchrun`` describes in the environment (``WORLD_SIZE`` > 1); a no-op for one process.

    ``backend`` defaults to ``gloo`` (CPU, tested); ``nccl`` (GPU nodes) is wired but untested here (no GPU).
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return current_group()
    if not dist.is_initialized():
        dist.init_process_group(backend=backend or os.environ.get("PRIVSYNTH_DIST_BACKEND", "gloo"))
    return current_group()


def is_main_process() -> bool:
    """True on rank 0 and in a single process: the one that writes files and prints."""
    g = current_group()
    return g is None or g.rank == 0


def shutdown() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


def _comm_device() -> torch.device:
    """Where collectives need their tensors: the current GPU for NCCL, else the CPU (gloo)."""
    if dist.get_backend() == "nccl":
        return torch.device("cuda", torch.cuda.current_device())
    return torch.device("cpu")


def shard(idx: torch.Tensor, group: Group) -> torch.Tensor:
    """This rank's share of the sampled unit indices: round-robin, so the shards are disjoint and cover ``idx``."""
    return idx[group.rank :: group.world_size]


def check_agreement(values: Sequence[float], what: str) -> None:
    """Raise :class:`PrivacyError` unless every rank passed the same ``values`` (seed, N, q, σ, steps, data sum)."""
    mine = torch.tensor([float(v) for v in values], dtype=torch.float64, device=_comm_device())
    lo, hi = mine.clone(), mine.clone()
    dist.all_reduce(lo, op=dist.ReduceOp.MIN)
    dist.all_reduce(hi, op=dist.ReduceOp.MAX)
    bad = ~torch.isclose(lo, hi, rtol=1e-9, atol=0.0)
    if bool(bad.any()):
        raise PrivacyError(f"ranks disagree on {what}: every rank needs the same data, seed and settings")


def broadcast_key(key: int, src: int = 0) -> int:
    """Rank ``src``'s generator key, on every rank (the shared mask and noise need one key; it is never recorded)."""
    t = torch.tensor([int(key)], dtype=torch.int64, device=_comm_device())
    dist.broadcast(t, src=src)
    return int(t.item())


def broadcast_parameters(params: Sequence[torch.Tensor], src: int = 0) -> None:
    """Start every rank from rank ``src``'s weights (as DDP does)."""
    with torch.no_grad():
        for p in params:
            dist.broadcast(p.data, src=src)


def allreduce_sum_(tensors: Sequence[torch.Tensor]) -> None:
    """In-place SUM over ranks of ``tensors``, packed into one buffer (one collective per step)."""
    if not tensors:
        return
    flat = torch.cat([t.reshape(-1) for t in tensors]).to(_comm_device())
    dist.all_reduce(flat, op=dist.ReduceOp.SUM)
    flat = flat.to(tensors[0].device)
    offset = 0
    for t in tensors:
        n = t.numel()
        t.copy_(flat[offset : offset + n].view_as(t))
        offset += n


def check_in_sync(params: Sequence[torch.Tensor]) -> None:
    """Raise :class:`PrivacyError` if the ranks' parameters drifted apart (the shared noise was not shared)."""
    with torch.no_grad():
        flat = torch.cat([p.detach().reshape(-1).double() for p in params])
        check_agreement([float(flat.sum()), float(flat.abs().sum()), float((flat * flat).sum())], "the trained weights")
