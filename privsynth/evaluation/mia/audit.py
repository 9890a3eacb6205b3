"""Run membership-inference attacks against a synthesizer and summarise them (PrivORL §IX-D, Table VI).

Members are the fine-tuning records, non-members a held-out split from the same distribution; both are subsampled
to at most ``max_units`` units each (1000 in PrivORL). :func:`run_audit` returns a JSON-ready dict: per attack the
AUC, best balanced accuracy, TPR at 0.1%, 1% and 10% FPR, and a compact ROC (TPR read at 200 log-spaced FPRs, exact
at every plotted FPR because it is taken at the last ROC point with FPR ≤ α). :func:`plot_roc` draws the log-log ROC.
"""
from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia.adapters import DiffusionAdapter, as_adapter
from privsynth.evaluation.mia.attacks import Attack, LossAttack, PIAAttack, ReferenceAttack
from privsynth.evaluation.mia.data_attacks import DataAttack, make_data_attack
from privsynth.evaluation.mia.metrics import DEFAULT_FPRS, attack_metrics, bootstrap_intervals, tpr_at_fpr

__all__ = ["run_audit", "run_data_audit", "default_attacks", "default_data_attacks", "subsample_units", "plot_roc",
           "summarise_scores", "ROC_GRID"]

ROC_GRID = np.unique(np.concatenate([[0.0], np.logspace(-4, 0, 200)]))


def default_attacks(reference: DiffusionAdapter | None = None, *, sigma: float = 0.1, repeats: int = 64) -> list[Attack]:
    """Loss attack (PrivORL), PIA on EDM, and the reference-calibrated loss attack when a public model is given."""
    attacks: list[Attack] = [LossAttack(sigma=sigma, repeats=repeats), PIAAttack()]
    if reference is not None:
        attacks.append(ReferenceAttack(LossAttack(sigma=sigma, repeats=repeats), reference))
    return attacks


def subsample_units(data: OfflineDataset | np.ndarray, max_units: int | None, seed: int, unit: str):
    """At most ``max_units`` random transitions (unit = transition) or episodes (unit = trajectory)."""
    if max_units is None:
        return data
    rng = np.random.default_rng(seed)
    if unit == "trajectory":
        n_episodes = data.n_episodes
        if n_episodes <= max_units:
            return data
        return data.select_episodes(np.sort(rng.choice(n_episodes, size=max_units, replace=False)))
    rows = data.transition_matrix() if isinstance(data, OfflineDataset) else np.asarray(data)
    if rows.shape[0] <= max_units:
        return rows
    return rows[np.sort(rng.choice(rows.shape[0], size=max_units, replace=False))]


def run_audit(
    target: Any,
    members: OfflineDataset | np.ndarray,
    non_members: OfflineDataset | np.ndarray,
    attacks: Sequence[Attack] | None = None,
    *,
    reference: Any | None = None,
    unit: str = "transition",
    max_units: int | None = 1000,
    fprs: Sequence[float] = DEFAULT_FPRS,
    seed: int = 0,
    n_boot: int = 0,
) -> dict[str, Any]:
    """Score members and non-members with every attack; return metrics and compact ROCs (members positive).

    ``n_boot > 0`` adds percentile bootstrap intervals (``ci``) of the AUC and of each TPR.
    """
    adapter = as_adapter(target, unit)
    ref_adapter = as_adapter(reference, "transition") if reference is not None else None
    if attacks is None:
        attacks = default_attacks(ref_adapter) if adapter.has_denoiser else [LossAttack(repeats=1)]
    if not attacks:
        raise InvalidData("no attack to run")
    members = subsample_units(members, max_units, seed, unit)
    non_members = subsample_units(non_members, max_units, seed + 1, unit)
    out: dict[str, Any] = {"unit": unit, "seed": seed, "fprs": list(fprs), "attacks": {}}
    for attack in attacks:
        t0 = time.perf_counter()
        # one seed per set so members and non-members never share noise draws
        s_in = attack.score(adapter, members, seed=seed)
        s_out = attack.score(adapter, non_members, seed=seed + 10_000)
        out["attacks"][attack.name] = summarise_scores(s_in, s_out, {**attack.describe(), "access": "white-box"},
                                                       time.perf_counter() - t0, fprs, n_boot=n_boot, seed=seed)
    return out


def summarise_scores(s_in: np.ndarray, s_out: np.ndarray, config: dict[str, Any], seconds: float,
                     fprs: Sequence[float] = DEFAULT_FPRS, *, n_boot: int = 0, seed: int = 0) -> dict[str, Any]:
    """One attack's JSON entry: metrics, settings, time, compact ROC, and bootstrap intervals when ``n_boot > 0``."""
    metrics, (fpr, tpr) = attack_metrics(s_in, s_out, fprs)
    entry = {
        **metrics.to_dict(),
        "config": config,
        "seconds": round(seconds, 3),
        "roc": {"fpr": ROC_GRID.tolist(), "tpr": [tpr_at_fpr(fpr, tpr, a) for a in ROC_GRID]},
    }
    if n_boot > 0:
        entry["ci"] = bootstrap_intervals(s_in, s_out, fprs, n_boot=n_boot, seed=seed)
    return entry


def default_data_attacks(unit: str = "transition", reference: bool = True) -> list[DataAttack]:
    """DCR, and with reference data the calibrated DCR and DOMIAS; per episode when ``unit='trajectory'``."""
    names = ["dcr", "dcr_ref", "domias"] if reference else ["dcr"]
    return [make_data_attack(n, unit) for n in names]


def run_data_audit(
    synthetic: OfflineDataset | np.ndarray,
    members: OfflineDataset | np.ndarray,
    non_members: OfflineDataset | np.ndarray,
    attacks: Sequence[DataAttack] | None = None,
    *,
    reference: OfflineDataset | np.ndarray | None = None,
    unit: str = "transition",
    max_units: int | None = 1000,
    fprs: Sequence[float] = DEFAULT_FPRS,
    seed: int = 0,
    n_boot: int = 1000,
) -> dict[str, Any]:
    """Data-only membership inference on a released dataset (no weights): same output format as :func:`run_audit`.

    The attacker holds ``synthetic`` (the release) and optionally ``reference`` records from the same population,
    disjoint from the members; ``unit='trajectory'`` scores whole episodes.
    """
    if unit not in ("transition", "trajectory"):
        raise InvalidData(f"unknown privacy unit '{unit}': use 'transition' or 'trajectory'")
    if unit == "trajectory" and not (isinstance(members, OfflineDataset) and isinstance(non_members, OfflineDataset)):
        raise InvalidData("trajectory-level audits need OfflineDatasets (episode ids), not bare matrices")
    if attacks is None:
        attacks = default_data_attacks(unit, reference is not None)
    if not attacks:
        raise InvalidData("no attack to run")
    members = subsample_units(members, max_units, seed, unit)
    non_members = subsample_units(non_members, max_units, seed + 1, unit)
    out: dict[str, Any] = {"unit": unit, "seed": seed, "fprs": list(fprs), "attacks": {},
                           "access": "data-only (released synthetic data" + (" + reference data)" if reference
                                                                             is not None else ")")}
    for attack in attacks:
        t0 = time.perf_counter()
        attack.fit(synthetic, reference)
        s_in, s_out = attack.score(members), attack.score(non_members)
        out["attacks"][attack.name] = summarise_scores(s_in, s_out, {**attack.describe(), "access": "data-only"},
                                                       time.perf_counter() - t0, fprs, n_boot=n_boot, seed=seed)
    return out


def plot_roc(audit: dict[str, Any] | dict[str, dict[str, Any]], path: str, title: str | None = None) -> None:
    """Log-log ROC of every attack; ``audit`` is one :func:`run_audit` result or a {label: result} mapping."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {"": audit} if "attacks" in audit else audit
    fig, ax = plt.subplots(figsize=(4.8, 4.2))
    names = sorted({n for res in runs.values() for n in res["attacks"]})
    colours = {n: f"C{i % 10}" for i, n in enumerate(names)}  # colour = attack, line style = run
    styles = ["-", "--", ":", "-."]
    for k, (label, res) in enumerate(runs.items()):
        for name, att in res["attacks"].items():
            fpr, tpr = np.asarray(att["roc"]["fpr"]), np.asarray(att["roc"]["tpr"])
            keep = fpr > 0
            tag = f"{label} {name}".strip()
            ax.step(fpr[keep], np.maximum(tpr[keep], 1e-4), where="post", color=colours[name],
                    linestyle=styles[k % len(styles)], label=f"{tag} (AUC {att['auc']:.2f})")
    grid = np.logspace(-4, 0, 50)
    ax.plot(grid, grid, "k--", lw=0.8, label="chance")
    ax.set(xscale="log", yscale="log", xlim=(1e-3, 1), ylim=(1e-3, 1.02), xlabel="FPR", ylabel="TPR (members)")
    ax.set_title(title or "Membership inference ROC")
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
