"""`privsynth datasets split`: a random members / non-members split of a local dataset, for membership audits."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.split import split_dataset
from privsynth.evaluation.bench.sources import split_transitions

ARRAYS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids")
LENGTHS = (5, 3, 7, 4, 6, 2, 8, 5, 3, 4, 6, 7)  # 12 episodes, 60 transitions


def source(sensitive: bool = True, name: str = "src"):
    """A toy Pendulum dataset (3 obs / 1 action dims) carrying environment facts, written to the store."""
    ds = make_toy_dataset(lengths=LENGTHS, obs_dim=3, act_dim=1, sensitive=sensitive, name=name)
    info = dataclasses.replace(ds.info, env_id="Pendulum-v1", env_kwargs={"g": 9.81}, action_low=[-2.0],
                               action_high=[2.0], extra={"origin": "toy"})
    ds = dataclasses.replace(ds, info=info)
    minari_io.write_dataset(ds, name)
    return minari_io.load_dataset(name)


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def split(capsys, *extra, src="src"):
    return run(capsys, "datasets", "split", src, "--members", "mem", "--non-members", "non", *extra)


def rows(ds) -> set[bytes]:
    return {r.tobytes() for r in np.asarray(ds.observations)}


def test_episode_split_partitions_the_episodes_and_keeps_the_flag_and_environment(capsys):
    src = source()
    code, out, err = split(capsys, "--seed", "3")
    assert code == 0, err
    mem, non = minari_io.load_dataset("mem"), minari_io.load_dataset("non")
    # counts add up, as printed
    assert mem.n_episodes + non.n_episodes == src.n_episodes == len(LENGTHS)
    assert mem.n_transitions + non.n_transitions == src.n_transitions
    assert mem.n_episodes == round(0.8 * len(LENGTHS))
    assert f"privsynth/mem-v0: {mem.n_episodes} episodes, {mem.n_transitions} transitions" in out
    assert f"privsynth/non-v0: {non.n_episodes} episodes, {non.n_transitions} transitions" in out
    assert "sensitive" in out
    # no transition on both sides, none lost; whole episodes on each side
    assert not rows(mem) & rows(non) and rows(mem) | rows(non) == rows(src)
    assert not set(mem.episode_ids) & set(non.episode_ids)
    # the same split as the library's episode split under the seed
    expected, _ = src.split_episodes(0.8, seed=3)
    for a in ARRAYS:
        np.testing.assert_array_equal(getattr(mem, a), getattr(expected, a), err_msg=a)
    # sensitive flag and environment facts kept; the parts are named by their ids and say where they came from
    for part, role in ((mem, "members"), (non, "non-members")):
        assert part.info.sensitive is True
        for f in ("env_id", "env_kwargs", "action_low", "action_high", "ref_min_score", "ref_max_score"):
            assert getattr(part.info, f) == getattr(src.info, f), f
        assert part.info.extra["origin"] == "toy"
        assert part.info.extra["split"] == {"source": "privsynth/src-v0", "part": role, "fraction": 0.8,
                                            "by": "episode", "seed": 3}
    assert mem.info.name == "privsynth/mem-v0" and non.info.name == "privsynth/non-v0"
    assert minari_io.describe("mem")["sensitive"] and minari_io.describe("non")["sensitive"]


def test_transition_split_draws_transitions_not_episodes(capsys):
    src = source()
    code, out, err = split(capsys, "--by", "transition", "--fraction", "0.5", "--seed", "1")
    assert code == 0, err
    mem, non = minari_io.load_dataset("mem"), minari_io.load_dataset("non")
    assert mem.n_transitions + non.n_transitions == src.n_transitions and mem.n_transitions == 30
    assert not rows(mem) & rows(non) and rows(mem) | rows(non) == rows(src)
    # transition-level: episodes are cut, most of them have rows on both sides
    assert len(set(mem.episode_ids) & set(non.episode_ids)) >= len(LENGTHS) // 2
    expected, _ = split_transitions(src, 0.5, 1)  # the benchmark's transition split, reused
    for a in ARRAYS:
        np.testing.assert_array_equal(getattr(mem, a), getattr(expected, a), err_msg=a)
    assert mem.info.sensitive and non.info.sensitive and mem.info.env_id == "Pendulum-v1"
    assert mem.info.extra["split"]["by"] == "transition"


def test_split_is_random_under_the_seed_and_a_public_source_stays_public():
    src = make_toy_dataset(lengths=LENGTHS, sensitive=False)
    for by in ("episode", "transition"):
        a, _ = split_dataset(src, 0.5, by=by, seed=0)
        b, _ = split_dataset(src, 0.5, by=by, seed=0)
        c, _ = split_dataset(src, 0.5, by=by, seed=1)
        assert np.array_equal(a.observations, b.observations)
        assert not np.array_equal(a.observations, c.observations)
        assert a.info.sensitive is False


def test_overwrite(capsys):
    source()
    assert split(capsys)[0] == 0
    before = minari_io.load_dataset("mem").observations
    code, _, err = split(capsys, "--seed", "5")
    assert code == 2 and "already exists; pass --overwrite" in err
    assert np.array_equal(minari_io.load_dataset("mem").observations, before)
    code, _, err = split(capsys, "--seed", "5", "--overwrite")
    assert code == 0, err
    assert not np.array_equal(minari_io.load_dataset("mem").observations, before)


@pytest.mark.parametrize("argv, needle", [
    (("datasets", "split", "nope", "--members", "mem", "--non-members", "non"), "no local dataset 'nope'"),
    (("datasets", "split", "src", "--members", "mem", "--non-members", "non", "--fraction", "1"),
     "split fraction must be in (0, 1), got 1"),
    (("datasets", "split", "src", "--members", "mem", "--non-members", "non", "--fraction", "0"),
     "split fraction must be in (0, 1)"),
    (("datasets", "split", "src", "--members", "mem", "--non-members", "non", "--fraction", "-0.2"),
     "split fraction must be in (0, 1)"),
    (("datasets", "split", "src", "--members", "mem", "--non-members", "privsynth/mem-v0"),
     "members and non-members need different ids"),
    (("datasets", "split", "src", "--members", "src", "--non-members", "non", "--overwrite"),
     "is the dataset being split"),
    (("datasets", "split", "src", "--members", "mem", "--non-members", "non", "--by", "user"),
     "unknown split unit 'user': choose 'transition' or 'trajectory'"),  # one unit vocabulary (issue 38)
    (("datasets", "split", "src", "--members", "mem"), "--members OUT_ID and --non-members OUT_ID are required"),
    (("datasets", "split"), "a dataset id is required"),
])
def test_errors_are_one_line_and_write_nothing(capsys, argv, needle):
    source()
    code, _, err = run(capsys, *argv)
    lines = [ln for ln in err.strip().splitlines() if ln.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("privsynth: error:") and needle in lines[0], err
    assert minari_io.list_datasets() == ["privsynth/src-v0"]


def test_existing_output_is_refused_before_anything_is_written(capsys):
    source()
    minari_io.write_dataset(make_toy_dataset(name="non"), "non")
    code, _, err = split(capsys)
    assert code == 2 and "'privsynth/non-v0' already exists" in err
    assert not minari_io.dataset_exists("mem")
