"""``privsynth demo``: the whole pipeline on the embedded default (see :mod:`privsynth.demo`)."""
from __future__ import annotations

import argparse

from privsynth.data.units import DATA_UNITS
from privsynth.commands._types import positive_int, require_counts
from privsynth.errors import InvalidData


def register(subparsers) -> None:
    from privsynth.commands._surface import example
    from privsynth.demo import DemoConfig

    d = DemoConfig()
    p = subparsers.add_parser(
        "demo",
        help="generate PointMaze data, pre-train, DP fine-tune, sample, evaluate, audit, write a report",
        description="Run privsynth end to end on a small locally generated PointMaze task (a few minutes on 2 CPU "
        "cores). Datasets go to <out>/minari unless --store is given; the report is <out>/report.md, the audit "
        "<out>/audit.md (its verdict on the card's ε, and the privsynth audit command that repeats it).",
        epilog=example("demo --epsilon 10 --out demo-out"),
    )
    p.add_argument("--out", default=d.out, metavar="DIR", help="output folder (default: %(default)s)")
    p.add_argument("--epsilon", type=float, default=d.epsilon, help="privacy budget ε (default: %(default)s)")
    p.add_argument("--delta", type=float, default=d.delta, help="δ (default: %(default)s)")
    p.add_argument("--unit", choices=DATA_UNITS, default=d.unit, metavar="UNIT",
                   help="privacy unit, transition | trajectory; the sensitive set is split into members and non-members at this unit (by "
                   "transition, or by episode for trajectory), so the audit can test the card's ε (default: "
                   "%(default)s)")
    p.add_argument("--sensitive-steps", type=int, default=d.sensitive_steps)
    p.add_argument("--public-steps", type=int, default=d.public_steps, help="steps per public map")
    p.add_argument("-n", "--samples", type=int, default=d.n_samples, help="synthetic transitions to release")
    p.add_argument("--agents", default="", metavar="A,B", help="comma list (td3bc, iql, edac) trained on synthetic and real data")
    p.add_argument("--agent-updates", type=int, default=d.agent_updates)
    p.add_argument("--seed", type=int, default=d.seed)
    # the global `privsynth --threads N|auto demo` is the one spelling; demo's own --threads N stays hidden
    p.add_argument("--threads", type=positive_int, default=None, help=argparse.SUPPRESS)
    # SUPPRESS: an unset demo --store must not mask the global one (privsynth --store DIR demo)
    p.add_argument("--store", default=argparse.SUPPRESS, metavar="DIR",
                   help="Minari store for the demo datasets (default: the global --store, else <out>/minari)")
    p.add_argument("--member-fraction", type=float, default=d.member_fraction,
                   help="share of the sensitive units (transitions, or episodes for --unit trajectory) that are "
                   "members: DP fine-tuning sees only them, the rest are the audit's non-members (default: "
                   "%(default)s)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=run)


def _check(args: argparse.Namespace) -> tuple[str, ...]:
    """Refusals that need no data, before an older report is removed or any data is made; returns the agents."""
    from privsynth.privacy.accounting import check_delta, check_epsilon

    check_epsilon(args.epsilon)
    check_delta(args.delta)
    require_counts((("--sensitive-steps", args.sensitive_steps), ("--public-steps", args.public_steps),
                    ("-n/--samples", args.samples), ("--agent-updates", args.agent_updates)))
    agents = tuple(a.strip() for a in args.agents.split(",") if a.strip())
    if agents:
        from privsynth.evaluation.agents import AGENTS
        from privsynth.evaluation.agents.train import agent_key

        unknown = [a for a in agents if agent_key(a) not in AGENTS]
        if unknown:
            raise InvalidData(f"unknown agent(s) {', '.join(unknown)} in --agents; choose from {', '.join(AGENTS)}")
    return agents


def run(args: argparse.Namespace) -> int:
    from privsynth.demo import DemoConfig, run_demo

    agents = _check(args)
    cfg = DemoConfig(
        out=args.out, epsilon=args.epsilon, delta=args.delta, unit=args.unit, sensitive_steps=args.sensitive_steps,
        public_steps=args.public_steps, n_samples=args.samples, seed=args.seed, store=getattr(args, "store", None),
        agents=agents, agent_updates=args.agent_updates,
        threads=args.threads, member_fraction=args.member_fraction,
    )
    run_demo(cfg, progress=not args.quiet)
    return 0
