"""PATE-GAN (Jordon, Yoon & van der Schaar, ICLR 2019) and PrePATE-GAN (PrivORL appendix E), our own torch code.

The sensitive transitions are split into ``teachers`` disjoint parts by a keyed hash of each record (the key comes from
the :class:`~privsynth.privacy.noise.NoiseSource` and is never recorded), so adding or removing one transition
changes exactly one teacher's data and leaves every other teacher's part as it was (a random permutation cut into
chunks would reshuffle all of them, and ``chunk`` can return fewer parts than teachers); teacher discriminators learn real (their part)
against generated rows; a student discriminator sees only generated rows, labelled by the teachers' noisy vote; the
generator learns against the student. Only the votes touch the sensitive data, so they are the whole privacy cost.

Aggregator and accounting (native): every query releases n₁ + N(0, σ²), n₁ the number of teachers voting "real";
one transition sits in one teacher's part, so it moves n₁ by at most one (L2 sensitivity 1) in every query. T queries
are T Gaussian mechanisms composed under RDP (the GNMax aggregator of Papernot et al. 2018, data-independent
analysis); σ is calibrated so that the ``queries`` of the run spend exactly ε at δ. The vote noise is drawn from the
NoiseSource (OS entropy), never from ``config.seed``, which only drives non-private randomness (initialisation,
generated rows, teacher mini-batches: one independent stream per teacher, :func:`teacher_generators`, so teacher
k's training depends only on its own part). The student regresses the noisy
vote share (unclipped, so unbiased) over a pool of all labelled rows; reusing labels is post-processing. This
departs from the paper's Laplace noisy-argmax with a data-dependent moments accountant, whose reported ε is itself
a function of the data and cannot be released without smooth sensitivity; ours is the honest, weaker version.

PrePATE-GAN first trains the generator and a discriminator as a plain GAN on public transitions (no privacy, PrivORL
pre-trains for the same epochs as PrivORL-n) and starts the student and the teachers from that discriminator.
Layer sizes from appendix E: generator 3 hidden layers of 141 units, discriminators 2 of 113, 15 teachers.

Why our own code: smartnoise-synth's PATE-GAN pins opacus < 0.15 (it would downgrade our Opacus 1.6) and pandas 2;
synthcity is blocked on the same Opacus pin.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch
from torch import nn

from privsynth.data.dataset import OfflineDataset
from privsynth.data.normalize import Normalizer
from privsynth.config_io import config_from_dict
from privsynth.errors import InvalidData
from privsynth.nn import mlp
from privsynth.privacy import accounting as acc
from privsynth.privacy.ledger import LedgerEvent
from privsynth.privacy.noise import NoiseSource
from privsynth.synth.baselines.common import BaselineSynthesizer, as_list, check_budget_args, public_matrix
from privsynth.synth.checkpoint import atomic_torch_save, load_weights_only

__all__ = ["PATEGANConfig", "PATEGANSynthesizer", "PrePATEGANSynthesizer", "teacher_assignment", "teacher_parts",
           "teacher_generators"]


def teacher_assignment(rows: np.ndarray, teachers: int, key: bytes) -> np.ndarray:
    """Teacher index of every record [N]: keyed BLAKE2b of the record's bytes, modulo ``teachers``.

    A record's teacher depends on that record and the key only, so adding or removing one record changes exactly
    one teacher's part (the one-teacher sensitivity PATE's vote analysis needs)."""
    if teachers < 1:
        raise InvalidData("PATE needs at least one teacher")
    x = np.ascontiguousarray(np.asarray(rows, dtype=np.float64))
    out = np.empty(len(x), dtype=np.int64)
    for i, row in enumerate(x):
        digest = hashlib.blake2b(row.tobytes(), key=key, digest_size=8).digest()
        out[i] = int.from_bytes(digest, "little") % teachers
    return out


def teacher_parts(rows: np.ndarray, teachers: int, key: bytes) -> list[torch.Tensor]:
    """Indices of the records of each of the ``teachers`` disjoint parts (always exactly ``teachers`` parts)."""
    assign = teacher_assignment(rows, teachers, key)
    parts = [torch.as_tensor(np.flatnonzero(assign == t)) for t in range(teachers)]
    assert len(parts) == teachers and sum(len(p) for p in parts) == len(assign)
    return parts


_TEACHER_STREAM = 0x7EAC4E5  # domain tag separating the teachers' streams from other uses of config.seed


def teacher_generators(seed: int, teachers: int) -> list[torch.Generator]:
    """One mini-batch generator per teacher, spawned independently from ``seed`` (non-private randomness).

    Teacher k's stream is child k of ``SeedSequence([seed, tag])``: it depends on neither the other teachers' parts
    nor how many draws they took (nor on the number of teachers), so teacher k's training is a function of its own
    part (and of public, already-released quantities) only. A generator shared by all teachers broke this: a teacher
    with an empty part skipped its draw, so one added record filling that part shifted every later teacher's
    mini-batches and moved the vote histogram by more than the one vote the accounting assumes."""
    children = np.random.SeedSequence([int(seed), _TEACHER_STREAM]).spawn(int(teachers))
    return [torch.Generator().manual_seed(int(ss.generate_state(1, np.uint64)[0] >> 1)) for ss in children]


@dataclass
class PATEGANConfig:
    generator_layers: int = 3  # appendix E
    generator_units: int = 141  # appendix E
    discriminator_layers: int = 2  # appendix E
    discriminator_units: int = 113  # appendix E
    teachers: int = 15  # appendix E
    noise_dim: int = 32  # latent size
    batch_size: int = 64  # real/fake rows per teacher step and per generator step
    iterations: int = 400  # DP training iterations (teacher step, queries, student steps, generator step)
    queries: int = 4000  # total teacher queries over the run (sets σ for the budget)
    student_steps: int = 5
    lr: float = 1e-3  # Adam; the PATE-GAN code uses 1e-4 with far more steps, 1e-3 trains at CPU scale
    pretrain_steps: int = 0  # PrePATE-GAN: non-private GAN steps on public data (0 = plain PATE-GAN)
    seed: int = 0  # non-private randomness only (init, generated rows, teacher batches: one stream per teacher,
    # teacher_generators); never the vote noise
    noise_seed: int | None = None  # None: vote noise and partition key from OS entropy; an int: NOT DP (tests only)

    def __post_init__(self) -> None:
        if self.teachers < 2:
            raise InvalidData("PATE-GAN needs at least 2 teachers")
        if self.iterations < 1 or self.queries < self.iterations:
            raise InvalidData("PATE-GAN needs iterations >= 1 and at least one query per iteration")


def _mlp(d_in: int, units: int, layers: int, d_out: int) -> nn.Sequential:
    """``layers`` hidden layers of ``units`` with LeakyReLU(0.2), the PATE-GAN networks' shape."""
    return mlp(d_in, (units,) * layers, d_out, act=functools.partial(nn.LeakyReLU, 0.2))


class PATEGANSynthesizer(BaselineSynthesizer):
    """``PATEGANSynthesizer().pretrain(public).finetune(sensitive, 10, 1e-5).sample(n)``.

    ``pretrain`` fits the public normaliser and, with ``pretrain_steps > 0`` (PrePATE-GAN), the non-private GAN.
    """

    name = "pategan"
    native_accounting = "rdp-gaussian-votes"
    mechanism = "PATE-GAN: teacher discriminators on disjoint parts, Gaussian noisy vote counts label the student"

    def __init__(self, config: PATEGANConfig | None = None) -> None:
        super().__init__(config or PATEGANConfig())
        self.normalizer: Normalizer | None = None
        self.generator: nn.Module | None = None
        self.discriminator: nn.Module | None = None  # the pre-trained (public) discriminator, PrePATE-GAN only

    @property
    def dim(self) -> int:
        if self.obs_dim is None:
            raise InvalidData(f"{self.name} has not seen data yet")
        return 2 * self.obs_dim + self.act_dim + 2

    def _build(self) -> None:
        c = self.config
        torch.manual_seed(c.seed)
        self.generator = _mlp(c.noise_dim, c.generator_units, c.generator_layers, self.dim)
        self.discriminator = _mlp(self.dim, c.discriminator_units, c.discriminator_layers, 1)

    def _noise(self, n: int, gen: torch.Generator | None = None) -> torch.Tensor:
        return torch.randn(n, self.config.noise_dim, generator=gen)

    # --------------------------------------------------------------------------------------------- public
    def pretrain(self, public: OfflineDataset | Sequence[OfflineDataset], *, progress: bool = False, **kwargs: Any):
        """Public normaliser; with ``pretrain_steps`` > 0, a plain (non-private) GAN on the public transitions."""
        pubs = as_list(public)
        rows = public_matrix(pubs)
        self._set_dims(pubs[0])
        self.normalizer = Normalizer.fit_public(pubs)
        self.public_data += [p.info.name for p in pubs]
        self._build()
        c = self.config
        if c.pretrain_steps <= 0:
            return self
        t0 = time.perf_counter()
        x = self.normalizer.normalize(torch.as_tensor(rows, dtype=torch.float32))
        g_opt = torch.optim.Adam(self.generator.parameters(), lr=c.lr, betas=(0.5, 0.999))
        d_opt = torch.optim.Adam(self.discriminator.parameters(), lr=c.lr, betas=(0.5, 0.999))
        bce = nn.BCEWithLogitsLoss()
        gen = torch.Generator().manual_seed(c.seed)
        steps = range(c.pretrain_steps)
        if progress:
            from tqdm import tqdm

            steps = tqdm(steps, desc=f"{self.name} pretrain")
        for _ in steps:
            real = x[torch.randint(len(x), (c.batch_size,), generator=gen)]
            fake = self.generator(self._noise(c.batch_size, gen)).detach()
            logits = self.discriminator(torch.cat([real, fake]))
            target = torch.cat([torch.ones(len(real), 1), torch.zeros(len(fake), 1)])
            d_opt.zero_grad()
            bce(logits, target).backward()
            d_opt.step()
            g_logits = self.discriminator(self.generator(self._noise(c.batch_size, gen)))
            g_opt.zero_grad()
            bce(g_logits, torch.ones_like(g_logits)).backward()
            g_opt.step()
        self.history.append({"phase": "pretrain", "steps": c.pretrain_steps, "seconds": time.perf_counter() - t0})
        return self

    # ------------------------------------------------------------------------------------------ sensitive
    def finetune(
        self,
        sensitive: OfflineDataset,
        epsilon: float,
        delta: float,
        unit: str = "transition",
        *,
        progress: bool = False,
        **kwargs: Any,
    ) -> "PATEGANSynthesizer":
        """PATE training on the sensitive transitions; the teacher votes spend (ε, δ) under RDP."""
        check_budget_args(sensitive, epsilon, delta, unit)
        if self.normalizer is None or self.generator is None:
            raise InvalidData(f"{self.name} needs public data for its normaliser: call pretrain(public) first")
        self._set_dims(sensitive)
        c = self.config
        n = sensitive.n_transitions
        if n < c.teachers:
            raise InvalidData(f"the sensitive dataset has {n} transitions, fewer than the {c.teachers} teachers")
        t0 = time.perf_counter()
        ledger = self._start_ledger(delta, unit)
        self._set_template(sensitive)
        per_iter = c.queries // c.iterations
        total_queries = per_iter * c.iterations
        sigma = acc.calibrate_gaussian_multiplier(epsilon, delta, total_queries, "rdp")

        gen = torch.Generator().manual_seed(c.seed + 1)  # non-private randomness (generated rows, student batches)
        teacher_gens = teacher_generators(c.seed, c.teachers)  # teacher k's mini-batches: its own stream only
        source = NoiseSource(c.noise_seed)
        noise_gen = source.torch_generator()  # the vote noise: OS entropy unless noise_seed is set (then NOT DP)
        raw = sensitive.transition_matrix()
        x = self.normalizer.normalize(torch.as_tensor(raw, dtype=torch.float32))
        parts = teacher_parts(raw, c.teachers, source.secret_key())  # disjoint: one transition, one teacher
        if len(parts) != c.teachers:
            raise InvalidData(f"the teacher partition has {len(parts)} parts for {c.teachers} teachers")
        # Charge all planned queries before the first one is answered: a run stopped part-way (an error, Ctrl-C)
        # leaves a generator already trained on noisy votes, and its ledger must never read less than they cost
        # (charged at the end, an interrupted run carried an empty ledger whose card read "(0, delta)-DP").
        ledger.append(
            LedgerEvent.gaussian(
                "teacher vote counts (PATE queries)",
                sigma=float(sigma),
                sensitivity=1.0,
                count=int(total_queries),
                unit="transition",
                teachers=c.teachers,
                queries=int(total_queries),
                partition="keyed hash of each transition (secret key, never recorded)",
                noise=source.kind,
            )
        )
        teachers = [_clone(self.discriminator) for _ in range(c.teachers)]
        t_opts = [torch.optim.Adam(t.parameters(), lr=c.lr, betas=(0.5, 0.999)) for t in teachers]
        student = _clone(self.discriminator)
        s_opt = torch.optim.Adam(student.parameters(), lr=c.lr, betas=(0.5, 0.999))
        g_opt = torch.optim.Adam(self.generator.parameters(), lr=c.lr, betas=(0.5, 0.999))
        bce = nn.BCEWithLogitsLoss()
        pool_x: list[torch.Tensor] = []
        pool_y: list[torch.Tensor] = []
        it = range(c.iterations)
        if progress:
            from tqdm import tqdm

            it = tqdm(it, desc=f"{self.name} PATE training")
        for _ in it:
            # 1. teachers: their part of the real data against fresh generated rows
            with torch.no_grad():
                fake = self.generator(self._noise(c.batch_size * c.teachers, gen)).chunk(c.teachers)
            for teacher, opt, part, f, t_gen in zip(teachers, t_opts, parts, fake, teacher_gens):
                if len(part) == 0:  # an empty part (possible, unlikely): this teacher sees no real rows this round;
                    continue  # skipping touches only this teacher's own generator, never another teacher's batches
                real = x[part[torch.randint(len(part), (c.batch_size,), generator=t_gen)]]
                logits = teacher(torch.cat([real, f]))
                target = torch.cat([torch.ones(len(real), 1), torch.zeros(len(f), 1)])
                opt.zero_grad()
                bce(logits, target).backward()
                opt.step()
            # 2. queries: noisy count of "real" votes on generated rows (the only release)
            with torch.no_grad():
                q = self.generator(self._noise(per_iter, gen))
                votes = torch.stack([(t(q) > 0).float().squeeze(1) for t in teachers]).sum(0)
                noisy = votes + sigma * torch.randn(per_iter, generator=noise_gen)
            pool_x.append(q)
            pool_y.append((noisy / c.teachers).unsqueeze(1))
            px, py = torch.cat(pool_x), torch.cat(pool_y)
            # 3. student: regress the noisy vote share (post-processing of the releases)
            for _ in range(c.student_steps):
                idx = torch.randint(len(px), (min(c.batch_size * 4, len(px)),), generator=gen)
                pred = torch.sigmoid(student(px[idx]))
                s_opt.zero_grad()
                ((pred - py[idx]) ** 2).mean().backward()
                s_opt.step()
            # 4. generator against the student
            g_logits = student(self.generator(self._noise(c.batch_size, gen)))
            g_opt.zero_grad()
            bce(g_logits, torch.ones_like(g_logits)).backward()
            g_opt.step()

        self.history.append(
            {
                "phase": "finetune",
                "epsilon_target": float(epsilon),
                "delta": float(delta),
                "vote_noise_sigma": float(sigma),
                "queries": int(total_queries),
                "iterations": c.iterations,
                "seconds": time.perf_counter() - t0,
            }
        )
        return self

    # --------------------------------------------------------------------------------------------- sample
    @torch.no_grad()
    def sample(self, n: int, *, seed: int | None = None, name: str | None = None, **kwargs: Any) -> OfflineDataset:
        """``n`` generated transitions, un-normalised with the public statistics."""
        if n < 1:
            raise InvalidData(f"number of samples must be positive, got {n}")
        if self._ledger is None or self.generator is None or self.normalizer is None:
            raise InvalidData(f"{self.name} has not been fitted on sensitive data yet")
        seed = self.config.seed if seed is None else seed
        gen = torch.Generator().manual_seed(seed)
        rows = self.normalizer.unnormalize(self.generator(self._noise(int(n), gen))).numpy()
        return self._to_dataset(rows, name, {"requested": int(n), "seed": seed})

    # ----------------------------------------------------------------------------------------- save/load
    def save(self, path: str | Path) -> Path:
        """Generator weights, public normaliser, config and ledger in one torch file (written atomically)."""
        if self.generator is None:
            raise InvalidData("nothing to save: the synthesizer has no weights yet")
        state = self._base_state()
        state["generator"] = self.generator.state_dict()
        state["discriminator"] = self.discriminator.state_dict() if self.discriminator is not None else None
        state["normalizer"] = self.normalizer.to_dict()
        return atomic_torch_save(state, Path(path))

    @classmethod
    def load(cls, path: str | Path) -> "PATEGANSynthesizer":
        """Inverse of :meth:`save`. The file is read as data and checked part by part (one :class:`InvalidData`
        line naming it); the networks are built only once the stored weights are known to fit the config."""
        from privsynth.synth.base import check_weights_fit

        state = load_weights_only(path)
        if not isinstance(state, dict) or state.get("synthesizer") not in ("pategan", "prepategan"):
            raise InvalidData(f"{path} is not a PATE-GAN checkpoint")
        damaged = f"{path} is a damaged PATE-GAN checkpoint"
        dims = state.get("dims")
        if not (isinstance(dims, (list, tuple)) and len(dims) == 2
                and all(isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims)):
            raise InvalidData(f"{damaged}: 'dims' must be two positive whole numbers, got {dims!r:.60}")
        if not all(isinstance(state.get(k, []), list) for k in ("public_data", "history")) or not all(
                isinstance(h, dict) for h in state.get("history", [])):
            raise InvalidData(f"{damaged}: 'public_data' and 'history' must be lists (of names, of mappings)")
        for key in ("template", "ledger"):
            if state.get(key) is not None and not isinstance(state[key], dict):
                raise InvalidData(f"{damaged}: '{key}' is not a mapping")
        weights = {k: state.get(k) for k in ("generator", "discriminator")}
        klass = PrePATEGANSynthesizer if state["synthesizer"] == "prepategan" else PATEGANSynthesizer
        synth = klass(config_from_dict(PATEGANConfig, state.get("config")))
        synth._restore_base(state)
        built = lambda: synth._build() or {"generator": synth.generator, "discriminator": synth.discriminator}  # noqa
        check_weights_fit(built, weights, damaged, state["config"])  # on the meta device, before allocating
        synth._build()
        synth.generator.load_state_dict(weights["generator"])
        synth.discriminator.load_state_dict(weights["discriminator"])
        synth.normalizer = Normalizer.from_dict(state.get("normalizer"))
        if synth.normalizer.dim != synth.dim:
            raise InvalidData(f"{damaged}: its normaliser has {synth.normalizer.dim} columns, its rows {synth.dim}")
        return synth


class PrePATEGANSynthesizer(PATEGANSynthesizer):
    """PATE-GAN whose generator and discriminators start from a plain GAN trained on public transitions."""

    name = "prepategan"
    mechanism = "PrePATE-GAN: non-private GAN pre-training on public data, then PATE-GAN on the sensitive data"

    def __init__(self, config: PATEGANConfig | None = None) -> None:
        config = config or PATEGANConfig(pretrain_steps=2000)
        if config.pretrain_steps <= 0:
            config = dataclasses.replace(config, pretrain_steps=2000)
        super().__init__(config)


def _clone(module: nn.Module) -> nn.Module:
    import copy

    return copy.deepcopy(module)
