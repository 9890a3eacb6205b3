"""The DP-SGD engine: Poisson sampling over privacy units, per-unit clipping, Gaussian noise, accounting.

One call, like Opacus' ``make_private`` (Abadi et al. 2016, Algorithm 1): a loss module, the sensitive items indexed
by privacy unit, and a :class:`DPSGDConfig` in; trained weights (in place) and a ledger event out.

* **Privacy unit.** ``items`` are tensors whose dim 0 is the unit. With ``unit="trajectory"`` one item is a whole
  trajectory (padded [L, D] with a mask, or its fragments [F, H, D]); ``loss_module`` returns the **sum** of the
  losses of all its transitions/fragments, so one trajectory's gradient is clipped once (docs/DESIGN.md invariant 2). Records
  are never duplicated; the sample rate is q = batch_size / N_units.
* **Sampling.** Each step draws every unit independently with probability q (Poisson); steps = round(epochs / q).
  An empty draw still takes a step (noise only), as the analysis assumes.
* **Clipping.** ``"ghost"``: Opacus ghost clipping (two backward passes, any layer Opacus supports); ``"hooks"``:
  Opacus per-sample gradients; ``"bk"``: our single-backward book-keeping clipping for Linear/LayerNorm models
  (:mod:`privsynth.privacy.fastclip`); ``"auto"`` picks ``bk`` when the model allows, else ``ghost``.
* **Noise.** σ is calibrated from (target ε, δ, q, steps) with the chosen accountant unless given. The update is
  (Σ clipped + N(0, σ²C²I)) / batch_size, then the user's optimizer step.
* **Accounting.** Every step is recorded in an Opacus accountant; after training the spent ε is computed from that
  history with the chosen accountant and checked against the target.
* **Randomness.** The Poisson masks and the noise come from one generator keyed by OS entropy
  (:class:`~privsynth.privacy.noise.NoiseSource`); nothing written on a card or config determines them. Neither
  does the randomness the loss draws itself from torch's global RNG (diffusion σ and noise, fragment picks): it is
  keyed from the same source for the run and put back afterwards (:meth:`NoiseSource.keyed_global_rng`). ``noise_seed``
  makes them reproducible for tests and benchmarks only: the ledger event is then tagged ``noise="reproducible"``,
  the card says "NOT DP" and the release guard refuses it. With ``bk`` on one process the next step's mask and noise
  are drawn on a helper thread while the current step computes (``DPSGDConfig.draw_ahead``): the same draws in the
  same order, off the critical path when a second core is free.
* **Several processes.** Under ``torchrun`` (``torch.distributed`` initialised, world > 1) the ranks share the Poisson
  mask and the noise generator (rank 0 draws its key and broadcasts it), each clips its round-robin share of the sampled units, the clipped sums are
  all-reduced and the noise is added once (:mod:`privsynth.privacy.distributed`); q, σ, steps and the ledger event
  are those of one process.

Why this module is long: Poisson sampling, the clipping dispatch, the noise draw and the accounting are one
privacy-critical loop, reviewed and tested as a unit; the clipping kernels themselves live in ``fastclip.py``.
"""
from __future__ import annotations

import math
import os
import time
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
from torch import nn

from privsynth.data.units import ALL_UNITS, check_unit
from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy import accounting as acc
from privsynth.privacy import distributed as dist_dp
from privsynth.privacy.count import count_epsilon, noisy_unit_count
from privsynth.privacy.fastclip import BookKeepingClipper, supported
from privsynth.privacy.ledger import LedgerEvent
from privsynth.privacy.noise import NoiseSource

__all__ = ["DPSGDConfig", "DPTrainResult", "dp_train", "dp_schedule", "GRAD_SAMPLE_MODES"]

GRAD_SAMPLE_MODES = ("ghost", "hooks", "bk", "auto")


@dataclass
class DPSGDConfig:
    """DP-SGD settings; defaults follow PrivORL's fine-tune (PrivORL paper, appendix "DP-SGD Training": 5 epochs, clip
    norm C = 1.0 as Opacus' default) except δ, which the caller sets."""

    target_epsilon: float = 10.0  # ε budget of this training run
    delta: float = 1e-5  # δ; must be below 1 / N_units
    epochs: float = 5.0  # expected passes over the units; steps = round(epochs / q)
    batch_size: int = 256  # expected logical batch, in privacy units; q = batch_size / N_units
    max_grad_norm: float = 1.0  # clip norm C on each unit's summed gradient
    unit: str = "transition"  # "transition" or "trajectory"
    accountant: str = "rdp"  # "rdp" | "prv" | "pld"
    grad_sample_mode: str = "ghost"  # "ghost" | "hooks" | "bk" | "auto"
    noise_multiplier: float | None = None  # None: calibrate from target_epsilon; a float overrides calibration
    # None (default): Poisson masks and noise from OS entropy. An int: reproducible, for tests and benchmarks only;
    # the ledger then marks the run "NOT DP: noise reproducible" and the release guard refuses it.
    noise_seed: int | None = None
    # bk on one process: draw the next step's Poisson mask and noise on a helper thread while this step computes
    # (the same draws from the same generator in the same order, so results do not change; see _DrawAhead), when
    # torch's intra-op threads leave a core free
    draw_ahead: bool = True

    def validate(self) -> None:
        acc.check_epsilon(self.target_epsilon, "target epsilon")
        acc.check_delta(self.delta)
        acc.check_accountant(self.accountant)
        check_unit(self.unit, ALL_UNITS)
        if self.grad_sample_mode not in GRAD_SAMPLE_MODES:
            raise PrivacyError(f"unknown grad_sample_mode '{self.grad_sample_mode}': choose {', '.join(GRAD_SAMPLE_MODES)}")
        if not (self.epochs > 0 and self.batch_size >= 1 and self.max_grad_norm > 0):
            raise PrivacyError("epochs, batch_size and max_grad_norm must be positive")
        if self.noise_multiplier is not None and not self.noise_multiplier >= 0:
            raise PrivacyError(f"noise multiplier must be non-negative, got {self.noise_multiplier}")


@dataclass
class DPTrainResult:
    """What a DP-SGD run spent and did. ``event`` is ready for :meth:`Ledger.append`."""

    event: LedgerEvent
    noise_multiplier: float
    sample_rate: float
    steps: int
    epsilon: float  # spent, from the accountant's history
    delta: float
    losses: list[float] = field(default_factory=list)  # per step mean loss over the sampled units (nan if empty)
    batch_sizes: list[int] = field(default_factory=list)
    grad_sample_mode: str = "ghost"
    seconds: float = 0.0
    world_size: int = 1  # processes that shared each step (torchrun); the accounting does not depend on it
    n_units_noisy: int = 0  # the DP count of units that set q and the steps (a DP output; N itself is private)

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d["event"] = self.event.to_dict()
        d.pop("losses")
        d.pop("batch_sizes")
        return d


def _check_items(items: Sequence[torch.Tensor] | torch.Tensor) -> tuple[torch.Tensor, ...]:
    if isinstance(items, torch.Tensor):
        items = (items,)
    items = tuple(items)
    if not items or not all(isinstance(t, torch.Tensor) for t in items):
        raise InvalidData("items must be a non-empty tuple of tensors indexed by privacy unit along dim 0")
    n = items[0].shape[0]
    if any(t.shape[0] != n for t in items):
        raise InvalidData(f"all item tensors must share dim 0 (the privacy unit), got {[t.shape[0] for t in items]}")
    if n == 0:
        raise InvalidData("no privacy units to train on")
    for t in items:
        if t.is_floating_point() and not torch.isfinite(t).all():
            raise InvalidData("items contain NaN or infinite values")
    return items


def _trainable(module: nn.Module) -> list[nn.Parameter]:
    params = [p for p in module.parameters() if p.requires_grad]
    if not params:
        raise PrivacyError("the loss module has no trainable parameters")
    return params


def dp_train(
    loss_module: nn.Module,
    items: Sequence[torch.Tensor] | torch.Tensor,
    cfg: DPSGDConfig | None = None,
    *,
    make_optimizer: Callable[[list[nn.Parameter]], torch.optim.Optimizer] | None = None,
    on_step: Callable[[int, float], None] | None = None,
    progress: bool = False,
    description: str = "DP-SGD",
    n_units_noisy: int | None = None,
) -> DPTrainResult:
    """Train ``loss_module`` on the sensitive ``items`` with DP-SGD; returns the spent budget and a ledger event.

    ``loss_module(*batch)`` must return one loss per privacy unit, shape [B]. Its parameters are updated in place.

    The number of units N is private under the add/remove relation (:mod:`privsynth.privacy.count`): the sample rate
    q = B/Ñ and the step count come from a DP count Ñ. ``n_units_noisy`` is a count the caller already made and
    charged to its ledger (so that the same Ñ serves the rest of its schedule); without it the run counts by itself,
    spending :data:`~privsynth.privacy.count.COUNT_SHARE` of ``target_epsilon``, and its event composes both.
    """
    cfg = cfg or DPSGDConfig()
    cfg.validate()
    items = _check_items(items)
    n_units = items[0].shape[0]
    source = NoiseSource(cfg.noise_seed)
    group = dist_dp.current_group()
    count_scale = 0.0
    if n_units_noisy is None:
        eps_count = count_epsilon(cfg.target_epsilon)
        n_units_noisy, _ = noisy_unit_count(n_units, epsilon=eps_count, unit=cfg.unit, source=source)
        count_scale = 1.0 / eps_count
        if group is not None:  # one count for the run (rank 0's), as for the masks and the noise
            n_units_noisy = dist_dp.broadcast_key(n_units_noisy)
        expected_batch = min(cfg.batch_size, n_units_noisy)  # q = B/Ñ <= 1
    elif not (isinstance(n_units_noisy, int) and n_units_noisy >= 1):
        raise PrivacyError(f"n_units_noisy must be a positive integer (a DP count), got {n_units_noisy!r}")
    elif cfg.batch_size > n_units_noisy:
        raise PrivacyError(f"batch size {cfg.batch_size} exceeds the number of privacy units (about {n_units_noisy})")
    else:
        expected_batch = cfg.batch_size
    # the δ refusal reads the exact N and is for the data holder (docs/privacy.md, "Refusals")
    acc.check_delta(cfg.delta, n_units)
    q, steps = dp_schedule(expected_batch, n_units_noisy, cfg.epochs)
    if cfg.noise_multiplier is None:
        sigma = acc.calibrate_noise_multiplier(cfg.target_epsilon, cfg.delta, q, steps, cfg.accountant,
                                               count_scale=count_scale)
        calibrated = True
    else:
        sigma = float(cfg.noise_multiplier)
        calibrated = False
    mode = cfg.grad_sample_mode
    if mode == "auto":
        mode = "bk" if supported(loss_module) else "ghost"

    params = _trainable(loss_module)
    if group is not None:  # every rank must drive the shared mask and noise identically, from the same weights
        checksum = float(sum(t.double().sum() for t in items if t.is_floating_point()))
        dist_dp.check_agreement([n_units, expected_batch, steps, sigma, cfg.max_grad_norm, checksum],
                                "the DP-SGD configuration or the data")
        dist_dp.broadcast_parameters(params)
    make_optimizer = make_optimizer or (lambda ps: torch.optim.Adam(ps, lr=3e-4))
    optimizer = make_optimizer(params)
    gen = source.torch_generator()  # masks and noise; secure unless noise_seed was given
    if group is not None:  # every rank must draw the same masks and the same noise: rank 0's key for all
        gen.manual_seed(dist_dp.broadcast_key(gen.initial_seed()))
    engine = _Engine(loss_module, optimizer, mode, sigma, cfg.max_grad_norm, expected_batch, gen, group)
    ahead = None
    if mode == "bk" and group is None and cfg.draw_ahead and _spare_core():
        ahead = engine.draw_ahead(n_units, q, steps)  # from here on only its thread touches ``gen``

    from opacus.accountants import RDPAccountant

    recorder = RDPAccountant()  # only its history of (σ, q, steps) is used
    losses: list[float] = []
    sizes: list[int] = []
    was_training = loss_module.training
    loss_module.train()
    t0 = time.perf_counter()
    bar = None
    if progress and (group is None or group.rank == 0):
        from tqdm.auto import tqdm

        bar = tqdm(total=steps, desc=description, leave=False)
    # If training stops early (error, interrupt) no ledger event is returned, so the weights must not keep what they
    # learned from the sensitive data: restore them. (What ``on_step`` copied elsewhere, e.g. an EMA, is the caller's.)
    snapshot = [p.detach().clone() for p in params]
    # The loss' own randomness (diffusion σ and noise, fragment or row picks; torch's global RNG) is keyed like the
    # masks and noise, never by a seed on the card: it shapes each unit's clipped gradient and is handed out by
    # batch position, so a replayable stream would let one unit move the others' gradients (stream 1 after the
    # masks' stream 0 when reproducible; each rank its own under torchrun).
    with source.keyed_global_rng(None if group is None else 1 + group.rank):
        finished = False
        try:
            for step in range(steps):
                mask = ahead.mask() if ahead is not None else torch.rand(n_units, generator=gen) < q
                idx = mask.nonzero().squeeze(1)
                if group is None:
                    batch = tuple(t[idx] for t in items)
                    loss = engine.step(batch, len(idx))
                else:
                    local = dist_dp.shard(idx, group)
                    loss = engine.step(tuple(t[local] for t in items), len(local))
                    loss = _global_mean(loss, len(local))
                recorder.step(noise_multiplier=sigma, sample_rate=q)
                losses.append(loss)
                sizes.append(len(idx))
                if on_step is not None:
                    on_step(step, loss)
                if bar is not None:
                    bar.update(1)
                    if step % 50 == 0 and math.isfinite(loss):
                        bar.set_postfix(loss=f"{loss:.4f}")
            if group is not None:
                dist_dp.check_in_sync(params)
            # checked before the weights are kept: an over-target run rolls back like any other failure
            steps_taken = sum(h[2] for h in recorder.history)
            events = [acc.dpsgd_event(s, r, k) for s, r, k in recorder.history] if sigma > 0 else []
            spent = (acc.events_epsilon(events, cfg.delta, cfg.accountant, count_scale=count_scale)
                     if sigma > 0 else math.inf)
            if calibrated and spent > cfg.target_epsilon * (1 + 1e-9):
                raise PrivacyError(f"DP-SGD spent epsilon {spent:.4g}, above the target {cfg.target_epsilon:g}")
            finished = True
        finally:
            engine.close()
            if not finished:
                with torch.no_grad():
                    for p, saved in zip(params, snapshot):
                        p.copy_(saved)
            if bar is not None:
                bar.close()
            loss_module.train(was_training)
    seconds = time.perf_counter() - t0

    event = LedgerEvent.dpsgd(
        description,
        noise_multiplier=sigma,
        sample_rate=q,
        steps=steps_taken,
        max_grad_norm=cfg.max_grad_norm,
        unit=cfg.unit,
        n_units_noisy=n_units_noisy,
        count_scale=count_scale,
        batch_size=expected_batch,
        epochs=cfg.epochs,
        accountant=cfg.accountant,
        epsilon_spent=spent,
        delta=cfg.delta,
        grad_sample_mode=mode,
        calibrated=calibrated,
        noise=source.kind,
    ) if sigma > 0 else LedgerEvent.approx_dp(
        description, epsilon=math.inf, delta=0.0, unit=cfg.unit, note="noise disabled: not private", noise="none"
    )
    return DPTrainResult(
        event=event,
        noise_multiplier=sigma,
        sample_rate=q,
        steps=steps_taken,
        epsilon=spent,
        delta=cfg.delta,
        losses=losses,
        batch_sizes=sizes,
        grad_sample_mode=mode,
        seconds=seconds,
        world_size=1 if group is None else group.world_size,
        n_units_noisy=n_units_noisy,
    )


def dp_schedule(batch_size: int, n_units_noisy: int, epochs: float) -> tuple[float, int]:
    """(q, steps) of a run: the sample rate q = B / Ñ from the DP count Ñ, and steps = round(epochs / q) (at least
    one); what a caller that composes a run before it trains (e.g. to calibrate it against a ledger) must use."""
    q = batch_size / n_units_noisy
    return q, max(1, int(round(epochs / q)))


def _spare_core() -> bool:
    """Whether a core is left beside torch's intra-op threads (the draw-ahead thread would otherwise take one of
    theirs and stall every parallel kernel; measured: the demo's fine-tune at 2 threads on 2 cores, 25 s -> 39 s)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return torch.get_num_threads() < cores


def _global_mean(local_mean: float, b: int) -> float:
    """Mean loss over the whole Poisson batch from each rank's mean over its share (nan if the batch is empty)."""
    t = torch.tensor([local_mean * b if b else 0.0, float(b)], dtype=torch.float64)
    dist_dp.allreduce_sum_([t])
    return float(t[0] / t[1]) if t[1] > 0 else math.nan


class _Engine:
    """One DP step in each clipping mode: clipped sum of per-unit gradients, noise, scaling, optimizer step."""

    def __init__(
        self,
        module: nn.Module,
        optimizer: torch.optim.Optimizer,
        mode: str,
        sigma: float,
        max_grad_norm: float,
        expected_batch: int,
        gen: torch.Generator,
        group: dist_dp.Group | None = None,
    ) -> None:
        self.module, self.mode, self.sigma, self.clip = module, mode, sigma, max_grad_norm
        self.expected_batch = expected_batch
        self.gen = gen
        self.group = group
        self.params = [p for p in module.parameters() if p.requires_grad]
        self.optimizer = optimizer
        self._buffers: list[torch.Tensor] | None = None  # bk: gradient buffers reused across steps
        self._ahead: _DrawAhead | None = None
        if mode == "bk":
            self.clipper = BookKeepingClipper(module, max_grad_norm)  # raises PrivacyError naming the layer
            self.model = None
            return
        from opacus.validators import ModuleValidator

        problems = ModuleValidator.validate(module, strict=False)
        if problems:
            raise PrivacyError(
                f"Opacus cannot train this module: {str(problems[0]).splitlines()[0]}; replace the layer (for attention: "
                "opacus.validators.ModuleValidator.fix(module) or Linear-layer attention, see docs/privacy.md)"
            )
        try:
            if mode == "ghost":
                from opacus.grad_sample import GradSampleModuleFastGradientClipping
                from opacus.optimizers import DPOptimizerFastGradientClipping

                self.model = GradSampleModuleFastGradientClipping(
                    module, batch_first=True, loss_reduction="sum", max_grad_norm=max_grad_norm, use_ghost_clipping=True
                )
                self.optimizer = DPOptimizerFastGradientClipping(
                    optimizer, noise_multiplier=sigma, max_grad_norm=max_grad_norm,
                    expected_batch_size=expected_batch, loss_reduction="mean", generator=gen,
                )
            else:
                from opacus.grad_sample import GradSampleModule
                from opacus.optimizers import DPOptimizer

                self.model = GradSampleModule(module, batch_first=True, loss_reduction="sum")
                self.optimizer = DPOptimizer(
                    optimizer, noise_multiplier=sigma, max_grad_norm=max_grad_norm,
                    expected_batch_size=expected_batch, loss_reduction="mean", generator=gen,
                )
        except (NotImplementedError, ValueError) as exc:
            raise PrivacyError(f"Opacus cannot train this module in {mode} mode: {str(exc).splitlines()[0]}") from None
        if group is not None:  # sum the ranks' clipped sums between Opacus' clipping and its (shared) noise
            dp_optimizer, add_noise = self.optimizer, self.optimizer.add_noise

            def add_noise_to_global_sum() -> None:
                dist_dp.allreduce_sum_([p.summed_grad for p in dp_optimizer.params])
                add_noise()

            dp_optimizer.add_noise = add_noise_to_global_sum

    def step(self, batch: tuple[torch.Tensor, ...], b: int) -> float:
        with warnings.catch_warnings():  # Opacus' full backward hooks warn when the inputs need no gradient
            warnings.filterwarnings("ignore", message="Full backward hook is firing")
            try:
                return self._step(batch, b)
            except NotImplementedError as exc:  # Opacus' way of refusing a layer or a pattern (e.g. reused layers)
                other = "bk" if supported(self.module) else "hooks"
                raise PrivacyError(
                    f"Opacus cannot train this module in {self.mode} mode ({str(exc).splitlines()[0]}); "
                    f"try grad_sample_mode='{other}'"
                ) from None

    def _step(self, batch: tuple[torch.Tensor, ...], b: int) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        if self.mode == "bk" and self.group is None:
            return self._bk_step(batch, b)
        if b == 0:
            loss_value = math.nan
            self._zero_batch()
        else:
            if self.mode == "bk":
                losses = self.clipper.forward(*batch)
                self._check_losses(losses, b)
                self.clipper.backward(losses)
            else:
                losses = self._opacus_backward(batch, b)
            loss_value = float(losses.detach().mean()) if losses is not None else math.nan
        if self.mode == "bk":
            self._noise_and_step()
        else:
            self.optimizer.step()
        return loss_value

    def _opacus_backward(self, batch: tuple[torch.Tensor, ...], b: int) -> torch.Tensor | None:
        """ghost / hooks: per-unit losses, then Opacus' clipping backward. A unit whose loss, gradient or gradient
        norm is not finite (a finite but extreme record overflowing float32) would turn the clipped sum into NaN
        (0 · inf), a change of every weight by one unit. Such units are dropped and the step redone on the others
        with fresh loss randomness: a clipped contribution of 0 is within the sensitivity, and the others' clipped
        gradients have the distribution they would have without that unit (bk drops them inside its clipper)."""
        losses = self._opacus_pass(batch, b)
        bad = self._nonfinite_units(losses)
        if bad is None:
            return losses
        keep = (~bad).nonzero().squeeze(1)
        self.optimizer.zero_grad(set_to_none=True)
        if len(keep) == 0:
            self._zero_batch()
            return None
        losses = self._opacus_pass(tuple(t[keep] for t in batch), len(keep))
        if self._nonfinite_units(losses) is not None:  # cannot happen unless units interact; fail closed
            raise PrivacyError("the clipped gradient is not finite after dropping the units with non-finite norms")
        return losses

    def _opacus_pass(self, batch: tuple[torch.Tensor, ...], b: int) -> torch.Tensor:
        losses = self.model(*batch)
        self._check_losses(losses, b)
        if self.mode == "ghost":
            from opacus.utils.fast_gradient_clipping_utils import DPTensorFastGradientClipping

            DPTensorFastGradientClipping(self.model, self.optimizer, losses, "sum").backward()
        else:
            losses.sum().backward()
        return losses

    def _nonfinite_units(self, losses: torch.Tensor) -> torch.Tensor | None:
        """Mask [b] of the units whose loss or (per-unit) gradient is not finite, or None when all are. ghost: its
        norms; hooks: the per-unit gradient rows. A non-finite clipped sum no unit accounts for raises."""
        bad = ~torch.isfinite(losses.detach())
        if self.mode == "ghost":
            bad |= ~torch.isfinite(self.model.per_sample_gradient_norms.detach())
            summed = [p.grad for p in self.params if p.grad is not None]
        else:
            for p in self.params:
                gs = getattr(p, "grad_sample", None)
                if gs is not None:
                    bad |= ~torch.isfinite(gs.detach().reshape(gs.shape[0], -1)).all(1)
            summed = []
        if bool(bad.any()):
            return bad
        if not all(bool(torch.isfinite(g).all()) for g in summed):
            raise PrivacyError("the clipped gradient is not finite although every unit's norm is")
        return None

    @staticmethod
    def _check_losses(losses: torch.Tensor, b: int) -> None:
        if not isinstance(losses, torch.Tensor) or losses.shape != (b,):
            shape = tuple(losses.shape) if isinstance(losses, torch.Tensor) else type(losses).__name__
            raise PrivacyError(f"the loss module must return one loss per privacy unit, shape [{b}], got {shape}")

    def _zero_batch(self) -> None:
        """An empty Poisson draw: the clipped sum is zero; the step still adds noise (and is accounted)."""
        for p in self.params:
            p.grad = torch.zeros_like(p)
            if self.mode == "hooks":
                p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype)

    def _bk_step(self, batch: tuple[torch.Tensor, ...], b: int) -> float:
        """One process, book-keeping clipping: the noise is drawn first, straight into reused gradient buffers as
        N(0, (σC/B)²), and the clipped sum scaled by 1/B is added into it (weights by ``addmm_``), so forming
        (Σ clipped + noise)/B costs no pass over the parameters beyond the draw itself. The generator's draw order
        (mask in :func:`dp_train`, then one normal vector per parameter in order) is that of the other modes."""
        std = self._noise_std()
        if self._buffers is None:
            self._buffers = [torch.empty_like(p) for p in self.params]
        if self._ahead is None:
            for buf in self._buffers:
                self._draw_noise(buf, std)
        loss_value = math.nan
        losses = None
        if b > 0:
            losses = self.clipper.forward(*batch)  # with draw-ahead, the noise is still being drawn meanwhile
            self._check_losses(losses, b)
        if self._ahead is not None:
            self._ahead.wait_noise()
        for p, buf in zip(self.params, self._buffers):
            p.grad = buf
        if losses is not None:
            self.clipper.backward(losses, scale=1.0 / self.expected_batch, accumulate=True)
            loss_value = float(losses.detach().mean())
        self.optimizer.step()
        if self._ahead is not None:
            for p in self.params:  # the buffers are refilled for the next step: nothing may read them as gradients
                p.grad = None
            self._ahead.next()
        return loss_value

    def _noise_std(self) -> float:
        """bk: std of the noise drawn into the buffers, N(0, (σC/B)²) (the clipped sum is added scaled by 1/B)."""
        return self.sigma * self.clip / self.expected_batch

    def draw_ahead(self, n_units: int, q: float, steps: int) -> "_DrawAhead":
        """Hand the generator to a :class:`_DrawAhead` for the ``steps`` steps of this run (bk, one process)."""
        if self._buffers is None:
            self._buffers = [torch.empty_like(p) for p in self.params]
        self._ahead = _DrawAhead(self.gen, n_units, q, self._buffers, self._noise_std(), steps, self._draw_noise)
        return self._ahead

    def _draw_noise(self, buf: torch.Tensor, std: float) -> None:
        """Fill ``buf`` with N(0, std²) from the NoiseSource's generator (zeros when ``std`` is 0)."""
        if std > 0:
            buf.normal_(0.0, std, generator=self.gen)
        else:
            buf.zero_()

    def _noise_and_step(self) -> None:
        std = self.sigma * self.clip
        for p in self.params:
            if p.grad is None:
                p.grad = torch.zeros_like(p)
        if self.group is not None:  # global clipped sum before the (shared, so single) noise draw
            dist_dp.allreduce_sum_([p.grad for p in self.params])
        for p in self.params:
            if std > 0:
                noise = torch.randn(p.shape, generator=self.gen, dtype=p.dtype)  # the NoiseSource's generator
                p.grad = noise.to(p.device).mul_(std).add_(p.grad)
            p.grad.div_(self.expected_batch)
        self.optimizer.step()

    def close(self) -> None:
        """Detach every hook and Opacus attribute so ``module`` is a plain module again."""
        if self._ahead is not None:
            self._ahead.close()
            self._ahead = None
        if self.mode == "bk":
            self.clipper.close()
        elif self.model is not None:
            try:
                self.model._close()
            except Exception:  # pragma: no cover - best effort cleanup
                pass
        for p in self.params:
            for attr_name in ("grad_sample", "summed_grad", "_norm_sample", "_forward_counter", "_processed"):
                if hasattr(p, attr_name):
                    try:
                        delattr(p, attr_name)
                    except AttributeError:
                        pass
            p.grad = None


class _DrawAhead:
    """The generator's draws of the next DP-SGD step on a helper thread (book-keeping clipping, one process).

    A step's randomness is its Poisson mask and then one normal vector per parameter (the order of every mode). Drawing
    6.4 M normals costs about 0.17x of a plain step of the 1024x6 MLP (``scripts/bench_dp_step.py``), so the thread
    draws step t+1's mask and noise, in that order and from the same generator, while the caller finishes step t and
    runs step t+1's forward pass; the caller waits for the mask before sampling the batch and for the noise before the
    backward pass accumulates the clipped sum into the noise buffers. Once it exists only its thread uses the
    generator, so the draws, and the trained weights, are those of the sequential loop. torch releases the GIL inside
    its kernels, so the draw runs on a second core when there is one.
    """

    def __init__(self, gen: torch.Generator, n_units: int, q: float, buffers: list[torch.Tensor], std: float,
                 steps: int, draw: Callable[[torch.Tensor, float], None]) -> None:
        self.gen, self.n_units, self.q, self.buffers, self.std, self._draw_into = gen, n_units, q, buffers, std, draw
        self._left = int(steps)
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="dp-noise")
        self._mask: Future | None = None
        self._job: Future | None = None
        self.next()

    def next(self) -> None:
        """Start drawing the next step's mask and noise (none after the last step)."""
        if self._left <= 0:
            self._mask = self._job = None
            return
        self._left -= 1
        mask: Future = Future()
        self._mask = mask
        self._job = self._pool.submit(self._draw, mask)

    def _draw(self, mask: Future) -> None:
        try:
            mask.set_result(torch.rand(self.n_units, generator=self.gen) < self.q)
        except BaseException as exc:
            if not mask.done():
                mask.set_exception(exc)
            raise
        for buf in self.buffers:
            self._draw_into(buf, self.std)

    def mask(self) -> torch.Tensor:
        """The Poisson mask of the coming step (waits for it)."""
        if self._mask is None:
            raise PrivacyError("DP-SGD asked for more steps than it planned")
        return self._mask.result()

    def wait_noise(self) -> None:
        """Block until the coming step's noise is in the buffers (re-raises an error of the draw)."""
        if self._job is not None:
            self._job.result()

    def close(self) -> None:
        """Finish any draw in flight (its buffers are never used) and stop the thread."""
        if self._job is not None:
            self._job.exception()
        self._pool.shutdown(wait=True)
