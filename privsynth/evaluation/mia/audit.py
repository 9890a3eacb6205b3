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

from privsynth.data.units import DATA_UNITS, check_unit
from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia.adapters import DiffusionAdapter, as_adapter
from privsynth.evaluation.mia.attacks import Attack, LossAttack, PIAAttack, ReferenceAttack
from privsynth.evaluation.mia.data_attacks import DataAttack, make_data_attack
from privsynth.evaluation.mia.epsilon import EpsilonTest, epsilon_test, pair_units
from privsynth.evaluation.mia.metrics import DEFAULT_FPRS, attack_metrics, bootstrap_intervals, tpr_at_fpr

__all__ = ["run_audit", "run_data_audit", "default_attacks", "default_data_attacks", "subsample_units", "plot_roc",
           "summarise_scores", "ROC_GRID", "check_disjoint", "check_environments", "infer_split",
           "withhold_unsupported", "min_non_members"]

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
    test: EpsilonTest | None = None,
) -> dict[str, Any]:
    """Score members and non-members with every attack; return metrics and compact ROCs (members positive).

    ``n_boot > 0`` adds percentile bootstrap intervals (``ci``) of the AUC and of each TPR; ``test`` adds each attack's
    one-run ε lower bound against the claim (:mod:`.epsilon`). Members and non-members that share records are refused.
    """
    adapter = as_adapter(target, unit)
    ref_adapter = as_adapter(reference, "transition") if reference is not None else None
    if attacks is None:
        attacks = default_attacks(ref_adapter) if adapter.has_denoiser else [LossAttack(repeats=1)]
    if not attacks:
        raise InvalidData("no attack to run")
    check_disjoint(members, non_members)
    members = subsample_units(members, max_units, seed, unit)
    non_members = subsample_units(non_members, max_units, seed + 1, unit)
    design = pair_units(_n_units(members, unit), _n_units(non_members, unit), test.guesses, test.seed) if test else None
    out: dict[str, Any] = {"unit": unit, "seed": seed, "fprs": list(fprs), "attacks": {}}
    for attack in attacks:
        t0 = time.perf_counter()
        # one seed per set so members and non-members never share noise draws
        s_in = attack.score(adapter, members, seed=seed)
        s_out = attack.score(adapter, non_members, seed=seed + 10_000)
        out["attacks"][attack.name] = summarise_scores(s_in, s_out, {**attack.describe(), "access": "white-box"},
                                                       time.perf_counter() - t0, fprs, n_boot=n_boot, seed=seed)
        if test is not None:
            out["attacks"][attack.name]["epsilon_test"] = epsilon_test(s_in, s_out, design, test)
    return out


def _n_units(data, unit: str) -> int:
    if unit == "trajectory" and isinstance(data, OfflineDataset):
        return data.n_episodes
    return data.n_transitions if isinstance(data, OfflineDataset) else int(np.asarray(data).shape[0])


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
    test: EpsilonTest | None = None,
) -> dict[str, Any]:
    """Data-only membership inference on a released dataset (no weights): same output format as :func:`run_audit`.

    The attacker holds ``synthetic`` (the release) and optionally ``reference`` records from the same population,
    disjoint from the members and the non-members (refused otherwise: a candidate in the reference data would be
    scored by its own label); ``unit='trajectory'`` scores whole episodes. ``test`` adds each attack's one-run ε lower
    bound against the claim (:mod:`.epsilon`).
    """
    check_unit(unit, DATA_UNITS)
    if unit == "trajectory" and not (isinstance(members, OfflineDataset) and isinstance(non_members, OfflineDataset)):
        raise InvalidData("trajectory-level audits need OfflineDatasets (episode ids), not bare matrices")
    if attacks is None:
        attacks = default_data_attacks(unit, reference is not None)
    if not attacks:
        raise InvalidData("no attack to run")
    check_disjoint(members, non_members, reference)
    members = subsample_units(members, max_units, seed, unit)
    non_members = subsample_units(non_members, max_units, seed + 1, unit)
    design = pair_units(_n_units(members, unit), _n_units(non_members, unit), test.guesses, test.seed) if test else None
    out: dict[str, Any] = {"unit": unit, "seed": seed, "fprs": list(fprs), "attacks": {},
                           "access": "data-only (released synthetic data" + (" + reference data)" if reference
                                                                             is not None else ")")}
    for attack in attacks:
        t0 = time.perf_counter()
        attack.fit(synthetic, reference)
        s_in, s_out = attack.score(members), attack.score(non_members)
        out["attacks"][attack.name] = summarise_scores(s_in, s_out, {**attack.describe(), "access": "data-only"},
                                                       time.perf_counter() - t0, fprs, n_boot=n_boot, seed=seed)
        if test is not None:
            out["attacks"][attack.name]["epsilon_test"] = epsilon_test(s_in, s_out, design, test)
    return out


def _row_keys(data: OfflineDataset | np.ndarray) -> np.ndarray:
    """One hashable key per transition row (its float64 bytes)."""
    rows = data.transition_matrix() if isinstance(data, OfflineDataset) else np.asarray(data)
    rows = np.ascontiguousarray(rows, dtype=np.float64)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).ravel()


def _shared(a: OfflineDataset | np.ndarray, b: OfflineDataset | np.ndarray) -> tuple[int, bool]:
    """(rows of ``b`` that are rows of ``a``, whether the overlap is the same records rather than chance)."""
    ka, kb = _row_keys(a), _row_keys(b)
    if ka.dtype != kb.dtype:  # different widths: the attacks refuse that themselves
        return 0, False
    shared = int(np.isin(kb, ka).sum())
    if shared == 0:
        return 0, False
    ua, ub = np.unique(ka), np.unique(kb)
    # records unique within each set (continuous data): a shared row is the same record. With duplicates inside a
    # set (discrete data), equal rows arise by chance, and only a set contained in the other is refused.
    unique_within = ua.size == ka.size and ub.size == kb.size
    contained = np.isin(ub, ua).all() or np.isin(ua, ub).all()
    # A few duplicated rows must not switch the check off. Two records of one population are equal with a probability
    # c, estimated from the equal pairs inside each set; a row of b then matches one of a's rows with probability at
    # most |a|·c. Clearly more shared rows than that (twice, with a margin) are the same records (e.g. reference data
    # cut from the non-members, whose rows would be scored by their label).
    def equal_pairs(keys: np.ndarray) -> float:
        counts = np.unique(keys, return_counts=True)[1].astype(np.float64)
        return float((counts * (counts - 1) / 2).sum())

    pairs = ka.size * (ka.size - 1) / 2 + kb.size * (kb.size - 1) / 2
    c = (equal_pairs(ka) + equal_pairs(kb)) / max(pairs, 1.0)
    expected = min(1.0, ka.size * c)
    excess = shared / kb.size > 2.0 * expected + 4.0 * np.sqrt(expected * (1.0 - expected) / kb.size) + 0.02
    return shared, bool(unique_within or contained or excess)


def check_disjoint(members: OfflineDataset | np.ndarray, non_members: OfflineDataset | np.ndarray,
                   reference: OfflineDataset | np.ndarray | None = None) -> None:
    """Refuse (one line) members and non-members that share records, and reference data that holds either."""
    shared, same = _shared(members, non_members)
    if same:
        n_out = _row_keys(non_members).size
        raise InvalidData(f"members and non-members share {shared} of the {n_out} non-member transitions (the same "
                          "set, or overlapping splits?): a record cannot be both; audit two disjoint parts of one "
                          "random split")
    if reference is not None:
        for label, data in (("members", members), ("non-members", non_members)):
            shared, same = _shared(reference, data)
            if same:
                raise InvalidData(f"the reference data hold {shared} of the {label}' transitions: the attacker's "
                                  "reference records must be disjoint from the audited members and non-members "
                                  "(a candidate found in them is scored by its label)")


def check_environments(sets: dict[str, Any]) -> None:
    """Refuse (one line) sets whose environment ids differ, among those that carry one (``{label: dataset}``)."""
    envs = {label: getattr(getattr(d, "info", None), "env_id", None) for label, d in sets.items() if d is not None}
    envs = {label: e for label, e in envs.items() if e}
    if len(set(envs.values())) > 1:
        items = list(envs.items())
        l1, e1 = items[0]
        l2, e2 = next((label, e) for label, e in items if e != e1)
        raise InvalidData(f"{l1} is from {e1} but {l2} is from {e2}: members, non-members, reference and release "
                          "must come from one environment (a shift between them reads as membership signal)")


def infer_split(members: OfflineDataset | np.ndarray, non_members: OfflineDataset | np.ndarray) -> dict[str, Any]:
    """How members and non-members were split: ``{"by": "episode" | "transition" | None, "evidence": str}``.

    ``privsynth datasets split`` records it (``info.extra["split"]``). Otherwise the rows tell: a transition whose
    next observation is another row's observation is followed by that row. In a split by transition a member's
    successor is a non-member about as often as a random unit is (2f(1−f) of the links cross the sets, f the member
    share); in a split by episode only the links across episode ends cross, far fewer.
    """
    infos = [getattr(getattr(d, "info", None), "extra", {}) or {} for d in (members, non_members)]
    sp = [i.get("split") if isinstance(i.get("split"), dict) else None for i in infos]
    if sp[0] and sp[1] and sp[0].get("source") == sp[1].get("source") and sp[0].get("seed") == sp[1].get("seed") \
            and sp[0].get("by") == sp[1].get("by") and sp[0].get("by") in ("episode", "transition"):
        return {"by": sp[0]["by"], "evidence": f"recorded by the split of {sp[0].get('source')} (seed "
                                               f"{sp[0].get('seed')})"}
    if not (isinstance(members, OfflineDataset) and isinstance(non_members, OfflineDataset)):
        return {"by": None, "evidence": "bare rows: no episode structure to read"}

    def keys(a: np.ndarray) -> np.ndarray:
        a = np.ascontiguousarray(a, dtype=np.float64)
        return a.view(np.dtype((np.void, a.dtype.itemsize * a.shape[1]))).ravel()

    m_obs, n_obs = keys(members.observations), keys(non_members.observations)
    within = int(np.isin(keys(members.next_observations), m_obs).sum() +
                 np.isin(keys(non_members.next_observations), n_obs).sum())
    cross = int(np.isin(keys(members.next_observations), n_obs).sum() +
                np.isin(keys(non_members.next_observations), m_obs).sum())
    links = within + cross
    f = members.n_transitions / (members.n_transitions + non_members.n_transitions)
    expected = 2 * f * (1 - f)
    evidence = (f"{cross} of {links} successor links between rows cross the two sets (a split by transition would "
                f"give about {expected * links:.0f})")
    if links < 20:
        return {"by": None, "evidence": f"only {links} successor links between rows: the split cannot be read"}
    frac = cross / links
    if frac < expected / 4:
        return {"by": "episode", "evidence": evidence}
    if frac > expected / 2:
        return {"by": "transition", "evidence": evidence}
    return {"by": None, "evidence": evidence}


def min_non_members(alpha: float) -> int:
    """Non-members needed for a TPR at FPR ``alpha`` to rest on at least one non-member above the threshold."""
    return int(np.ceil(1.0 / float(alpha) - 1e-9))


def withhold_unsupported(result: dict[str, Any]) -> dict[str, Any]:
    """Replace each TPR at FPR α scored on fewer than 1/α non-members by None (in place; returns ``result``).

    With n < 1/α non-members the only ROC point at FPR ≤ α is FPR = 0: the number is the TPR at zero false
    positives, not at α. ``not_available`` says why.
    """
    for att in result.get("attacks", {}).values():
        n = int(att["n_non_members"])
        for alpha in list(att["tpr_at_fpr"]):
            need = min_non_members(float(alpha))
            if n < need:
                att["tpr_at_fpr"][alpha] = None
                if att.get("ci"):
                    att["ci"]["tpr_at_fpr"][alpha] = None
                att.setdefault("not_available", {})[alpha] = f"n/a: needs ≥ {need} non-members ({n} scored)"
    return result


def plot_roc(audit: dict[str, Any] | dict[str, dict[str, Any]], path: str, title: str | None = None,
             dp_bound: tuple[float, float] | None = None) -> None:
    """Log-log ROC of every attack; ``audit`` is one :func:`run_audit` result or a {label: result} mapping.

    ``dp_bound = (ε, δ)`` adds the line TPR = e^ε·FPR + δ that (ε, δ)-DP keeps every attack under (in expectation).
    """
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    runs = {"": audit} if "attacks" in audit else audit
    fig, ax = plt.subplots(figsize=(5.2, 4.6))
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
    grid = np.logspace(-4, 0, 200)
    ax.plot(grid, grid, "k--", lw=0.8, label="chance")
    if dp_bound is not None:
        eps, delta = dp_bound
        ax.plot(grid, np.minimum(np.exp(eps) * grid + delta, 1.0), color="0.35", lw=1.2, linestyle="-.",
                label=rf"claimed DP: TPR = $e^{{\varepsilon}}\cdot$FPR + $\delta$ ($\varepsilon$={eps:.3g}, "
                      rf"$\delta$={delta:.2g})")
    ax.set(xscale="log", yscale="log", xlim=(1e-3, 1), ylim=(1e-3, 1.02), xlabel="FPR", ylabel="TPR (members)")
    ax.set_title(textwrap.fill(title or "Membership inference ROC", 48), fontsize=9)
    ax.legend(fontsize=6, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=130)
    plt.close(fig)
