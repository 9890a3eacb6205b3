"""Experiments of the DP-APVI / DP-VAPVI paper and our extensions: gap versus number of episodes, exact evaluation.

* :func:`run_linear`: the section-5 simulation (2 states, 100 actions, d = 10, H = 20): PEVI, VAPVI and DP-VAPVI at
  several ρ, plus a synthetic-data route: the DP-APVI count release at the same ρ turned into synthetic
  trajectories, and non-private VAPVI run on them (post-processing, so also ρ-zCDP).
* :func:`run_tabular`: APVI vs DP-APVI (Gaussian at several ρ, Laplace at one ε, and the theory constants) on a
  random tabular MDP or the gridworld, plus APVI on the DP synthetic data.

Every seed resamples the dataset (stream [seed, 0]); tie-breaking uses stream [seed, 2] inside the methods. Privacy
noise comes from OS entropy unless ``noise_seed`` is set (then ``NoiseSource.reproducible(noise_seed + seed)``: a
replayable benchmark whose ledgers say "not DP"). The MDP instance is fixed (``mdp_seed``). Results are long-format
DataFrames, summarised as mean ± 95% normal CI over seeds.
"""
from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
from tqdm import tqdm

from privsynth.methods.dp_apvi import APVIConfig, apvi, dp_apvi, release_counts_sensitive
from privsynth.methods.dp_vapvi import PEVIConfig, VAPVIConfig, dp_vapvi, pevi, vapvi
from privsynth.methods.linear_mdp import behaviour_policy, synthetic_linear_mdp
from privsynth.methods.tabular_mdp import gridworld_mdp, random_tabular_mdp, uniform_policy
from privsynth.privacy.noise import NoiseSource

__all__ = ["LinearExperiment", "TabularExperiment", "run_linear", "run_tabular", "summarise", "markdown_table",
           "plot_gap", "approach_K", "write_results"]


@dataclass
class LinearExperiment:
    """Gap vs K on the synthetic linear MDP (defaults: the paper's section 5 simulation, scaled for CPU)."""

    H: int = 20
    A: int = 100
    mdp_seed: int = 0
    transition_mode: str = "two_alpha"
    reward_mode: str = "R1"
    normalize_features: bool = True
    behaviour_p0: float = 0.6
    Ks: list[int] = field(default_factory=lambda: [5, 10, 20, 50, 100, 200, 500, 1000, 3000, 10000, 30000, 100000])
    rhos: list[float] = field(default_factory=lambda: [10.0, 100.0])
    synthetic_rhos: list[float] = field(default_factory=lambda: [10.0, 100.0])  # route B (count release + VAPVI)
    seeds: int = 10
    vapvi: VAPVIConfig = field(default_factory=VAPVIConfig)
    pevi: PEVIConfig = field(default_factory=PEVIConfig)
    count_delta: float = 0.1  # utility δ for the count release threshold E
    noise_seed: int | None = None  # None: privacy noise from OS entropy; an int replays it (benchmarks only, not DP)


def _noise(noise_seed: int | None, seed: int) -> NoiseSource:
    return NoiseSource() if noise_seed is None else NoiseSource.reproducible(noise_seed + seed)


@dataclass
class TabularExperiment:
    """APVI vs DP-APVI vs n on a tabular MDP (a random tabular MDP; the paper has no tabular experiment)."""

    env: str = "random"  # "random" (S=5, A=3, H=10) or "gridworld"
    S: int = 5
    A: int = 3
    H: int = 10
    mdp_seed: int = 0
    ns: list[int] = field(default_factory=lambda: [100, 300, 1000, 3000, 10000, 30000, 100000])
    rhos: list[float] = field(default_factory=lambda: [0.1, 1.0, 10.0])
    laplace_epsilon: float | None = 1.0
    theory_rho: float | None = 1.0  # one DP-APVI curve with the theory constants (expected trivial: Theorem 3.3's constants clip every Q to 0)
    synthetic_rho: float | None = 1.0  # APVI on synthetic trajectories sampled from the count release
    behaviour_optimal_mix: float | None = None  # μ = mix·π* + (1−mix)·uniform; None: 0 (random MDP), 0.5 (gridworld)
    seeds: int = 10
    apvi: APVIConfig = field(default_factory=APVIConfig)
    noise_seed: int | None = None  # None: privacy noise from OS entropy; an int replays it (benchmarks only, not DP)


def _linear_mdp(cfg: LinearExperiment):
    return synthetic_linear_mdp(H=cfg.H, A=cfg.A, seed=cfg.mdp_seed, transition_mode=cfg.transition_mode,
                                reward_mode=cfg.reward_mode, normalize_features=cfg.normalize_features)


def run_linear(cfg: LinearExperiment, progress: bool = True) -> pd.DataFrame:
    """Rows (method, rho, K, seed, gap) for PEVI, VAPVI, DP-VAPVI(ρ) and VAPVI on DP synthetic data(ρ)."""
    mdp = _linear_mdp(cfg)
    H, S, A = mdp.tabular.shape
    mu = behaviour_policy(H, S, A, cfg.behaviour_p0)
    v_star, _ = mdp.tabular.optimal()
    rows: list[dict[str, Any]] = []
    jobs = [(K, seed) for K in cfg.Ks for seed in range(cfg.seeds)]
    for K, seed in tqdm(jobs, desc="dp-vapvi", disable=not progress):
        traj = mdp.sample(mu, K, np.random.default_rng([seed, 0]))
        noise = _noise(cfg.noise_seed, seed)

        def add(method: str, rho: float, pi: np.ndarray) -> None:
            rows.append({"method": method, "rho": rho, "K": K, "seed": seed, "gap": mdp.gap(pi), "v_star": v_star})

        add("PEVI", math.inf, pevi(traj, mdp.Phi, cfg.pevi, seed).policy)
        add("VAPVI", math.inf, vapvi(traj, mdp.Phi, cfg.vapvi, seed).policy)
        for rho in cfg.rhos:
            add("DP-VAPVI", rho, dp_vapvi(traj, mdp.Phi, rho, cfg.vapvi, seed, noise=noise).policy)
        for rho in cfg.synthetic_rhos:
            release = release_counts_sensitive(traj, S, A, noise, rho=rho,
                                               delta=cfg.count_delta, reward=None)
            syn = release.sample(K, np.random.default_rng([seed, 3]))
            add("VAPVI on DP synthetic", rho, vapvi(syn, mdp.Phi, cfg.vapvi, seed).policy)
    return pd.DataFrame(rows)


def _tabular_mdp(cfg: TabularExperiment):
    if cfg.env == "gridworld":
        return gridworld_mdp(H=cfg.H)
    return random_tabular_mdp(cfg.S, cfg.A, cfg.H, seed=cfg.mdp_seed)


def run_tabular(cfg: TabularExperiment, progress: bool = True) -> pd.DataFrame:
    """Rows (method, rho, K, seed, gap) for APVI, DP-APVI(ρ), DP-APVI Laplace(ε), DP-APVI theory, APVI on DP synthetic."""
    mdp = _tabular_mdp(cfg)
    H, S, A = mdp.shape
    v_star, pi_star = mdp.optimal()
    mix = cfg.behaviour_optimal_mix if cfg.behaviour_optimal_mix is not None else (0.5 if cfg.env == "gridworld" else 0.0)
    mu = mix * np.eye(A)[pi_star] + (1.0 - mix) * uniform_policy(H, S, A)
    rows: list[dict[str, Any]] = []
    jobs = [(n, seed) for n in cfg.ns for seed in range(cfg.seeds)]
    for n, seed in tqdm(jobs, desc="dp-apvi", disable=not progress):
        traj = mdp.sample(mu, n, np.random.default_rng([seed, 0]))
        noise = _noise(cfg.noise_seed, seed)

        def add(method: str, rho: float, pi: np.ndarray) -> None:
            rows.append({"method": method, "rho": rho, "K": n, "seed": seed, "gap": mdp.gap(pi), "v_star": v_star})

        add("APVI", math.inf, apvi(traj, mdp.R, S, A, cfg.apvi, seed).policy)
        for rho in cfg.rhos:
            add("DP-APVI", rho, dp_apvi(traj, mdp.R, S, A, rho=rho, cfg=cfg.apvi, seed=seed, noise=noise).policy)
        if cfg.laplace_epsilon:
            eps = cfg.laplace_epsilon
            add(f"DP-APVI Laplace (eps={eps:g})", eps**2 / 2,
                dp_apvi(traj, mdp.R, S, A, epsilon=eps, cfg=cfg.apvi, seed=seed, noise=noise).policy)
        if cfg.theory_rho:
            theory = APVIConfig.theory(delta=cfg.apvi.delta)
            add("DP-APVI theory constants", cfg.theory_rho,
                dp_apvi(traj, mdp.R, S, A, rho=cfg.theory_rho, cfg=theory, seed=seed, noise=noise).policy)
        if cfg.synthetic_rho:
            release = release_counts_sensitive(traj, S, A, noise, rho=cfg.synthetic_rho,
                                               delta=cfg.apvi.delta, reward=mdp.R)
            syn = release.sample(n, np.random.default_rng([seed, 3]))
            add("APVI on DP synthetic", cfg.synthetic_rho, apvi(syn, mdp.R, S, A, cfg.apvi, seed).policy)
    return pd.DataFrame(rows)


def _label(method: str, rho: float) -> str:
    return method if not math.isfinite(rho) or "eps=" in method else f"{method} (rho={rho:g})"


def summarise(df: pd.DataFrame) -> pd.DataFrame:
    """Mean gap and 95% normal CI half-width over seeds, per (label, K)."""
    df = df.assign(label=[_label(m, r) for m, r in zip(df["method"], df["rho"])])
    g = df.groupby(["label", "K"], sort=False)["gap"]
    out = g.agg(["mean", "std", "count"]).reset_index()
    out["ci95"] = 1.96 * out["std"].fillna(0.0) / np.sqrt(out["count"])
    return out


def markdown_table(summary: pd.DataFrame, x_name: str = "K") -> str:
    """One row per method, one column per K: 'mean ± ci'."""
    labels = list(dict.fromkeys(summary["label"]))
    Ks = sorted(summary["K"].unique())
    lines = [f"| method \\ {x_name} | " + " | ".join(str(k) for k in Ks) + " |",
             "|---|" + "---|" * len(Ks)]
    for lab in labels:
        sub = summary[summary["label"] == lab].set_index("K")
        cells = [f"{sub.loc[k, 'mean']:.3f} ± {sub.loc[k, 'ci95']:.3f}" if k in sub.index else "" for k in Ks]
        lines.append(f"| {lab} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def approach_K(summary: pd.DataFrame, label: str, reference: str, tol: float) -> int | None:
    """Smallest K from which the mean gap of ``label`` stays within ``tol`` of ``reference`` (None if never)."""
    a = summary[summary["label"] == label].set_index("K")["mean"]
    b = summary[summary["label"] == reference].set_index("K")["mean"]
    Ks = sorted(set(a.index) & set(b.index))
    ok = [abs(a[k] - b[k]) <= tol for k in Ks]
    for i, k in enumerate(Ks):
        if all(ok[i:]):
            return int(k)
    return None


def plot_gap(summary: pd.DataFrame, path: Path, title: str, x_name: str = "number of episodes K") -> None:
    """Log-x plot of mean gap ± 95% CI per method."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for lab in dict.fromkeys(summary["label"]):
        sub = summary[summary["label"] == lab].sort_values("K")
        ax.plot(sub["K"], sub["mean"], marker="o", ms=3, label=lab)
        ax.fill_between(sub["K"], sub["mean"] - sub["ci95"], sub["mean"] + sub["ci95"], alpha=0.15)
    ax.set_xscale("log")
    ax.set_xlabel(x_name)
    ax.set_ylabel("suboptimality gap v* − v^π̂")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _jsonable(cfg: Any) -> dict[str, Any]:
    return json.loads(json.dumps(asdict(cfg), default=str))


def write_results(df: pd.DataFrame, cfg: Any, out: Path, stem: str, title: str, x_name: str,
                  notes: Callable[[pd.DataFrame], str] | None = None) -> pd.DataFrame:
    """Write ``{stem}_raw.csv``, ``{stem}_table.md``, ``{stem}.png`` and ``{stem}_config.json`` under ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    summary = summarise(df)
    df.to_csv(out / f"{stem}_raw.csv", index=False)
    text = f"# {title}\n\nMean suboptimality gap ± 95% CI over {df['seed'].nunique()} seeds " \
           f"(v* = {df['v_star'].iloc[0]:.3f}).\n\n" + markdown_table(summary, x_name) + "\n"
    if notes is not None:
        text += "\n" + notes(summary) + "\n"
    (out / f"{stem}_table.md").write_text(text)
    (out / f"{stem}_config.json").write_text(json.dumps(_jsonable(cfg), indent=2))
    plot_gap(summary, out / f"{stem}.png", title, f"number of episodes {x_name}")
    return summary
