"""Write a generated ICU-like cohort and its schema (docs/own_data.md): no real patient behind any row.

One row per patient-hour: 8 vitals and labs of mixed kinds (continuous, integer GCS, binary ventilation, categorical
ward), a discrete treatment 0-4 chosen from the patient's severity, and the outcome +15 (discharged alive) / -15
(died) on the last row of each stay; 2% of the vital and lab cells are missing.

    python scripts/make_icu_cohort.py --patients 400 --out icu.csv   # also writes icu.schema.yaml
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

SCHEMA = """\
# generated ICU-like cohort (scripts/make_icu_cohort.py): public metadata declared by the data holder
episode_id: patient_id
order: hour
observations:
  - {name: heart_rate, kind: continuous, low: 20, high: 250, unit: bpm}
  - {name: sbp, kind: continuous, low: 40, high: 250, unit: mmHg}
  - {name: resp_rate, kind: continuous, low: 4, high: 60, unit: /min}
  - {name: temperature, kind: continuous, low: 30, high: 43, unit: degC}
  - {name: spo2, kind: continuous, low: 50, high: 100, unit: "%"}
  - {name: lactate, kind: continuous, low: 0, high: 20, unit: mmol/L}
  - {name: gcs, kind: integer, low: 3, high: 15}
  - {name: ventilated, kind: binary}
  - {name: ward, kind: categorical, values: [icu, hdu, general]}
actions:
  - {name: treatment, kind: categorical, values: [0, 1, 2, 3, 4]}
reward: {name: outcome, low: -15, high: 15}
"""
VITALS = ["heart_rate", "sbp", "resp_rate", "temperature", "spo2", "lactate"]


def make_cohort(patients: int = 400, *, min_len: int = 6, max_len: int = 40, missing: float = 0.02,
                seed: int = 0):
    """The cohort as a DataFrame (one row per patient-hour)."""
    import pandas as pd

    rng = np.random.default_rng(seed)
    rows = []
    for pid in range(patients):
        length = int(rng.integers(min_len, max_len + 1))
        sev = float(rng.uniform(0.0, 1.0))
        for hour in range(length):
            treat = int(np.clip(np.round(sev * 4 + rng.normal(0, 0.7)), 0, 4))
            hr = np.clip(75 + 45 * sev + rng.normal(0, 8), 20, 250)
            sbp = np.clip(125 - 35 * sev + rng.normal(0, 10), 40, 250)
            rr = np.clip(15 + 12 * sev + rng.normal(0, 2.5), 4, 60)
            temp = np.clip(36.8 + 1.6 * sev + rng.normal(0, 0.4), 30, 43)
            spo2 = np.clip(98 - 9 * sev + rng.normal(0, 1.5), 50, 100)
            lac = np.clip(1.0 + 4.0 * sev ** 2 + rng.gamma(2.0, 0.3), 0, 20)
            gcs = int(np.clip(np.round(15 - 9 * sev + rng.normal(0, 1.0)), 3, 15))
            vent = int(sev + rng.normal(0, 0.15) > 0.65)
            ward = "icu" if sev > 0.6 else "hdu" if sev > 0.3 else "general"
            last = hour == length - 1
            outcome = 0.0
            if last:
                outcome = 15.0 if rng.random() < 0.9 - 0.6 * sev else -15.0
            rows.append(dict(patient_id=f"P{pid:05d}", hour=hour, heart_rate=round(hr, 1), sbp=round(sbp, 1),
                             resp_rate=round(rr, 1), temperature=round(temp, 2), spo2=round(spo2, 1),
                             lactate=round(lac, 2), gcs=gcs, ventilated=vent, ward=ward, treatment=treat,
                             outcome=outcome))
            sev = float(np.clip(sev + 0.04 * (2 - treat) * 0.5 * sev + rng.normal(0, 0.05), 0, 1))
    df = pd.DataFrame(rows)
    cells = df[VITALS].to_numpy(dtype=float, copy=True)
    cells[rng.random(cells.shape) < missing] = np.nan
    df[VITALS] = cells
    return df


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--patients", type=int, default=400)
    p.add_argument("--min-len", type=int, default=6)
    p.add_argument("--max-len", type=int, default=40)
    p.add_argument("--missing", type=float, default=0.02, help="share of missing vital / lab cells")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default="icu.csv", help="CSV to write; the schema goes beside it as <stem>.schema.yaml")
    args = p.parse_args(argv)
    out = Path(args.out)
    make_cohort(args.patients, min_len=args.min_len, max_len=args.max_len, missing=args.missing,
                seed=args.seed).to_csv(out, index=False)
    schema = out.with_name(out.stem + ".schema.yaml")
    schema.write_text(SCHEMA, encoding="utf-8")
    print(f"wrote {out} and {schema}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
