"""A holder's own table with a declared schema (issue 39): validation, both layouts, kinds kept by construction, the
no-public release, export back to the holder's columns, and its accounting."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from conftest import load_script
from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.dataset import OfflineDataset
from privsynth.data.schema import RowCodec, Schema, load_schema
from privsynth.data.validity import check_release
from privsynth.errors import InvalidData

GEN = load_script("make_icu_cohort")


def cohort(tmp_path: Path, patients: int = 40, missing: float = 0.0, seed: int = 0) -> tuple[Path, Path]:
    df = GEN.make_cohort(patients, min_len=6, max_len=12, missing=missing, seed=seed)
    csv, schema = tmp_path / "icu.csv", tmp_path / "icu.schema.yaml"
    df.to_csv(csv, index=False)
    schema.write_text(GEN.SCHEMA, encoding="utf-8")
    return csv, schema


def schema_dict() -> dict:
    import yaml

    return yaml.safe_load(GEN.SCHEMA)


def _import(capsys, csv, schema, *extra, name="icu"):
    code = main(["datasets", "import", str(csv), "--schema", str(schema), "--name", name, *extra])
    out, err = capsys.readouterr()
    return code, out, err


# ------------------------------------------------------------------------------------------ validation
def _bad_schema(tmp_path, edit):
    d = schema_dict()
    edit(d)
    import yaml

    p = tmp_path / "bad.schema.yaml"
    p.write_text(yaml.safe_dump(d), encoding="utf-8")
    return p


SCHEMA_ERRORS = {
    "typo'd key": (lambda d: d.__setitem__("obsevations", d.pop("observations")), "unknown key 'obsevations'"),
    "typo'd column key": (lambda d: d["observations"][0].__setitem__("hihg", 3), "did you mean 'high'"),
    "unknown kind": (lambda d: d["observations"][6].__setitem__("kind", "ordinal"), "unknown kind 'ordinal'"),
    "low >= high": (lambda d: d["observations"][0].__setitem__("low", 300), "low 300 >= high 250"),
    "one category": (lambda d: d["actions"][0].__setitem__("values", [0]), "at least 2 values"),
    "no reward bounds": (lambda d: d.__setitem__("reward", "outcome"), "reward needs public bounds"),
    "typo'd kind": (lambda d: d["observations"][8].__setitem__("kind", "categorial"), "did you mean 'categorical'"),
    "typo'd reward key": (lambda d: d["reward"].__setitem__("hihg", d["reward"].pop("high")),
                          "unknown key 'hihg' in reward; did you mean 'high'"),
    "low == high": (lambda d: d["observations"][0].__setitem__("low", 250), "low 250 >= high 250"),
    "a category twice": (lambda d: d["observations"][8].__setitem__("values", ["icu", "hdu", "icu"]),
                         "lists a value twice"),
    "typo'd column name": (lambda d: d["observations"][0].__setitem__("name", "heart_rat"),
                           "no column 'heart_rat' declared in the schema; closest column 'heart_rate'"),
}


@pytest.mark.parametrize("case", list(SCHEMA_ERRORS))
def test_bad_schema_is_one_line_exit_2_nothing_written(tmp_path, capsys, case):
    csv, _ = cohort(tmp_path, patients=8)
    edit, expected = SCHEMA_ERRORS[case]
    code, _, err = _import(capsys, csv, _bad_schema(tmp_path, edit))
    assert code == 2 and err.count("\n") == 1 and expected in err, err
    assert not minari_io.dataset_exists("icu")


DATA_ERRORS = {
    "value outside categories": (lambda df: df.__setitem__("ward", df["ward"].replace("hdu", "ccu")),
                                 "column 'ward' has 'ccu'"),
    "treatment outside categories": (lambda df: df.loc.__setitem__((3, "treatment"), 7),
                                     "column 'treatment' has 7 at row 3 (line 5 of the file)"),
    "outside bounds": (lambda df: df.loc.__setitem__((5, "spo2"), 140.0), "outside its declared bounds [50, 100]"),
    "integer with a fraction": (lambda df: df.__setitem__("gcs", df["gcs"].astype(float).where(df.index != 2, 7.5)),
                                "declared integer"),
    "missing value": (lambda df: df.loc.__setitem__((4, "lactate"), np.nan),
                      "column 'lactate' has a missing value at row 4"),
    "missing column": (lambda df: df.drop(columns=["sbp"], inplace=True), "no column 'sbp'"),
    "missing reward": (lambda df: df.loc.__setitem__((1, "outcome"), np.nan), "never imputed"),
    "binary outside 0/1": (lambda df: df.loc.__setitem__((3, "ventilated"), 2),
                           "column 'ventilated' has 2 at row 3 (line 5 of the file), not one of its declared values"),
    "reward outside bounds": (lambda df: df.loc.__setitem__((2, "outcome"), 40.0), "[-15, 15]"),
}


@pytest.mark.parametrize("case", list(DATA_ERRORS))
def test_bad_data_is_one_line_exit_2_nothing_written(tmp_path, capsys, case):
    csv, schema = cohort(tmp_path, patients=8)
    df = pd.read_csv(csv)
    edit, expected = DATA_ERRORS[case]
    edit(df)
    df.to_csv(csv, index=False)
    code, _, err = _import(capsys, csv, schema)
    assert code == 2 and err.count("\n") == 1 and expected in err, err
    assert not minari_io.dataset_exists("icu")


@pytest.mark.parametrize("text, expected", [("episode_id: patient_id\nobservations: [\n", "is not valid YAML at line"),
                                             (None, "no such schema file")])
def test_unreadable_schema_file_is_one_line_exit_2_nothing_written(tmp_path, capsys, text, expected):
    csv, _ = cohort(tmp_path, patients=4)
    path = tmp_path / "s.yaml"
    if text is not None:
        path.write_text(text, encoding="utf-8")
    code, _, err = _import(capsys, csv, path)
    assert code == 2 and err.count("\n") == 1 and expected in err, err
    assert not minari_io.dataset_exists("icu")


def test_json_schema_and_schema_round_trip(tmp_path):
    import json

    p = tmp_path / "s.json"
    p.write_text(json.dumps(schema_dict()))
    s = load_schema(p)
    assert Schema.from_dict(s.to_dict()) == s
    assert s.action_bounds() == ([0.0], [4.0])


# ------------------------------------------------------------------------------------------ layouts
def test_per_step_layout_keeps_every_row_and_the_terminal_reward(tmp_path, capsys):
    csv, schema = cohort(tmp_path, patients=20)
    df = pd.read_csv(csv)
    code, out, _ = _import(capsys, csv, schema)
    assert code == 0, out
    ds = minari_io.load_dataset("icu")
    assert ds.n_transitions == len(df) and ds.n_episodes == 20  # no row dropped as "closing"
    assert int(ds.terminals.sum()) == 20 and not ds.timeouts.any()
    assert np.isclose(np.abs(ds.rewards).sum(), 15 * 20)  # every +-15 outcome kept
    ends = np.flatnonzero(ds.terminals)
    assert np.all(np.abs(ds.rewards[ends]) == 15)
    assert ds.info.sensitive and ds.info.schema == Schema.from_dict(schema_dict()).to_dict()
    # categorical values held as indices: ward icu/hdu/general -> 0/1/2, treatment 0-4 as is
    ward = ds.observations[:, 8]
    assert set(np.unique(ward)) <= {0.0, 1.0, 2.0}
    assert np.array_equal(ds.actions[:, 0], df["treatment"].to_numpy(np.float32))
    # next state = the episode's next row
    assert np.array_equal(ds.next_observations[0], ds.observations[1])


def test_transition_layout_and_order_column(tmp_path):
    csv, schema = cohort(tmp_path, patients=6)
    df = pd.read_csv(csv)
    s = load_schema(schema)
    obs_names = [c.name for c in s.observations]
    nxt = df.groupby("patient_id")[obs_names].shift(-1)
    nxt = nxt.fillna(df[obs_names])
    full = pd.concat([df, nxt.add_prefix("next_")], axis=1)
    shuffled = full.sample(frac=1.0, random_state=0)  # rows out of order: the order column sorts them
    ds = OfflineDataset.from_pandas(shuffled, schema=s)
    assert ds.n_transitions == len(df) and int(ds.terminals.sum()) == 6
    assert np.isclose(np.abs(ds.rewards).sum(), 15 * 6)
    ordered = shuffled.assign(k=pd.factorize(shuffled["patient_id"])[0]).sort_values(["k", "hour"])
    per_step = OfflineDataset.from_pandas(ordered[df.columns], schema=s)  # the same rows, one per step
    np.testing.assert_array_equal(ds.next_observations, per_step.next_observations)
    with pytest.raises(InvalidData, match="lacks 'next_sbp'"):
        OfflineDataset.from_pandas(full.drop(columns=["next_sbp"]), schema=s)


def test_ffill_fills_within_each_episode_only(tmp_path, capsys):
    csv, schema = cohort(tmp_path, patients=10)
    df = pd.read_csv(csv)
    first_of_second = int(np.flatnonzero(df["patient_id"] != df["patient_id"].iloc[0])[0])
    df.loc[first_of_second, "lactate"] = np.nan  # first row of an episode: its next value, never the previous stay
    df.loc[2, "heart_rate"] = np.nan
    df.to_csv(csv, index=False)
    code, _, err = _import(capsys, csv, schema)
    assert code == 2 and "column 'heart_rate' has a missing value at row 2 (line 4 of the file)" in err
    code, _, err = _import(capsys, csv, schema, "--impute", "ffill")
    assert code == 0, err
    ds = minari_io.load_dataset("icu")
    assert ds.observations[2, 0] == np.float32(df.loc[1, "heart_rate"])
    assert ds.observations[first_of_second, 5] == np.float32(df.loc[first_of_second + 1, "lactate"])


# ------------------------------------------------------------------------------------------ codec
def test_codec_one_hot_round_trip_and_decoding_keeps_kinds():
    codec = RowCodec(schema_dict())
    rng = np.random.default_rng(0)
    enc = rng.normal(0, 50, size=(200, codec.width)).astype(np.float32)  # anything a DP model may output
    rows = codec.decode(enc)
    ds = OfflineDataset.from_transition_matrix(rows, 9, 1)
    ds.info.schema = schema_dict()
    assert check_release(ds) == []
    np.testing.assert_array_equal(codec.decode(codec.encode(rows)), rows)
    lo, hi = codec.bounds()
    assert codec.width == 2 * (6 + 1 + 2 + 3) + 5 + 1 + 1 and lo.shape == hi.shape == (codec.width,)


# ------------------------------------------------------------------------------------------ export
def test_csv_export_round_trip_with_the_schemas_names(tmp_path, capsys):
    csv, schema = cohort(tmp_path, patients=12)
    assert _import(capsys, csv, schema)[0] == 0
    out = tmp_path / "back.csv"
    assert main(["datasets", "export", "icu", str(out)]) == 0
    back = pd.read_csv(out)
    orig = pd.read_csv(csv)
    assert list(back.columns[:2]) == ["patient_id", "hour"]
    assert set(orig.columns) <= set(back.columns)
    assert list(back["ward"].unique()) != [] and set(back["ward"]) <= {"icu", "hdu", "general"}
    assert back["gcs"].dtype.kind == "i" and set(back["treatment"]) <= set(range(5))
    again = OfflineDataset.from_pandas(back, schema=load_schema(schema))
    first = minari_io.load_dataset("icu")
    for name in ("observations", "actions", "rewards", "terminals"):
        np.testing.assert_allclose(getattr(again, name), getattr(first, name), rtol=1e-6)
    assert main(["datasets", "export", "icu", str(out)]) == 2  # exists: refused, file kept
    capsys.readouterr()


# ------------------------------------------------------------------------------------------ release
@pytest.fixture
def icu_sensitive(tmp_path):
    csv, schema = cohort(tmp_path, patients=40)
    return OfflineDataset.from_pandas(pd.read_csv(csv), schema=load_schema(schema), name="icu")


def _tiny():
    from test_transition_synth import tiny_config

    return tiny_config()


@pytest.mark.slow
def test_no_public_release_keeps_kinds_trajectories_and_is_accounted(icu_sensitive):
    from opacus.accountants import RDPAccountant

    from privsynth.release import synthesize

    res = synthesize(icu_sensitive, epsilon=8.0, delta=1e-4, unit="trajectory", n=300, config=_tiny(),
                     out_dataset="icu-syn", progress=False)
    ds = minari_io.load_dataset("icu-syn")
    assert check_release(ds) == []  # every value valid for the schema
    assert ds.info.schema == icu_sensitive.info.schema  # the schema travels with the release
    assert ds.n_episodes < ds.n_transitions / 2  # whole trajectories, not one-step episodes
    assert set(np.unique(ds.actions)) <= {0.0, 1.0, 2.0, 3.0, 4.0}
    # by default (nothing public) 1/16 of epsilon buys a DP normaliser, DP-SGD the rest: both on the card
    synth = res.synthesizer
    norm_ev, count, sgd = synth.ledger.events
    assert [e.mechanism for e in synth.ledger.events] == ["gaussian", "laplace", "dpsgd"]
    assert norm_ev.params["epsilon_target"] == pytest.approx(8.0 / 16) and synth.normalizer.source == "dp"
    assert sgd.params["epsilon_spent"] <= 8.0 - 8.0 / 16
    # accounted: the ledger's epsilon against an independent accountant (Opacus RDP for DP-SGD and the normaliser's
    # three Gaussian releases, plus the Laplace count by basic composition: an upper bound)
    h = synth.history[-1]
    rdp = RDPAccountant()
    rdp.history = [(h["noise_multiplier"], h["sample_rate"], h["steps"]),
                   (norm_ev.params["sigma"], 1.0, norm_ev.params["count"])]
    independent = rdp.get_epsilon(1e-4) + 1.0 / count.params["scale"]
    assert synth.ledger.epsilon() <= 8.0 * (1 + 1e-9)
    assert synth.ledger.epsilon() <= independent * (1 + 1e-6)
    assert synth.ledger.epsilon() == pytest.approx(independent, rel=0.05)
    assert ds.info.privacy_card["ledger"]["public_data"] == []  # the schema is metadata; no public rows


@pytest.mark.slow
def test_no_public_release_with_dp_normaliser_zero_uses_the_schema_bounds(icu_sensitive):
    from privsynth.release import synthesize

    res = synthesize(icu_sensitive, epsilon=8.0, delta=1e-4, unit="trajectory", n=100, config=_tiny(),
                     normalizer_epsilon=0.0, progress=False)
    assert [e.mechanism for e in res.synthesizer.ledger.events] == ["laplace", "dpsgd"]
    assert res.synthesizer.normalizer.source == "schema bounds"
    assert res.dataset.info.privacy_card["ledger"]["public_data"] == ["normaliser: schema bounds"]


def test_schema_path_normaliser_comes_from_the_schema_only(icu_sensitive):
    from privsynth.synth.scratch import schema_synthesizer

    a = schema_synthesizer(icu_sensitive.info, 9, 1, _tiny())
    shifted = OfflineDataset(observations=icu_sensitive.observations * 0 + 60, actions=icu_sensitive.actions,
                             rewards=icu_sensitive.rewards, next_observations=icu_sensitive.next_observations,
                             terminals=icu_sensitive.terminals, timeouts=icu_sensitive.timeouts,
                             episode_ids=icu_sensitive.episode_ids, info=icu_sensitive.info)
    b = schema_synthesizer(shifted.info, 9, 1, _tiny())  # other rows, same schema: the same normaliser
    lo, hi = RowCodec(icu_sensitive.info.schema).bounds()
    for s in (a, b):
        assert s.normalizer.source == "schema bounds"
        np.testing.assert_allclose(s.normalizer.mean.numpy(), (lo + hi) / 2, rtol=1e-6)
        np.testing.assert_allclose(s.normalizer.std.numpy(), (hi - lo) / 2, rtol=1e-6)
    assert a.config.next_state == "absolute" and a.config.dp.trainable == "all"


@pytest.mark.slow
def test_cli_holder_walkthrough_without_public_data(tmp_path, capsys, monkeypatch):
    csv, schema = cohort(tmp_path, patients=40)
    assert _import(capsys, csv, schema, name="ward")[0] == 0
    code = main(["synthesize", "--sensitive", "ward", "--epsilon", "8", "--delta", "1e-4", "--unit", "trajectory",
                 "-n", "200", "--out-dataset", "ward-syn", "--config", "tiny", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert main(["datasets", "export", "ward-syn", str(tmp_path / "ward_syn.csv")]) == 0
    syn = pd.read_csv(tmp_path / "ward_syn.csv")
    assert {"patient_id", "hour", "heart_rate", "gcs", "ward", "treatment", "outcome"} <= set(syn.columns)
    assert set(syn["ward"]) <= {"icu", "hdu", "general"} and syn["heart_rate"].between(20, 250).all()


def test_reward_with_declared_values_is_stored_as_values_and_decoded_to_them(tmp_path):
    csv, _ = cohort(tmp_path, patients=10)
    d = schema_dict()
    d["reward"] = {"name": "outcome", "values": [-15, 0, 15]}
    ds = OfflineDataset.from_pandas(pd.read_csv(csv), schema=d)
    assert set(np.unique(ds.rewards)) <= {-15.0, 0.0, 15.0} and np.isclose(np.abs(ds.rewards).sum(), 150)
    codec = RowCodec(ds.info.schema)
    np.testing.assert_array_equal(codec.decode(codec.encode(ds.transition_matrix())), ds.transition_matrix())
    rows = codec.decode(np.random.default_rng(1).normal(0, 3, size=(100, codec.width)))
    assert set(np.unique(rows[:, 10])) <= {-15.0, 0.0, 15.0}
    bad = dict(d, reward={"name": "outcome", "values": ["good", "bad"]})
    with pytest.raises(InvalidData, match="reward values must be a list of numbers"):
        Schema.from_dict(bad)


@pytest.mark.slow  # importing d3rlpy takes seconds
def test_d3rlpy_export_keeps_a_declared_discrete_action(tmp_path):
    pytest.importorskip("d3rlpy")
    import d3rlpy

    from privsynth.evaluation.agents.d3rlpy_export import to_d3rlpy

    csv, schema = cohort(tmp_path, patients=6)
    ds = OfflineDataset.from_pandas(pd.read_csv(csv), schema=load_schema(schema))
    assert to_d3rlpy(ds).dataset_info.action_space == d3rlpy.constants.ActionSpace.DISCRETE
    ds.info.schema = None  # without a schema: continuous, as before
    assert to_d3rlpy(ds).dataset_info.action_space == d3rlpy.constants.ActionSpace.CONTINUOUS


@pytest.mark.slow
def test_schema_with_a_dp_normaliser_charges_it_and_clips_to_the_schema(icu_sensitive):
    from privsynth.release import synthesize

    res = synthesize(icu_sensitive, epsilon=8.0, delta=1e-4, unit="trajectory", n=100, config=_tiny(),
                     normalizer_epsilon=0.5, progress=False)
    synth = res.synthesizer
    assert synth.normalizer.source == "dp" and synth.normalizer.dim == synth.data_dim
    event = synth.ledger.events[0]
    assert event.mechanism == "gaussian"
    lo, hi = RowCodec(icu_sensitive.info.schema).bounds()
    assert event.params["clip_low"] == lo.tolist() and event.params["clip_high"] == hi.tolist()
    # numeric columns get DP statistics; one-hot columns and the terminal flag the schema's scaling (no data read);
    # the next state's statistics are the state's
    codec, norm = RowCodec(icu_sensitive.info.schema), synth.normalizer
    mean, std = norm.mean.numpy(), norm.std.numpy()
    disc = codec.discrete_columns()
    np.testing.assert_allclose(mean[disc], ((lo + hi) / 2)[disc], rtol=1e-6)
    np.testing.assert_allclose(std[disc], ((hi - lo) / 2)[disc], rtol=1e-6)
    o, start = synth.obs_dim_encoded, codec.next_state_start()
    np.testing.assert_array_equal(mean[start:start + o], mean[:o])
    np.testing.assert_array_equal(std[start:start + o], std[:o])
    numeric = [j for j in range(o) if j not in disc]
    assert not np.allclose(mean[numeric], ((lo + hi) / 2)[numeric])  # estimated, not the bounds' centre
    assert [e.mechanism for e in synth.ledger.events] == ["gaussian", "laplace", "dpsgd"]
    assert synth.ledger.epsilon() <= 8.0 * (1 + 1e-9)
    assert check_release(res.dataset) == []


# ------------------------------------------------------------------------------- terminal rows of a release
def test_terminal_share_rule_hits_the_target_and_the_threshold_rule_is_unchanged():
    from privsynth.synth.chain import choose_terminals

    scores = np.random.default_rng(0).normal(0.03, 0.15, size=5000)  # smeared scores: few above 0.5
    for share in (0.044, 1 / 22.6, 0.2, 1e-6):
        term, rule = choose_terminals(scores, 0.5, target_share=share)
        assert abs(int(term.sum()) - 5000 * share) <= 1 or (share < 1 / 5000 and term.sum() == 1)
        assert scores[term].min() >= scores[~term].max()  # the highest scores end episodes
        assert rule["terminal_rows"] == int(term.sum()) and rule["terminal_target_length"] == pytest.approx(1 / share)
    term, rule = choose_terminals(scores, 0.5)  # no target: today's threshold rule
    np.testing.assert_array_equal(term, scores > 0.5)
    assert rule == {"terminal_rule": "score > 0.5", "terminal_rows": int((scores > 0.5).sum())}


def test_trajectory_release_ends_episodes_at_the_models_mean_terminal_score(icu_sensitive):
    from privsynth.synth.scratch import schema_synthesizer

    synth = schema_synthesizer(icu_sensitive.info, 9, 1, _tiny())
    rows = icu_sensitive.transition_matrix()[:200].astype(np.float32).copy()
    rows[:, -1] = np.random.default_rng(1).normal(0.05, 0.1, size=200)  # 0.05 on average, 0-2 rows above 0.5
    synth.last_sample_stats = {}
    synth.history.append({"phase": "finetune", "unit": "trajectory"})
    ds = synth.rows_to_dataset(rows.copy())
    k = round(200 * float(rows[:, -1].mean()))
    assert abs(int(ds.terminals.sum()) - k) <= 1 and ds.terminals.sum() > (rows[:, -1] > 0.5).sum()
    sample = ds.info.extra["sample"]
    assert sample["terminal_rows"] == int(ds.terminals.sum())
    assert sample["terminal_target_length"] == pytest.approx(1 / float(rows[:, -1].mean()), rel=1e-5)
    synth.history[-1]["unit"] = "transition"  # a transition release keeps the threshold rule
    np.testing.assert_array_equal(synth.rows_to_dataset(rows.copy()).terminals, rows[:, -1] > 0.5)


@pytest.mark.slow
def test_a_schema_release_model_saves_and_loads_back(icu_sensitive, tmp_path):
    """A model fine-tuned on schema data has one-hot columns: its checkpoint must load back (the checker once
    compared the normaliser with the raw column count and called every such checkpoint damaged)."""
    from privsynth.privacy.guard import guarded_save_model
    from privsynth.release import synthesize
    from privsynth.synth import registry

    res = synthesize(icu_sensitive, epsilon=8.0, delta=1e-4, unit="trajectory", n=0, config=_tiny(),
                     progress=False)
    path = guarded_save_model(res.synthesizer, tmp_path / "m.pt", 8.0, 1e-4)
    back = registry.load(path)
    assert back.codec is not None and back.data_dim == res.synthesizer.data_dim
    assert back.normalizer.dim == back.data_dim
    rows = registry.sample(back, n_transitions=30, seed=0)
    assert check_release(rows) == [] and rows.info.schema == icu_sensitive.info.schema
