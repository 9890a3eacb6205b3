"""``privsynth methods dp-vapvi|dp-apvi|dp-apvi-release``: run the DP-VAPVI / DP-APVI experiments or write the
DP-APVI count release as a synthetic dataset. Logic lives in :mod:`privsynth.methods`."""
from __future__ import annotations

import argparse
from pathlib import Path

from privsynth.commands._types import float_list, int_list


def register(subparsers: argparse._SubParsersAction) -> None:
    from privsynth.commands._surface import hidden_parser

    # deprecated alias (one release) of `privsynth method`
    p = hidden_parser(subparsers, "methods", "method run dp-apvi|dp-vapvi (dp-apvi-release: method run dp-apvi --out-dataset ID)")
    sub = p.add_subparsers(dest="method", metavar="METHOD")
    p.set_defaults(func=lambda _args: (p.print_help(), 2)[1])

    lin = sub.add_parser("dp-vapvi", help="gap vs K on the synthetic linear MDP: PEVI, VAPVI, DP-VAPVI, VAPVI on DP synthetic data")
    lin.add_argument("--out", type=Path, default=Path("evaluation/dp_vapvi"),
                     help="folder for the results table and plot (default: %(default)s)")
    lin.add_argument("--ks", type=int_list, default=None, help="comma-separated episode counts K")
    lin.add_argument("--rhos", type=float_list, default=None, help="zCDP budgets of DP-VAPVI")
    lin.add_argument("--synthetic-rhos", type=float_list, default=None, help="budgets of the count release (route B)")
    lin.add_argument("--seeds", type=int, default=10, help="repetitions per point, seeds 0..N-1 (default: %(default)s)")
    lin.add_argument("--c-bonus", type=float, default=0.1, help="C in Γ = C√d‖φ‖ + D/K")
    lin.add_argument("--lam", type=float, default=0.01, help="ridge λ")
    lin.add_argument("--reward-mode", default="R1", choices=["orig", "R1", "R2"])
    lin.add_argument("--transition-mode", default="two_alpha", choices=["deterministic", "one_alpha", "two_alpha"])
    lin.set_defaults(func=_run_linear)

    tab = sub.add_parser("dp-apvi", help="gap vs n on a tabular MDP: APVI, DP-APVI (Gaussian, Laplace, theory), APVI on DP synthetic data")
    tab.add_argument("--out", type=Path, default=Path("evaluation/dp_vapvi"),
                     help="folder for the results table and plot (default: %(default)s)")
    tab.add_argument("--env", default="random", choices=["random", "gridworld"],
                     help="tabular MDP: a random one or the gridworld (default: %(default)s)")
    tab.add_argument("--ns", type=int_list, default=None, help="comma-separated episode counts n (default: the experiment's)")
    tab.add_argument("--rhos", type=float_list, default=None, help="zCDP budgets of DP-APVI (default: the experiment's)")
    tab.add_argument("--seeds", type=int, default=10, help="repetitions per point, seeds 0..N-1 (default: %(default)s)")
    tab.add_argument("--horizon", type=int, default=None, help="episode length H (default: the environment's)")
    tab.set_defaults(func=_run_tabular)

    rel = sub.add_parser("dp-apvi-release", help="write DP-APVI's noisy counts as a synthetic Minari dataset with a privacy card")
    rel.add_argument("dataset_id", help="Minari id of the synthetic dataset to write, e.g. privsynth/gridworld/dp-counts-v0")
    rel.add_argument("--env", default="gridworld", choices=["random", "gridworld"],
                     help="tabular MDP the sensitive episodes come from (default: %(default)s)")
    rel.add_argument("--episodes", type=int, default=10000, help="sensitive episodes generated from the behaviour policy")
    rel.add_argument("--synthetic-episodes", type=int, default=None, help="synthetic episodes to sample (default: as many)")
    rel.add_argument("--rho", type=float, default=1.0, help="zCDP budget ρ of the noisy counts (default: %(default)s)")
    rel.add_argument("--delta", type=float, default=1e-5, help="privacy δ for the ε on the card")
    rel.add_argument("--epsilon-budget", type=float, required=True, help="refuse to write if ε at δ exceeds this")
    rel.add_argument("--seed", type=int, default=0,
                     help="seed of the public MDP instance and of sampling the release (the sensitive episodes and the privacy noise come from OS entropy; default: %(default)s)")
    rel.add_argument("--overwrite", action="store_true", help="replace an existing dataset with this id")
    rel.set_defaults(func=_run_release)


def _run_linear(args: argparse.Namespace) -> int:
    from privsynth.methods.apvi_experiments import LinearExperiment, approach_K, run_linear, write_results
    from privsynth.methods.dp_vapvi import VAPVIConfig

    cfg = LinearExperiment(seeds=args.seeds, reward_mode=args.reward_mode, transition_mode=args.transition_mode,
                           vapvi=VAPVIConfig(c_bonus=args.c_bonus, lam=args.lam))
    if args.ks:
        cfg.Ks = args.ks
    if args.rhos:
        cfg.rhos = args.rhos
    if args.synthetic_rhos is not None:
        cfg.synthetic_rhos = args.synthetic_rhos
    df = run_linear(cfg)

    def notes(summary):
        lines = []
        for rho in cfg.rhos:
            for tol in (0.5, 0.1):
                k = approach_K(summary, f"DP-VAPVI (rho={rho:g})", "VAPVI", tol)
                lines.append(f"- DP-VAPVI (rho={rho:g}) stays within {tol} of VAPVI from K = {k if k else 'never (in this grid)'}")
        return "\n".join(lines)

    summary = write_results(df, cfg, args.out, "linear_gap_vs_K", "Synthetic linear MDP (H=20, 2 states, 100 actions, d=10)",
                            "K", notes)
    print(notes(summary))
    print(f"wrote {args.out}/linear_gap_vs_K_table.md and .png")
    return 0


def _run_tabular(args: argparse.Namespace) -> int:
    from privsynth.methods.apvi_experiments import TabularExperiment, approach_K, run_tabular, write_results

    cfg = TabularExperiment(env=args.env, seeds=args.seeds)
    if args.horizon:
        cfg.H = args.horizon
    elif args.env == "gridworld":
        cfg.H = 12
    if args.ns:
        cfg.ns = args.ns
    if args.rhos:
        cfg.rhos = args.rhos
    df = run_tabular(cfg)

    def notes(summary):
        return "\n".join(
            f"- DP-APVI (rho={rho:g}) stays within {tol} of APVI from n = {approach_K(summary, f'DP-APVI (rho={rho:g})', 'APVI', tol) or 'never (in this grid)'}"
            for rho in cfg.rhos for tol in (0.1, 0.02))

    stem = f"tabular_{args.env}_gap_vs_n"
    summary = write_results(df, cfg, args.out, stem, f"Tabular MDP ({args.env}): APVI vs DP-APVI", "n", notes)
    print(notes(summary))
    print(f"wrote {args.out}/{stem}_table.md and .png")
    return 0


def _run_release(args: argparse.Namespace) -> int:
    from privsynth.methods.dp_apvi_release import release_synthetic_dataset

    path = release_synthetic_dataset(args.dataset_id, env=args.env, n_episodes=args.episodes, rho=args.rho,
                                     n_synthetic=args.synthetic_episodes, privacy_delta=args.delta,
                                     epsilon_budget=args.epsilon_budget, seed=args.seed, overwrite=args.overwrite)
    print(f"wrote synthetic dataset {args.dataset_id} to {path}")
    return 0
