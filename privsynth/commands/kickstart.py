"""``privsynth kickstart cost|teacher|bc-teacher|student|summarise``: privacy-preserving kickstarting
(Gohari et al. 2021). Logic lives in :mod:`privsynth.methods.kickstart`; see docs/kickstarting.md."""
from __future__ import annotations

import argparse
import json
import math
from dataclasses import replace
from pathlib import Path

from privsynth.commands._types import float_list


def _suite_cfg(args: argparse.Namespace):
    from privsynth.methods.kickstart.experiments import SuiteConfig

    base = SuiteConfig()
    kw = {k: getattr(args, k) for k in ("eta", "b", "k0", "c", "k_min", "lam") if getattr(args, k, None) is not None}
    student = replace(base.student, epochs=getattr(args, "epochs", None) or base.student.epochs)
    return replace(base, env_id=args.env, student=student, **kw)


def register(subparsers: argparse._SubParsersAction) -> None:
    from privsynth.commands._surface import hidden_parser

    # deprecated alias (one release) of `privsynth method`
    p = hidden_parser(subparsers, "kickstart", "method run kickstart")
    sub = p.add_subparsers(dest="kick_cmd", metavar="COMMAND")
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])

    c = sub.add_parser("cost", help="per-query (epsilon, delta) of the Dirichlet mechanism (Theorem 1) for some k")
    c.add_argument("--k", type=float_list, default=[5.0, 1.0, 0.5, 0.1, 0.05])
    c.add_argument("--m", type=int, required=True, help="number of actions")
    c.add_argument("--eta", type=float, default=0.1)
    c.add_argument("--lipschitz", type=float, required=True, help="L of the restricted teacher (raw observation units)")
    c.add_argument("--b", type=float, required=True, help="adjacency radius on query observations (L2)")
    c.add_argument("--delta-per-query", type=float, default=1e-6)
    c.add_argument("--beta", type=float, default=0.05, help="student's beta for the radius column")
    c.add_argument("--lam", type=float, default=0.5, help="student's lambda for the radius column")
    c.set_defaults(func=_cost)

    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--out", type=Path, default=Path("evaluation/kickstarting"), help="suite directory")
    common.add_argument("--env", default="Acrobot-v1", help="discrete-action gymnasium id")

    t = sub.add_parser("teacher", parents=[common], help="train the (64, 64) PPO teacher into OUT/teacher.pt")
    t.add_argument("--epochs", type=int, default=80, help="teacher epochs of 1000 steps")
    t.add_argument("--seed", type=int, default=0)
    t.set_defaults(func=_teacher)

    bc = sub.add_parser("bc-teacher", parents=[common],
                        help="behaviour-cloning teacher on a stored non-sensitive (e.g. DP synthetic) dataset")
    bc.add_argument("dataset_id")
    bc.add_argument("--epochs", type=int, default=30)
    bc.add_argument("--seed", type=int, default=0)
    bc.set_defaults(func=_bc_teacher)

    s = sub.add_parser("student", parents=[common], help="train one student configuration against OUT's teacher")
    s.add_argument("--config", required=True, help="ppo, nonprivate, unaware-sampling, unaware-silent, aware-sampling, aware-silent")
    s.add_argument("--seed", type=int, default=0)
    s.add_argument("--epochs", type=int, default=None, help="student epochs of 1000 steps (default 30)")
    for name in ("eta", "b", "k0", "c", "k_min", "lam"):
        s.add_argument(f"--{name.replace('_', '-')}", dest=name, type=float, default=None)
    s.set_defaults(func=_student)

    su = sub.add_parser("summarise", parents=[common], help="table of the stored student runs in OUT/runs")
    su.add_argument("--threshold", type=float, default=-100.0)
    su.set_defaults(func=_summarise)


def _cost(args: argparse.Namespace) -> int:
    from privsynth.methods.kickstart.dirichlet import DirichletMechanism, concentration_radius

    mech = DirichletMechanism(m=args.m, L=args.lipschitz, b=args.b, eta=args.eta, delta_per_query=args.delta_per_query)
    print(f"protects: one query observation, L2 radius b={args.b:g} (input-metric DP; not dataset DP)")
    print(f"{'k':>8} {'epsilon':>10} {'delta':>10} {'log tau':>12} {'alpha':>7}")
    for k in args.k:
        q = mech.cost(k)
        print(f"{k:8.4g} {q.epsilon:10.4g} {q.delta:10.3g} {q.log_tau:12.5g} "
              f"{float(concentration_radius(k, args.beta, args.lam)):7.3f}")
    return 0


def _teacher(args: argparse.Namespace) -> int:
    from tqdm.auto import tqdm

    from privsynth.methods.kickstart.experiments import train_teacher

    cfg = replace(_suite_cfg(args), teacher_epochs=args.epochs)
    bar = tqdm(total=args.epochs, desc="teacher epochs")
    info = train_teacher(cfg, args.out, seed=args.seed, progress=lambda r: (bar.update(1), bar.set_postfix(ret=r.ep_return)))
    bar.close()
    print(json.dumps({k: v for k, v in info.items() if k != "train_curve"}, indent=1))
    return 0


def _bc_teacher(args: argparse.Namespace) -> int:
    from privsynth.methods.kickstart.experiments import teacher_from_dataset

    info = teacher_from_dataset(args.dataset_id, _suite_cfg(args), args.out, epochs=args.epochs, seed=args.seed)
    print(json.dumps(info, indent=1))
    return 0


def _student(args: argparse.Namespace) -> int:
    from privsynth.methods.kickstart.experiments import run_student

    rec = run_student(args.config, args.seed, _suite_cfg(args), args.out)
    rets = [e["ep_return"] for e in rec["curve"]]
    print(f"{args.config} seed {args.seed}: returns per epoch {[round(r, 1) for r in rets]}")
    print(f"teacher answered {rec['teacher_answered']} of {rec['teacher_asked']} queries")
    if "query_ledger" in rec:
        q = rec["query_ledger"]
        print(f"query ledger ({q['unit']}): epsilon {q['epsilon']:.4g}, delta {q['delta']:.3g} over {q['queries']} "
              f"answers; {q['composition']}")
    return 0


def _summarise(args: argparse.Namespace) -> int:
    from privsynth.methods.kickstart.experiments import summarise

    table = summarise(args.out, args.threshold)
    for name, r in table.items():
        stt = ["never" if math.isinf(s) else f"{s:.0f}" for s in r["steps_to_threshold"]]
        print(f"{name:18s} n={len(r['seeds'])} AUC {r['auc_mean']:.1f}±{r['auc_std']:.1f} final "
              f"{r['final_mean']:.1f}±{r['final_std']:.1f} steps-to-{args.threshold:g} {stt}")
    return 0
