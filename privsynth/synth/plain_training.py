"""The non-private training loop of the diffusion synthesizers (pre-training on public data, PrivORL section VI-B).

One loop for PrivORL-n (rows) and PrivORL-j (flattened fragments): AdamW over epochs of a seeded permutation, optional
RND curiosity mixing (:class:`~privsynth.synth.curiosity.CuriosityMixer`, refreshed from the current model every
``refresh_every`` steps), gradient clipping, the EMA step, and optional resumable checkpoints. The caller supplies the
data as one tensor and the loss of a batch of it. Never used on sensitive data with ``private=True``: DP fine-tuning
goes through :func:`privsynth.privacy.dpsgd.dp_train`.
"""
from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from privsynth.synth.checkpoint import atomic_torch_save, load_weights_only
from privsynth.synth.config import TrainConfig
from privsynth.synth.curiosity import CuriosityMixer

__all__ = ["train_plain"]

Draw = Callable[[int, torch.Generator], torch.Tensor]  # (k, generator) -> k samples of the current model


def train_plain(
    model: nn.Module,
    ema: Any,
    data: torch.Tensor,
    tc: TrainConfig,
    *,
    loss: Callable[[torch.Tensor], torch.Tensor],
    seed: int,
    phase: str = "pretrain",
    mixer: CuriosityMixer | None = None,
    draw: Draw | None = None,
    refresh_every: int | None = None,
    progress: bool = False,
    checkpoint: Path | None = None,
) -> dict[str, Any]:
    """Train ``model`` on ``data`` [N, ...] with ``loss(batch) -> scalar``; returns the phase's statistics.

    The permutation generator is seeded with ``seed + 3`` and is also what ``draw`` receives. With ``checkpoint`` and
    ``tc.checkpoint_every``, the loop saves its state every so many steps and resumes from a checkpoint of the same
    ``phase``; the file is removed at the end.
    """
    n = data.shape[0]
    bs = min(tc.batch_size, n)
    per_epoch = max(1, n // bs)
    total = max(1, int(round(tc.epochs * per_epoch)))
    if tc.max_steps is not None:
        total = min(total, tc.max_steps)
    opt = torch.optim.AdamW(model.parameters(), lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay)
    ema.reset(model, decay=tc.ema_decay, every=tc.ema_every)
    refresh = refresh_every or per_epoch
    gen = torch.Generator().manual_seed(seed + 3)
    step, perm = 0, torch.randperm(n, generator=gen)
    if checkpoint is not None and checkpoint.exists():
        step, perm = _resume(checkpoint, phase, model, opt, ema, gen, mixer, step, perm)
    model.train()
    losses: list[float] = []
    t0, c0, t_sampling = time.perf_counter(), time.process_time(), 0.0
    bar = tqdm(total=total, initial=step, desc=phase, disable=not progress, unit="step", leave=False)
    while step < total:
        pos = (step % per_epoch) * bs
        if pos == 0 and step > 0:
            perm = torch.randperm(n, generator=gen)
        batch = data[perm[pos : pos + bs]]
        if mixer is not None and draw is not None and step > 0 and step % refresh == 0:
            ts = time.perf_counter()
            mixer.refresh(lambda k: draw(k, gen))
            t_sampling += time.perf_counter() - ts
        if mixer is not None:
            batch, _ = mixer.mix(batch)
        value = loss(batch)
        opt.zero_grad(set_to_none=True)
        value.backward()
        if tc.grad_clip:
            nn.utils.clip_grad_norm_(model.parameters(), tc.grad_clip)
        opt.step()
        ema.step(model)
        losses.append(value.item())
        step += 1
        bar.update(1)
        if step % 50 == 0:
            bar.set_postfix(loss=f"{np.mean(losses[-50:]):.3f}")
        if checkpoint is not None and tc.checkpoint_every and step % tc.checkpoint_every == 0 and step < total:
            atomic_torch_save({"phase": phase, "step": step, "model": model.state_dict(), "opt": opt.state_dict(),
                               "ema": ema.shadow.state_dict(), "ema_counts": (ema.updates, ema.calls),
                               "gen": gen.get_state(), "perm": perm, "torch_rng": torch.get_rng_state(),
                               "mixer": None if mixer is None else {"rnd": mixer.rnd.state_dict(), "top": mixer.top}},
                              checkpoint)
    bar.close()
    if checkpoint is not None and checkpoint.exists():
        checkpoint.unlink()
    elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
    epochs = step / per_epoch
    return {"steps": step, "batch_size": bs, "epochs": epochs, "seconds": elapsed,
            "seconds_per_epoch": elapsed / max(epochs, 1e-9), "cpu_seconds_per_epoch": cpu / max(epochs, 1e-9),
            "curiosity_sampling_seconds": t_sampling, "curiosity_refreshes": mixer.refreshes if mixer is not None else 0,
            "final_loss": float(np.mean(losses[-50:])) if losses else None}


def _resume(path: Path, phase: str, model: nn.Module, opt: torch.optim.Optimizer, ema: Any, gen: torch.Generator,
            mixer: CuriosityMixer | None, step: int, perm: torch.Tensor) -> tuple[int, torch.Tensor]:
    """Restore a checkpoint of the same phase (weights read as data); another phase's file is ignored."""
    state = load_weights_only(path)
    if state.get("phase") != phase:
        return step, perm
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    ema.shadow.load_state_dict(state["ema"])
    ema.updates, ema.calls = state["ema_counts"]
    gen.set_state(state["gen"])
    torch.set_rng_state(state["torch_rng"])
    if mixer is not None and state.get("mixer") is not None:
        mixer.rnd.load_state_dict(state["mixer"]["rnd"])
        mixer.top = state["mixer"]["top"]
    return state["step"], state["perm"]
