"""``privsynth method list | run NAME | data NAME``: every DP offline-RL method of the registry
(:mod:`privsynth.methods.registry`, ``methods.make(NAME)``) from one command.

``run`` builds the method from its preset and ``--set`` overrides, runs it on a sensitive dataset and writes what it
returns: its result (metrics, privacy card) to ``--out``, its DP dataset through the release guard to
``--out-dataset``. ``data`` writes a sensitive example dataset of the kind the method's paper uses.
"""
from __future__ import annotations

import argparse
import inspect
import json
import os
from pathlib import Path

from privsynth.commands._surface import add_set, example, overrides
from privsynth.commands._types import refuse_existing
from privsynth.errors import InvalidData


def register(subparsers: argparse._SubParsersAction) -> None:
    from privsynth.methods.registry import names

    p = subparsers.add_parser("method", help="DP offline-RL methods by name: list, run NAME, data NAME "
                                             "(PriMORL, DP-APVI, DP-VAPVI, expert SVT, kickstarting)")
    sub = p.add_subparsers(dest="method_command", metavar="ACTION", required=True)

    ls = sub.add_parser("list", help="the registered methods: name, privacy unit, what it does",
                        epilog=example("method list"))
    ls.add_argument("--json", action="store_true", help="print JSON")
    ls.set_defaults(func=_list)

    run = sub.add_parser(
        "run", help="run a method on a sensitive dataset; write its result and DP dataset",
        description="Build the method (methods.make(NAME, preset, **overrides)), run it on the sensitive dataset and "
                    "write its metrics and privacy card (--out) and its DP dataset (--out-dataset). The run must fit "
                    "--epsilon at --delta (the config's own when not given).",
        epilog="--set takes any field of the method's config (docs/methods.md), e.g. rho=1.0, "
               "pipeline.tdp.rounds=50.\n" + example(
                   "method run dp-apvi --sensitive privsynth/gridworld-v0 --epsilon 2 --set rho=1.0",
                   "--out runs/dp-apvi --out-dataset privsynth/gridworld/dp-counts-v0"))
    run.add_argument("name", choices=names(), metavar="NAME", help=", ".join(names()))
    run.add_argument("--sensitive", required=True, metavar="ID", help="sensitive dataset id")
    run.add_argument("--epsilon", type=float, default=None, help="privacy budget (default: the config's)")
    run.add_argument("--delta", type=float, default=None, help="delta (default: the config's)")
    run.add_argument("--config", dest="preset", choices=("paper", "tiny"), default="paper", metavar="PRESET",
                     help="paper (the paper's settings) or tiny (seconds; smoke tests)")
    add_set(run, "method config")
    run.add_argument("--out", default=None, metavar="DIR", help="folder for result.json (metrics and privacy card)")
    run.add_argument("--out-dataset", default=None, metavar="ID", help="write the method's DP dataset as this id")
    run.add_argument("--overwrite", action="store_true", help="replace --out's result.json and --out-dataset")
    run.add_argument("--json", action="store_true", help="print the result as one JSON object")
    run.set_defaults(func=_run)

    data = sub.add_parser(
        "data", help="write a sensitive example dataset of the kind the method's paper uses",
        epilog=example("method data primorl privsynth/pendulum-sensitive-v0 --episodes 3000"))
    data.add_argument("name", choices=names(), metavar="NAME", help=", ".join(names()))
    data.add_argument("dataset_id", metavar="ID", help="dataset id to write (marked sensitive)")
    data.add_argument("--episodes", type=int, default=None, help="episodes to generate (default: the method's)")
    data.add_argument("--seed", type=int, default=0, help="seed of the generator (not privacy noise)")
    data.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="another argument of the method's example_dataset (e.g. env=cartpole); repeatable")
    data.add_argument("--overwrite", action="store_true", help="replace an existing dataset with this id")
    data.set_defaults(func=_data)


def _list(args: argparse.Namespace) -> int:
    from privsynth.methods.registry import REGISTRY

    rows = [{"name": e.name, "unit": e.unit, "summary": e.summary} for e in REGISTRY.values()]
    if args.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['name']:<12} {r['unit']:<11} {r['summary']}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from privsynth.methods.registry import make
    from privsynth.release import as_dataset, check_release_request

    settings = overrides(args.set)
    for key in ("epsilon", "delta"):
        if getattr(args, key) is not None:
            settings[key] = getattr(args, key)
    method = make(args.name, preset=args.preset, **settings)
    result_path = Path(args.out) / "result.json" if args.out else None
    if result_path is not None:  # refused before any data is read
        if Path(args.out).exists() and not Path(args.out).is_dir():
            raise InvalidData(f"--out {args.out} is a file; give a folder")
        refuse_existing(result_path, args.overwrite, label="--out ")
    if args.out_dataset:
        check_release_request(args.out_dataset, overwrite=args.overwrite, sensitive_id=args.sensitive)
    sensitive = as_dataset(args.sensitive).mark_sensitive(True)
    result = method.run(sensitive)
    summary = {"method": args.name, "epsilon": result.epsilon, "private": result.private,
               "metrics": result.metrics, "card": result.card}
    if args.out_dataset:
        if result.dataset is None:
            raise InvalidData(f"{args.name} returns no dataset to write (--out-dataset); it returns a policy")
        from privsynth.data import minari_io
        from privsynth.privacy.guard import guarded_write

        # the release guard (as every method release): budget checked, written to a temporary sibling with the
        # ledger and card, then renamed
        ds = result.dataset
        guarded_write(minari_io.target_path(args.out_dataset),
                      lambda tmp: minari_io.write_dataset_dir(ds, args.out_dataset, tmp), result.ledger,
                      method.config.epsilon, method.config.delta)
        summary["out_dataset"] = args.out_dataset
    if result_path is not None:
        result_path.parent.mkdir(parents=True, exist_ok=True)
        tmp = result_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(summary, indent=2, default=str))
        os.replace(tmp, result_path)  # nothing earlier is lost if the write fails
    if args.json:
        print(json.dumps(summary, default=str))
    else:
        metrics = ", ".join(f"{k} {v:.4g}" for k, v in result.metrics.items())
        where = "".join(f"; wrote {w}" for w in (args.out_dataset, result_path) if w)
        print(f"{args.name}: epsilon {result.epsilon:.4g}{'' if result.private else ' (NOT DP)'}; {metrics}{where}")
    return 0


def _data(args: argparse.Namespace) -> int:
    import importlib

    from privsynth.data.minari_io import write_dataset
    from privsynth.methods.registry import entry

    module = importlib.import_module(entry(args.name).adapter.split(":")[0])
    make_data = getattr(module, "example_dataset", None)
    if make_data is None:
        raise InvalidData(f"{args.name} ships no example data generator")
    accepted = inspect.signature(make_data).parameters
    kwargs = overrides(args.set)
    if args.episodes is not None:
        if "episodes" not in accepted:
            raise InvalidData(f"{args.name}'s example data takes no --episodes; its arguments: {', '.join(accepted)}")
        kwargs["episodes"] = args.episodes
    if "seed" in accepted:
        kwargs["seed"] = args.seed
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        raise InvalidData(f"{args.name}'s example data takes {', '.join(accepted)}, not {', '.join(unknown)}")
    ds = make_data(**kwargs).mark_sensitive(True)
    ds.info.name = args.dataset_id
    path = write_dataset(ds, args.dataset_id, overwrite=args.overwrite)
    print(f"wrote {ds.n_episodes} sensitive episodes ({ds.n_transitions} transitions) for {args.name} to {path}")
    return 0
