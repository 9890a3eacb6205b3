"""Kickstarting suite on Acrobot-v1 (scaled down): teacher, then 6 student configurations x seeds; curves + table.

    OMP_NUM_THREADS=1 python scripts/run_kickstart_suite.py --out evaluation/kickstarting --seeds 5 --epochs 30 --workers 2

Runs already stored under OUT/runs are kept (delete them to re-run). Re-run only the summary/plot from stored runs
with ``--summarise-only``; the table uses only the seeds every configuration has finished.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from privsynth.methods.kickstart.experiments import CONFIGS, SuiteConfig, run_student, summarise, train_teacher


def _job(args: tuple[str, int, SuiteConfig, Path]) -> str:
    torch.set_num_threads(1)
    name, seed, cfg, out = args
    if (out / "runs" / f"{name}_s{seed}.json").exists():
        return f"{name} seed {seed}: stored run kept"
    t0 = time.time()
    try:
        rec = run_student(name, seed, cfg, out)
    except Exception as exc:  # one failed run must not stop the suite; it is reported and missing from the table
        return f"{name} seed {seed}: FAILED {type(exc).__name__}: {exc}"
    last = [e["ep_return"] for e in rec["curve"]][-5:]
    return f"{name} seed {seed}: {time.time() - t0:.0f}s, last-5 returns {np.round(last, 1).tolist()}"


def plot(table: dict, out: Path, threshold: float, teacher_return: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(table)
    fig, axes = plt.subplots(1, 2, figsize=(13, 4.8), sharey=True)
    groups = [
        ("silent teacher", ["ppo", "nonprivate", "unaware-silent", "aware-silent"]),
        ("sampling teacher (k keeps decaying, no budget)", ["ppo", "nonprivate", "unaware-sampling", "aware-sampling"]),
    ]
    colours = {"ppo": "black", "nonprivate": "tab:green", "unaware-silent": "tab:red", "aware-silent": "tab:blue",
               "unaware-sampling": "tab:red", "aware-sampling": "tab:blue"}
    for ax, (title, group) in zip(axes, groups):
        for name in [g for g in group if g in names]:
            row = table[name]
            c = np.asarray(row["curves"])
            x = np.arange(1, c.shape[1] + 1) * row["steps_per_epoch"]
            med = np.nanmedian(c, axis=0)
            lo, hi = np.nanpercentile(c, 15, axis=0), np.nanpercentile(c, 85, axis=0)
            label = f"{name} (n={len(row['seeds'])})"
            ax.plot(x, med, color=colours[name], label=label, ls="--" if name == "ppo" else "-")
            ax.fill_between(x, lo, hi, color=colours[name], alpha=0.15)
        ax.axhline(teacher_return, color="grey", lw=0.8, ls=":", label=f"teacher (64x64) {teacher_return:.0f}")
        ax.axhline(threshold, color="grey", lw=0.8, ls="-.", label=f"threshold {threshold:.0f}")
        ax.set_title(title)
        ax.set_xlabel("environment steps")
        ax.legend(fontsize=8, loc="lower right")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("episode return (3-epoch trailing mean)")
    fig.suptitle("Kickstarting on Acrobot-v1: median and 15-85 percentile band over seeds")
    fig.tight_layout()
    fig.savefig(out / "curves.png", dpi=110)


def write_table(table: dict, out: Path, threshold: float, cfg: SuiteConfig, teacher: dict) -> str:
    lines = [
        f"Teacher: PPO {teacher['hidden']} on {teacher['env_id']}, {teacher['epochs']} epochs x 1000 steps; eval return "
        f"{teacher['eval_return']:.1f} (restricted eta={cfg.eta}: {teacher['eval_return_restricted']:.1f}); "
        f"L (restricted) = {teacher['lipschitz_restricted']:.3f}, b = {cfg.b:g}.",
        "",
        f"| config | seeds | AUC (mean return) | final (last 5 epochs) | steps to {threshold:.0f} (per seed) | "
        "teacher answers | query eps (sum) | query delta (sum) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, r in table.items():
        stt = ", ".join("never" if math.isinf(s) else f"{s / 1000:.0f}k" for s in r["steps_to_threshold"])
        lines.append(
            f"| {name} | {len(r['seeds'])} | {r['auc_mean']:.1f} ± {r['auc_std']:.1f} | {r['final_mean']:.1f} ± "
            f"{r['final_std']:.1f} | {stt} | {r['answered_mean']:.0f} | {r['query_eps_mean']:.3g} | "
            f"{r['query_delta_mean']:.3g} |"
        )
    lines.append("")
    lines.append("Per-seed AUC:")
    for name, r in table.items():
        lines.append(f"- {name}: " + ", ".join(f"s{s}={a:.1f}" for s, a in zip(r["seeds"], r["auc_per_seed"])))
    lines += ["", "Paired comparisons (same seeds: same env seeds and teacher noise RNG):", ""]
    for a, b in (("aware-silent", "unaware-silent"), ("aware-sampling", "unaware-sampling"),
                 ("unaware-silent", "ppo"), ("aware-silent", "ppo"), ("nonprivate", "ppo")):
        if a in table and b in table and table[a]["seeds"] == table[b]["seeds"]:
            for metric in ("auc", "final"):
                d = np.asarray(table[a][f"{metric}_per_seed"]) - np.asarray(table[b][f"{metric}_per_seed"])
                sd = f" ± {d.std(ddof=1):.1f} (sd)" if len(d) > 1 else ""
                lines.append(f"- {a} minus {b}, {metric}: mean {d.mean():+.1f}{sd}; {a} ahead on {(d > 0).sum()} of "
                             f"{len(d)} seeds; per seed {np.round(d, 1).tolist()}")
    text = "\n".join(lines) + "\n"
    (out / "table.md").write_text(text)
    return text


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=Path("evaluation/kickstarting"))
    ap.add_argument("--env", default="Acrobot-v1")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--epochs", type=int, default=30, help="student epochs of 1000 steps")
    ap.add_argument("--teacher-epochs", type=int, default=60)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--threshold", type=float, default=-100.0, help="return level for steps-to-threshold")
    ap.add_argument("--retrain-teacher", action="store_true")
    ap.add_argument("--summarise-only", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    base = SuiteConfig()
    cfg = replace(base, env_id=args.env, teacher_epochs=args.teacher_epochs,
                  student=replace(base.student, epochs=args.epochs))
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    if not args.summarise_only:
        if args.retrain_teacher or not (out / "teacher.pt").exists():
            t0 = time.time()
            info = train_teacher(cfg, out, progress=lambda r: print(f"teacher epoch {r.epoch}: {r.ep_return:.1f}", flush=True)
                                 if r.epoch % 10 == 9 else None)
            print(f"teacher: {time.time() - t0:.0f}s, eval {info['eval_return']:.1f}, restricted "
                  f"{info['eval_return_restricted']:.1f}, L {info['lipschitz_restricted']:.3f}", flush=True)
        jobs = [(name, seed, cfg, out) for seed in range(args.seeds) for name in args.configs.split(",")]
        with mp.get_context("spawn").Pool(args.workers) as pool:
            for msg in pool.imap_unordered(_job, jobs):
                print(msg, flush=True)
    teacher = json.loads((out / "teacher.json").read_text())
    table = summarise(out, args.threshold)
    (out / "summary.json").write_text(json.dumps({k: {kk: vv for kk, vv in v.items() if kk != "curves"}
                                                  for k, v in table.items()}, indent=1))
    plot(table, out, args.threshold, teacher["eval_return"])
    print(write_table(table, out, args.threshold, cfg, teacher))


if __name__ == "__main__":
    main()
