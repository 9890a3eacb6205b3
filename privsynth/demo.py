"""The end-to-end demo behind ``make demo`` / ``privsynth demo``.

On the embedded default it generates a small public PointMaze corpus (other maps) and a sensitive umaze set, splits the
sensitive set by episode into members (the fine-tuning records) and held-out non-members, pre-trains the PrivORL-n
synthesizer on the public data with curiosity, DP fine-tunes it on the members (ε = 10), samples from the EMA weights,
releases the synthetic set through the release guard, evaluates fidelity (and optionally agents) against the members,
audits the released weights with membership inference, and writes ``report.md`` / ``report.json``.

This module only orchestrates library calls; it sits to the right of every layer (data -> privacy -> synth -> release
-> evaluation) and nothing imports it.
"""
from __future__ import annotations

import dataclasses
import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

__all__ = ["DemoConfig", "run_demo"]


@dataclass
class DemoConfig:
    """The embedded default: small enough for a few minutes on 2 CPU cores."""

    out: str = "demo-output"
    public_mazes: tuple[str, ...] = ("open", "medium")  # PrivORL pre-trains on the sibling maps of the sensitive one
    sensitive_maze: str = "umaze"
    public_steps: int = 20_000  # per public map
    sensitive_steps: int = 50_000  # measured: marginal 0.927 at ε=10 (0.889 with 20k steps: DP noise needs more data)
    dense: bool = True  # maze2d-umaze-dense, as PrivORL's main table
    seed: int = 0
    member_fraction: float = 0.8  # members fine-tune the model; the rest are the audit's non-members (PrivORL: 0.8)
    epsilon: float = 10.0
    delta: float = 1e-5  # must stay below 1/N for the N member transitions
    unit: str = "transition"
    n_samples: int = 20_000
    ref_episodes: int = 20  # episodes per reference policy (random / noiseless controller)
    agents: tuple[str, ...] = ()  # e.g. ("td3bc",): trained on the synthetic data, scored in the real env
    agent_updates: int = 5_000
    agent_seeds: tuple[int, ...] = (0,)
    audit_units: int = 1000
    data_workers: int = 2  # processes generating the PointMaze sets at once (the demo machine has 2 cores)
    # torch intra-op threads; None: the cores left idle by other jobs (cores minus the 1-minute load average, at
    # least 1). On a shared machine a thread per busy core stalls every parallel op behind a descheduled thread
    # (measured: a DP fine-tune step took 2.8 s with 2 threads at load 7, against 0.15 s with 1 thread).
    threads: int | None = None
    store: str | None = None  # Minari store; default: <out>/minari (the demo never touches your own store)
    extra: dict[str, Any] = field(default_factory=dict)


def _dataset(dataset_id: str, make: Callable[[], Any], log: Callable[[str], None]):
    from privsynth.data import minari_io

    if minari_io.dataset_exists(dataset_id):
        log(f"  reusing {dataset_id}")
        return minari_io.load_dataset(dataset_id)
    ds = make()
    minari_io.write_dataset(ds, dataset_id, overwrite=True)
    log(f"  wrote {dataset_id}: {ds.n_episodes} episodes, {ds.n_transitions} transitions")
    return ds


def _generate_and_write(job: tuple[str, Any]) -> str:
    """Worker: generate one PointMaze set and write it to the Minari store (a child process of the demo)."""
    from privsynth.data import minari_io
    from privsynth.data.pointmaze import generate_pointmaze

    dataset_id, pc = job
    ds = generate_pointmaze(pc, False)
    minari_io.write_dataset(ds, dataset_id, overwrite=True)
    return f"  wrote {dataset_id}: {ds.n_episodes} episodes, {ds.n_transitions} transitions"


def _datasets(jobs: list[tuple[str, Any]], workers: int, progress: bool, log: Callable[[str], None]) -> list[Any]:
    """Generate (or reuse) each ``(dataset_id, PointMazeConfig)``; missing sets are made by up to ``workers``
    processes at once (each collection run is one sequential simulation, deterministic under its seed, so the sets
    are the same whichever process makes them), then every set is read back from the store."""
    from privsynth.data import minari_io
    from privsynth.data.pointmaze import generate_pointmaze

    missing = [job for job in jobs if not minari_io.dataset_exists(job[0])]
    if len(missing) > 1 and workers > 1:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        missing.sort(key=lambda job: -job[1].steps)  # longest first: the pool then balances the rest
        ctx = multiprocessing.get_context("fork")
        with ProcessPoolExecutor(max_workers=min(workers, len(missing)), mp_context=ctx) as pool:
            for line in pool.map(_generate_and_write, missing):
                log(line)
        return [minari_io.load_dataset(dataset_id) for dataset_id, _ in jobs]
    return [_dataset(dataset_id, lambda pc=pc: generate_pointmaze(pc, progress), log) for dataset_id, pc in jobs]


def _idle_cores() -> int:
    cores = os.cpu_count() or 1
    try:
        load = os.getloadavg()[0]
    except OSError:  # not available on this platform
        return cores
    return max(1, min(cores, int(cores - load + 0.5)))


def run_demo(cfg: DemoConfig, *, progress: bool = True, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the whole pipeline; return the report dict (also written to ``<out>/report.json`` and ``report.md``)."""
    import torch

    before = torch.get_num_threads()
    threads = cfg.threads or _idle_cores()
    torch.set_num_threads(threads)
    log(f"torch threads: {threads}")
    try:
        return _run(cfg, progress, log)
    finally:
        torch.set_num_threads(before)


def _run(cfg: DemoConfig, progress: bool, log: Callable[[str], None]) -> dict[str, Any]:
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    store = Path(cfg.store) if cfg.store else out / "minari"
    os.environ["MINARI_DATASETS_PATH"] = str(store.resolve())

    from privsynth.data.pointmaze import PointMazeConfig
    from privsynth.evaluation.mia import ReferenceAttack, LossAttack, as_adapter, plot_roc, run_audit
    from privsynth.evaluation.report import evaluate_synthetic
    from privsynth.release import synthesize
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.config import demo_config

    seconds: dict[str, float] = {}
    t_all = time.perf_counter()
    suffix = "-dense" if cfg.dense else ""

    log("1/5 data: public and sensitive PointMaze sets (generated locally)")
    t0 = time.perf_counter()
    jobs = [(f"privsynth/demo-public-{maze}{suffix}-v0",
             PointMazeConfig(maze=maze, steps=cfg.public_steps, seed=cfg.seed + 1 + i, dense=cfg.dense,
                             ref_episodes=cfg.ref_episodes))
            for i, maze in enumerate(cfg.public_mazes)]
    jobs.append((f"privsynth/demo-sensitive-{cfg.sensitive_maze}{suffix}-v0",
                 PointMazeConfig(maze=cfg.sensitive_maze, steps=cfg.sensitive_steps, seed=cfg.seed, dense=cfg.dense,
                                 ref_episodes=cfg.ref_episodes)))
    *publics, sensitive = _datasets(jobs, cfg.data_workers, progress, log)
    sensitive = sensitive.mark_sensitive(True)
    members, non_members = sensitive.split_episodes(cfg.member_fraction, seed=cfg.seed)
    log(f"  members: {members.n_episodes} episodes / {members.n_transitions} transitions; "
        f"non-members: {non_members.n_episodes} / {non_members.n_transitions}")
    seconds["data"] = time.perf_counter() - t0

    log(f"2/5 synthesize: pre-train on public, DP fine-tune on members (ε={cfg.epsilon:g}, δ={cfg.delta:g}, "
        f"unit={cfg.unit}), sample {cfg.n_samples} from the EMA weights, guarded release")
    t0 = time.perf_counter()
    synthetic_id = f"privsynth/demo-synthetic-{cfg.sensitive_maze}{suffix}-eps{cfg.epsilon:g}-v0"
    result = synthesize(
        members,
        epsilon=cfg.epsilon,
        delta=cfg.delta,
        public=publics,
        unit=cfg.unit,  # type: ignore[arg-type]
        n=cfg.n_samples,
        config=demo_config(),
        out_dataset=synthetic_id,
        overwrite=True,
        workdir=out / "work",
        progress=progress,
    )
    seconds.update({f"synth_{k}": v for k, v in result.seconds.items()})
    seconds["synthesize"] = time.perf_counter() - t0
    # what synthesize() spends besides its own stages: release checks and writing the Minari dataset
    seconds["release"] = seconds["synthesize"] - sum(seconds.get(f"synth_{k}", 0.0)
                                                      for k in ("pretrain", "finetune", "sample"))
    synthetic = result.dataset
    log(f"  released {synthetic_id}: {synthetic.n_transitions} transitions, spent ε = {result.epsilon:.3f} "
        f"(budget {cfg.epsilon:g}) at δ = {cfg.delta:g}")

    log("3/5 evaluate: fidelity, RL-aware checks" + (f", agents {', '.join(cfg.agents)}" if cfg.agents else ""))
    t0 = time.perf_counter()
    evaluation = evaluate_synthetic(
        synthetic,
        members,
        agents=cfg.agents,
        seeds=cfg.agent_seeds,
        num_updates=cfg.agent_updates,
        agents_on_real=bool(cfg.agents),
        public=publics[0],
        out=out / "evaluation.json",
        progress=progress,
    )
    seconds["evaluate"] = time.perf_counter() - t0

    log("4/5 audit: membership inference on the released (EMA) weights, members vs held-out non-members")
    t0 = time.perf_counter()
    reference = as_adapter(TransitionSynthesizer.load(out / "work" / "pretrained.pt"))
    attacks = [LossAttack(sigma=0.1, repeats=16), ReferenceAttack(LossAttack(sigma=0.1, repeats=16), reference)]
    audit = run_audit(result.synthesizer, members, non_members, attacks, unit=cfg.unit, max_units=cfg.audit_units,
                      seed=cfg.seed)
    plot_roc(audit, str(out / "audit_roc.png"), title=f"MIA on the ε={cfg.epsilon:g} synthesizer")
    (out / "audit.json").write_text(json.dumps(audit, indent=1))
    seconds["audit"] = time.perf_counter() - t0
    seconds["total"] = time.perf_counter() - t_all

    log("5/5 report")
    report = {
        "config": dataclasses.asdict(cfg),
        "datasets": {
            "public": [p.info.name for p in publics],
            "sensitive": sensitive.info.name,
            # sizes only: they are treated as public (the card says so); other statistics of the
            # sensitive data (returns, rates) would be unaccounted releases and stay out of the report's header
            "members": {"episodes": members.n_episodes, "transitions": members.n_transitions},
            "non_members": {"episodes": non_members.n_episodes, "transitions": non_members.n_transitions},
            "synthetic": synthetic_id,
        },
        "privacy_card": result.ledger.card(),
        "fidelity": evaluation.get("fidelity"),
        "trajscore": evaluation.get("trajscore"),
        "rl_checks": evaluation.get("rl_checks"),
        "agents": evaluation.get("agents"),
        "audit": {name: {k: v for k, v in a.items() if k != "roc"} for name, a in audit["attacks"].items()},
        "seconds": seconds,
    }
    (out / "report.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "report.md").write_text(_render(report, result.ledger.render_markdown(), out))
    stages = ("data", "synth_pretrain", "synth_finetune", "synth_sample", "release", "evaluate", "audit")
    log("time (s): " + ", ".join(f"{k.removeprefix('synth_')} {seconds[k]:.1f}" for k in stages if k in seconds)
        + f"; total {seconds['total']:.1f}")
    log(f"wrote {out / 'report.md'} (total {seconds['total']:.0f} s)")
    return report


def _num(x: Any, digits: int = 3) -> str:
    return f"{x:.{digits}f}" if isinstance(x, (int, float)) else "–"


def _render(report: dict[str, Any], card_md: str, out: Path) -> str:
    cfg, sec = report["config"], report["seconds"]
    fid = report.get("fidelity") or {}
    lines = [
        "# privsynth demo report",
        "",
        f"Sensitive data: `{report['datasets']['sensitive']}` (members {report['datasets']['members']['transitions']}"
        f" transitions; non-members {report['datasets']['non_members']['transitions']}). Public pre-training data: "
        + ", ".join(f"`{p}`" for p in report["datasets"]["public"])
        + f". Released synthetic dataset: `{report['datasets']['synthetic']}` in the Minari store `{cfg['store'] or str(out / 'minari')}`.",
        "",
        card_md.strip(),
        "",
        "## What the card covers, and what it does not",
        "",
        "The guarantee above covers the released synthetic dataset and the fine-tuned weights. **Every section below "
        "marked _internal, not DP_ is computed from the sensitive data without any privacy mechanism** (fidelity "
        "against the members, RL checks on the members, the membership-inference audit, the t-SNE of the members in "
        "evaluation.md): it is for the data holder's own assessment and must not be published with the release.",
        "",
        "## Fidelity (synthetic vs the members it was fine-tuned on; internal, not DP)",
        "",
        "| metric | value |",
        "|---|---|",
        f"| marginal (1 − mean KS) | {_num(fid.get('marginal'))} |",
        f"| correlation similarity | {_num(fid.get('correlation'))} |",
    ]
    ts = report.get("trajscore") or {}
    if isinstance(ts, dict) and isinstance(ts.get("trajscore"), (int, float)):
        lines.append(f"| TrajScore | {_num(ts['trajscore'])} |")
    rl = report.get("rl_checks") or {}
    if isinstance(rl, dict) and "synthetic" in rl:
        syn, real = rl["synthetic"], rl.get("real", {})
        lines += [
            "",
            f"## RL-aware checks (against the simulator, {rl.get('adapter', '?')} adapter; internal, not DP)",
            "",
            "| check | synthetic | real |",
            "|---|---|---|",
        ]
        for group, key, label in (
            ("dynamics", "within_tol", "dynamics consistency: next state within tolerance"),
            ("dynamics", "median_error", "dynamics: median next-state error"),
            ("reward", "within_tol", "reward consistency: within tolerance"),
        ):
            lines.append(f"| {label} | {_num((syn.get(group) or {}).get(key))} | {_num((real.get(group) or {}).get(key))} |")
        cov = rl.get("coverage") or {}
        lines.append(f"| states in valid maze cells | {_num(1 - cov['synthetic_invalid_rate']) if 'synthetic_invalid_rate' in cov else '–'} "
                     f"| {_num(1 - cov['real_invalid_rate']) if 'real_invalid_rate' in cov else '–'} |")
    agents = report.get("agents")
    if agents:
        lines += ["", "## Agents (normalised score, real environment; trained on the released data, public)", "", "```", json.dumps(agents, indent=1, default=str)[:3000], "```"]
    lines += [
        "",
        "## Membership-inference audit (members = fine-tuning records; positive class; internal, not DP)",
        "",
        "| attack | AUC | TPR@1% FPR | TPR@10% FPR |",
        "|---|---|---|---|",
    ]
    for name, a in report["audit"].items():
        t = a.get("tpr_at_fpr", {})
        lines.append(f"| {name} | {_num(a.get('auc'))} | {_num(t.get('0.01'))} | {_num(t.get('0.1'))} |")
    lines += [
        "",
        "![ROC](audit_roc.png)",
        "",
        "Full evaluation (internal, not DP): [evaluation.md](evaluation.md) (t-SNE, RL-aware checks, per-column scores).",
        "",
        "## Time (seconds)",
        "",
        "| stage | s |",
        "|---|---|",
    ]
    lines += [f"| {k} | {v:.1f} |" for k, v in sec.items()]
    lines += ["", f"Reproduce: `privsynth demo --out {out}` (seed {cfg['seed']})."]
    return "\n".join(lines) + "\n"
