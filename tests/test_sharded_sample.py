"""Sharded sampling: independent recorded seeds, shard i == sample(n_i, seed_i), reproducible, and the CLI path."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from privsynth.cli import main
from privsynth.errors import InvalidData
from privsynth.evaluation.executors import LocalExecutor
from privsynth.synth import TransitionSynthesizer
from privsynth.synth.sharded import sample_sharded, shard_seeds, shard_sizes
from test_transition_synth import public_data, sensitive_data, tiny_config


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    torch.manual_seed(0)
    synth = TransitionSynthesizer(tiny_config()).pretrain(public_data(), progress=False)
    synth.finetune(sensitive_data(), 10.0, 1e-3, progress=False)
    return synth.save(tmp_path_factory.mktemp("m") / "m.pt")


def test_shard_plan():
    assert shard_sizes(10, 3) == [4, 3, 3] and sum(shard_sizes(1001, 7)) == 1001
    seeds = shard_seeds(5, 4)
    assert len(set(seeds)) == 4 and seeds == shard_seeds(5, 4) and seeds != shard_seeds(6, 4)
    assert shard_seeds(5, 2) == seeds[:2]  # spawn is prefix-stable: adding shards keeps the earlier streams


def test_sharded_draw_is_the_shards_concatenated(checkpoint):
    synth = TransitionSynthesizer.load(checkpoint)
    ds = sample_sharded(synth, checkpoint, 50, shards=3, executor=LocalExecutor(1), seed=4, name="s")
    st = synth.last_sample_stats
    assert [s["seed"] for s in st["shards"]] == shard_seeds(4, 3) and [s["n"] for s in st["shards"]] == [17, 17, 16]
    assert ds.info.extra["sample"]["shards"] == st["shards"] and ds.info.privacy_card["private"] is True
    one = TransitionSynthesizer.load(checkpoint)
    expected = np.concatenate([one.sample(s["n"], seed=s["seed"]).transition_matrix() for s in st["shards"]])
    np.testing.assert_allclose(ds.transition_matrix(), expected, rtol=1e-6, atol=1e-6)
    again = sample_sharded(TransitionSynthesizer.load(checkpoint), checkpoint, 50, shards=3, executor=LocalExecutor(2),
                           seed=4)  # two processes, any finishing order: the same draw
    np.testing.assert_array_equal(again.transition_matrix(), ds.transition_matrix())
    with pytest.raises(InvalidData, match="shards"):
        sample_sharded(synth, checkpoint, 2, shards=3, executor=LocalExecutor(1))


def test_sample_cli_with_shards(checkpoint, capsys):
    from privsynth.data import minari_io

    minari_io.write_dataset(sensitive_data(), "sensitive")  # the release carries its environment spec
    code = main(["sample", "--model", str(checkpoint), "-n", "40", "--shards", "2", "--seed", "1",
                 "--out-dataset", "synthetic/shards-v0", "--sensitive", "sensitive", "--quiet"])
    out = capsys.readouterr().out
    assert code == 0 and "2 shards, seeds" in out and str(shard_seeds(1, 2)[0]) in out
