"""More files made by others, read as data: synthesizer checkpoints whose weights do not fit their config, TrajScore
encoder files, ledgers, PriMORL run folders and audit record files. A damaged or hostile file is one line (a
PrivsynthError; the CLI exits 2), never a traceback or a huge allocation (docs/DESIGN.md, invariant 5)."""
from __future__ import annotations

import copy
import json
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import make_toy_dataset
from test_review_hostile_files import _npz_declaring
from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.dataset import DatasetInfo
from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy.ledger import Ledger
from privsynth.synth import registry

_FIELDS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids")


def _one_line_error(capsys, code: int) -> str:
    """The CLI refused in one line: exit 2, ``privsynth: error: ...`` and nothing else on stderr (after the one
    deprecation line of a hidden old command, issue 38)."""
    err = capsys.readouterr().err
    if err.startswith("privsynth: warning:") and "is deprecated" in err.splitlines()[0]:
        err = err.split("\n", 1)[1]
    assert code == 2, err
    assert err.startswith("privsynth: error:") and err.strip().count("\n") == 0 and "Traceback" not in err, err
    return err


# ----------------------------------------------------------------------------- synthesizer checkpoints (item 1)
@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory) -> dict[str, dict]:
    """Tiny untrained checkpoints of privorl-n, privorl-j and PATE-GAN, as the state dicts their files hold."""
    out = {}
    for name in ("privorl-n", "privorl-j"):
        synth = registry.make(name, preset="tiny")
        synth._build(4, 2, DatasetInfo(name="template"))
        out[name] = synth.state()
    pategan = registry.make("pategan", preset="tiny")
    registry.pretrain(pategan, make_toy_dataset(lengths=(10, 10)))
    path = tmp_path_factory.mktemp("ckpt") / "pategan.pt"
    pategan.save(path)
    out["pategan"] = torch.load(path, weights_only=True)
    return out


def _write(tmp_path: Path, state: dict, edit) -> Path:
    state = copy.deepcopy(state)
    edit(state)
    path = tmp_path / "hostile.pt"
    torch.save(state, path)
    return path


def _set_weight(part: str, key: str, value: torch.Tensor):
    def edit(state):
        state[part][key] = value
        if part == "ema" and state.get("model") is not None:
            state["model"][key] = value
    return edit


def test_untouched_checkpoints_still_load(checkpoints, tmp_path):
    for name, state in checkpoints.items():
        assert registry.name_of(registry.load(_write(tmp_path, state, lambda s: None))) == name


@pytest.mark.parametrize("name,edit,match", [
    ("privorl-n", _set_weight("ema", "net.noise_mlp.0.weight", torch.zeros(3, 3)), "has shape"),
    ("privorl-n", _set_weight("ema", "net.noise_mlp.0.weight", torch.zeros(16, 17, dtype=torch.long)), "floating"),
    ("privorl-n", lambda s: s["config"]["denoiser"].__setitem__("width", -5), "no network"),
    ("privorl-n", lambda s: s["config"]["denoiser"].__setitem__("width", 10**7), "has shape"),  # 400 TB unchecked
    ("privorl-n", lambda s: s["config"]["denoiser"].__setitem__("depth", 3000), "layers"),
    ("privorl-n", lambda s: s.__setitem__("dims", [10**6, 10**6]), "has shape"),
    ("privorl-j", lambda s: s["config"].__setitem__("horizon", 10**10), "settings"),
    ("privorl-j", lambda s: s["config"].__setitem__("horizon", -3), "no network"),
    ("privorl-j", lambda s: s["config"].__setitem__("backbone", "dp-transformer"), "lacks"),
])
def test_network_checkpoint_not_fitting_its_config_is_one_line(checkpoints, tmp_path, name, edit, match):
    path = _write(tmp_path, checkpoints[name], edit)
    with pytest.raises(InvalidData, match=match) as err:
        registry.load(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("edit,match", [
    (lambda s: s.pop("dims"), "dims"),
    (lambda s: s.__setitem__("dims", [-4, 2]), "dims"),
    (lambda s: s["generator"].__setitem__("0.weight", torch.zeros(2, 2)), "generator"),
    (lambda s: s.pop("generator"), "tensors"),
    (lambda s: s["discriminator"].__setitem__("0.bias", torch.zeros(5)), "discriminator"),
    (lambda s: s["config"].__setitem__("generator_units", 10**8), "has shape"),
    (lambda s: s["config"].__setitem__("generator_layers", 10**4), "layers"),
    (lambda s: s.__setitem__("normalizer", {"mean": [0.0], "std": [1.0], "source": "public"}), "normaliser"),
    (lambda s: s.__setitem__("history", 5), "history"),
])
def test_pategan_checkpoint_with_damaged_parts_is_one_line(checkpoints, tmp_path, edit, match):
    path = _write(tmp_path, checkpoints["pategan"], edit)
    with pytest.raises(InvalidData, match=match) as err:
        registry.load(path)
    assert str(path) in str(err.value)


def test_any_other_error_while_reading_is_one_line_naming_the_file(checkpoints, tmp_path):
    # a malformed normaliser event: the loader's KeyError becomes one line
    path = _write(tmp_path, checkpoints["privorl-n"], lambda s: s.__setitem__("normalizer_event", {"name": "x"}))
    with pytest.raises(InvalidData, match="cannot read checkpoint") as err:
        registry.load(path)
    assert str(path) in str(err.value)


def test_privacy_errors_pass_unchanged(checkpoints, tmp_path):
    ledger = json.dumps({"unit": "household", "events": []})
    path = _write(tmp_path, checkpoints["privorl-n"], lambda s: s.__setitem__("ledger", ledger))
    with pytest.raises(PrivacyError, match="household"):
        registry.load(path)


def _save_records(path: Path, seed: int) -> Path:
    ds = make_toy_dataset(seed=seed)
    np.savez(path, **{k: getattr(ds, k) for k in _FIELDS})
    return path


def test_audit_of_a_checkpoint_not_fitting_its_config_is_one_line(checkpoints, tmp_path, capsys):
    members, non_members = _save_records(tmp_path / "m.npz", 0), _save_records(tmp_path / "n.npz", 1)
    path = _write(tmp_path, checkpoints["privorl-n"], lambda s: s["config"]["denoiser"].__setitem__("width", 10**7))
    code = main(["audit", "membership", "--checkpoint", str(path), "--members", str(members),
                 "--non-members", str(non_members),
                 "--out", str(tmp_path / "audit")])
    assert str(path) in _one_line_error(capsys, code)


# --------------------------------------------------------------------------------- TrajScore encoders (item 2)
@pytest.fixture(scope="module")
def encoder_file(tmp_path_factory) -> Path:
    from privsynth.evaluation.trajscore import TrajScoreConfig, fit_trajscore_encoder

    cfg = TrajScoreConfig(window=4, hidden=8, embed_dim=4, steps=2, batch_size=8)
    path = tmp_path_factory.mktemp("enc") / "encoder.pt"
    fit_trajscore_encoder(make_toy_dataset(lengths=(9, 9, 9)), cfg).save(path)
    return path


class _Payload:
    def __reduce__(self):
        return (print, ("pwned",))


def _encoder_variant(encoder_file: Path, tmp_path: Path, edit) -> Path:
    blob = torch.load(encoder_file, weights_only=True)
    edit(blob)
    path = tmp_path / "encoder.pt"
    torch.save(blob, path)
    return path


def test_encoder_round_trip_still_loads(encoder_file):
    from privsynth.evaluation.trajscore import TrajEncoder

    enc = TrajEncoder.load(encoder_file)
    assert enc.config.window == 4 and enc.normalizer.source == "public:toy" and float(enc.normalizer.std.sum()) > 0


@pytest.mark.parametrize("make,match", [
    (lambda f, t: (t / "garbage.pt").write_bytes(b"not a torch file at all") and t / "garbage.pt", "corrupted"),
    (lambda f, t: (t / "pickle.pt").write_bytes(pickle.dumps({"config": _Payload()})) and t / "pickle.pt", ""),
    (lambda f, t: torch.save({"config": _Payload()}, t / "obj.pt") or t / "obj.pt", "refusing"),
    (lambda f, t: _encoder_variant(f, t, lambda b: b["state_dict"].__setitem__("center", torch.zeros(9))), "shape"),
    (lambda f, t: _encoder_variant(f, t, lambda b: b["state_dict"].pop("encoder.0.weight")), "lacks"),
    (lambda f, t: _encoder_variant(f, t, lambda b: b["config"].__setitem__("hidden", 10**8)), "shape"),
    (lambda f, t: _encoder_variant(f, t, lambda b: b.__setitem__("dims", "abc")), "dims"),
    (lambda f, t: _encoder_variant(f, t, lambda b: b.__setitem__("config", [1])), "config"),
])
def test_damaged_or_pickled_encoder_file_is_one_line(encoder_file, tmp_path, capsys, make, match):
    from privsynth.evaluation.trajscore import TrajEncoder

    path = make(encoder_file, tmp_path)
    with pytest.raises(InvalidData, match=match) as err:
        TrajEncoder.load(path)
    assert str(path) in str(err.value) and "pwned" not in capsys.readouterr().out


def test_evaluate_with_a_garbage_encoder_is_one_line(tmp_path, capsys):
    minari_io.write_dataset(make_toy_dataset(name="syn"), "syn")
    minari_io.write_dataset(make_toy_dataset(name="real", seed=1), "real")
    bad = tmp_path / "encoder.pt"
    bad.write_bytes(pickle.dumps({"config": _Payload()}))
    code = main(["evaluate", "--synthetic", "syn", "--real", "real", "--trajscore-encoder", str(bad),
                 "--out", str(tmp_path / "report"), "--no-tsne", "--quiet"])
    assert str(bad) in _one_line_error(capsys, code)


# ------------------------------------------------------------------------------------------------ ledgers (item 3)
_GAUSS = {"type": "GaussianDpEvent", "noise_multiplier": 1.0}
_BAD_LEDGERS = [
    [1, 2],
    {"unit": "transition", "events": 7},
    {"events": ["x"]},
    {"public_data": "abc"},
    {"delta": "small"},
    {"events": [{"mechanism": "gaussian"}]},
    {"events": [{"name": "a", "mechanism": "approx_dp", "epsilon": 1.0, "delta": [1]}]},
    {"events": [{"name": "a", "mechanism": "gaussian", "dp_event": "boo"}]},
    {"events": [{"name": "a", "mechanism": "gaussian", "dp_event": {"noise_multiplier": 1.0}}]},
    {"events": [{"name": "a", "mechanism": "gaussian", "dp_event": {"type": "GaussianDpEvent", "sigma": 1}}]},
    {"events": [{"name": "a", "mechanism": "gaussian", "dp_event": {**_GAUSS, "noise_multiplier": "x"}}]},
    {"events": [{"name": "a", "mechanism": "dpsgd", "dp_event": {
        "type": "PoissonSampledDpEvent", "sampling_probability": 5, "event": _GAUSS}}]},
    {"events": [{"name": "a", "mechanism": "dpsgd", "dp_event": {"type": "SelfComposedDpEvent", "count": 1.5,
                                                                 "event": _GAUSS}}]},
]


@pytest.mark.parametrize("data", _BAD_LEDGERS)
def test_privacy_card_of_a_malformed_ledger_is_one_line(tmp_path, capsys, data):
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(data))
    _one_line_error(capsys, main(["privacy", "card", str(path)]))
    with pytest.raises(InvalidData):
        Ledger.from_dict(data)


def test_ledger_nested_past_the_recursion_limit_is_one_line():
    with pytest.raises(InvalidData):
        Ledger.from_json("[" * 100_000 + "]" * 100_000)


def test_well_formed_ledger_still_reads():
    data = {"unit": "transition", "events": [{"name": "a", "mechanism": "gaussian", "dp_event": _GAUSS,
                                              "params": {"noise": "secure", "unit": "transition"}}]}
    assert Ledger.from_dict(data).epsilon() > 0


# ---------------------------------------------------------------------------------- PriMORL run folders (item 4)
_RUN_CONFIG = {"ensemble": {"hidden": [4], "weight_decay": [0.0, 0.0]}, "obs_dim": 3, "act_dim": 1,
               "env": {"env_id": "Pendulum-v1"}, "pessimism": {}, "sac": {"hidden": [4]}}


@pytest.fixture
def run_dir(tmp_path) -> Path:
    """A tiny, well-formed ``primorl train`` folder for Pendulum (obs 3, action 1)."""
    from privsynth.methods.primorl.dynamics import EnsembleConfig, GaussianEnsemble
    from privsynth.methods.primorl.sac import SACPolicy

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(json.dumps(_RUN_CONFIG))
    torch.save(GaussianEnsemble(3, 1, EnsembleConfig(hidden=(4,), weight_decay=(0.0, 0.0))).state_dict(),
               run / "model.pt")
    torch.save(SACPolicy(3, 1, np.array([-2.0]), np.array([2.0]), (4,)).state_dict(), run / "policy.pt")
    (run / "privacy_ledger.json").write_text(Ledger(unit="trajectory").to_json())
    return run


def test_well_formed_run_folder_still_loads(run_dir):
    from privsynth.commands.primorl import _load_run

    info, mdp, policy, ledger = _load_run(run_dir)
    assert info.env_id == "Pendulum-v1" and mdp.obs_dim == 3 and ledger.unit == "trajectory"


@pytest.mark.parametrize("config,match", [
    ("{not json", "JSON"),
    (b"\xff\xfe\x00garbage", "JSON"),
    ([1, 2], "object"),
    ({**_RUN_CONFIG, "obs_dim": "3"}, "obs_dim"),
    ({k: v for k, v in _RUN_CONFIG.items() if k != "ensemble"}, "ensemble"),
    ({**_RUN_CONFIG, "ensemble": {"hidden": "ab", "weight_decay": [0.0, 0.0]}}, "hidden"),
    ({**_RUN_CONFIG, "ensemble": {"hidden": [4], "weight_decay": [0.0, 0.0], "layers": 3}}, "layers"),
    ({**_RUN_CONFIG, "ensemble": {"hidden": [10**7], "weight_decay": [0.0, 0.0]}}, "model.pt"),  # 10^7² unchecked
    ({**_RUN_CONFIG, "obs_dim": 10**9}, "model.pt"),
    ({**_RUN_CONFIG, "sac": {"hidden": [10**8]}}, "policy.pt"),
    ({**_RUN_CONFIG, "env": {"env_id": 5}}, "env_id"),
    ({**_RUN_CONFIG, "env": {"env_id": "CartPole-v1"}}, "environment"),
])
def test_primorl_generate_from_a_damaged_run_folder_is_one_line(run_dir, capsys, config, match):
    file = run_dir / "config.json"
    if isinstance(config, bytes):
        file.write_bytes(config)
    else:
        file.write_text(config if isinstance(config, str) else json.dumps(config))
    code = main(["primorl", "generate", "x", "test/evil-v0", "--from", str(run_dir), "--epsilon-budget", "5"])
    err = _one_line_error(capsys, code)
    assert match in err and str(run_dir) in err


def test_primorl_run_folder_without_a_ledger_is_one_line(run_dir, capsys):
    (run_dir / "privacy_ledger.json").unlink()
    code = main(["primorl", "generate", "x", "test/evil-v0", "--from", str(run_dir), "--epsilon-budget", "5"])
    assert "privacy_ledger.json" in _one_line_error(capsys, code)


# ------------------------------------------------------------------------------ audit record files (item 5)
def _audit(tmp_path: Path, members: Path) -> int:
    non_members = _save_records(tmp_path / "non.npz", 1)
    return main(["audit", "membership", "--members", str(members), "--non-members", str(non_members), "--checkpoint",
                 str(tmp_path / "unused.pt"), "--out", str(tmp_path / "audit")])


def test_audit_members_declaring_a_huge_array_is_refused_before_allocating(tmp_path, capsys):
    ds = make_toy_dataset()
    path = tmp_path / "huge.npz"
    _npz_declaring(path, {k: getattr(ds, k) for k in _FIELDS}, "observations", (10**11, 4))
    assert "declares" in _one_line_error(capsys, _audit(tmp_path, path))


@pytest.mark.parametrize("over", [{"info": np.array("{not json")}, {"info": np.array("[1]")},
                                  {"observations": np.array([["a"] * 4] * 15)}])
def test_audit_members_file_with_bad_parts_is_one_line(tmp_path, capsys, over):
    ds = make_toy_dataset()
    path = tmp_path / "bad.npz"
    np.savez(path, **{**{k: getattr(ds, k) for k in _FIELDS}, **over})
    assert str(path) in _one_line_error(capsys, _audit(tmp_path, path))


def test_audit_members_file_holding_objects_is_one_line(tmp_path, capsys):
    ds = make_toy_dataset()
    path = tmp_path / "objects.npz"
    np.savez(path, **{k: getattr(ds, k) for k in _FIELDS}, extra=np.array([{"a": 1}], dtype=object))
    assert "objects" in _one_line_error(capsys, _audit(tmp_path, path))


def test_privacy_card_of_a_binary_file_is_one_line(tmp_path, capsys):
    from privsynth.cli import main

    path = tmp_path / "ledger.json"
    path.write_bytes(b"\xff\xfe\x00garbage")
    assert main(["privacy", "card", str(path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not a ledger (not UTF-8 text)" in err[0], err


def test_the_release_path_reader_names_the_damaged_file_too(checkpoints, tmp_path):
    """release.checks.load_synthesizer (sample --model, resumes) passed the reader's own message, without the path."""
    from privsynth.release.checks import load_synthesizer

    path = _write(tmp_path, checkpoints["privorl-n"], _set_weight("ema", "net.noise_mlp.0.weight", torch.zeros(3, 3)))
    with pytest.raises(InvalidData, match="has shape") as err:
        load_synthesizer(path)
    assert str(path) in str(err.value) and "\n" not in str(err.value)
