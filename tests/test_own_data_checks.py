"""Issue 39, the holder's checks: the release warns when its own rows break the schema, and ``privsynth evaluate``
gives a verdict for the holder's eyes."""
from __future__ import annotations

import dataclasses
import json

import numpy as np
import pandas as pd
import pytest

from privsynth.cli import main
from privsynth.data import minari_io
from privsynth.data.dataset import OfflineDataset
from privsynth.data.schema import RowCodec, load_schema
from privsynth.data.validity import column_validity, schema_warnings, share_text
from test_own_data import cohort


@pytest.fixture
def icu(tmp_path):
    csv, schema = cohort(tmp_path, patients=40)
    return OfflineDataset.from_pandas(pd.read_csv(csv), schema=load_schema(schema), name="icu")


def _broken(ds: OfflineDataset, share: float = 0.03) -> OfflineDataset:
    obs = ds.observations.copy()
    k = int(round(share * len(obs)))
    obs[:k, 0] = 300.0  # heart_rate, declared [20, 250]
    act = ds.actions.copy()
    act[0, 0] = 2.5  # treatment: not a value index
    return dataclasses.replace(ds, observations=obs, actions=act)


# ------------------------------------------------------------------------------------------ the check itself
def test_schema_warnings_name_column_share_and_declaration(icu):
    assert schema_warnings(icu) == []
    warnings = schema_warnings(_broken(icu, share=0.06))  # 6% of the observations: 3% of obs + next obs pooled
    assert warnings[0] == "3% of heart_rate outside [20, 250]"
    assert warnings[1].endswith("of treatment not one of its declared values [0, 1, 2, 3, 4]")
    assert len(warnings) == 2
    by_name = {(c.name, c.rule): c for c in column_validity(_broken(icu))}
    assert by_name[("heart_rate", "outside [20, 250]")].invalid == int(round(0.03 * icu.n_transitions))
    assert share_text(0.004) == "0.4%" and share_text(0.0) == "0%" and share_text(1e-5) == "<0.1%"


def _release(tmp_path, capsys, name="ward"):
    csv, schema = cohort(tmp_path, patients=40)
    assert main(["datasets", "import", str(csv), "--schema", str(schema), "--name", name]) == 0
    code = main(["synthesize", "--sensitive", name, "--epsilon", "8", "--delta", "1e-4", "--unit", "trajectory",
                 "-n", "200", "--out-dataset", f"{name}-syn", "--config", "tiny", "--quiet"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return err, minari_io.load_dataset(f"{name}-syn")


@pytest.mark.slow
def test_release_whose_rows_break_a_bound_warns_and_records_it(tmp_path, capsys, monkeypatch):
    decode = RowCodec.decode

    def leaky(self, enc):  # a decoder that forgets to clip heart_rate on the first rows
        rows = decode(self, enc)
        rows[: max(1, len(rows) // 10), 0] = 300.0
        return rows

    monkeypatch.setattr(RowCodec, "decode", leaky)
    err, ds = _release(tmp_path, capsys)
    line = next(ln for ln in err.splitlines() if "warning" in ln)
    assert line.startswith("privsynth: warning: ") and "of heart_rate outside [20, 250]" in line
    check = ds.info.extra["schema_check"]
    assert check["valid"] is False and "of heart_rate outside [20, 250]" in check["warnings"][0]
    assert "schema_check" not in json.dumps(ds.info.privacy_card)  # metadata, not the card's ledger


@pytest.mark.slow
def test_release_whose_rows_keep_the_schema_stays_quiet(tmp_path, capsys):
    err, ds = _release(tmp_path, capsys)
    assert "warning" not in err
    assert ds.info.extra["schema_check"] == {"valid": True, "warnings": []}
    # the holder's episode ids stay with the imported copy: a release never carries them
    assert "episode_labels" in minari_io.load_dataset("ward").info.extra
    assert "episode_labels" not in ds.info.extra
    assert main(["datasets", "export", "ward-syn", str(tmp_path / "syn.csv")]) == 0
    syn = pd.read_csv(tmp_path / "syn.csv")
    assert syn["patient_id"].dtype.kind == "i" and syn["patient_id"].min() == 0  # episodes numbered, not P00000


# ------------------------------------------------------------------------------------------ the holder's episode ids
@pytest.mark.parametrize("numeric", [False, True])
def test_export_of_the_imported_table_gives_back_the_holders_episode_ids(tmp_path, capsys, numeric):
    from privsynth.data.split import split_dataset

    csv, schema = cohort(tmp_path, patients=12)
    df = pd.read_csv(csv)
    if numeric:
        df["patient_id"] = 5000 - df["patient_id"].str[1:].astype(int) * 7  # numbers, not in sorted order
    else:  # labels whose sorted order is not the table's
        df["patient_id"] = "stay-" + df["patient_id"].str[::-1]
    df.to_csv(csv, index=False)
    assert main(["datasets", "import", str(csv), "--schema", str(schema), "--name", "icu"]) == 0
    assert main(["datasets", "export", "icu", str(tmp_path / "back.csv")]) == 0
    back = pd.read_csv(tmp_path / "back.csv")
    assert back["patient_id"].tolist() == df["patient_id"].tolist()
    assert back["hour"].tolist() == df["hour"].tolist()
    # a split keeps each part's own ids
    members, _ = split_dataset(minari_io.load_dataset("icu"), 0.5)
    minari_io.write_dataset(members, "icu-members")
    assert main(["datasets", "export", "icu-members", str(tmp_path / "members.csv")]) == 0
    part = pd.read_csv(tmp_path / "members.csv")
    assert set(part["patient_id"]) < set(df["patient_id"])
    for pid, rows in part.groupby("patient_id"):
        assert len(rows) == int((df["patient_id"] == pid).sum())
    capsys.readouterr()


# ------------------------------------------------------------------------------------------ the holder's verdict
def _as_release(ds: OfflineDataset) -> OfflineDataset:
    info = dataclasses.replace(ds.info, name="icu-syn", sensitive=False, privacy_card={"private": True})
    return dataclasses.replace(ds, info=info)


def _verdict(syn, real, **th):
    from privsynth.evaluation.fidelity import tabular_fidelity
    from privsynth.evaluation.verdict import VerdictThresholds, holder_verdict

    return holder_verdict(syn, real, tabular_fidelity(syn, real).to_dict(), {}, VerdictThresholds(**th))


def test_verdict_fit_to_publish_names_what_it_checked(icu):
    v = _verdict(_as_release(icu), icu)
    assert v["fit_to_publish"] and v["reasons"] == []
    assert v["verdict"] == "fit to publish: marginal 1.00, correlation 1.00, every value valid for the schema"
    hr = v["columns"]["heart_rate"]
    assert hr["real"] == hr["synthetic"] and hr["declared"] == [20.0, 250.0]
    assert v["columns"]["ward"]["declared"] == ["icu", "hdu", "general"]
    assert set(v["columns"]["ward"]["synthetic"]) <= {"icu", "hdu", "general"}


def test_verdict_not_fit_gives_its_reasons_and_thresholds_are_the_holders(icu):
    v = _verdict(_as_release(_broken(icu, share=0.5)), icu)
    assert not v["fit_to_publish"]
    assert v["verdict"].startswith("not fit to publish: 25% of heart_rate outside [20, 250]")  # marginal 0.97
    assert v["reasons"][0] == "25% of heart_rate outside [20, 250]"
    strict = _verdict(_as_release(_broken(icu, share=0.5)), icu, marginal=0.99)
    assert strict["verdict"].startswith("not fit to publish: marginal 0.97 < 0.99, 25% of heart_rate")
    assert v["columns"]["heart_rate"]["synthetic"][1] == 300.0
    assert v["columns"]["heart_rate"]["invalid"]["outside [20, 250]"] == pytest.approx(0.25, abs=0.01)
    # one value in 1,000 invalid: fit at the default 1% per column, not fit when the holder allows none
    small = _broken(icu, share=0.0)
    assert _verdict(_as_release(small), icu)["fit_to_publish"]  # the single bad treatment is 1/N of the column
    assert not _verdict(_as_release(small), icu, invalid_share=0.0)["fit_to_publish"]
    assert _verdict(icu, icu)["reasons"] == ["no privacy card: not a DP release"]


def test_evaluate_prints_the_verdict_and_writes_it_to_the_json(icu, tmp_path, capsys):
    minari_io.write_dataset(icu, "icu")
    minari_io.write_dataset(_as_release(_broken(icu, share=0.5)), "icu-syn")
    out = tmp_path / "rep.json"
    assert main(["evaluate", "--synthetic", "icu-syn", "--real", "icu", "--out", str(out), "--no-tsne",
                 "--quiet"]) == 0
    printed = capsys.readouterr().out
    assert "verdict (for your eyes, never published): not fit to publish: 25% of heart_rate outside [20, 250]" \
        in printed
    report = json.loads(out.read_text())
    assert report["verdict"]["fit_to_publish"] is False and "heart_rate" in report["verdict"]["columns"]
    assert "## Verdict (for the data holder's eyes, never published)" in out.with_suffix(".md").read_text()
