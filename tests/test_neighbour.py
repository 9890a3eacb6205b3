"""The neighbour test over every releasing path (issue 21): run on D and on D plus one unit, everything a path writes
except its DP outputs must be identical (or a public fact of N). A new releasing path gets the test by adding one
entry to ``PATHS``. The added unit is an episode longer than every other one, so shape fields computed from the data
(longest trajectory, total transitions) show up as leaks."""
from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import make_toy_dataset
from neighbour import add_episode, leaks, minari_metadata
from privsynth.data import OfflineDataset


@dataclass(frozen=True)
class ReleasingPath:
    name: str
    run: Callable[[OfflineDataset, Path], dict]  # (sensitive data, scratch dir) -> public view
    data: Callable[[], OfflineDataset]
    dp_outputs: tuple[str, ...] = ()  # paths of DP outputs and of their post-processing
    slow: bool = False


def _saved(path: Path) -> object:
    """What a synthesizer's save() wrote, as data: JSON, or a torch file read as weights only (arrays by shape)."""
    if path.is_dir():
        return {p.name: _saved(p) for p in sorted(path.iterdir())}
    try:
        return json.loads(path.read_text())
    except (UnicodeDecodeError, json.JSONDecodeError):
        pass
    try:
        return torch.load(path, weights_only=True, map_location="cpu")
    except Exception:  # an old pickle-based checkpoint: the test may read its own file
        return torch.load(path, weights_only=False, map_location="cpu")


def _synth_view(synth, tmp: Path, n: int = 64) -> dict:
    ds = synth.sample(n, seed=0)
    info = ds.info.to_dict()
    target = tmp / "ckpt"
    synth.save(target)
    return {"card": synth.card(), "sample_info": info, "saved": _saved(target)}


# ------------------------------------------------------------------------------------------------ the paths
def _privorl_n(unit: str):
    def run(sens: OfflineDataset, tmp: Path) -> dict:
        from privsynth.release import synthesize
        from test_transition_synth import public_data, tiny_config

        res = synthesize(sens, public=[public_data()], epsilon=5.0, delta=1e-3, unit=unit, n=128, config=tiny_config(),
                         out_dataset="privsynth/neighbour-v0", overwrite=True, progress=False)
        return {"release": minari_metadata("privsynth/neighbour-v0"), "card": res.dataset.info.privacy_card,
                "info": res.dataset.info.to_dict(), "checkpoint": res.synthesizer.state()}
    return run


def _trajectory(backbone: str):
    def run(sens: OfflineDataset, tmp: Path) -> dict:
        from privsynth.synth.trajectory import TrajectorySynthesizer, tiny_config

        cfg = tiny_config(backbone)
        cfg.pretrain_curiosity = False
        torch.manual_seed(0)
        synth = TrajectorySynthesizer(cfg).pretrain(make_toy_dataset(lengths=(12, 10, 14), seed=1, name="pub"),
                                                      progress=False)
        synth.finetune(sens, 5.0, 1e-3, progress=False)
        return _synth_view(synth, tmp, n=4)
    return run


def _baseline(name: str, **overrides):
    def run(sens: OfflineDataset, tmp: Path) -> dict:
        from privsynth.synth.baselines import make_baseline

        torch.manual_seed(0)
        synth = make_baseline(name, **overrides).pretrain(make_toy_dataset(lengths=(100, 100), seed=1, name="pub"))
        synth.finetune(sens, 5.0, 1e-3, "transition")
        return _synth_view(synth, tmp)
    return run


def _sens_transitions() -> OfflineDataset:
    from test_transition_synth import sensitive_data

    return sensitive_data()


def _sens_small() -> OfflineDataset:
    return make_toy_dataset(lengths=(9, 8, 10, 9, 8, 10, 9, 8), seed=2, sensitive=True, name="sens")


_PATE = dict(teachers=3, iterations=10, queries=100, student_steps=2, batch_size=16, generator_units=16,
             discriminator_units=16, noise_dim=4)
_SAMPLE = ("*sample_info.extra*", "*card.sample.*", "*.sample.*", "*last_sample*")
_GRID = _SAMPLE + ("*discretizer.fine_counts*", "*discretizer.groups*", "*discretizer.sizes*", "*measurements*",
                   "*marginals*", "*cliques*")

PATHS = [
    # at unit = transition the number of rows is N, a public fact the card names
    ReleasingPath("privorl-n transition", _privorl_n("transition"), _sens_transitions, _SAMPLE + ("*.rows",)),
    ReleasingPath("privorl-n trajectory", _privorl_n("trajectory"), _sens_transitions, _SAMPLE, slow=True),
    ReleasingPath("privorl-j", _trajectory("transformer"), _sens_small, _SAMPLE, slow=True),
    ReleasingPath("privorl-j-unet", _trajectory("unet"), _sens_small, _SAMPLE, slow=True),
    ReleasingPath("dp-transformer", _trajectory("dp-transformer"), _sens_small, _SAMPLE, slow=True),
    ReleasingPath("privsyn", _baseline("privsyn", gum_rounds=3), _sens_transitions, _GRID, slow=True),
    ReleasingPath("pategan", _baseline("pategan", **_PATE), _sens_transitions, _SAMPLE, slow=True),
    ReleasingPath("prepategan", _baseline("prepategan", **_PATE, pretrain_steps=5), _sens_transitions, _SAMPLE, slow=True),
]


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.slow else p for p in PATHS],
                         ids=[p.name for p in PATHS])
def test_neighbouring_datasets_differ_only_in_dp_outputs(path: ReleasingPath, tmp_path):
    d = path.data()
    d_plus = add_episode(d, int(max(d.episode_lengths())) + 7)
    a = path.run(d, tmp_path / "a")
    b = path.run(d_plus, tmp_path / "b")
    found = leaks(a, b, dp_outputs=path.dp_outputs)
    assert not found, f"{path.name} writes values computed from the sensitive data outside a mechanism:\n" + "\n".join(found)
