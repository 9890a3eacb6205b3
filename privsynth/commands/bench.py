"""``privsynth bench SUITE.yaml``: run a benchmark grid, skipping finished cells, and write tables and plots."""
from __future__ import annotations

import argparse


def register(subparsers) -> None:
    from privsynth.commands._surface import example, hidden_option

    p = subparsers.add_parser(
        "bench",
        help="run a benchmark suite (grid of synthesizers x epsilon x agents x seeds); re-runs skip finished cells",
        description="Run the suite's cells stage by stage in parallel processes, store one JSON per cell under "
        "RESULTS/<suite>/cells, and write tables (markdown, HTML) and plots. See docs/benchmarks.md.",
        epilog=example("bench evaluation/suites/smoke.yaml --workers 2"),
    )
    p.add_argument("suite", help="suite YAML, e.g. evaluation/suites/smoke.yaml")
    p.add_argument("--workers", type=int, default=None, help="parallel processes (default: the suite's, else 1)")
    p.add_argument("--executor", choices=("local", "ray"), default="local",
                   help="local: a process pool on this machine (default); ray: one Ray task per cell, reserving the "
                   "stage's 'cpus' (pip install 'privsynth[ray]'; see docs/scale_out.md)")
    p.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="Ray cluster to join (e.g. auto or ray://head:10001); default: start a local Ray instance")
    p.add_argument("--results-dir", default=None, metavar="DIR", help="root for results (default: the suite's, else evaluation/results)")
    p.add_argument("--only", action="append", default=None, metavar="STAGE", help="run only this stage (repeatable)")
    p.add_argument("--dry-run", action="store_true", help="list what would run, run nothing")
    p.add_argument("--tables-only", action="store_true", help="rewrite tables and plots from stored cells")
    p.add_argument("--quiet", dest="no_progress", action="store_true", help="no progress bars")
    hidden_option(p, "--no-progress", dest="no_progress", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privsynth.errors import InvalidData
    from privsynth.evaluation.bench.execute import run_suite
    from privsynth.evaluation.bench.plots import write_plots
    from privsynth.evaluation.bench.suite import load_suite
    from privsynth.evaluation.bench.tables import write_tables
    from privsynth.evaluation.executors import init_worker

    if getattr(args, "torch_threads", None) is None:  # the global --threads decides the inline cells' threads
        init_worker()  # cells run inline when workers == 1: one torch thread, as in the pool workers

    suite = load_suite(args.suite, results_dir=args.results_dir)
    if args.tables_only:
        try:
            for path in write_tables(suite):
                print(path)
        finally:  # a refused table still leaves the plots written
            for path in write_plots(suite):
                print(path)
        return 0
    summary = run_suite(suite, workers=args.workers, only=args.only, dry_run=args.dry_run,
                        progress=not args.no_progress, executor=args.executor, address=args.address)
    if args.dry_run:
        return 0
    print(f"{suite.name}: {summary.ran} ran, {summary.skipped} skipped, {summary.failed} failed, "
          f"{summary.blocked} blocked; results in {suite.out}")
    for path in summary.tables + summary.plots:
        print(f"  {path}")
    if summary.table_error:  # after the summary, so a partial run (--only) still says what ran and what failed
        raise InvalidData(f"tables not written: {summary.table_error}")
    return 1 if summary.failed else 0
