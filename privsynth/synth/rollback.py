"""Rollback of a failed DP fine-tune: :class:`FinetuneSnapshot` puts a synthesizer's weights, EMA and ledger back as
they were, so no DP-SGD step that the ledger does not record survives an error or an interrupt (in the EMA either,
which is what gets sampled and released). Used by the transition and the trajectory synthesizers."""
from __future__ import annotations

from typing import Any

import torch

__all__ = ["FinetuneSnapshot"]


class FinetuneSnapshot:
    """What a DP fine-tune changes on a synthesizer before its ledger event is recorded: the model's parameters,
    buffers, gradients, ``requires_grad`` flags and train/eval modes, the EMA (shadow weights, counters, decay,
    period) and the ledger (the object, its events and notes).

    Take it before the EMA restarts and :meth:`restore` it on any exception (an error, Ctrl-C) up to and including the
    ledger append: :func:`~privsynth.privacy.dpsgd.dp_train` restores only the parameters it trained, while the EMA
    has averaged the unaccounted steps and would otherwise be sampled and released with no ledger event for them.
    Restoring copies the saved tensors back in place (bit-identical), so the modules and the EMA keep their identity."""

    def __init__(self, synth: Any) -> None:
        model, ema = synth.model, synth.ema
        self.synth = synth
        self.params = [p.detach().clone() for p in model.parameters()]
        self.grads = [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()]
        self.requires_grad = [p.requires_grad for p in model.parameters()]
        self.buffers = [b.detach().clone() for b in model.buffers()]
        self.training = [m.training for m in model.modules()]
        self.ema_params = [p.detach().clone() for p in ema.shadow.parameters()]
        self.ema_buffers = [b.detach().clone() for b in ema.shadow.buffers()]
        self.ema_counters = (ema.decay, ema.every, ema.warmup, ema.updates, ema.calls)
        self.ledger = synth._ledger
        self.ledger_events = list(self.ledger.events) if self.ledger is not None else None
        self.ledger_notes = list(self.ledger.notes) if self.ledger is not None else None

    @torch.no_grad()
    def restore(self) -> None:
        synth = self.synth
        model, ema = synth.model, synth.ema
        for p, saved, grad, flag in zip(model.parameters(), self.params, self.grads, self.requires_grad):
            p.copy_(saved)
            p.grad = grad
            p.requires_grad_(flag)
        for b, saved in zip(model.buffers(), self.buffers):
            b.copy_(saved)
        for m, mode in zip(model.modules(), self.training):
            m.training = mode
        for p, saved in zip(ema.shadow.parameters(), self.ema_params):
            p.copy_(saved)
        for b, saved in zip(ema.shadow.buffers(), self.ema_buffers):
            b.copy_(saved)
        ema.decay, ema.every, ema.warmup, ema.updates, ema.calls = self.ema_counters
        synth._ledger = self.ledger
        if self.ledger is not None:
            self.ledger.events[:] = self.ledger_events
            self.ledger.notes[:] = self.ledger_notes
