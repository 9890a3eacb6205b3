"""PrivORL-j: trajectory-level DP synthesis with a conditional fragment model (PrivORL section VI, Algorithm 2).

Pipeline: curiosity-driven pre-training on public fragments -> DP fine-tuning on the sensitive trajectories with the
trajectory as the privacy unit -> fragment-by-fragment generation stitched into whole trajectories, un-normalised,
with the privacy card attached. ``backbone`` picks the fragment model: ``transformer`` (PrivORL-j), ``unet``
(PrivORL-j-U ablation) or ``dp-transformer`` (the autoregressive DP-Transformer baseline); everything else is shared.

Model rows. A row is ``state | action | reward | next state | terminal | end`` (the transition matrix plus an
end-of-trajectory flag, 1 on each trajectory's last transition), so generation can stop trajectories that end by a
timeout (PointMaze ends an episode at the goal, with no terminal). The first 2o+a+1 columns are z-scored by a
:class:`~privsynth.data.normalize.Normalizer` fitted on **public** data (never refitted on sensitive data); the two
flags stay in {0, 1}. With ``next_state = "delta"`` the next-state block holds s′ − s before z-scoring (a
:class:`~privsynth.synth.next_state.DeltaNormalizer`, public statistics), so a generated s′ is the state plus a small
generated step, as in PrivORL-n. A fragment's condition is its linking transition in model space plus a has-link flag.

The privacy unit. One DP-SGD item is one whole trajectory: all its fragments, padded to a public number of fragment
slots F = ⌈L_max / H⌉ ([N_traj, F, H, D] with masks), where L_max is a public bound on trajectory length: the
configured ``dp.max_trajectory_length``, else the environment's ``max_episode_steps`` (its gymnasium spec), else the
sampler's ``max_length``. A trajectory longer than L_max is truncated to its first L_max transitions. Truncation is
a fixed map applied to each trajectory on its own, so datasets that differ in one trajectory still differ in (the
truncation of) one trajectory and trajectory-level DP holds unchanged; splitting a long trajectory into several items
instead would let one user own several units and break it. No shape, and nothing on the card, depends on the longest
sensitive trajectory. Per step, Poisson sampling draws trajectories with
q = B / N_traj; inside the loss, each drawn trajectory contributes the **sum** of the losses of K of its fragments
picked at random (all of them when it has ≤ K). That sum depends on that trajectory alone, so its gradient is clipped
once to C however many fragments it has; fixing K bounds the cost of long trajectories without duplicating anything
(PrivORL-J duplicated every trajectory 25x and had no accountant). σ is calibrated by the accountant and the spent ε
goes to the ledger.

Why this module is long: fragment encoding, the trajectory-unit loss and stitched generation are one PrivORL-j
pipeline (Algorithm 2) over one row layout; the model backbones and layers live in their own modules.
"""
from __future__ import annotations

import dataclasses
import math
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.normalize import Normalizer
from privsynth.errors import InvalidData, PrivacyError, SpaceMismatch
from privsynth.synth.checkpoint import read_checkpoint
from privsynth.synth.base import NetworkSynthesizer, Unit
from privsynth.synth.curiosity import RND, CuriosityMixer
from privsynth.synth.ema import EMA
from privsynth.synth.rollback import FinetuneSnapshot
from privsynth.synth.next_state import fit_public_normalizer
from privsynth.synth.plain_training import train_plain
from privsynth.synth.trajectory.config import (
    TrajSynthConfig,
    cpu_config,
    traj_config_from_dict,
)
from privsynth.synth.trajectory.diffusion import FragmentEDM
from privsynth.synth.trajectory.dp_transformer import ARTransformer
from privsynth.synth.trajectory.stitching import StitchResult, stitch
from privsynth.synth.trajectory.transformer import DiffusionTransformer
from privsynth.synth.trajectory.unet import TemporalUNet

__all__ = ["TrajectorySynthesizer", "TrajectoryLoss", "FragmentItems", "FORMAT", "NAMES"]

FORMAT = "privsynth.trajectory-synth/1"
NAMES = {"transformer": "privorl-j", "unet": "privorl-j-unet", "dp-transformer": "dp-transformer"}


@dataclasses.dataclass
class FragmentItems:
    """Fragments of a dataset in model space: data [F, H, D], cond [F, D + 1], mask [F, H], episode [F] and the
    fragment's first position inside its episode, start [F]."""

    data: torch.Tensor
    cond: torch.Tensor
    mask: torch.Tensor
    episode: torch.Tensor
    start: torch.Tensor | None = None

    def per_trajectory(self, slots: int | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One item per trajectory, padded to ``slots`` fragments (default: the largest count; DP fine-tuning passes
        the public ⌈L_max / H⌉): ([N, F, H, D], [N, F, D + 1], [N, F, H])."""
        ep = self.episode.numpy()
        n = int(ep.max()) + 1
        counts = np.bincount(ep, minlength=n)
        fmax = int(counts.max()) if slots is None else int(slots)
        if counts.max() > fmax:
            raise InvalidData(f"a trajectory has {int(counts.max())} fragments, more than the {fmax} slots")
        f, h, d = self.data.shape
        data = torch.zeros(n, fmax, h, d)
        cond = torch.zeros(n, fmax, d + 1)
        mask = torch.zeros(n, fmax, h, dtype=torch.bool)
        slot = np.zeros(f, dtype=np.int64)
        seen = np.zeros(n, dtype=np.int64)
        for j, e in enumerate(ep):
            slot[j] = seen[e]
            seen[e] += 1
        idx_e, idx_s = torch.as_tensor(ep), torch.as_tensor(slot)
        data[idx_e, idx_s] = self.data
        cond[idx_e, idx_s] = self.cond
        mask[idx_e, idx_s] = self.mask
        return data, cond, mask


def public_max_episode_steps(info: DatasetInfo | None) -> int | None:
    """``max_episode_steps`` of the dataset's environment (its kwargs, else its registered gymnasium spec): a public
    fact about the task. None when unknown."""
    if info is None or not info.env_id:
        return None
    kw = (info.env_kwargs or {}).get("max_episode_steps")
    if kw:
        return int(kw)
    try:
        import gymnasium as gym

        try:
            spec = gym.spec(info.env_id)
        except Exception:
            import gymnasium_robotics  # registers PointMaze and friends

            gym.register_envs(gymnasium_robotics)
            spec = gym.spec(info.env_id)
    except Exception:
        return None
    return int(spec.max_episode_steps) if spec.max_episode_steps else None


class TrajectoryLoss(nn.Module):
    """Per-trajectory loss [B] for DP-SGD: the sum of the losses of up to K random valid fragments of each trajectory.

    ``forward(data [B, F, H, D], cond [B, F, D + 1], mask [B, F, H])``. The fragment model sees [B, K, H, D] (leading
    batch dims kept), so Opacus and the book-keeping clipper both see one privacy unit per row of dim 0. The picks and
    the σ/noise draws come from torch's global RNG, which :func:`~privsynth.privacy.dpsgd.dp_train` keys from its
    secret noise source for the run: handed out by batch position, they must not be replayable from the card's seed.
    """

    def __init__(self, model: nn.Module, fragments_per_trajectory: int) -> None:
        super().__init__()
        self.model = model
        self.k = max(int(fragments_per_trajectory), 1)

    def forward(self, data: torch.Tensor, cond: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        b, f, h, d = data.shape
        k = min(self.k, f)
        valid = mask.any(-1)  # [B, F] fragments that exist
        keys = torch.rand(b, f).masked_fill(~valid, -1.0)
        idx = keys.topk(k, dim=1).indices  # random valid fragments first, padding last
        sel_valid = valid.gather(1, idx).to(data.dtype)
        x = data.gather(1, idx[:, :, None, None].expand(b, k, h, d))
        c = cond.gather(1, idx[:, :, None].expand(b, k, d + 1))
        m = mask.gather(1, idx[:, :, None].expand(b, k, h))
        per_fragment = self.model.random_loss(x, c, m)  # [B, K]
        return (per_fragment * sel_valid).sum(1)


class TrajectorySynthesizer(NetworkSynthesizer):
    """``TrajectorySynthesizer(cpu_config()).pretrain(public).finetune(sensitive, 10, 1e-5, "trajectory").sample(n)``.

    ``sample(n)`` returns ``n`` stitched trajectories (not transitions).
    """

    checkpoint_format = FORMAT
    card_note = "the number of sensitive trajectories (for the sample rate) is treated as public"

    def __init__(
        self, config: TrajSynthConfig | None = None, *, normalizer: Normalizer | None = None, normalizer_event: Any = None
    ) -> None:
        """``normalizer``: public or fixed bounds; a DP one (:func:`privsynth.privacy.dp_normalizer`) must come with its
        ``normalizer_event``, charged to this synthesizer's ledger (or use :meth:`fit_dp_normalizer`)."""
        self.config = config or cpu_config()
        if self.config.backbone not in NAMES:
            raise InvalidData(f"unknown backbone '{self.config.backbone}': choose {', '.join(NAMES)}")
        self.name = NAMES[self.config.backbone]
        self.normalizer = normalizer
        self.model: nn.Module | None = None
        self.ema: EMA | None = None
        self.obs_dim: int | None = None
        self.act_dim: int | None = None
        self.template: DatasetInfo | None = None
        self._ledger: Any = None
        self.public_data: list[str] = []
        self.history: list[dict[str, Any]] = []
        self.last_sample_stats: dict[str, Any] = {}
        self.normalizer_event: Any = normalizer_event
        # mean DP-SGD loss of the last fine-tune: computed from sensitive data without a mechanism, so it stays in
        # memory for the data holder and is never saved, carded or released
        self.last_finetune_loss: float | None = None

    # ----------------------------------------------------------------------------------------------- layout
    flag_columns = 2  # terminal and end of trajectory (model rows, see the module docstring)

    def _build(self, obs_dim: int, act_dim: int, template: DatasetInfo) -> None:
        self._set_layout(obs_dim, act_dim, template)
        cfg = self.config
        torch.manual_seed(cfg.seed)
        if cfg.backbone == "transformer":
            self.model = FragmentEDM(DiffusionTransformer(obs_dim, act_dim, cfg.horizon, cfg.transformer), cfg.edm)
        elif cfg.backbone == "unet":
            self.model = FragmentEDM(TemporalUNet(self.data_dim, cfg.horizon, cfg.unet), cfg.edm)
        else:
            self.model = ARTransformer(obs_dim, act_dim, cfg.horizon, cfg.ar)
        t = cfg.pretrain
        self.ema = EMA(self.model, decay=t.ema_decay, every=t.ema_every, warmup=t.ema_warmup)
        if self.normalizer is not None and self.normalizer.dim != self.data_dim - 1:
            raise SpaceMismatch(f"normaliser has {self.normalizer.dim} columns but transitions have {self.data_dim - 1}")
        self._check_next_state()

    def _check(self, ds: OfflineDataset) -> None:
        if self.model is None:
            self._build(ds.obs_dim, ds.act_dim, ds.info)
        self._check_dims(ds)

    def model_rows(self, ds: OfflineDataset) -> np.ndarray:
        """[N, D] model-space rows of ``ds``: normalised transition matrix plus the end-of-trajectory flag."""
        assert self.normalizer is not None
        rows = self.normalizer.normalize(ds.transition_matrix())
        end = np.zeros((len(rows), 1), dtype=np.float32)
        end[np.cumsum(ds.episode_lengths()) - 1] = 1.0
        return np.concatenate([rows, end], axis=1)

    def to_raw(self, x: np.ndarray) -> np.ndarray:
        """Model space -> raw units (un-normalise all but the end flag)."""
        assert self.normalizer is not None
        out = x.copy()
        out[..., :-1] = self.normalizer.unnormalize(x[..., :-1].reshape(-1, x.shape[-1] - 1)).reshape(out[..., :-1].shape)
        return out

    def fragment_items(self, ds: OfflineDataset) -> FragmentItems:
        """Fragments of horizon H (stride H) in model space, each with its link condition."""
        h = self.config.horizon
        rows = self.model_rows(ds)
        fr = ds.fragments(h)
        lengths = ds.episode_lengths()
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        pos = starts[fr.episode_index][:, None] + fr.start[:, None] + np.arange(h)[None, :]
        pos = np.minimum(pos, len(rows) - 1)
        data = rows[pos] * fr.mask[..., None]
        cond = np.zeros((len(fr), self.data_dim + 1), dtype=np.float32)
        has = fr.start > 0
        prev = starts[fr.episode_index] + fr.start - 1
        cond[has, : self.data_dim] = rows[prev[has]]
        cond[has, -1] = 1.0
        return FragmentItems(
            data=torch.as_tensor(data, dtype=torch.float32),
            cond=torch.as_tensor(cond),
            mask=torch.as_tensor(fr.mask),
            episode=torch.as_tensor(fr.episode_index),
            start=torch.as_tensor(fr.start),
        )

    # ------------------------------------------------------------------------------------------- pre-training
    def pretrain(self, public: OfflineDataset | Sequence[OfflineDataset], *, progress: bool = True) -> "TrajectorySynthesizer":
        """Curiosity-driven pre-training on public fragments (no DP; PrivORL section VI-B). Fits the normaliser."""
        datasets = self._public_datasets(public)
        for ds in datasets:
            self._check(ds)
        if self.normalizer is None:
            self.normalizer = fit_public_normalizer(datasets, self.config.next_state)
        items = [self.fragment_items(ds) for ds in datasets]
        x = torch.cat([it.data for it in items])
        c = torch.cat([it.cond for it in items])
        m = torch.cat([it.mask for it in items])
        self.public_data += [ds.info.name for ds in datasets]
        self._train_plain(x, c, m, progress=progress)
        return self

    def _flat(self, x: torch.Tensor, c: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return torch.cat([x.flatten(1), c, m.float()], dim=1)

    def _unflat(self, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        h, d = self.config.horizon, self.data_dim
        x = v[:, : h * d].reshape(-1, h, d)
        c = v[:, h * d : h * d + d + 1]
        m = v[:, h * d + d + 1 :] > 0.5
        return x, c, m

    def _train_plain(self, x: torch.Tensor, c: torch.Tensor, m: torch.Tensor, *, progress: bool) -> None:
        """Non-private pre-training on fragments, with RND curiosity over whole fragments (PrivORL section VI-B)."""
        assert self.model is not None and self.ema is not None
        cfg, model = self.config, self.model
        mixer = None
        if cfg.pretrain_curiosity and cfg.curiosity.rate > 0:
            width = x.shape[1] * x.shape[2] + c.shape[1] + m.shape[1]
            rnd = RND(width, cfg.curiosity, seed=cfg.seed + 1)
            mixer = CuriosityMixer(rnd, cfg.curiosity, generator=torch.Generator().manual_seed(cfg.seed + 2))

        def draw(k: int, gen: torch.Generator) -> torch.Tensor:  # fragments of the current model, public links
            cond = c[torch.randint(len(c), (k,), generator=gen)]
            was = model.training
            model.eval()
            frag = model.sample(cond, cfg.horizon, self.data_dim, cfg.curiosity.sample_steps, generator=gen)
            model.train(was)
            return self._flat(frag, cond, torch.ones(k, cfg.horizon, dtype=torch.bool))

        stats = train_plain(model, self.ema, self._flat(x, c, m), cfg.pretrain,
                            loss=lambda v: model.random_loss(*self._unflat(v)).mean(), seed=cfg.seed, mixer=mixer,
                            draw=draw, refresh_every=cfg.curiosity.refresh_every, progress=progress)
        self.history.append({"phase": "pretrain", "private": False, "fragments": len(x), **stats})

    # ---------------------------------------------------------------------------------------- DP fine-tuning
    def trajectory_cap(self) -> tuple[int, str]:
        """The public bound L_max on trajectory length used in DP fine-tuning, and where it comes from."""
        cap = self.config.dp.max_trajectory_length
        if cap is not None:
            if int(cap) < 1:
                raise InvalidData(f"max_trajectory_length must be at least 1, got {cap}")
            return int(cap), "config dp.max_trajectory_length"
        steps = public_max_episode_steps(self.template)
        if steps is not None:
            return steps, "environment spec max_episode_steps"
        return int(self.config.sampler.max_length), "config sampler.max_length"

    def trajectory_items(self, sensitive: OfflineDataset) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """One DP item per trajectory of ``sensitive``: its fragments, truncated to the public length bound L_max and
        padded to ⌈L_max / H⌉ slots (see the module docstring)."""
        cap, _ = self.trajectory_cap()
        return self.capped_fragments(sensitive).per_trajectory(slots=-(-cap // self.config.horizon))

    def capped_fragments(self, sensitive: OfflineDataset) -> FragmentItems:
        """The fragments of ``sensitive`` that fine-tuning sees: truncated to the public length bound L_max."""
        cap, _ = self.trajectory_cap()
        fr = self.fragment_items(sensitive)
        keep = fr.start < cap  # fragments that begin inside the first L_max transitions
        pos = fr.start[keep, None] + torch.arange(self.config.horizon)[None, :]
        mask = fr.mask[keep] & (pos < cap)  # and no transition past L_max
        return FragmentItems(data=fr.data[keep] * mask[..., None], cond=fr.cond[keep], mask=mask,
                             episode=fr.episode[keep])

    def finetune(
        self, sensitive: OfflineDataset, epsilon: float, delta: float, unit: Unit = "trajectory", *, progress: bool = True
    ) -> "TrajectorySynthesizer":
        """DP-SGD fine-tuning on ``sensitive`` with (ε, δ) at unit = trajectory (PrivORL section VI-B, eq. 7)."""
        if unit != "trajectory":
            raise PrivacyError("the trajectory synthesizer protects whole trajectories: use unit='trajectory'")
        if self.normalizer is None:
            raise PrivacyError(
                "no normaliser: pre-train on public data first, or pass a public/fixed-bounds normaliser; "
                "fine-tuning never fits one on sensitive data"
            )
        self._check(sensitive)
        self._check_next_state()
        self._check_normalizer_accounted("trajectory")
        self.adopt_environment(sensitive.info)
        assert self.model is not None and self.ema is not None
        if not self.config.private:
            return self._finetune_plain(sensitive, progress=progress)
        from privsynth.privacy.dpsgd import DPSGDConfig, dp_train

        cfg, tc, dpc = self.config, self.config.finetune, self.config.dp
        cap, cap_source = self.trajectory_cap()
        items = self.trajectory_items(sensitive)  # dp_train counts them with DP (N is private under add/remove)
        loss_module = TrajectoryLoss(self.model, dpc.fragments_per_trajectory)
        losses: list[float] = []

        def on_step(step: int, loss: float) -> None:
            self.ema.step(self.model)
            losses.append(float(loss))

        dp_cfg = DPSGDConfig(
            target_epsilon=float(epsilon), delta=float(delta), epochs=tc.epochs, batch_size=dpc.batch_size,
            max_grad_norm=dpc.max_grad_norm, unit="trajectory", accountant=dpc.accountant,
            grad_sample_mode=dpc.grad_sample_mode, noise_multiplier=dpc.noise_multiplier,
            noise_seed=cfg.noise_seed,  # None: masks and noise from OS entropy, never from cfg.seed
        )
        t0 = time.perf_counter()
        # the loss' fragment picks and diffusion σ/noise: dp_train keys them like the DP noise, never from cfg.seed
        # From the EMA restart to the ledger append, any exception (an error, Ctrl-C, a refused ledger event) puts the
        # weights, the EMA and the ledger back as they were: no unaccounted DP-SGD step survives, in the EMA either.
        snapshot = FinetuneSnapshot(self)
        frozen: list[Any] = []
        try:
            self.ema.reset(self.model, decay=tc.ema_decay, every=tc.ema_every)
            trainable, frozen = self._freeze_except(self.model, dpc.trainable)
            result = dp_train(
                loss_module, items, dp_cfg,
                make_optimizer=lambda ps: torch.optim.AdamW(ps, lr=tc.lr, betas=tc.betas, weight_decay=tc.weight_decay),
                on_step=on_step, progress=progress,
                description=f"{self.name} DP fine-tune (eps={epsilon:g}, unit=trajectory)",
            )
            ledger = self._open_ledger("trajectory", dpc.accountant, float(delta))
            ledger.append(result.event)
        except BaseException:
            snapshot.restore()
            raise
        finally:
            for p in frozen:
                p.requires_grad_(True)
        note = (f"trajectories longer than {cap} transitions ({cap_source}, a public bound) are truncated to their "
                f"first {cap} before DP fine-tuning")
        if note not in ledger.notes:
            ledger.notes.append(note)
        fin = [v for v in losses if math.isfinite(v)]
        self.last_finetune_loss = float(np.mean(fin[-50:])) if fin else None
        self.history.append({
            "phase": "finetune", "private": True, "unit": "trajectory",
            "trajectories_noisy": result.n_units_noisy, "trajectory_length_cap": cap, "trajectory_length_cap_source": cap_source,
            "fragment_slots": int(items[0].shape[1]), "longer_trajectories": "truncated to the cap",
            "fragments_per_trajectory": dpc.fragments_per_trajectory, "steps": result.steps,
            "batch_size": dpc.batch_size, "sample_rate": result.sample_rate,
            "noise_multiplier": result.noise_multiplier, "epsilon": result.epsilon, "delta": result.delta,
            "target_epsilon": float(epsilon), "grad_sample_mode": result.grad_sample_mode, "trainable": trainable,
            "seconds": time.perf_counter() - t0,
        })
        return self

    def _finetune_plain(self, sensitive: OfflineDataset, *, progress: bool) -> "TrajectorySynthesizer":
        """The no-privacy ablation (``config.private = False``): the DP fine-tune's schedule without clipping or noise.
        The DP step draws ``dp.batch_size`` trajectories of ``dp.fragments_per_trajectory`` fragments each; here a
        batch holds as many fragments, for as many steps, over the same fragments (truncated to the same cap), with
        the same parameters trainable. No ledger is written: the result is a control, never a DP release."""
        cfg, dpc = self.config, self.config.dp
        fr = self.capped_fragments(sensitive)
        x, c, mask = fr.data, fr.cond, fr.mask
        n_traj = int(sensitive.n_episodes)
        batch = dpc.batch_size * dpc.fragments_per_trajectory
        steps = max(1, int(round(cfg.finetune.epochs * n_traj / dpc.batch_size)))
        per_epoch = max(1, len(x) // max(1, min(batch, len(x))))  # train_plain's steps per epoch
        tc = dataclasses.replace(cfg.finetune, batch_size=batch, epochs=steps / per_epoch, max_steps=steps)
        model = self.model
        trainable, frozen = self._freeze_except(model, dpc.trainable)
        try:
            stats = train_plain(model, self.ema, self._flat(x, c, mask), tc, phase="finetune",
                                loss=lambda v: model.random_loss(*self._unflat(v)).mean(), seed=cfg.seed,
                                progress=progress)
        finally:
            for p in frozen:
                p.requires_grad_(True)
        # no loss on the record: it is a statistic of the sensitive set (the DP fine-tune keeps its own off the card)
        self.history.append({"phase": "finetune", "private": False, "unit": "trajectory", "trajectories": n_traj,
                             "fragments": len(x), "trainable": trainable,
                             **{k: v for k, v in stats.items() if "loss" not in k}})
        return self

    # ------------------------------------------------------------------------------------------------ sampling
    def stitch(self, n: int, *, seed: int | None = None, progress: bool = False, max_length: int | None = None,
               generator: torch.Generator | None = None) -> StitchResult:
        """Generate and stitch ``n`` trajectories from the released (EMA) weights; rows in raw units. ``generator``
        (instead of ``seed``) continues a stream, so successive calls draw new trajectories."""
        if n < 1:
            raise InvalidData(f"number of trajectories must be positive, got {n}")
        if self.obs_dim is None or self.act_dim is None:
            raise InvalidData("the synthesizer has no weights yet: pre-train, fine-tune or load it first")
        sc, h, d = self.config.sampler, self.config.horizon, self.data_dim
        model = self.released.eval()
        gen = generator if generator is not None else torch.Generator().manual_seed(
            self.config.seed if seed is None else seed)
        o, a = self.obs_dim, self.act_dim
        bar = tqdm(total=n, desc=f"sample {self.name}", unit="traj", disable=not progress, leave=False)
        try:
            return stitch(
                lambda cond: model.sample(cond, h, d, sc.steps, generator=gen),
                n, horizon=h, data_dim=d, max_length=max_length or sc.max_length, to_raw=self.to_raw,
                state_slice=slice(0, o), next_state_slice=slice(o + a + 1, 2 * o + a + 1),
                terminal_col=d - 2, end_col=d - 1, threshold=sc.done_threshold, batch_size=sc.batch_size,
                snap=sc.snap, progress=bar.update,
            )
        finally:
            bar.close()

    def sample(self, n: int, *, seed: int | None = None, progress: bool = False, name: str | None = None,
               max_length: int | None = None) -> OfflineDataset:
        """``n`` synthetic trajectories (un-normalised, actions clipped), with the privacy card in ``info``.

        ``seed`` (default ``config.seed``) drives the sampler only: sampling the released weights is post-processing,
        so a recorded sampling seed reveals nothing about the DP noise, which was drawn from OS entropy."""
        t0 = time.perf_counter()
        res = self.stitch(n, seed=seed, progress=progress, max_length=max_length)
        return self._dataset(res, t0, seed, name)

    def sample_transitions(self, n: int, *, seed: int | None = None, progress: bool = False,
                           name: str | None = None) -> OfflineDataset:
        """Exactly ``n`` synthetic rows of whole stitched trajectories (the last one cut short ends in a truncation).

        Trajectory lengths are the model's, so the rows come in rounds sized by the mean length so far; every round
        continues one sampler stream seeded once (rounds re-seeded alike would repeat their first trajectories). The
        card's ``sample`` statistics pool every round and say what was released (``released``)."""
        if n < 1:
            raise InvalidData(f"number of transitions must be positive, got {n}")
        t0 = time.perf_counter()
        gen = torch.Generator().manual_seed(self.config.seed if seed is None else seed)
        parts: list[StitchResult] = []
        total = episodes = 0
        for _ in range(1000):
            mean_len = total / episodes if episodes else self.config.sampler.max_length / 2
            want = max(1, math.ceil((n - total) / max(1.0, mean_len)))
            parts.append(self.stitch(want, progress=progress, generator=gen))
            total, episodes = total + int(parts[-1].lengths.sum()), episodes + len(parts[-1].lengths)
            if total >= n:
                break
        else:
            raise InvalidData("the trajectory synthesizer returned too few rows; check its sampler settings")
        ds = self._dataset(StitchResult.concatenate(parts), t0, seed, name, rounds=len(parts)).first_rows(n)
        released = {"trajectories": int(ds.n_episodes), "transitions": int(ds.n_transitions),
                    "last_trajectory_cut": bool(total > n)}
        self.last_sample_stats["released"] = released
        ds.info.extra["sample"]["released"] = dict(released)
        ds.info.privacy_card["sample"]["released"] = dict(released)
        return ds

    def _dataset(self, res: StitchResult, t0: float, seed: int | None, name: str | None,
                 rounds: int = 1) -> OfflineDataset:
        """The stitched rows as a dataset in the template's layout, card and sampling statistics attached."""
        assert self.obs_dim is not None and self.act_dim is not None and self.template is not None
        o, a = self.obs_dim, self.act_dim
        rows = res.rows[:, :-1].copy()  # drop the end flag: the transition matrix layout
        finite = np.isfinite(rows).all(1)
        if not finite.all():
            raise InvalidData(f"{int((~finite).sum())} sampled rows are NaN or inf; the model diverged")
        if self.config.sampler.clip_actions and self.template.action_low is not None and self.template.action_high is not None:
            rows[:, o : o + a] = np.clip(rows[:, o : o + a], self.template.action_low, self.template.action_high)
        self.last_sample_stats = {**res.stats(), "seconds": time.perf_counter() - t0,
                                  "seed": self.config.seed if seed is None else seed, "rounds": rounds,
                                  "sampler_steps": self.config.sampler.steps, "snap": self.config.sampler.snap}
        info = dataclasses.replace(
            self.template, name=name or f"synthetic-{self.name}", sensitive=False, privacy_card=self.card(),
            extra={"synthesizer": self.name, "sample": dict(self.last_sample_stats)},
        )
        return OfflineDataset.from_transition_matrix(
            rows, o, a, episode_ids=res.episode_ids, timeouts=res.timeouts, info=info,
        )

    # ------------------------------------------------------------------------------------------- persistence
    @classmethod
    def load(cls, path: str | Path) -> "TrajectorySynthesizer":
        state = read_checkpoint(path, FORMAT, "trajectory-synthesizer")
        synth = cls(traj_config_from_dict(state["config"]))
        synth._restore(state)
        return synth
