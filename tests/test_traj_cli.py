"""``privsynth synthesize-traj`` end to end on toy data: releases a dataset whose card carries the trajectory ledger."""
from __future__ import annotations

import json

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data.minari_io import load_dataset, write_dataset


def test_synthesize_traj_releases_with_card(capsys):
    pub = make_toy_dataset(lengths=(9, 6, 11, 8), obs_dim=3, act_dim=2, seed=1, name="pub")
    sens = make_toy_dataset(lengths=(7, 5, 10, 4, 6, 8, 9, 5), obs_dim=3, act_dim=2, seed=2, name="sens")
    write_dataset(pub, "test/pub-v0")
    write_dataset(sens, "test/sens-v0")
    code = main(["synthesize-traj", "--sensitive", "test/sens-v0", "--public", "test/pub-v0", "--config", "tiny",
                 "--model", "dp-transformer", "--epsilon", "5", "--delta", "1e-3", "--n", "3", "--out",
                 "test/syn-v0", "--quiet"])
    assert code == 0
    out = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert out["unit"] == "trajectory" and out["epsilon"] <= 5.0
    syn = load_dataset("test/syn-v0")
    card = syn.info.privacy_card
    assert syn.n_episodes == 3 and card["private"] and card["synthesizer"] == "dp-transformer"


def test_synthesize_traj_refuses_without_public(capsys):
    sens = make_toy_dataset(lengths=(7, 5), obs_dim=3, act_dim=2, seed=2, name="sens")
    write_dataset(sens, "test/sens2-v0")
    assert main(["synthesize-traj", "--sensitive", "test/sens2-v0", "--epsilon", "1", "--out", "test/x-v0"]) == 2
    assert "public" in capsys.readouterr().err
