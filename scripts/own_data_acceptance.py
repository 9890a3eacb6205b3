"""Acceptance figures of a release made from a holder's own table without public data (docs/own_data.md).

Compares a real dataset (imported with a schema) with its synthetic release: the marginal and correlation scores of
``privsynth evaluate`` (privsynth.evaluation.fidelity, over state | action | reward | next state), the share of values
valid for the schema, the treatment distribution's total variation distance, mean episode length and the outcome
rate (share of episodes whose last reward is positive). For the holder's eyes: it reads the real data.

    python scripts/own_data_acceptance.py --real icu --synthetic icu-syn
"""
from __future__ import annotations

import argparse

import numpy as np


def _tv(a: np.ndarray, b: np.ndarray, k: int) -> float:
    pa = np.bincount(a.astype(int), minlength=k) / len(a)
    pb = np.bincount(b.astype(int), minlength=k) / len(b)
    return float(0.5 * np.abs(pa - pb).sum())


def figures(real, syn) -> dict[str, float]:
    """The acceptance figures of ``syn`` against ``real`` (both with the same schema)."""
    from privsynth.data.schema import Schema
    from privsynth.data.validity import check_release
    from privsynth.evaluation.fidelity import tabular_fidelity

    schema = Schema.from_dict(real.info.schema)
    fid = tabular_fidelity(syn, real)
    n_values = syn.n_transitions * (2 * syn.obs_dim + syn.act_dim + 1)
    problems = check_release(syn)
    bad = sum(int(p.split()[0]) for p in problems)

    def outcome(ds) -> float:
        ends = np.flatnonzero(np.concatenate([ds.episode_ids[1:] != ds.episode_ids[:-1], [True]]))
        return float((ds.rewards[ends] > 0).mean())

    k = schema.actions[0].width
    return {
        "marginal": fid.marginal,
        "correlation": fid.correlation,
        "valid_share": 1 - bad / n_values,
        "treatment_tv": _tv(real.actions[:, 0], syn.actions[:, 0], k),
        "mean_length_real": float(real.episode_lengths().mean()),
        "mean_length_syn": float(syn.episode_lengths().mean()),
        "outcome_rate_real": outcome(real),
        "outcome_rate_syn": outcome(syn),
    }


def main(argv: list[str] | None = None) -> int:
    from privsynth.data import minari_io

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--real", required=True)
    p.add_argument("--synthetic", required=True)
    args = p.parse_args(argv)
    f = figures(minari_io.load_dataset(args.real), minari_io.load_dataset(args.synthetic))
    print("| figure | value |\n|---|---|")
    for k, v in f.items():
        print(f"| {k} | {v:.3f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
