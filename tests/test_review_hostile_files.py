"""Files made by others (dataset folders, .npz imports, checkpoints, cards, configs) are read as data: a damaged or
hostile file is one line (a PrivsynthError; the CLI exits 2), never a traceback, a huge allocation, a read outside
the dataset's folder or an import of a module the file names (docs/DESIGN.md, invariant 5)."""
from __future__ import annotations

import io
import json
import sys
import zipfile
from pathlib import Path

import h5py
import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData, PrivsynthError


# ------------------------------------------------------------------------------------------------ helpers
def _store_dataset(dataset_id: str = "hostile") -> Path:
    """A small privsynth dataset in the test's store; returns its data folder."""
    return minari_io.write_dataset(make_toy_dataset(name=dataset_id), dataset_id) / "data"


def _edit_meta(data_dir: Path, edit) -> None:
    path = data_dir / "metadata.json"
    meta = json.loads(path.read_text())
    new = edit(meta)
    path.write_text(json.dumps(meta if new is None else new))


def _npz_declaring(path: Path, arrays: dict[str, np.ndarray], key: str, shape: tuple[int, ...]) -> None:
    """A .npz whose member ``key`` declares ``shape`` in its header but holds a few bytes."""
    members = {}
    for k, v in arrays.items():
        buf = io.BytesIO()
        np.lib.format.write_array(buf, v)
        members[k] = buf.getvalue()
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f4", "fortran_order": False, "shape": shape})
    members[key] = buf.getvalue() + b"\0" * 64
    with zipfile.ZipFile(path, "w") as zf:
        for k, v in members.items():
            zf.writestr(f"{k}.npy", v)


def _sidecar_arrays(data_dir: Path) -> dict[str, np.ndarray]:
    with np.load(data_dir / minari_io.SIDECAR_FILE) as z:
        return {k: z[k] for k in z.files}


# ------------------------------------------------------------------------------- dataset folders: metadata
def test_arrays_file_named_outside_the_data_folder_is_refused():
    _store_dataset("victim")
    data_dir = _store_dataset("hostile")
    _edit_meta(data_dir, lambda m: m["privsynth"].__setitem__("arrays", "../../victim-v0/data/privsynth_arrays.npz"))
    with pytest.raises(InvalidData, match="arrays file"):
        minari_io.load_dataset("hostile")


def test_arrays_file_of_the_wrong_type_is_one_line():
    data_dir = _store_dataset()
    _edit_meta(data_dir, lambda m: m["privsynth"].__setitem__("arrays", 5))
    with pytest.raises(InvalidData, match="arrays file"):
        minari_io.load_dataset("hostile")


def test_arrays_file_symlinked_outside_the_data_folder_is_refused(tmp_path):
    data_dir = _store_dataset()
    outside = tmp_path / "elsewhere.npz"
    (data_dir / minari_io.SIDECAR_FILE).rename(outside)
    (data_dir / minari_io.SIDECAR_FILE).symlink_to(outside)
    with pytest.raises(InvalidData, match="outside"):
        minari_io.load_dataset("hostile")


@pytest.mark.parametrize("edit", [
    lambda m: m["privsynth"].__setitem__("info", [1, 2]),
    lambda m: m["privsynth"]["info"].__setitem__("ref_min_score", "low"),
    lambda m: m["privsynth"]["info"].__setitem__("env_kwargs", "abc"),
    lambda m: m["privsynth"]["info"].__setitem__("extra", [1]),
    lambda m: m.__setitem__("total_episodes", "many"),
    lambda m: [1, 2],
])
def test_metadata_of_the_wrong_types_is_one_line(edit):
    data_dir = _store_dataset()
    _edit_meta(data_dir, edit)
    for read in (minari_io.load_dataset, minari_io.describe, minari_io.read_info, minari_io.read_card):
        with pytest.raises(InvalidData):
            read("hostile")


def test_card_with_strings_for_numbers_is_summarised_not_a_traceback():
    text = minari_io.card_summary({"epsilon": "lots", "delta": [1], "noise_multiplier": "x", "steps": "y"})
    assert "privacy" in text.lower()


def test_datasets_list_survives_one_damaged_folder(capsys, tmp_path):
    store = Path(minari_io._root())
    _store_dataset("good")
    _edit_meta(_store_dataset("hostile"), lambda m: m["privsynth"].__setitem__("info", [1]))
    assert main(["--store", str(store), "datasets", "list"]) == 0
    out = capsys.readouterr()
    assert "privsynth/good-v0" in out.out and "hostile" in out.err
    assert main(["--store", str(store), "datasets", "show", "hostile"]) == 2


# -------------------------------------------------------------------------------- dataset folders: arrays
def test_sidecar_declaring_a_huge_array_is_refused_before_allocating():
    data_dir = _store_dataset()
    arrays = _sidecar_arrays(data_dir)
    _npz_declaring(data_dir / minari_io.SIDECAR_FILE, arrays, "observations", (10**11, 4))
    with pytest.raises(InvalidData, match="declares"):
        minari_io.load_dataset("hostile")


def test_sidecar_holding_strings_is_one_line():
    data_dir = _store_dataset()
    arrays = _sidecar_arrays(data_dir)
    arrays["observations"] = np.array([["a"] * 4] * len(arrays["rewards"]))
    np.savez(data_dir / minari_io.SIDECAR_FILE, **arrays)
    with pytest.raises(InvalidData, match="numbers"):
        minari_io.load_dataset("hostile")


def test_nan_episode_ids_are_refused():
    ds = make_toy_dataset()
    with pytest.raises(InvalidData, match="episode_ids"):
        OfflineDataset(ds.observations, ds.actions, ds.rewards, ds.next_observations, ds.terminals, ds.timeouts,
                       np.full(ds.n_transitions, np.nan))


def _foreign(edit_file) -> None:
    """A dataset without privsynth's arrays file (read through Minari's episodes), its HDF5 edited by ``edit_file``."""
    data_dir = _store_dataset()
    (data_dir / minari_io.SIDECAR_FILE).unlink()
    _edit_meta(data_dir, lambda m: m.pop("privsynth"))
    with h5py.File(data_dir / "main_data.hdf5", "a") as f:
        edit_file(f)


def test_foreign_episode_missing_an_array_is_one_line():
    _foreign(lambda f: f["episode_0"].__delitem__("actions"))
    with pytest.raises(InvalidData, match="cannot read dataset 'privsynth/hostile-v0': damaged"):
        minari_io.load_dataset("hostile")


def test_foreign_episode_declaring_a_huge_array_is_refused_before_allocating():
    def huge(f):
        del f["episode_0/rewards"]
        f["episode_0"].create_dataset("rewards", shape=(10**12,), dtype="f4", chunks=(1000,))
    _foreign(huge)
    with pytest.raises(InvalidData, match="declares"):
        minari_io.load_dataset("hostile")


def test_foreign_episode_linking_another_file_is_refused(tmp_path):
    other = tmp_path / "other.hdf5"
    with h5py.File(other, "w") as g:
        g["rewards"] = np.zeros(5, np.float32)

    def link(f):
        del f["episode_0/rewards"]
        f["episode_0/rewards"] = h5py.ExternalLink(str(other), "/rewards")
    _foreign(link)
    with pytest.raises(InvalidData, match="another file"):
        minari_io.load_dataset("hostile")


# ------------------------------------------------------------------------------------------- .npz imports
def _d4rl(n: int = 6, **over) -> dict[str, np.ndarray]:
    arrays = dict(observations=np.zeros((n, 3), np.float32), actions=np.zeros((n, 1), np.float32),
                  rewards=np.zeros(n, np.float32), next_observations=np.zeros((n, 3), np.float32),
                  terminals=np.zeros(n, bool))
    arrays.update(over)
    return arrays


def test_import_npz_declaring_a_huge_array_is_one_line(tmp_path, capsys):
    path = tmp_path / "huge.npz"
    _npz_declaring(path, _d4rl(), "observations", (10**11, 3))
    assert main(["datasets", "import", str(path)]) == 2
    assert "declares" in capsys.readouterr().err


@pytest.mark.parametrize("over", [
    {"observations": np.array([["a", "b", "c"]] * 6)},
    {"rewards": np.array([b"ab"] * 6)},
    {"terminals": np.array(["yes"] * 6)},
    {"episode_ids": np.array(["x"] * 6)},
    {"episode_ids": np.linspace(0, 1, 6)},
])
def test_import_npz_with_non_numeric_or_fractional_arrays_is_one_line(tmp_path, capsys, over):
    path = tmp_path / "bad.npz"
    np.savez(path, **_d4rl(**over))
    assert main(["datasets", "import", str(path)]) == 2
    assert capsys.readouterr().err.startswith("privsynth: error:")


# ----------------------------------------------------------------------------------------- environments
def test_env_id_naming_a_module_is_not_imported(tmp_path, monkeypatch):
    from privsynth.data.envs import make_env

    (tmp_path / "privsynth_review_planted.py").write_text("PLANTED = True\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PrivsynthError, match="module"):
        make_env(DatasetInfo(name="x", env_id="privsynth_review_planted:Pendulum-v1"))
    assert "privsynth_review_planted" not in sys.modules


# ------------------------------------------------------------------------------------------ checkpoints
@pytest.fixture(scope="module")
def tiny_state() -> dict:
    from privsynth.data.normalize import Normalizer
    from privsynth.synth import registry

    synth = registry.make("privorl-n", preset="cpu", denoiser={"width": 8, "depth": 1}, next_state="absolute")
    synth.normalizer = Normalizer.from_stats(np.zeros(7), np.ones(7), source="bounds")
    synth._build(2, 1, DatasetInfo())
    return synth.state()


@pytest.mark.parametrize("edit", [
    lambda s: s.__setitem__("dims", ["a", "b"]),
    lambda s: s.__setitem__("dims", [10**9, 1]),
    lambda s: s.__setitem__("ema", [1]),
    lambda s: s["ema"].__setitem__(next(iter(s["ema"])), "abc"),
    lambda s: s.__setitem__("template", [1]),
    lambda s: s.__setitem__("ledger", "[1, 2]"),
    lambda s: s.__setitem__("history", 5),
    lambda s: s.__setitem__("discrete_values", {"x": [1]}),
    lambda s: s.__setitem__("normalizer", {"x": 1}),
    lambda s: s["config"]["denoiser"].__setitem__("width", "wide"),
])
def test_checkpoint_parts_of_the_wrong_type_are_one_line(tmp_path, tiny_state, edit):
    import copy

    from privsynth.synth import registry

    state = copy.deepcopy(tiny_state)
    edit(state)
    path = tmp_path / "model.pt"
    torch.save(state, path)
    with pytest.raises(InvalidData):
        registry.load(path)


def test_the_untouched_tiny_checkpoint_still_loads(tmp_path, tiny_state):
    from privsynth.synth import registry

    torch.save(tiny_state, tmp_path / "model.pt")
    assert registry.load(tmp_path / "model.pt").obs_dim == 2


# ------------------------------------------------------------------------------- configs, normalisers, cards
def test_config_values_of_the_wrong_type_are_one_line():
    from privsynth.config_io import config_from_dict
    from privsynth.synth.config import TransitionSynthConfig

    with pytest.raises(InvalidData, match="denoiser.width"):
        config_from_dict(TransitionSynthConfig, {"denoiser": {"width": "wide"}})
    with pytest.raises(InvalidData, match="betas"):
        config_from_dict(TransitionSynthConfig, {"pretrain": {"betas": ["a", 0.9]}})
    assert config_from_dict(TransitionSynthConfig, {"pretrain": {"epochs": 3, "betas": [0.8, 0.9]}}).pretrain.epochs == 3


def test_saved_normaliser_of_the_wrong_shape_is_one_line():
    from privsynth.data.normalize import Normalizer

    for bad in ({"x": 1}, {"mean": "abc", "std": [1.0], "source": "s"}, [1]):
        with pytest.raises(InvalidData):
            Normalizer.from_dict(bad)


def test_dataset_info_fields_of_the_wrong_type_are_one_line():
    with pytest.raises(InvalidData, match="obs_keys"):
        DatasetInfo.from_dict({"obs_keys": "abc"})
    with pytest.raises(InvalidData):
        DatasetInfo.from_dict([1])
    assert DatasetInfo.from_dict({"name": "n", "ref_min_score": 1, "unknown": 2}).ref_min_score == 1


def test_damaged_pretrained_card_is_one_line(tmp_path, monkeypatch):
    from privsynth.synth.pretrained import pretrained_card

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.pt").write_bytes(b"")
    (tmp_path / "m" / "card.json").write_text("{truncated")
    monkeypatch.setenv("PRIVSYNTH_PRETRAINED", str(tmp_path))
    with pytest.raises(InvalidData, match="card"):
        pretrained_card("m")


# ------------------------------------------------------------------------------ shipped locomotion policies
def test_damaged_locomotion_policy_files_are_one_line(tmp_path):
    from privsynth.data.locomotion.policies import load_actor, load_card

    (tmp_path / "hopper" / "snapshots").mkdir(parents=True)
    card = tmp_path / "hopper" / "card.json"
    for text in ("{truncated", "[1]", json.dumps({"levels": {"medium": "a"}})):
        card.write_text(text)
        with pytest.raises(InvalidData, match="card"):
            load_card("hopper", tmp_path)
    snapshot = tmp_path / "hopper" / "snapshots" / "step_0000005.pt"
    torch.save({"obs_dim": 3, "act_dim": 1, "hidden": 8, "state_dict": {"net.0.weight": torch.zeros(2, 2)}}, snapshot)
    with pytest.raises(InvalidData, match="snapshot"):
        load_actor("hopper", 5, tmp_path)
    snapshot.write_bytes(b"garbage")
    with pytest.raises(InvalidData, match="snapshot"):
        load_actor("hopper", 5, tmp_path)
