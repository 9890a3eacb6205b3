"""The demo's audit can test its own release's claim: the sensitive set is split at the release's privacy unit
(transitions by default), members and non-members partition it, the one-run ε test gives a verdict (never "no
verdict" for the demo's design), a fine-tune of other members is never resumed, and the report's ``privsynth audit``
command repeats the demo's verdict."""
from __future__ import annotations

import dataclasses
import json
import shlex

import numpy as np
import pytest

from mia_standin import TinyEDM
from privsynth.data import minari_io
from privsynth.data.dataset import ARRAY_FIELDS, DatasetInfo, OfflineDataset
from privsynth.data.split import split_dataset, split_for_unit
from privsynth.demo import DemoConfig, _split_sensitive, _store_part, membership_seed
from privsynth.demo_audit import drop_stale_finetune, finetune_key, rerun_command, run_demo_audit, stamp_finetune
from privsynth.errors import InvalidData
from privsynth.evaluation.mia.audit import infer_split

SOURCE, IDS = "privsynth/sens-v0", ("privsynth/m-v0", "privsynth/n-v0")


def chained(n_episodes: int = 40, length: int = 25, obs_dim: int = 3, seed: int = 0) -> OfflineDataset:
    """Random-walk episodes whose next observation is the next row's observation, as collected data is."""
    rng = np.random.default_rng(seed)
    walks = np.cumsum(rng.normal(size=(n_episodes, length + 1, obs_dim)), axis=1).astype(np.float32)
    n = n_episodes * length
    timeouts = np.zeros(n, dtype=bool)
    timeouts[length - 1::length] = True
    ds = OfflineDataset(
        observations=walks[:, :-1].reshape(n, obs_dim), actions=rng.uniform(-1, 1, size=(n, 1)),
        rewards=rng.normal(size=n), next_observations=walks[:, 1:].reshape(n, obs_dim),
        terminals=np.zeros(n, dtype=bool), timeouts=timeouts, episode_ids=np.repeat(np.arange(n_episodes), length),
        info=DatasetInfo(name=SOURCE, sensitive=True, ref_min_score=0.0, ref_max_score=10.0))
    minari_io.write_dataset(ds, SOURCE)
    return ds


def split(sensitive: OfflineDataset, cfg: DemoConfig, log=lambda _: None) -> tuple[OfflineDataset, OfflineDataset]:
    """The demo's split of ``sensitive``, stored as the demo stores it (its child process writes the parts)."""
    members, non_members, to_store = _split_sensitive(sensitive, IDS, SOURCE, cfg, log)
    for dataset_id, part in to_store:
        log(_store_part(dataset_id, part))
    return members, non_members


def keys(ds: OfflineDataset) -> list[bytes]:
    return [row.tobytes() for row in np.ascontiguousarray(ds.transition_matrix())]


def test_split_for_unit():
    assert split_for_unit("transition") == "transition" and split_for_unit("trajectory") == "episode"
    with pytest.raises(InvalidData, match="unknown privacy unit"):
        split_for_unit("user")


def test_demo_members_and_non_members_partition_the_sensitive_transitions():
    sensitive, cfg = chained(), DemoConfig()
    assert cfg.unit == "transition"  # the demo's release protects one transition: its split must be by transition
    lines: list[str] = []
    members, non_members = split(sensitive, cfg, lines.append)
    assert [ln.split(":")[0] for ln in lines] == [f"  wrote {i}" for i in IDS]
    km, kn, ks = keys(members), keys(non_members), keys(sensitive)
    assert len(set(ks)) == len(ks)  # continuous rows: a row is one transition
    assert not set(km) & set(kn)  # disjoint
    assert sorted(km + kn) == sorted(ks)  # whose union is the sensitive set, nothing duplicated or lost
    assert members.n_transitions == round(cfg.member_fraction * sensitive.n_transitions)
    assert set(members.episode_ids) & set(non_members.episode_ids)  # by transition: episodes are on both sides
    # the split of `privsynth datasets split --by transition` under the demo's split seed: derived from the demo's
    # seed on its own stream, not numpy's default_rng(seed), which replays the stream that generated the data
    assert membership_seed(cfg.seed) != cfg.seed
    expected = split_dataset(sensitive, cfg.member_fraction, by="transition", seed=membership_seed(cfg.seed))
    for part, exp in zip((members, non_members), expected):
        for a in ARRAY_FIELDS:
            np.testing.assert_array_equal(getattr(part, a), getattr(exp, a), err_msg=a)
    # stored sensitive as the demo holds them, the split recorded; plain Minari reads the members
    for dataset_id, part in zip(IDS, (members, non_members)):
        stored = minari_io.load_dataset(dataset_id)
        assert stored.info.sensitive and minari_io.describe(dataset_id)["sensitive"]
        for a in ARRAY_FIELDS:
            np.testing.assert_array_equal(getattr(stored, a), getattr(part, a), err_msg=a)
        assert stored.info.extra["split"] == {"source": SOURCE, "part": part.info.extra["split"]["part"],
                                              "fraction": cfg.member_fraction, "by": "transition",
                                              "seed": membership_seed(cfg.seed)}
    import minari

    assert minari.load_dataset(minari_io.resolve_id(IDS[0])).total_steps == members.n_transitions
    # what the audit reads: the recorded split, and the rows alone tell the same
    stored = [minari_io.load_dataset(i) for i in IDS]
    assert infer_split(*stored)["by"] == "transition"
    bare = [dataclasses.replace(p, info=dataclasses.replace(p.info, extra={})) for p in stored]
    assert infer_split(*bare)["by"] == "transition"
    # a re-run keeps the stored parts
    lines = []
    split(sensitive, cfg, lines.append)
    assert lines == [f"  reusing {i}" for i in IDS]


def test_trajectory_level_demo_splits_by_episode():
    sensitive = chained()
    members, non_members = split(sensitive, DemoConfig(unit="trajectory"))
    assert not set(members.episode_ids) & set(non_members.episode_ids)
    assert members.info.extra["split"]["by"] == "episode"
    assert sorted(keys(members) + keys(non_members)) == sorted(keys(sensitive))


def _release(members: OfflineDataset, epsilon: float) -> OfflineDataset:
    """The members verbatim as a 'release' whose card claims ``epsilon`` per transition: a leak any audit sees."""
    card = {"epsilon": epsilon, "delta": 1e-5, "unit": "transition", "private": True,
            "neighbouring_relation": "add/remove one transition"}
    return dataclasses.replace(members, info=dataclasses.replace(members.info, name="privsynth/syn-v0",
                                                                 sensitive=False, extra={}, privacy_card=card))


def test_demo_audit_gives_a_verdict_on_its_split(tmp_path):
    """Regression: the demo's own split and audit test the card's claim (the by-episode split gave no verdict)."""
    sensitive = chained()
    members, non_members = split(sensitive, DemoConfig())
    dim = members.transition_dim
    model = TinyEDM(dim, width=64).fit(members.transition_matrix(), steps=200)
    audit = run_demo_audit(model, TinyEDM(dim, width=64, seed=1), _release(members, 0.1), members, non_members,
                           unit="transition", max_units=1000, seed=0, out=tmp_path, command="privsynth audit ...")
    ea = audit["epsilon_audit"]
    assert ea["status"] == "violation" and ea["line"].startswith("VIOLATION"), ea["line"]
    assert ea["split"]["by"] == "transition" and ea["tests"] == 3 and not ea["notes"]
    assert set(audit["data_only"]["attacks"]) == {"dcr"} and set(audit["white_box"]["attacks"]) == {"loss", "loss_ref"}
    assert audit["data_only"]["attacks"]["dcr"]["epsilon_test"]["pairs"] == non_members.n_transitions
    report = json.loads((tmp_path / "audit.json").read_text())
    assert report["epsilon_audit"]["status"] == "violation" and report["command"] == "privsynth audit ..."
    assert (tmp_path / "audit.md").exists() and (tmp_path / "audit_roc.png").stat().st_size > 0
    # the same release audited on the old demo's split by episode: no verdict on a transition-level claim
    by_episode = split(sensitive, DemoConfig(unit="trajectory"))
    old = run_demo_audit(model, TinyEDM(dim, width=64, seed=1), _release(by_episode[0], 0.1), *by_episode,
                         unit="transition", max_units=1000, seed=0, out=tmp_path / "old")
    assert old["epsilon_audit"]["status"] == "not_applicable"


def test_a_fine_tune_of_other_members_is_not_resumed(tmp_path):
    sensitive = chained()
    members, _ = split_dataset(sensitive, 0.8, by="transition", seed=0)
    other, _ = split_dataset(sensitive, 0.8, by="episode", seed=0)
    key = finetune_key(members, epsilon=10.0, delta=1e-5, unit="transition")
    assert key == finetune_key(members, epsilon=10.0, delta=1e-5, unit="transition")
    assert key != finetune_key(other, epsilon=10.0, delta=1e-5, unit="transition")
    assert key != finetune_key(members, epsilon=1.0, delta=1e-5, unit="transition")
    ckpt, lines = tmp_path / "finetuned.pt", []
    ckpt.write_bytes(b"fine-tuned by an older demo, no stamp")
    (tmp_path / "pretrained.pt").write_bytes(b"public")
    drop_stale_finetune(tmp_path, key, lines.append)
    assert not ckpt.exists() and (tmp_path / "pretrained.pt").exists() and "discarded" in lines[0]
    ckpt.write_bytes(b"fine-tuned on these members")
    stamp_finetune(tmp_path, key)
    drop_stale_finetune(tmp_path, key, lines.append)
    assert ckpt.exists() and len(lines) == 1  # same members and settings: resumed
    drop_stale_finetune(tmp_path, finetune_key(other, epsilon=10.0, delta=1e-5, unit="transition"), lines.append)
    assert not ckpt.exists()


def test_rerun_command_repeats_the_demo_settings():
    argv = shlex.split(rerun_command(store="out dir/minari", release="privsynth/syn-v0", members="privsynth/m-v0",
                                     non_members="privsynth/n-v0", workdir="out dir/work", unit="trajectory", seed=3,
                                     max_units=500, out="out dir/audit-rerun.json"))
    assert argv[:5] == ["privsynth", "--store", "out dir/minari", "audit", "membership"]  # issue 38: audit's modes
    flags = dict(zip(argv[5::2], argv[6::2]))
    assert flags == {"--release": "privsynth/syn-v0", "--checkpoint": "out dir/work/finetuned.pt",
                     "--reference-model": "out dir/work/pretrained.pt", "--attacks": "loss,loss_ref",
                     "--repeats": "16", "--members": "privsynth/m-v0", "--non-members": "privsynth/n-v0",
                     "--unit": "trajectory", "--max-units": "500", "--seed": "3",
                     "--out": "out dir/audit-rerun.json"}


@pytest.mark.slow  # ~30 s: the tiny demo end to end, then the report's audit command
def test_demo_verdict_and_its_cli_rerun(tmp_path, monkeypatch):
    from privsynth.cli import main

    out = tmp_path / "demo"
    assert main(["demo", "--out", str(out), "--sensitive-steps", "2500", "--public-steps", "2000", "-n", "2000",
                 "--quiet"]) == 0
    report = json.loads((out / "report.json").read_text())
    ea = report["epsilon_audit"]
    assert ea["status"] == "uninformative", ea["line"]  # ε = 10: this design cannot refute it (issue 36)
    assert ea["split"]["by"] == "transition" and report["datasets"]["split"]["by"] == "transition"
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(out / "minari"))
    members, non_members = (minari_io.load_dataset(report["datasets"][k]["id"]) for k in ("members", "non_members"))
    sensitive = minari_io.load_dataset("privsynth/demo-sensitive-umaze-dense-v0")
    assert sorted(keys(members) + keys(non_members)) == sorted(keys(sensitive))
    assert not set(keys(members)) & set(keys(non_members))
    # DP-SGD counted the member transitions with DP (a Laplace count, issue 36: N is private); δ stays below 1/N
    event = report["privacy_card"]["events"][0]
    assert event["mechanism"] == "laplace" and "n_units" not in event
    assert abs(event["n_units_noisy"] - members.n_transitions) < 60 * event["scale"]  # P(miss) = e^-60
    assert report["privacy_card"]["delta"] < 1 / members.n_transitions
    # the report's command, as printed, gives the demo's verdict line
    command = report["audit_command"]
    assert f"`{command}`" in (out / "report.md").read_text()
    assert main(shlex.split(command)[1:]) == 3  # the exit status of "uninformative"
    rerun = json.loads((out / "audit-rerun.json").read_text())
    assert rerun["epsilon_audit"]["line"] == ea["line"]


def test_a_stored_set_of_other_settings_is_made_again():
    """Regression: a re-run into the same store with another --seed / --sensitive-steps reused the old sets, so the
    report's config (and its split seed) described data the run never used."""
    from privsynth.data.pointmaze import PointMazeConfig
    from privsynth.demo import _datasets

    job = ("privsynth/t-umaze-v0", PointMazeConfig(maze="umaze", steps=300, seed=0, ref_episodes=1))
    first, = _datasets([job], 1, False, lambda _: None, sensitive=frozenset({job[0]}))
    lines: list[str] = []
    again, = _datasets([job], 1, False, lines.append, sensitive=frozenset({job[0]}))
    assert lines == [f"  reusing {job[0]}"]  # same settings: kept
    other = (job[0], dataclasses.replace(job[1], steps=200, seed=1))
    lines = []
    made, = _datasets([other], 1, False, lines.append, sensitive=frozenset({job[0]}))
    assert lines[0].startswith(f"  discarded {job[0]}: generated with other settings")
    assert made.n_transitions == 200 and made.info.extra["config"]["seed"] == 1 and made.info.sensitive
    assert minari_io.read_info(job[0]).extra["config"]["steps"] == 200


def test_checkpoints_pre_trained_on_other_public_data_are_not_resumed(tmp_path):
    from conftest import make_toy_dataset
    from privsynth.demo import _PUBLIC_STAMP, _drop_stale_pretrain
    from privsynth.demo_audit import rows_key as _public_key

    pub, other = make_toy_dataset(lengths=(5, 3), seed=0), make_toy_dataset(lengths=(5, 3), seed=1)
    key = _public_key([pub])
    assert key == _public_key([pub]) and key != _public_key([other])
    names = ("pretrained.pt", "pretrain-checkpoint.pt", "finetuned.pt", "finetuned.members")
    for n in names:
        (tmp_path / n).write_bytes(b"x")
    (tmp_path / _PUBLIC_STAMP).write_text(key + "\n")
    lines: list[str] = []
    _drop_stale_pretrain(tmp_path, key, lines.append)
    assert all((tmp_path / n).exists() for n in names) and not lines  # same public data: resumed
    _drop_stale_pretrain(tmp_path, _public_key([other]), lines.append)
    assert not any((tmp_path / n).exists() for n in (*names, _PUBLIC_STAMP)) and "discarded" in lines[0]
    (tmp_path / "pretrained.pt").write_bytes(b"an older demo's, no stamp")
    _drop_stale_pretrain(tmp_path, key, lines.append)
    assert not (tmp_path / "pretrained.pt").exists()


def test_a_new_run_removes_the_previous_report_first(tmp_path, monkeypatch):
    """A re-run that fails must not leave the old report (and its audit command) beside a store and work folder
    it has started to replace."""
    import privsynth.demo as demo

    for n in demo._REPORT_FILES:
        (tmp_path / n).write_text("old")

    class Stop(Exception):
        pass

    def stop(*_a, **_k):
        raise Stop

    monkeypatch.setattr(demo, "_datasets", stop)
    with pytest.raises(Stop):
        demo._run(DemoConfig(out=str(tmp_path)), 1, False, lambda _: None)
    assert not any((tmp_path / n).exists() for n in demo._REPORT_FILES)


def test_demo_verdict_on_a_claim_its_design_cannot_test_is_uninformative(tmp_path):
    """Issue 36: the members verbatim under a card claiming ε = 8 got 'consistent'; the demo's design (1000 pairs,
    three attacks) shows at most about 1.74, so the verdict is 'uninformative' with the members a test would need."""
    from privsynth.demo_report import _verdict

    sensitive = chained()
    members, non_members = split(sensitive, DemoConfig())
    dim = members.transition_dim
    model = TinyEDM(dim, width=64).fit(members.transition_matrix(), steps=50)
    audit = run_demo_audit(model, TinyEDM(dim, width=64, seed=1), _release(members, 8.0), members, non_members,
                           unit="transition", max_units=1000, seed=0, out=tmp_path)
    ea = audit["epsilon_audit"]
    assert ea["status"] == "uninformative" and ea["line"].startswith("uninformative"), ea["line"]
    assert ea["best_possible_bound"] < 8.0 and ea["members_needed"]["more_than"] is not None
    assert "more than 1,000,000 members" in ea["line"]
    assert json.loads((tmp_path / "audit.json").read_text())["epsilon_audit"]["status"] == "uninformative"
    assert _verdict(ea) == f"**{ea['line']}**"
