"""A verdict for the data holder's eyes: is this synthetic release fit to hand to a colleague? (issue 39)

Computed from the REAL (sensitive) data: per-column ranges real vs synthetic, the share of synthetic values that
break the schema, the marginal / correlation scores of ``privsynth evaluate`` and its policy R². It is printed by
``privsynth evaluate`` and written to the evaluation's JSON, never published with the release (it describes real
records and is not differentially private). Fitness here is fidelity and validity; privacy is the card's business.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from privsynth.data.validity import column_validity, share_text

__all__ = ["VerdictThresholds", "holder_verdict", "verdict_lines"]


@dataclass(frozen=True)
class VerdictThresholds:
    """What a release must reach to be called fit to publish (docs/own_data.md, "The verdict").

    * ``marginal``: the fidelity report's marginal score (mean 1 − KS over state, action, reward, next state);
    * ``correlation``: its correlation score (mean 1 − |Δρ|/2);
    * ``invalid_share``: per schema column and rule, the largest share of synthetic values that may break it;
    * ``policy_r2_ratio``: policy R² of the synthetic data over the real data's (None: reported, not required).
    """

    marginal: float = 0.85
    correlation: float = 0.75
    invalid_share: float = 0.01
    policy_r2_ratio: float | None = None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _names(ds: Any) -> tuple[list[str], list[str], str, dict[str, Any]]:
    """Observation, action and reward column names (the schema's, else obs_i / act_i / reward) and the schema's
    columns by name (empty without one)."""
    from privsynth.data.schema import Schema

    if ds.info.schema:
        s = Schema.from_dict(ds.info.schema)
        cols = {c.name: c for c in (*s.observations, *s.actions, s.reward)}
        return [c.name for c in s.observations], [c.name for c in s.actions], s.reward.name, cols
    return [f"obs_{i}" for i in range(ds.obs_dim)], [f"act_{i}" for i in range(ds.act_dim)], "reward", {}


def _columns(ds: Any) -> dict[str, np.ndarray]:
    obs, act, rew, _ = _names(ds)
    out = {n: np.concatenate([ds.observations[:, j], ds.next_observations[:, j]]) for j, n in enumerate(obs)}
    out.update({n: ds.actions[:, j] for j, n in enumerate(act)})
    out[rew] = np.asarray(ds.rewards).reshape(-1)
    return out


def _range(v: np.ndarray, col: Any) -> Any:
    """``[min, max]`` of the finite values; for a discrete column (stored as value indices), its values present."""
    if col is not None and col.discrete:
        idx = np.unique(v[np.isfinite(v)])
        return [col.levels[int(i)] for i in idx if i == np.round(i) and 0 <= i < len(col.levels)]
    f = v[np.isfinite(v)]
    return [float(f.min()), float(f.max())] if f.size else None


def holder_verdict(synthetic: Any, real: Any, fidelity: Mapping[str, Any], utility: Mapping[str, Any] | None = None,
                   thresholds: VerdictThresholds | None = None) -> dict[str, Any]:
    """The verdict: ``fit_to_publish``, ``verdict`` (one plain line with its reasons), ``reasons``, per-column
    ``columns`` (real and synthetic ranges, invalid shares) and the ``thresholds`` applied."""
    th = thresholds or VerdictThresholds()
    with_schema = synthetic if synthetic.info.schema else real
    _, _, reward_name, declared = _names(with_schema)
    validity = column_validity(dataclasses.replace(synthetic, info=dataclasses.replace(
        synthetic.info, schema=with_schema.info.schema)))
    real_cols, syn_cols = _columns(dataclasses.replace(real, info=with_schema.info)), \
        _columns(dataclasses.replace(synthetic, info=with_schema.info))
    columns: dict[str, Any] = {}
    for name in syn_cols:
        col = declared.get(name)
        is_reward_values = name == reward_name and col is not None and col.discrete
        shown = None if is_reward_values else col  # a discrete reward is stored as its value
        entry: dict[str, Any] = {
            "real": _range(real_cols[name], shown),
            "synthetic": _range(syn_cols[name], shown),
            "invalid": {v.rule: v.share for v in validity if v.name == name},
        }
        if col is not None:
            entry["declared"] = list(col.levels) if col.discrete else [col.low, col.high]
        columns[name] = entry
    reasons, notes = [], []
    marginal, corr = fidelity.get("marginal"), fidelity.get("correlation")
    if marginal is None or not marginal >= th.marginal:
        reasons.append(f"marginal {_num(marginal)} < {th.marginal:g}")
    else:
        notes.append(f"marginal {_num(marginal)}")
    if corr is not None and not corr >= th.correlation:
        reasons.append(f"correlation {_num(corr)} < {th.correlation:g}")
    elif corr is not None:
        notes.append(f"correlation {_num(corr)}")
    bad = sorted((v for v in validity if v.share > th.invalid_share), key=lambda v: -v.share)
    reasons += [v.text() for v in bad]
    if validity and not any(v.invalid for v in validity):
        notes.append("every value valid for the schema")
    elif validity and not bad:
        notes.append("invalid values within " + share_text(th.invalid_share) + " per column")
    ratio = (utility or {}).get("policy_r2_ratio")
    if th.policy_r2_ratio is not None and (ratio is None or not ratio >= th.policy_r2_ratio):
        reasons.append(f"policy R² ratio {_num(ratio)} < {th.policy_r2_ratio:g}")
    elif ratio is not None and np.isfinite(ratio):
        notes.append(f"policy R² {_num((utility or {}).get('policy_r2'))} (real {_num((utility or {}).get('policy_r2_real'))})")
    card = synthetic.info.privacy_card
    if not card or not card.get("private"):
        reasons.append("no privacy card: not a DP release")
    fit = not reasons
    line = ("fit to publish: " + ", ".join(notes)) if fit else ("not fit to publish: " + ", ".join(reasons))
    return {"fit_to_publish": fit, "verdict": line, "reasons": reasons, "columns": columns,
            "thresholds": th.to_dict(),
            "note": "computed from the real data: for the data holder's eyes, never published with the release"}


def _num(v: Any) -> str:
    return "n/a" if v is None or (isinstance(v, float) and not np.isfinite(v)) else f"{v:.2f}"


def _show_range(r: Any) -> str:
    if r is None:
        return "-"
    if r and isinstance(r[0], float) and len(r) == 2:
        return f"{r[0]:.4g} .. {r[1]:.4g}"
    return "{" + ", ".join(str(v) for v in r) + "}"


def verdict_lines(verdict: Mapping[str, Any]) -> list[str]:
    """What ``privsynth evaluate`` prints: the verdict, then one line per column (real vs synthetic range, invalid
    share where any)."""
    lines = [f"verdict (for your eyes, never published): {verdict['verdict']}"]
    cols = verdict.get("columns") or {}
    width = max([len(n) for n in cols] + [6])
    lines.append(f"  {'column':<{width}}  {'real':<22}  {'synthetic':<22}  invalid")
    for name, c in cols.items():
        inv = ", ".join(f"{share_text(s)} {rule}" for rule, s in (c.get("invalid") or {}).items() if s) or "-"
        lines.append(f"  {name:<{width}}  {_show_range(c['real']):<22}  {_show_range(c['synthetic']):<22}  {inv}")
    return lines
