"""Stitching fragments into trajectories: stops at terminals, end flags and the maximum length; conditions each
fragment on the previous one's last transition; measures the seams; un-normalises."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config
from privsynth.synth.trajectory.stitching import stitch

O, A, H = 2, 1, 4
D = 2 * O + A + 3  # s a r s' term end
S, NS, TERM, END = slice(0, O), slice(O + A + 1, 2 * O + A + 1), D - 2, D - 1


def _walker(stop_at: dict[int, tuple[int, int, int]] | None = None, gap: float = 0.0):
    """Fragments whose state walks +1 per step from the link's next state; ``stop_at[call][traj] = (step, col)``."""
    calls = {"n": 0, "conds": []}

    def sample(cond: torch.Tensor) -> torch.Tensor:
        calls["conds"].append(cond.clone())
        m = cond.shape[0]
        start = torch.where(cond[:, -1:] > 0, cond[:, NS][:, :1], torch.zeros(m, 1)) + gap * (cond[:, -1:] > 0)
        x = torch.zeros(m, H, D)
        t = torch.arange(H, dtype=torch.float32)
        x[:, :, 0] = start + t
        x[:, :, O + A + 1] = start + t + 1
        flags = (stop_at or {}).get(calls["n"], {})
        for j, (step, col) in flags.items():
            x[j, step, col] = 1.0
        calls["n"] += 1
        return x

    return sample, calls


def _run(sample, n=3, max_length=100, **kw):
    return stitch(sample, n, horizon=H, data_dim=D, max_length=max_length, to_raw=lambda x: x, state_slice=S,
                  next_state_slice=NS, terminal_col=TERM, end_col=END, **kw)


def test_stops_at_terminal_and_end_flag_and_keeps_that_transition():
    sample, _ = _walker({0: {0: (2, TERM)}, 1: {0: (1, END)}})  # traj 0 terminal at step 2; traj 1 ends in round 2
    res = _run(sample, n=2, max_length=12)
    assert res.lengths.tolist() == [3, 6]
    ends = np.cumsum(res.lengths) - 1
    assert res.terminals[ends].tolist() == [True, False]
    assert res.timeouts[ends].tolist() == [False, True]
    assert res.terminals.sum() == 1 and res.timeouts.sum() == 1
    assert res.ended_by == {"terminal": 1, "end_flag": 1, "max_length": 0}


def test_stops_at_max_length_exactly():
    sample, calls = _walker()
    res = _run(sample, n=3, max_length=10)  # 10 = 2 full fragments + 2 steps of a third
    assert res.lengths.tolist() == [10, 10, 10]
    assert calls["n"] == 3 and res.ended_by["max_length"] == 3
    assert res.timeouts[np.cumsum(res.lengths) - 1].all() and not res.terminals.any()


def test_each_fragment_is_conditioned_on_the_previous_last_transition():
    sample, calls = _walker()
    res = _run(sample, n=2, max_length=8)
    first, second = calls["conds"][0], calls["conds"][1]
    assert torch.all(first == 0)  # no link for the first fragment, flag 0
    assert torch.all(second[:, -1] == 1)
    assert second[0, 0].item() == 3.0 and second[0, NS.start].item() == 4.0  # last row of fragment 1
    # seamless walker: the state chain is exact, so both gaps are zero
    assert res.boundary_gaps.size == 2 and np.allclose(res.boundary_gaps, 0)
    assert np.allclose(res.inner_gaps, 0)
    assert res.rows[:, 0].tolist()[:8] == list(range(8))


def test_boundary_gap_is_measured_and_snap_removes_it():
    sample, _ = _walker(gap=0.5)
    res = _run(sample, n=1, max_length=8)
    assert res.boundary_gaps.tolist() == pytest.approx([0.5])
    sample, _ = _walker(gap=0.5)
    snapped = _run(sample, n=1, max_length=8, snap=True)
    assert np.allclose(snapped.rows[1:, 0], snapped.rows[:-1, NS.start])


def test_synthesizer_output_is_unnormalised_and_chained_by_episode():
    pub = make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=O, act_dim=A, seed=1)
    pub.observations[:] += 100.0  # far from zero: a normalised sample would sit near 0
    pub.next_observations[:] += 100.0
    synth = TrajectorySynthesizer(tiny_config()).pretrain(pub, progress=False)
    ds = synth.sample(4, max_length=9)
    assert ds.n_episodes == 4 and ds.episode_lengths().max() <= 9
    assert np.abs(ds.observations.mean() - 100.0) < 30.0
    stats = ds.info.extra["sample"]
    assert stats["trajectories"] == 4 and "boundary_gap" in stats and "inner_gap" in stats


def test_rows_on_demand_come_from_one_stream_and_the_card_describes_them():
    """registry.sample(n_transitions=...) stitched in rounds each re-seeded alike: round 2 repeated round 1's first
    trajectories (169 episodes, 129 distinct in a tiny run), and the card's statistics described round 1 only."""
    from privsynth.synth import registry

    pub = make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=O, act_dim=A, seed=1)
    synth = TrajectorySynthesizer(tiny_config()).pretrain(pub, progress=False)
    synth.config.sampler.max_length = 12  # the first round asks n / 6 trajectories; shorter ones force more rounds
    ds = registry.sample(synth, n_transitions=150)  # seed None: config.seed, which every round used to restart
    stats = ds.info.extra["sample"]
    assert ds.n_transitions == 150 and stats["rounds"] >= 2
    starts = {ds.observations[ds.episode_ids == e][0].tobytes() for e in np.unique(ds.episode_ids)}
    assert len(starts) == ds.n_episodes  # no trajectory twice
    assert len({r.tobytes() for r in ds.observations}) == 150
    assert stats["transitions"] >= 150 and stats["trajectories"] >= ds.n_episodes
    assert stats["released"] == {"trajectories": ds.n_episodes, "transitions": 150,
                                 "last_trajectory_cut": stats["transitions"] > 150}
    assert ds.info.privacy_card["sample"]["released"] == stats["released"]
    again = registry.sample(synth, n_transitions=150)
    np.testing.assert_array_equal(again.observations, ds.observations)  # the sampling seed still replays
