"""The neighbour test over every releasing path (issue 21): run on D and on D plus one unit, everything a path writes
except its DP outputs must be identical (or a public fact of N). A new releasing path gets the test by adding one
entry to ``PATHS``. The added unit is an episode longer than every other one, so shape fields computed from the data
(longest trajectory, total transitions) show up as leaks."""
from __future__ import annotations

import importlib.util
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch

from conftest import make_toy_dataset
from neighbour import add_episode, leaks, minari_metadata
from privsynth.data import OfflineDataset
from privsynth.synth import registry


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


def _registered(name: str):
    """Any registered synthesizer at its tiny preset: pre-train on public data, DP fine-tune, sample, save."""
    def run(sens: OfflineDataset, tmp: Path) -> dict:
        episodes = registry.entry(name).episodes
        public = make_toy_dataset(lengths=(12, 10, 14) if episodes else (100, 100), seed=1, name="pub")
        torch.manual_seed(0)
        synth = registry.make(name, preset="tiny")
        registry.fit(synth, sens, public=public, epsilon=5.0, delta=1e-3,
                     unit="trajectory" if episodes else "transition")
        return _synth_view(synth, tmp, n=4 if episodes else 64)
    return run


def _sens_transitions() -> OfflineDataset:
    from test_transition_synth import sensitive_data

    return sensitive_data()


def _sens_small() -> OfflineDataset:
    return make_toy_dataset(lengths=(9, 8, 10, 9, 8, 10, 9, 8), seed=2, sensitive=True, name="sens")


_SAMPLE = ("*sample_info.extra*", "*card.sample.*", "*.sample.*", "*last_sample*")
_GRID = _SAMPLE + ("*discretizer.fine_counts*", "*discretizer.groups*", "*discretizer.sizes*", "*measurements*",
                   "*marginals*", "*cliques*")

_DP_OUTPUTS = {"pgm": _GRID, "privsyn": _GRID}


def _paths() -> list[ReleasingPath]:
    paths = [
        # the release to the Minari store, at both units (at unit = transition the row count is N, a public fact)
        ReleasingPath("release privorl-n transition", _privorl_n("transition"), _sens_transitions, _SAMPLE + ("*.rows",)),
        ReleasingPath("release privorl-n trajectory", _privorl_n("trajectory"), _sens_transitions, _SAMPLE, slow=True),
    ]
    for name in registry.names():  # every registered synthesizer, by construction
        if registry.entry(name).extra == "pgm" and importlib.util.find_spec("mbi") is None:
            continue
        data = _sens_small if registry.entry(name).episodes else _sens_transitions
        paths.append(ReleasingPath(name, _registered(name), data, _DP_OUTPUTS.get(name, _SAMPLE), slow=True))
    return paths


PATHS = _paths()


@pytest.mark.parametrize("path", [pytest.param(p, marks=pytest.mark.slow) if p.slow else p for p in PATHS],
                         ids=[p.name for p in PATHS])
def test_neighbouring_datasets_differ_only_in_dp_outputs(path: ReleasingPath, tmp_path):
    d = path.data()
    d_plus = add_episode(d, int(max(d.episode_lengths())) + 7)
    a = path.run(d, tmp_path / "a")
    b = path.run(d_plus, tmp_path / "b")
    found = leaks(a, b, dp_outputs=path.dp_outputs)
    assert not found, f"{path.name} writes values computed from the sensitive data outside a mechanism:\n" + "\n".join(found)
