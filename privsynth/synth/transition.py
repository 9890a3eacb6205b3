"""PrivORL-n: a transition synthesizer = EDM diffusion over transition rows, curiosity-driven pre-training on public
data, DP-SGD fine-tuning on sensitive data (PrivORL section V; SynthER for the EDM/residual-MLP recipe).

Rows are ``state | action | reward | next state | terminal`` (``OfflineDataset.transition_matrix``), z-scored by a
:class:`~privsynth.data.normalize.Normalizer` fitted on **public** data only; the normaliser is a buffer module saved
with the checkpoint and fine-tuning never refits it. Training updates an EMA copy of the weights; sampling, the MIA
hooks (:meth:`TransitionSynthesizer.denoise`, :meth:`TransitionSynthesizer.edm_loss`) and releases all use the EMA
weights. DP fine-tuning goes through :func:`privsynth.privacy.dpsgd.dp_train` at unit ``transition`` (the paper) or
``trajectory`` (one trajectory = one privacy unit, a fixed number of its transitions per step, never duplicated), and
its accounted event is appended to :attr:`TransitionSynthesizer.ledger`.

What a card, a checkpoint and a sample's info may hold: DP outputs (weights), public facts (config, public data,
the environment, N as said on the card) and timing, except a fine-tune's (kept in memory only). The DP-SGD
noise and Poisson masks come from OS entropy (``config.noise_seed`` replays them for tests only and marks the output
NOT DP), and so does the loss' own randomness during DP fine-tuning (σ, noise, picks: keyed in ``dp_train``);
``config.seed`` drives only non-private randomness (initialisation, pre-training, non-private fine-tuning,
sampling). The mean training loss on the sensitive data went through no mechanism, so it is kept in
memory (:attr:`TransitionSynthesizer.last_finetune_loss`) and never saved or carded.

Ablations (PrivORL section IX) are switches of :class:`~privsynth.synth.config.TransitionSynthConfig`: skip
:meth:`pretrain` (DPDM), ``pretrain_curiosity=False`` (PDP-Diffusion), ``finetune_curiosity=True`` (FineCur),
``private=False`` (no privacy).

How a row holds the next state (absolute ``s′`` or ``Δs = s′ − s``) is the normaliser's business:
:mod:`privsynth.synth.next_state`.

Why this module is long: it is the one class behind PrivORL-n's verbs (pre-train, DP fine-tune at two units, sample,
card, save/load), each a few dozen lines that share the model, EMA, normaliser and ledger state; the pieces that stand
alone (EDM, denoiser, sampler, curiosity, EMA, checkpoint I/O, the row encoding) already live in their own modules.
"""
from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.normalize import Normalizer, refuse_sensitive
from privsynth.data.schema import RowCodec, schema_codec
from privsynth.errors import InvalidData, PrivacyError, SpaceMismatch
from privsynth.synth.checkpoint import read_checkpoint
from privsynth.data.units import check_unit
from privsynth.synth.base import NetworkSynthesizer, Unit
from privsynth.synth.config import (
    TrainConfig,
    TransitionSynthConfig,
    config_from_dict,
    cpu_config,
)
from privsynth.synth.curiosity import RND, CuriosityMixer, finetune_curiosity_for
from privsynth.synth.denoiser import ResidualMLPDenoiser
from privsynth.synth.edm import EDM
from privsynth.synth.ema import EMA
from privsynth.synth.next_state import fit_public_normalizer
from privsynth.synth.plain_training import train_plain
from privsynth.synth.rollback import FinetuneSnapshot
from privsynth.synth.sampling import sample_dpm, sample_rows

__all__ = ["TransitionSynthesizer", "UnitLoss", "FORMAT"]

FORMAT = "privsynth.transition-synth/1"


class UnitLoss(nn.Module):
    """Per-privacy-unit EDM loss [B] for DP-SGD; σ and noise are drawn inside ``forward``.

    * unit ``transition``: ``forward(x [B, D])``; each record carries ``multiplicity`` independent (σ, noise) draws
      whose losses are averaged (DPDM noise multiplicity: same record, one clipped gradient, no extra privacy cost).
    * unit ``trajectory``: ``forward(x [B, L, D], mask [B, L])``; per trajectory, up to ``per_unit`` of its valid
      transitions are picked at random (without replacement) and their losses averaged, so the clipped gradient is the
      whole trajectory's contribution.
    * ``columns`` [D] (0/1, optional): the loss averages the marked columns only (``dp.fit_columns``).
    * FineCur: when ``curiosity_rows`` is set, each unit's loss is ``(1 − rate)·real + rate·synthetic`` where the
      synthetic row is a top-novelty sample of the current model (a function of already-private weights).

    The picks and σ/noise draws come from torch's global RNG, which :func:`~privsynth.privacy.dpsgd.dp_train` keys from
    its secret noise source for the run (never from ``config.seed``, which the card shows): they are handed out by
    batch position, so a replayable stream would let one unit change the others' clipped gradients.
    """

    def __init__(self, edm: EDM, *, multiplicity: int = 1, per_unit: int = 32, rate: float = 0.0,
                 columns: torch.Tensor | None = None) -> None:
        super().__init__()
        self.edm = edm
        self.multiplicity = max(int(multiplicity), 1)
        self.per_unit = max(int(per_unit), 1)
        self.rate = rate
        self.columns = columns
        self.curiosity_rows: torch.Tensor | None = None

    def _rows_loss(self, x: torch.Tensor) -> torch.Tensor:
        """x [B, D] -> [B] with noise multiplicity."""
        if self.multiplicity == 1:
            return self.edm.random_loss(x, columns=self.columns)
        xs = x[:, None, :].expand(x.shape[0], self.multiplicity, x.shape[1])
        return self.edm.random_loss(xs, columns=self.columns).mean(-1)

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if x.ndim == 2:
            loss = self._rows_loss(x)
        else:
            b, length, d = x.shape
            m = min(self.per_unit, length)
            valid = mask.bool() if mask is not None else torch.ones(b, length, dtype=torch.bool)
            keys = torch.rand(b, length).masked_fill(~valid, -1.0)
            idx = keys.topk(m, dim=1).indices  # random valid positions first
            sel_valid = valid.gather(1, idx).float()
            sel = x.gather(1, idx[..., None].expand(b, m, d))
            if self.multiplicity > 1:
                sel = sel.repeat_interleave(self.multiplicity, dim=1)
                sel_valid = sel_valid.repeat_interleave(self.multiplicity, dim=1)
            per_row = self.edm.random_loss(sel, columns=self.columns)
            loss = (per_row * sel_valid).sum(1) / sel_valid.sum(1).clamp_min(1.0)
        rows = self.curiosity_rows
        if rows is not None and rows.shape[0] > 0 and self.rate > 0:
            syn = rows[torch.randint(rows.shape[0], (loss.shape[0],))]
            loss = (1 - self.rate) * loss + self.rate * self._rows_loss(syn)
        return loss


class TransitionSynthesizer(NetworkSynthesizer):
    """PrivORL-n. ``TransitionSynthesizer(cpu_config()).pretrain(public).finetune(sensitive, 10, 1e-5).sample(n)``."""

    name = "privorl-n"

    def __init__(
        self,
        config: TransitionSynthConfig | None = None,
        *,
        normalizer: Normalizer | None = None,
        normalizer_event: Any = None,
    ) -> None:
        """``normalizer``: fitted on public data or fixed bounds; one estimated with DP on the sensitive data
        (:func:`privsynth.privacy.dp_normalizer`) must come with its ``normalizer_event``, which is charged to this
        synthesizer's ledger (or use :meth:`fit_dp_normalizer`)."""
        self.config = config or cpu_config()
        self.normalizer: Normalizer | None = normalizer
        self.model: EDM | None = None
        self.ema: EMA | None = None
        self.obs_dim: int | None = None
        self.act_dim: int | None = None
        self.template: DatasetInfo | None = None  # env, spaces and reference scores of the data (public facts)
        self._ledger: Any = None
        self.public_data: list[str] = []
        self.history: list[dict[str, Any]] = []
        self.nonprivate_finetunes = 0  # fine-tunes on sensitive data with private=False (never releasable as DP)
        self.last_sample_stats: dict[str, Any] = {}
        self.normalizer_event: Any = normalizer_event
        # mean training loss of the last fine-tune on sensitive data: computed without a mechanism, so it is kept in
        # memory for the data holder only and never saved, carded or released
        self.last_finetune_loss: float | None = None
        self.discrete_values: dict[int, list[float]] = {}  # column -> value set, learnt from public data only
        self.codec: RowCodec | None = None  # the data's declared schema: discrete columns one-hot (public metadata)
        self.warm_events: list[Any] = []  # DP summary events behind a warm start (privsynth.synth.warmstart)

    # ------------------------------------------------------------------------------------------------ building
    def _build(self, obs_dim: int, act_dim: int, template: DatasetInfo) -> None:
        self._set_layout(obs_dim, act_dim, template)
        self.codec = schema_codec(template)
        torch.manual_seed(self.config.seed)
        net = ResidualMLPDenoiser(self.data_dim, self.config.denoiser)
        self.model = EDM(net, self.config.edm)
        t = self.config.pretrain
        self.ema = EMA(self.model, decay=t.ema_decay, every=t.ema_every, warmup=t.ema_warmup)
        if self.normalizer is not None and self.normalizer.dim != self.data_dim:
            raise SpaceMismatch(f"normaliser has {self.normalizer.dim} columns but transitions have {self.data_dim}")
        self._check_next_state()

    def _check_data(self, ds: OfflineDataset) -> None:
        if self.obs_dim is not None:
            self._check_dims(ds)
        if self.template is not None and (ds.info.schema or None) != (self.template.schema or None):
            raise SpaceMismatch(f"dataset '{ds.info.name}' has {'another' if ds.info.schema else 'no'} schema than "
                                "the one the synthesizer was built for; a schema fixes the row encoding")

    @property
    def data_dim(self) -> int:
        """Width of a model row; with a schema, discrete columns count one column per declared value."""
        if self.codec is not None:
            return self.codec.width - 1 + self.flag_columns
        return super().data_dim

    def _rows(self, ds: OfflineDataset) -> np.ndarray:
        """``ds``'s transition matrix as the model sees it (one-hot discrete columns with a schema)."""
        rows = ds.transition_matrix()
        return self.codec.encode(rows) if self.codec is not None else rows

    @property
    def released(self) -> EDM:
        """The EMA EDM model: what is sampled, released and attacked."""
        return super().released

    # ------------------------------------------------------------------------------------------- MIA adapter
    @torch.no_grad()
    def denoise(self, x_norm: torch.Tensor, sigma: torch.Tensor) -> torch.Tensor:
        """EDM D(x; σ) of the released (EMA) weights; ``x_norm`` [B, D] normalised rows, ``sigma`` [B]."""
        return self.released.eval().denoise(x_norm, sigma)

    @torch.no_grad()
    def edm_loss(self, x_norm: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Per-sample λ(σ)-weighted EDM loss [B] of the released (EMA) weights at given σ [B] and noise [B, D]."""
        return self.released.eval().loss(x_norm, sigma, noise)

    # ------------------------------------------------------------------------------------------- pre-training
    def pretrain(
        self,
        public: OfflineDataset | Sequence[OfflineDataset],
        *,
        progress: bool = True,
        checkpoint: str | Path | None = None,
    ) -> "TransitionSynthesizer":
        """Curiosity-driven pre-training on public data (no DP; PrivORL section V-B). Fits the normaliser on it.

        ``checkpoint``: a file written every ``config.pretrain.checkpoint_every`` steps; if it exists, training
        resumes from it.
        """
        datasets = self._public_datasets(public)
        if self.model is None:
            self._build(datasets[0].obs_dim, datasets[0].act_dim, datasets[0].info)
        for ds in datasets:
            self._check_data(ds)
        if self.normalizer is None:
            self.normalizer = self.codec.normalizer() if self.codec is not None else \
                fit_public_normalizer(datasets, self.config.next_state)
        rows = np.concatenate([self._rows(ds) for ds in datasets])
        self.discrete_values = self._discrete_support(rows) if self.codec is None else {}
        x = torch.as_tensor(self.normalizer.normalize(rows))
        self.public_data += [ds.info.name for ds in datasets]
        self._train_plain(
            x,
            self.config.pretrain,
            phase="pretrain",
            curiosity=self.config.pretrain_curiosity,
            progress=progress,
            checkpoint=Path(checkpoint) if checkpoint else None,
        )
        return self

    def warm_start(self, corpus: OfflineDataset, events: list[Any], *, progress: bool = True) -> "TransitionSynthesizer":
        """Pre-train on ``corpus``, rows drawn from a DP summary of the sensitive data whose accounted ``events`` are
        charged to this synthesizer's ledger at its first DP fine-tune (:mod:`privsynth.synth.warmstart`). The
        normaliser stays as it is (public bounds or DP); a corpus marked sensitive (raw rows) is refused."""
        refuse_sensitive(corpus, "warm-start a synthesizer")
        if not events:
            raise PrivacyError("a warm-start corpus needs the ledger events of the DP summary it was drawn from")
        if self._ledger is not None:
            raise PrivacyError("warm start after a DP fine-tune: the summary's cost could not be charged first")
        if self.model is None or self.normalizer is None:
            raise InvalidData("build the synthesizer and its normaliser before the warm start")
        self._check_data(corpus)
        x = torch.as_tensor(self.normalizer.normalize(self._rows(corpus)))
        self.warm_events = list(events)
        self._train_plain(x, self.config.pretrain, phase="warm_start", curiosity=False, progress=progress)
        self.history[-1]["rows"] = int(x.shape[0])  # a public constant (the corpus size asked for)
        return self

    def fit_public_stats(self, public: OfflineDataset | Sequence[OfflineDataset]) -> "TransitionSynthesizer":
        """Normaliser and discrete-column supports from public data, without training (the DPDM ablation's start)."""
        datasets = [public] if isinstance(public, OfflineDataset) else list(public)
        if not datasets:
            raise InvalidData("no public dataset to fit the normaliser on")
        for ds in datasets:
            refuse_sensitive(ds, "fit public statistics")
        self.normalizer = fit_public_normalizer(datasets, self.config.next_state)
        self.discrete_values = self._discrete_support(np.concatenate([ds.transition_matrix() for ds in datasets]))
        self.public_data += [ds.info.name for ds in datasets]
        return self

    def _discrete_support(self, public_rows: np.ndarray) -> dict[int, list[float]]:
        """Columns (terminal excluded) with few distinct values in the public data, and those values."""
        out: dict[int, list[float]] = {}
        k = self.config.sampler.discrete_max_values
        for j in range(public_rows.shape[1] - 1):
            vals = np.unique(public_rows[:, j])
            if 1 < len(vals) <= k:
                out[j] = [float(v) for v in vals]
        return out

    def _draw_normalised(self, model: EDM, n: int, steps: int) -> torch.Tensor:
        was = model.training
        model.eval()
        out = sample_dpm(model, n, self.data_dim, steps)  # curiosity pool: few steps, where 2M beats 3M
        model.train(was)
        return out

    def _make_mixer(self) -> CuriosityMixer:
        rnd = RND(self.data_dim, self.config.curiosity, seed=self.config.seed + 1)
        return CuriosityMixer(rnd, self.config.curiosity, generator=torch.Generator().manual_seed(self.config.seed + 2))

    def _train_plain(
        self,
        x: torch.Tensor,
        tc: TrainConfig,
        *,
        phase: str,
        curiosity: bool,
        progress: bool,
        checkpoint: Path | None = None,
        columns: torch.Tensor | None = None,
    ) -> None:
        """Non-private training loop (pre-training, or fine-tuning with ``private=False``): the shared
        :func:`~privsynth.synth.plain_training.train_plain` with curiosity over rows; ``columns`` as in
        :meth:`EDM.loss` (the no-privacy ablation's fine-tune fits the columns a DP one would)."""
        assert self.model is not None and self.ema is not None
        model = self.model
        mixer = self._make_mixer() if curiosity and self.config.curiosity.rate > 0 else None
        stats = train_plain(model, self.ema, x, tc, loss=lambda b: model.random_loss(b, columns=columns).mean(),
                            seed=self.config.seed,
                            phase=phase, mixer=mixer,
                            draw=lambda k, _gen: self._draw_normalised(model, k, self.config.curiosity.sample_steps),
                            refresh_every=self.config.curiosity.refresh_every, progress=progress, checkpoint=checkpoint)
        final = stats.pop("final_loss")
        self.history.append({"phase": phase, "private": False, "rows": x.shape[0], **stats})
        if phase == "pretrain":  # a loss on public data may be recorded
            self.history[-1]["final_loss"] = final
        else:  # the mean loss on sensitive data went through no mechanism: in memory only, never saved or carded
            self.history[-1]["rows"] = None
            self.last_finetune_loss = final

    def fit_dp_normalizer(self, sensitive: OfflineDataset, *, low: Any, high: Any, epsilon: float, delta: float,
                          unit: Unit = "transition", accountant: str = "pld") -> "TransitionSynthesizer":
        """As :meth:`NetworkSynthesizer.fit_dp_normalizer`; with a schema, the DP statistics are those of the
        encoded rows clipped to ``low`` / ``high`` (the schema's bounds), for the numeric columns only: one-hot columns
        and the terminal flag keep the schema's fixed scaling and read no data."""
        if self.codec is None:
            return super().fit_dp_normalizer(sensitive, low=low, high=high, epsilon=epsilon, delta=delta, unit=unit,
                                             accountant=accountant)
        from privsynth.data.normalize import Normalizer
        from privsynth.privacy.dp_stats import dp_normalizer_stats

        public = self.codec.normalizer()  # one-hot columns and the terminal flag keep the schema's scaling (no data)
        o, start = self.obs_dim_encoded, self.codec.next_state_start()
        # the next state's columns share the state's statistics (the same quantities one step later): estimating
        # them once halves the columns the noise is spread over; they are copied after (post-processing)
        skip = sorted(set(self.codec.discrete_columns()) | set(range(start, start + o)))
        mean, std, event = dp_normalizer_stats(self._rows(sensitive), episode_ids=sensitive.episode_ids, low=low,
                                               high=high, epsilon=epsilon, delta=delta, unit=unit,
                                               accountant=accountant, noise_seed=self.config.noise_seed, skip=skip,
                                               fallback=(public.mean.numpy(), public.std.numpy()))
        mean[start:start + o], std[start:start + o] = mean[:o], std[:o]
        norm = Normalizer.from_stats(mean, std, source="dp")
        if self._ledger is not None:
            self._ledger.append(event)
        self.normalizer, self.normalizer_event = norm, event
        return self

    # ---------------------------------------------------------------------------------------- DP fine-tuning
    def _check_can_finetune(self, sensitive: OfflineDataset) -> None:
        if self.normalizer is None:
            raise PrivacyError(
                "no normaliser: pre-train on public data first, or pass a public/fixed-bounds normaliser; "
                "fine-tuning never fits one on sensitive data"
            )
        if self.model is None:
            self._build(sensitive.obs_dim, sensitive.act_dim, sensitive.info)
        self._check_data(sensitive)
        if self.normalizer.dim != self.data_dim:
            raise SpaceMismatch(f"normaliser has {self.normalizer.dim} columns but transitions have {self.data_dim}")

    @staticmethod
    def trajectory_items(x: torch.Tensor, sensitive: OfflineDataset) -> tuple[torch.Tensor, torch.Tensor]:
        """Pad normalised rows [N, D] into one item per trajectory: ([N_traj, L, D], mask [N_traj, L])."""
        lengths = sensitive.episode_lengths()
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        big = int(lengths.max())
        items = x.new_zeros(len(lengths), big, x.shape[1])
        mask = torch.zeros(len(lengths), big, dtype=torch.bool)
        for i, (s, k) in enumerate(zip(starts, lengths)):
            items[i, :k] = x[s : s + k]
            mask[i, :k] = True
        return items, mask

    def finetune(
        self,
        sensitive: OfflineDataset,
        epsilon: float,
        delta: float,
        unit: Unit = "transition",
        *,
        progress: bool = True,
    ) -> "TransitionSynthesizer":
        """DP-SGD fine-tuning on ``sensitive`` with (``epsilon``, ``delta``) at ``unit`` (PrivORL section V-C).

        The normaliser is the public one (never refitted); the accounted event goes to :attr:`ledger`. With
        ``config.private=False`` (the no-privacy ablation) nothing is accounted and the result can never be released
        as DP.
        """
        unit = check_unit(unit)
        if self.config.private:
            from privsynth.privacy.budget import Budget

            Budget(epsilon, delta, unit).check_dataset(sensitive)
        self._check_can_finetune(sensitive)
        self._check_next_state()
        if self.config.private:
            self._check_normalizer_accounted(unit)
        self.adopt_environment(sensitive.info)
        assert self.model is not None and self.ema is not None and self.normalizer is not None
        cfg = self.config
        tc = cfg.finetune
        x = torch.as_tensor(self.normalizer.normalize(self._rows(sensitive)))
        # public facts only: the environment and the budget (a release resolves "auto" at its whole budget before
        # this call, privsynth.release.pipeline; a direct call reads its own epsilon)
        finecur = finetune_curiosity_for(cfg.finetune_curiosity, sensitive.info, epsilon)
        # the loss columns, for the DP fine-tune and the no-privacy control alike ("auto" resolved by a route, else
        # every column), and what the history says the loss averaged
        columns = self._fit_columns(cfg.dp.fit_columns)
        fitted = "all" if columns is None else "state_action"
        if not cfg.private:
            self._train_plain(x, tc, phase="finetune", curiosity=finecur, progress=progress, columns=columns)
            self.nonprivate_finetunes += 1
            self.history[-1].update({"unit": unit, "trainable": "all", "fit_columns": fitted})
            return self
        from privsynth.privacy.dpsgd import DPSGDConfig, dp_train

        dpc = cfg.dp
        if unit == "transition":
            items: tuple[torch.Tensor, ...] = (x,)
            batch = tc.batch_size
        else:
            items = self.trajectory_items(x, sensitive)
            batch = dpc.trajectory_batch_size
        loss_module = UnitLoss(
            self.model,
            multiplicity=dpc.noise_multiplicity,
            per_unit=dpc.transitions_per_trajectory,
            rate=cfg.curiosity.rate if finecur else 0.0,
            columns=columns,
        )
        mixer = self._make_mixer() if finecur and cfg.curiosity.rate > 0 else None
        # N is private under add/remove: everything sized by it (the batch cap, the curiosity refresh, q and the
        # steps inside dp_train) uses the DP count Ñ, charged to the ledger with the run (privsynth.privacy.count)
        from privsynth.privacy.count import count_epsilon, noisy_unit_count
        from privsynth.privacy.noise import NoiseSource

        eps_count = count_epsilon(float(epsilon))
        n_units, count_event = noisy_unit_count(int(items[0].shape[0]), epsilon=eps_count, unit=unit,
                                                source=NoiseSource(cfg.noise_seed))
        batch = min(batch, n_units)  # q = B / Ñ <= 1
        refresh = cfg.curiosity.refresh_every or max(1, n_units // max(batch, 1))
        losses: list[float] = []

        def on_step(step: int, loss: float) -> None:
            self.ema.step(self.model)
            losses.append(float(loss))
            if mixer is not None and (step + 1) % refresh == 0:
                top = mixer.refresh(lambda k: self._draw_normalised(self.model, k, cfg.curiosity.sample_steps))
                loss_module.curiosity_rows = top

        dp_cfg = DPSGDConfig(
            target_epsilon=float(epsilon) - eps_count,  # basic composition with the count
            delta=float(delta),
            epochs=tc.epochs,
            batch_size=batch,
            max_grad_norm=dpc.max_grad_norm,
            unit=unit,
            accountant=dpc.accountant,
            grad_sample_mode=dpc.grad_sample_mode,
            noise_multiplier=dpc.noise_multiplier,
            noise_seed=cfg.noise_seed,  # None: masks and noise from OS entropy, never from cfg.seed
        )
        t0, c0 = time.perf_counter(), time.process_time()
        # From the EMA restart to the ledger append, any exception (an error, Ctrl-C, a refused ledger event) puts the
        # weights, the EMA and the ledger back as they were: no unaccounted DP-SGD step survives, in the EMA either.
        snapshot = FinetuneSnapshot(self)
        frozen: list[Any] = []
        net = self.model.net  # partial fine-tuning keeps pre-trained weights (none in the no-pre-training ablation)
        head = (net.blocks[-1], net.out_norm, net.out)
        adapters: list[Any] = []
        try:
            if dpc.trainable == "lora" and self.has_trained_weights():  # adapters in the model and its EMA copy
                from privsynth.synth import lora

                adapters = lora.attach(net, dpc.lora_rank)
                lora.attach(self.ema.shadow.net, dpc.lora_rank, like=net)
                self.ema.shadow.requires_grad_(False)
            self.ema.reset(self.model, decay=tc.ema_decay, every=tc.ema_every)
            self.model.train()
            trainable, frozen = self._freeze_except(net, dpc.trainable, head=head, adapters=adapters)
            result = self._dp_train(dp_train, loss_module, items, dp_cfg, tc, on_step, progress, epsilon, unit,
                                    n_units)
            ledger = self._open_ledger(unit, dpc.accountant, float(delta))
            ledger.append(count_event)
            ledger.append(result.event)
            if adapters:  # the DP run's update folded into the weights: a plain network again (post-processing)
                lora.merge(net)
                lora.merge(self.ema.shadow.net)
        except BaseException:
            if adapters:  # the structure first, so the snapshot's parameter order matches again
                lora.detach(net)
                lora.detach(self.ema.shadow.net)
            snapshot.restore()
            raise
        finally:
            for p in frozen:
                p.requires_grad_(True)
        elapsed, cpu = time.perf_counter() - t0, time.process_time() - c0
        self.last_finetune_loss = float(np.mean(losses[-50:])) if losses else None
        epochs_done = result.steps * result.sample_rate
        self.history.append(
            {
                "phase": "finetune",
                "private": True,
                "unit": unit,
                "units_noisy": n_units,
                "steps": result.steps,
                "batch_size": batch,
                "sample_rate": result.sample_rate,
                "noise_multiplier": result.noise_multiplier,
                "noise_multiplicity": dpc.noise_multiplicity,
                "fit_columns": fitted,
                "trainable": trainable,
                "target_epsilon": float(epsilon),
                "epsilon": result.epsilon,
                "delta": result.delta,
                "epochs": epochs_done,
                "seconds": elapsed,
                "seconds_per_epoch": elapsed / max(epochs_done, 1e-9),
                "cpu_seconds_per_epoch": cpu / max(epochs_done, 1e-9),
                "finetune_curiosity": mixer is not None,
            }
        )
        return self

    def _fit_columns(self, which: str) -> torch.Tensor | None:
        """The DP fine-tune's loss columns: None (every column) or a 0/1 mask over the state and action columns, for
        releases whose simulator repair recomputes reward, next state and flags from (s, a) (``dp.fit_columns``;
        ``"auto"`` left unresolved, as in a fine-tune called outside a release, is every column)."""
        if which in ("all", "auto"):
            return None
        if which != "state_action":
            raise InvalidData(f"unknown dp.fit_columns '{which}': choose 'all', 'state_action' or 'auto'")
        if self.codec is not None:
            raise InvalidData("dp.fit_columns='state_action' needs rows without a schema (one-hot columns); use 'all'")
        keep = torch.zeros(self.data_dim)
        keep[: int(self.obs_dim) + int(self.act_dim)] = 1.0
        return keep

    @staticmethod
    def _dp_train(dp_train, loss_module, items, dp_cfg, tc, on_step, progress, epsilon, unit, n_units_noisy):
        return dp_train(
            loss_module,
            items,
            dp_cfg,
            make_optimizer=lambda params: torch.optim.AdamW(
                params, lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay
            ),
            on_step=on_step,
            progress=progress,
            description=f"DP fine-tune (eps={epsilon:g}, unit={unit})",
            n_units_noisy=n_units_noisy,
        )

    # ------------------------------------------------------------------------------------------------ sampling
    def sample_normalised(
        self, n: int, *, seed: int | None = None, method: str | None = None, steps: int | None = None, progress: bool = False
    ) -> torch.Tensor:
        """``n`` rows in normalised space from the released (EMA) weights."""
        sc = dataclasses.replace(self.config.sampler)
        if method is not None:
            sc.method = method
        if steps is not None:
            if sc.method == "heun":
                sc.heun_steps = steps
            else:
                sc.steps = steps
        gen = torch.Generator().manual_seed(self.config.seed if seed is None else seed)
        model = self.released.eval()
        bar = tqdm(total=n, desc=f"sample ({sc.method})", unit="row", disable=not progress, leave=False)
        try:
            return sample_rows(model, n, self.data_dim, sc, generator=gen, progress=bar.update)
        finally:
            bar.close()

    def postprocess(self, rows: np.ndarray) -> tuple[np.ndarray, int]:
        """Un-normalise, drop non-finite rows, clip actions to the action space. Returns (rows, rows dropped)."""
        assert self.normalizer is not None and self.obs_dim is not None and self.template is not None
        rows = self.normalizer.unnormalize(np.asarray(rows, dtype=np.float32))
        finite = np.isfinite(rows).all(axis=1)
        dropped = int((~finite).sum())
        rows = rows[finite]
        if self.codec is not None:  # argmax, whole numbers and the declared bounds: post-processing of DP outputs
            return self.codec.decode(rows), dropped
        if self.config.sampler.snap_discrete:
            for j, vals in self.discrete_values.items():
                v = np.asarray(vals, dtype=np.float32)
                rows[:, j] = v[np.abs(rows[:, j : j + 1] - v[None, :]).argmin(axis=1)]
        if self.config.sampler.clip_actions and self.template.action_low is not None and self.template.action_high is not None:
            o, a = self.obs_dim, self.act_dim
            rows[:, o : o + a] = np.clip(
                rows[:, o : o + a], np.asarray(self.template.action_low), np.asarray(self.template.action_high)
            )
        return rows, dropped

    def sample(
        self,
        n: int,
        *,
        seed: int | None = None,
        method: str | None = None,
        steps: int | None = None,
        progress: bool = False,
        name: str | None = None,
    ) -> OfflineDataset:
        """``n`` synthetic transitions (fewer if some rows were NaN and dropped; the count is on the card).

        ``seed`` (default ``config.seed``) drives the sampler only and is recorded in the sample info: sampling the
        released weights is post-processing, and the DP noise came from OS entropy, not from any recorded seed."""
        if n < 1:
            raise InvalidData(f"number of samples must be positive, got {n}")
        t0, c0 = time.perf_counter(), time.process_time()
        rows = self.sample_normalised(n, seed=seed, method=method, steps=steps, progress=progress).numpy()
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        rows, dropped = self.postprocess(rows)
        if rows.shape[0] == 0:
            raise InvalidData(f"all {n} sampled rows were NaN or inf; the model diverged")
        used = method or self.config.sampler.method
        self.last_sample_stats = {
            "requested": n,
            "returned": int(rows.shape[0]),
            "nan_rows_dropped": dropped,
            "sampler": used,
            "sampler_steps": self.sampler_steps(used, steps),
            "solver_order": self.config.sampler.solver_order if used == "dpm" else None,
            "seconds": seconds,
            "cpu_seconds": cpu,
            "seed": self.config.seed if seed is None else seed,
        }
        return self.rows_to_dataset(rows, name)

    def sampler_steps(self, method: str, steps: int | None) -> int:
        """The number of solver steps a sample call with ``method`` / ``steps`` runs."""
        return steps or (self.config.sampler.heun_steps if method == "heun" else self.config.sampler.steps)

    def rows_to_dataset(self, rows: np.ndarray, name: str | None = None) -> OfflineDataset:
        """Un-normalised sampled rows -> a releasable dataset carrying the card and ``last_sample_stats``."""
        assert self.template is not None
        episode_ids = timeouts = None
        if self.codec is not None and self.history and self.history[-1].get("unit") == "trajectory":
            from privsynth.synth.chain import chain_episodes, choose_terminals  # whole trajectories (free)

            enc = self.normalizer.normalize(self.codec.encode(rows))
            o = self.obs_dim_encoded
            a = sum(c.width for c in self.codec.act)
            # the model's own terminal rate: the mean sampled terminal score (a DP output), whose rows above 0.5 are
            # fewer (1.5-3% against a real 4.4% on the ICU cohort, docs/own_data.md "Measured"): the top-k scores end
            # episodes, k = rows x that mean
            share = float(np.clip(rows[:, -1].mean(), 1.0 / len(rows), 1.0))
            term, rule = choose_terminals(rows[:, -1], self.config.sampler.terminal_threshold, target_share=share)
            rows = rows.copy()
            rows[:, -1] = term
            order, episode_ids, timeouts = chain_episodes(enc[:, :o], enc[:, o + a + 1: 2 * o + a + 1], term)
            rows = rows[order]
            self.last_sample_stats.update(rule, terminal_share_source="mean sampled terminal score",
                                          chained_episodes=int(len(np.unique(episode_ids))))
        info = dataclasses.replace(
            self.template,
            name=name or f"synthetic-{self.name}",
            sensitive=False,
            privacy_card=self.card(),
            extra={"synthesizer": self.name, "sample": dict(self.last_sample_stats)},
        )
        return OfflineDataset.from_transition_matrix(
            rows, self.obs_dim, self.act_dim, info=info, terminal_threshold=self.config.sampler.terminal_threshold,
            episode_ids=episode_ids, timeouts=timeouts,
        )

    @property
    def obs_dim_encoded(self) -> int:
        """Columns of one state in the model's row (one-hot discrete columns with a schema)."""
        return sum(c.width for c in self.codec.obs) if self.codec is not None else int(self.obs_dim or 0)

    # ------------------------------------------------------------------------------------------------- the card
    card_note = "dataset sizes used for sampling rates are treated as public"
    checkpoint_format = FORMAT

    def _released_privately(self) -> bool:
        return self.nonprivate_finetunes == 0 and super()._released_privately()

    def _card_facts(self) -> dict[str, Any]:
        return {**super()._card_facts(), "nonprivate_finetunes": self.nonprivate_finetunes,
                "discrete_columns": {str(k): v for k, v in self.discrete_values.items()}}

    # ------------------------------------------------------------------------------------------- persistence
    def state(self, *, ema_only: bool = False) -> dict[str, Any]:
        return {**super().state(ema_only=ema_only), "nonprivate_finetunes": self.nonprivate_finetunes,
                "discrete_values": {str(k): v for k, v in self.discrete_values.items()}}

    @classmethod
    def load(cls, path: str | Path) -> "TransitionSynthesizer":
        """Inverse of :meth:`save`. A file saved with ``ema_only`` starts fine-tuning from its EMA weights."""
        state = read_checkpoint(path, FORMAT, "transition-synthesizer")
        synth = cls(config_from_dict(state["config"]))
        synth._restore(state)
        synth.nonprivate_finetunes = int(state.get("nonprivate_finetunes", 0))
        synth.discrete_values = {int(k): list(v) for k, v in state.get("discrete_values", {}).items()}
        return synth
