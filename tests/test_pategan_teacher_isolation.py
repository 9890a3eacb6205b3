"""PATE-GAN teachers train independently: teacher k's training depends only on its own part of the sensitive data.

With one minibatch generator shared by all teachers, a teacher whose part is empty skipped its draw, so one added
record that filled an empty part shifted every later teacher's minibatches: the vote histogram then moved by more
than the one vote the accounting assumes. Each teacher now has its own generator; on D and D plus one record that
lands in part j, only teacher j's parameters may differ.
"""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.privacy.noise import NoiseSource
from privsynth.synth.baselines import pategan as pg

OBS, ACT, TEACHERS = 2, 1, 6
TINY = dict(teachers=TEACHERS, iterations=1, queries=4, student_steps=1, batch_size=8, generator_units=8,
            discriminator_units=8, noise_dim=3)


def _sensitive(rows: np.ndarray) -> OfflineDataset:
    return OfflineDataset.from_transition_matrix(rows, OBS, ACT, info=DatasetInfo(name="sens", sensitive=True))


def _scenario():
    """(noise_seed, D rows, D+1 rows, j): part j of D is empty, a later part is not, and the added row lands in j."""
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(TEACHERS, 2 * OBS + ACT + 2)).astype(np.float32)
    rows[:, -1] = 0.0  # terminal column
    for noise_seed in range(200):
        key = NoiseSource.reproducible(noise_seed).secret_key()
        assign = pg.teacher_assignment(rows, TEACHERS, key)
        counts = np.bincount(assign, minlength=TEACHERS)
        empty = [j for j in range(TEACHERS - 1) if counts[j] == 0 and counts[j + 1:].sum() > 0]
        if not empty:
            continue
        j = empty[0]
        for _ in range(1000):
            extra = rng.normal(size=(1, rows.shape[1])).astype(np.float32)
            extra[:, -1] = 0.0
            if pg.teacher_assignment(extra, TEACHERS, key)[0] == j:
                return noise_seed, rows, np.concatenate([rows, extra]), j
    raise AssertionError("no scenario found")  # pragma: no cover


def _trained_teachers(monkeypatch, pub, rows, noise_seed) -> list[torch.nn.Module]:
    clones: list[torch.nn.Module] = []
    real_clone = pg._clone

    def recording_clone(module):
        out = real_clone(module)
        clones.append(out)
        return out

    monkeypatch.setattr(pg, "_clone", recording_clone)
    cfg = pg.PATEGANConfig(**TINY, noise_seed=noise_seed)
    pg.PATEGANSynthesizer(cfg).pretrain(pub).finetune(_sensitive(rows), 10.0, 1e-3)
    monkeypatch.setattr(pg, "_clone", real_clone)
    return clones[:TEACHERS]  # the teachers are cloned first, then the student


def _flat(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])


def test_one_added_record_changes_only_its_teacher(monkeypatch):
    noise_seed, d0, d1, j = _scenario()
    pub = make_toy_dataset(lengths=(30, 30), obs_dim=OBS, act_dim=ACT, seed=1, name="pub")
    t0 = _trained_teachers(monkeypatch, pub, d0, noise_seed)
    t1 = _trained_teachers(monkeypatch, pub, d1, noise_seed)
    changed = [k for k in range(TEACHERS) if not torch.equal(_flat(t0[k]), _flat(t1[k]))]
    assert changed == [j]


def test_each_teacher_draws_from_its_own_generator():
    gens = pg.teacher_generators(seed=3, teachers=4)
    draws = [torch.randint(1000, (8,), generator=g) for g in gens]
    assert len({tuple(d.tolist()) for d in draws}) == 4  # independent streams
    again = [torch.randint(1000, (8,), generator=g) for g in pg.teacher_generators(seed=3, teachers=4)]
    assert all(torch.equal(a, b) for a, b in zip(draws, again))  # reproducible from the (non-private) seed
    # teacher k's stream does not depend on how many teachers there are
    more = pg.teacher_generators(seed=3, teachers=6)
    assert torch.equal(torch.randint(1000, (8,), generator=more[2]), draws[2])


@pytest.mark.parametrize("teachers", [2, 5])
def test_teacher_generators_count(teachers):
    assert len(pg.teacher_generators(seed=0, teachers=teachers)) == teachers
