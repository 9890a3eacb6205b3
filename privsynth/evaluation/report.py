"""One report for one synthetic dataset: privacy card, fidelity, RL checks, downstream agents.

:func:`evaluate_synthetic` runs every evaluation that applies and writes ``report.json`` (everything, machine
readable) and ``report.md`` (a summary with tables) next to each other, plus ``<stem>_tsne.png``:

* the synthetic dataset's privacy card (``DatasetInfo.privacy_card``), when it has one;
* tabular fidelity, marginal and correlation (:mod:`privsynth.evaluation.fidelity`, PrivORL section VIII-C);
* TrajScore (:mod:`privsynth.evaluation.trajscore`) when both datasets have trajectories and an encoder is given or
  public data to train one is; reported with the real-halves baseline;
* RL-aware checks (:mod:`privsynth.evaluation.rl_checks`), with the real data as the reference column;
* the holder's verdict (:mod:`privsynth.evaluation.verdict`): fit to publish or not, with its reasons, per-column
  ranges real vs synthetic and the share of values that break the schema;
* agents trained on the synthetic data and scored in the real environment (optional; needs
  :mod:`privsynth.evaluation.agents`), optionally also on the real data for comparison.

Files are written to temporary names and renamed, so a failed run never leaves a half-written report.

The report reads the real data directly: it is an evaluation for the data holder or a benchmark on public stand-ins,
not a release, and its markdown says so when the real dataset is marked sensitive. Only the TrajScore encoder is
trained, and it is trained on public data only.

Why this module is long: the report's sections and their markdown are one format, and every table and note that says
what a number measured (window counts, transitions checked, agent budgets) is written next to the section it reads.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivsynthError
from privsynth.evaluation.fidelity import tabular_fidelity
from privsynth.evaluation.rl_checks import RLCheckConfig, rl_checks
from privsynth.evaluation.verdict import VerdictThresholds, holder_verdict, verdict_lines

__all__ = ["evaluate_synthetic", "render_markdown"]


def _jsonable(x: Any) -> Any:
    if isinstance(x, Mapping):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, np.ndarray):
        return _jsonable(x.tolist())
    if isinstance(x, (np.floating, float)):
        v = float(x)
        return v if math.isfinite(v) else None
    if isinstance(x, (np.integer,)):
        return int(x)
    if isinstance(x, (np.bool_,)):
        return bool(x)
    if isinstance(x, (str, int, bool)) or x is None:
        return x
    if hasattr(x, "to_dict"):
        return _jsonable(x.to_dict())
    return str(x)


def _write_text(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def _timed(timings: dict[str, float], name: str, fn: Callable[[], Any]) -> Any:
    t0 = time.perf_counter()
    try:
        return fn()
    finally:
        timings[name] = round(time.perf_counter() - t0, 3)


def _trajscore_section(
    synthetic: OfflineDataset, real: OfflineDataset, public: OfflineDataset | None, encoder: Any, progress: bool,
    save_to: Path,
) -> dict[str, Any]:
    from privsynth.evaluation.trajscore import (
        TrajScoreConfig,
        fit_trajscore_encoder,
        trajectory_windows,
        trajscore,
        trajscore_matched,
    )

    if encoder is None and public is None:
        return {"skipped": "no public trajectories to train the TrajScore encoder (pass public= or an encoder)"}
    try:
        window = encoder.config.window if encoder is not None else TrajScoreConfig().window
        for ds in (synthetic, real):  # cheap check first: independent transitions have no TrajScore
            trajectory_windows(ds, window)
        saved = None
        if encoder is None:
            encoder = fit_trajscore_encoder(public, progress=progress)  # type: ignore[arg-type]
            saved = encoder.save(save_to).name  # reuse it for the other rows of a table
        out = trajscore(synthetic, real, encoder)
        try:  # the baseline and the synthetic score at one window count (the score grows with the count)
            matched = trajscore_matched(synthetic, real, encoder)
            out.update(baseline=matched["baseline"], baseline_windows=matched["windows"],
                       trajscore_matched=matched["trajscore"])
        except PrivsynthError as exc:  # e.g. one real episode: no halves, so no baseline
            out["baseline"] = None
            out["baseline_note"] = str(exc)
        if saved:
            out["encoder_file"] = saved
        return out
    except PrivsynthError as exc:
        return {"skipped": str(exc)}


def _agents_section(
    synthetic: OfflineDataset,
    real: OfflineDataset,
    agents: Sequence[str],
    seeds: Sequence[int],
    num_updates: int | None,
    agents_on_real: bool,
    agent_kwargs: Mapping[str, Any],
    progress: bool,
) -> dict[str, Any]:
    try:
        from privsynth.evaluation.agents import run_seeds
    except ImportError:
        return {"skipped": "privsynth.evaluation.agents is not installed in this build"}
    out: dict[str, Any] = {}
    kwargs = dict(agent_kwargs)
    if num_updates is not None:
        kwargs["num_updates"] = num_updates
    kwargs.setdefault("progress", progress)
    for agent in agents:
        entry: dict[str, Any] = {}
        for which, data in (("synthetic", synthetic), ("real", real)):
            if which == "real" and not agents_on_real:
                continue
            summary = run_seeds(data, real.info, agent, seeds=list(seeds), **kwargs)
            entry[which] = _jsonable(summary)
        out[agent] = entry
    return out


def _check_agent_names(agents: Sequence[str]) -> None:
    """Fail before any work on an unknown agent name (when the agents package is installed)."""
    if not agents:
        return
    try:
        from privsynth.evaluation.agents import AGENTS
    except ImportError:
        return
    for agent in agents:
        key = agent.lower().replace("+", "").replace("_", "").replace("-", "")
        if key not in AGENTS:
            raise InvalidData(f"unknown agent '{agent}'; choose one of {', '.join(AGENTS)}")


def evaluate_synthetic(
    synthetic: OfflineDataset,
    real: OfflineDataset,
    *,
    agents: Sequence[str] = (),
    seeds: Sequence[int] = (0, 1, 2),
    num_updates: int | None = None,
    agents_on_real: bool = False,
    agent_kwargs: Mapping[str, Any] | None = None,
    public: OfflineDataset | None = None,
    trajscore_encoder: Any = None,
    rl_config: RLCheckConfig | None = None,
    max_rows: int | None = None,
    tsne: bool = True,
    tsne_points: int = 600,
    out: str | Path = "report.json",
    progress: bool = False,
    thresholds: VerdictThresholds | None = None,
) -> dict[str, Any]:
    """Evaluate ``synthetic`` against ``real``; write ``out`` (JSON) and its ``.md`` summary; return the report.

    ``agents`` (e.g. ``("td3bc", "iql")``) are trained on the synthetic data for each of ``seeds`` with
    ``num_updates`` updates and scored in ``real``'s environment; ``agent_kwargs`` go to
    :func:`privsynth.evaluation.agents.run_seeds` (``eval_every``, ``eval_episodes``, ...). ``public`` trains the
    TrajScore encoder (or pass a trained ``trajscore_encoder``). ``max_rows`` caps the rows of the tabular scores.
    ``thresholds`` set the holder's verdict (``report["verdict"]``, :mod:`privsynth.evaluation.verdict`).
    """
    real.check_compatible(synthetic)
    _check_agent_names(agents)
    if agents:  # the agents are scored on real's reference returns: fail before minutes of fidelity work
        from privsynth.evaluation.agents.common import require_reference_scores

        require_reference_scores(real.info)
    out = Path(out)
    if out.suffix != ".json":
        raise InvalidData(f"the report path must end in .json, got '{out}'")
    out.parent.mkdir(parents=True, exist_ok=True)
    timings: dict[str, float] = {}
    report: dict[str, Any] = {
        "synthetic": synthetic.summary(),
        "real": real.summary(),
        "privacy_card": synthetic.info.privacy_card,
    }
    report["fidelity"] = _timed(
        timings, "fidelity", lambda: tabular_fidelity(synthetic, real, max_rows=max_rows).to_dict()
    )
    report["trajscore"] = _timed(
        timings, "trajscore", lambda: _trajscore_section(
            synthetic, real, public, trajscore_encoder, progress, out.with_name(out.stem + "_trajscore_encoder.pt")
        )
    )
    report["rl_checks"] = _timed(timings, "rl_checks", lambda: rl_checks(synthetic, real, rl_config))
    report["utility_predictor"] = _timed(timings, "utility_predictor", lambda: _utility_section(synthetic, real))
    report["verdict"] = holder_verdict(synthetic, real, report["fidelity"], report["utility_predictor"],
                                       thresholds)  # for the holder's eyes (privsynth.evaluation.verdict)
    report["plots"] = {}
    if tsne:
        from privsynth.evaluation.plots import tsne_plot

        png = out.with_name(out.stem + "_tsne.png")
        _timed(timings, "tsne", lambda: tsne_plot(real, synthetic, png, n_points=tsne_points, title=f"{synthetic.info.name} vs {real.info.name}"))
        report["plots"]["tsne"] = png.name
    if agents:
        report["agents"] = _timed(
            timings,
            "agents",
            lambda: _agents_section(
                synthetic, real, list(agents), list(seeds), num_updates, agents_on_real, agent_kwargs or {}, progress
            ),
        )
    report["timings_s"] = timings
    report = _jsonable(report)
    _write_text(out, json.dumps(report, indent=1))
    _write_text(out.with_suffix(".md"), render_markdown(report))
    return report


# ------------------------------------------------------------------------------------------------------ markdown
def _fmt(v: Any, digits: int | None = None) -> str:
    if v is None:
        return "n/a"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:.{digits}f}" if digits is not None else f"{v:.4g}"
    return str(v).replace("|", "\\|")


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(_fmt(c) for c in row) + " |" for row in rows]
    return lines + [""]


def _flatten(d: Mapping[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    items: list[tuple[str, Any]] = []
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            items += _flatten(v, key + ".")
        elif isinstance(v, list) and v and all(isinstance(e, Mapping) for e in v):
            for i, e in enumerate(v):
                items += _flatten(e, f"{key}[{i}].")
        else:
            items.append((key, v if not isinstance(v, list) else ", ".join(_fmt(e) for e in v)))
    return items


def _get(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, Mapping) or d.get(k) is None:
            return None
        d = d[k]
    return d


def render_markdown(report: Mapping[str, Any]) -> str:
    """The markdown summary of a report produced by :func:`evaluate_synthetic`."""
    syn, real = report["synthetic"], report["real"]
    lines = [f"# Evaluation of `{syn['name']}` against `{real['name']}`", ""]
    lines += _table(
        ["dataset", "transitions", "episodes", "environment", "terminal rate", "mean return / episode"],
        [
            ["synthetic", syn["transitions"], syn["episodes"], syn["env_id"], syn["terminal_rate"], syn["episode_return_mean"]],
            ["real", real["transitions"], real["episodes"], real["env_id"], real["terminal_rate"], real["episode_return_mean"]],
        ],
    )
    if real.get("sensitive"):
        lines += ["> This report is computed from the real (sensitive) data and is not itself differentially private: "
                  "its statistics and the t-SNE plot describe real records. Keep it with the data holder.", ""]
    lines += ["## Privacy card", ""]
    card = report.get("privacy_card")
    if card:
        lines += _table(["field", "value"], _flatten(card))
    else:
        lines += ["The synthetic dataset carries no privacy card: it was not released through a DP mechanism.", ""]

    verdict = report.get("verdict")
    if verdict:
        lines += ["## Verdict (for the data holder's eyes, never published)", "", f"**{verdict['verdict']}**", "",
                  "```text", *verdict_lines(verdict)[1:], "```", ""]
    lines += ["## Fidelity", ""]
    fid = report["fidelity"]
    ts = report.get("trajscore") or {}
    rows = [
        ["marginal (mean 1 − KS)", fid["marginal"], "1 = identical per-column distributions"],
        ["correlation (mean 1 − |Δρ|/2)", fid["correlation"], "1 = identical Pearson matrices"],
    ]
    if "trajscore" in ts:
        note = f"{_fmt(ts.get('windows'))} windows per side; P {_fmt(ts['precision'])}, R {_fmt(ts['recall'])}"
        if ts.get("baseline") is not None:  # compare at one count: each real half has about half the windows
            note += (f"; at {_fmt(ts.get('baseline_windows'))} windows per side {_fmt(ts.get('trajscore_matched'))} "
                     f"against the real-halves baseline {_fmt(ts['baseline'])}")
        else:
            note += f"; no real-halves baseline ({_fmt(ts.get('baseline_note'))})"
        rows.append(["TrajScore (F1)", ts["trajscore"], note])
    else:
        rows.append(["TrajScore", None, ts.get("skipped", "not computed")])
    lines += _table(["metric", "value", "note"], rows)
    up = report.get("utility_predictor") or {}
    if "policy_r2" in up:
        lines += ["Utility predictor (docs/synthesizers.md): state → action predictability scored on held-out real "
                  "episodes, and next-state error against a linear model fitted on real transitions.", ""]
        lines += _table(["predictor", "synthetic", "real reference"], [
            ["policy R² (k-NN state → action)", up["policy_r2"], up["policy_r2_real"]],
            ["next-state error / real step (mean over components)", up["dynamics"]["rel_step_mean"],
             up["dynamics_real"]["rel_step_mean"]],
        ])
    elif up:
        lines += [f"Utility predictor: {up.get('skipped', 'not computed')}", ""]
    lines += [f"Columns: state | action | reward | next state (terminal {'included' if fid['include_terminal'] else 'excluded'}); "
              f"{fid['rows_real']} real and {fid['rows_synthetic']} synthetic rows.", ""]
    per = fid.get("per_column") or {}
    if per:
        worst = sorted(per.items(), key=lambda kv: (kv[1]["marginal"] if kv[1]["marginal"] is not None else 2))[:5]
        lines += ["Lowest per-column marginal scores:", ""]
        lines += _table(["column", "1 − KS", "mean pair correlation score"],
                        [[c, v["marginal"], v["correlation"]] for c, v in worst])

    rl = report.get("rl_checks") or {}
    lines += [f"## RL checks (adapter: {rl.get('adapter', 'n/a')})", ""]
    s, r = rl.get("synthetic") or {}, rl.get("real") or {}
    n_s, n_r = _get(s, "dynamics", "n") or _get(s, "reward", "n"), _get(r, "dynamics", "n") or _get(r, "reward", "n")
    if n_s is not None or n_r is not None:
        ex_s, ex_r = s.get("undetermined_excluded") or 0, r.get("undetermined_excluded") or 0
        lines += [f"Simulator checks on {_fmt(n_s)} synthetic and {_fmt(n_r)} real transitions (seeded subsample of "
                  f"at most {_fmt(_get(rl, 'config', 'max_transitions'))}); terminal rate and coverage use every row."
                  + (f" Left out: {ex_s} synthetic and {ex_r} real rows whose observed velocities sit at the "
                     "environment's clip (±10), which do not fix the simulator state." if ex_s or ex_r else ""),
                  ""]
    tol_d = _get(rl, "config", "dynamics_tol")
    tol_r = _get(rl, "config", "reward_tol")
    lines += _table(
        ["check", "synthetic", "real (reference)"],
        [
            ["dynamics: mean next-state error", _get(s, "dynamics", "mean_error"), _get(r, "dynamics", "mean_error")],
            ["dynamics: relative error (÷ mean step)", _get(s, "dynamics", "relative_error"), _get(r, "dynamics", "relative_error")],
            [f"dynamics: fraction within {_fmt(tol_d)}", _get(s, "dynamics", "within_tol"), _get(r, "dynamics", "within_tol")],
            ["reward: mean abs error", _get(s, "reward", "mean_abs_error"), _get(r, "reward", "mean_abs_error")],
            [f"reward: fraction within {_fmt(tol_r)}", _get(s, "reward", "within_tol"), _get(r, "reward", "within_tol")],
            ["terminal rate", s.get("terminal_rate"), r.get("terminal_rate")],
            ["terminal flag agrees with env", s.get("terminal_agreement"), r.get("terminal_agreement")],
        ],
    )
    cov = rl.get("coverage") or {}
    if cov:
        lines += _table(
            ["coverage", "value"],
            [
                ["state bins", cov["n_bins"]],
                ["visited by real", cov["real_coverage"]],
                ["visited by synthetic", cov["synthetic_coverage"]],
                ["overlap (Jaccard)", cov["overlap_jaccard"]],
                ["synthetic states in bins real data visits", cov["synthetic_in_real_bins"]],
                [("synthetic states in walls / off the map" if rl.get("adapter") == "pointmaze" else
                  "synthetic states outside the real states' range (first two dims)"), cov["synthetic_invalid_rate"]],
                *([["synthetic goals in walls / off the map", cov["synthetic_goal_invalid_rate"]]]
                  if "synthetic_goal_invalid_rate" in cov else []),
            ],
        )

    if "agents" in report:
        lines += ["## Downstream agents (normalised score, real environment)", ""]
        ag = report["agents"]
        if "skipped" in ag:
            lines += [f"Skipped: {ag['skipped']}.", ""]
        else:
            rows = []
            for name, entry in ag.items():
                for which in ("synthetic", "real"):
                    e = entry.get(which)
                    if e:
                        rows.append([name, which, f"{_fmt(e.get('final_mean'), 1)} ± {_fmt(e.get('final_std'), 1)}",
                                     f"{_fmt(e.get('best_mean'), 1)} ± {_fmt(e.get('best_std'), 1)}",
                                     ", ".join(str(x) for x in e.get("seeds", []))])
            lines += _table(["agent", "trained on", "final (mean ± std)", "best (mean ± std)", "seeds"], rows)
            lines += _agent_budget_lines(ag, real)

    if report.get("plots", {}).get("tsne"):
        lines += ["## t-SNE", "", f"![t-SNE of real vs synthetic transitions]({report['plots']['tsne']})", ""]
    timings = report.get("timings_s") or {}
    if timings:
        lines += ["Timings (s): " + ", ".join(f"{k} {v}" for k, v in timings.items()), ""]
    return "\n".join(lines)


def _agent_budget_lines(agents: Mapping[str, Any], real: Mapping[str, Any]) -> list[str]:
    """What each agent row measured: updates, evaluations, episodes, how many evaluations the final score averages,
    and the reference returns it is normalised with (read from the runs' own records)."""
    lines = []
    for name, entry in agents.items():
        for which in ("synthetic", "real"):
            runs = _get(entry, which, "runs")
            if not runs:
                continue
            r = runs[0]
            cfg, n_evals = r.get("config") or {}, len(r.get("curve") or [])
            k = min(int(r.get("final_k") or 0), n_evals)
            lines.append(f"- {name} on {which}: {_fmt(r.get('num_updates'))} updates per seed, {n_evals} evaluations "
                         f"of {_fmt(cfg.get('eval_episodes'))} episodes each; final = mean of the last {k}, best = "
                         "max over all" + ("" if cfg.get("max_episode_steps") is None else
                                           f"; episodes cut at {cfg['max_episode_steps']} steps"))
    if lines:
        lo, hi = _fmt(real.get("ref_min_score")), _fmt(real.get("ref_max_score"))
        lines.append(f"- normalised as 100·(R − {lo})/({hi} − {lo}) with the real dataset's reference returns")
    return lines + [""] if lines else []


def _utility_section(synthetic: OfflineDataset, real: OfflineDataset) -> dict[str, Any]:
    """:func:`privsynth.evaluation.fidelity.utility_predictor`, or why it was skipped (too few real episodes)."""
    from privsynth.evaluation.fidelity import utility_predictor

    if real.n_episodes < 2:  # a held-out real episode and at least one to fit the reference on
        return {"skipped": f"needs at least 2 real episodes, the real data has {real.n_episodes}"}
    return utility_predictor(synthetic, real)
