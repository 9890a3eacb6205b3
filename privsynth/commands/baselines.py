"""``privsynth baseline pgm|privsyn|pategan|prepategan`` (deprecated alias of ``privsynth synthesize --synth
NAME``): a classic DP baseline from public + sensitive data to a
released Minari dataset with its privacy card. Also the benchmark-runner cell ``baseline_synthesize``
(``kind: privsynth.commands.baselines:synthesize_cell`` in a suite). See docs/baselines.md."""
from __future__ import annotations

import argparse
import json
import resource
import time
from pathlib import Path
from typing import Any

NAMES = ("pgm", "privsyn", "pategan", "prepategan")


def register(subparsers: argparse._SubParsersAction) -> None:
    from privsynth.commands._surface import hidden_parser

    # deprecated alias (one release): `privsynth synthesize --synth pgm|privsyn|pategan|prepategan`
    p = hidden_parser(
        subparsers, "baseline", "synthesize --synth NAME (--num-samples is -n/--samples)",
        description="Fit a DP tabular baseline on sensitive transitions (public data sets the bins / normaliser / "
        "pre-training), sample, and write the synthetic dataset with its privacy card. See docs/baselines.md.",
    )
    p.add_argument("method", choices=NAMES, help="which baseline")
    p.add_argument("--sensitive", required=True, help="Minari id of the sensitive dataset")
    p.add_argument("--public", nargs="+", required=True, help="Minari id(s) of the public dataset(s)")
    p.add_argument("--epsilon", type=float, required=True, help="privacy budget epsilon (> 0)")
    p.add_argument("--delta", type=float, default=1e-5, help="delta (default 1e-5; must be below 1/N)")
    p.add_argument("--num-samples", type=int, default=50_000, help="synthetic transitions to draw (default 50000)")
    p.add_argument("--out-dataset", default=None, help="Minari id to write (omit to only print the card)")
    p.add_argument("--save", default=None, help="also save the fitted synthesizer to this path (.json / .pt)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--set", action="append", default=[], metavar="KEY=VALUE", help="override a config field (repeatable), e.g. iters=1000"
    )
    p.add_argument("--overwrite", action="store_true", help="replace an existing output dataset")
    p.add_argument("--json", action="store_true", help="print one JSON summary line")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_run)


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """``["iters=1000", "selection=appendix_e"]`` -> typed dict (JSON values where they parse, else strings)."""
    from privsynth.errors import InvalidData

    out: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InvalidData(f"--set expects KEY=VALUE, got '{item}'")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value
    return out


def run_baseline(
    method: str,
    public: list,
    sensitive,
    *,
    epsilon: float,
    delta: float,
    num_samples: int,
    seed: int = 0,
    overrides: dict[str, Any] | None = None,
    progress: bool = False,
    name: str | None = None,
) -> tuple[Any, Any, dict[str, float]]:
    """pretrain(public) -> finetune(sensitive, ε, δ) -> sample(n); returns (synthesizer, dataset, seconds)."""
    from privsynth.release.checks import check_public
    from privsynth.synth.baselines import make_baseline

    for pub in public:  # public data fits the discretiser's bounds and categories: it must hold no sensitive record
        check_public(pub, sensitive)
    synth = make_baseline(method, **{"seed": seed, **(overrides or {})})
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    synth.pretrain(public, progress=progress)
    seconds["pretrain"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    synth.finetune(sensitive.mark_sensitive(True), epsilon, delta, "transition", progress=progress)
    seconds["finetune"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    ds = synth.sample(num_samples, seed=seed, name=name)
    seconds["sample"] = time.perf_counter() - t0
    return synth, ds, seconds


def _run(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io
    from privsynth.release import release_dataset

    public = [minari_io.load_dataset(p) for p in args.public]
    sensitive = minari_io.load_dataset(args.sensitive)
    synth, ds, seconds = run_baseline(
        args.method,
        public,
        sensitive,
        epsilon=args.epsilon,
        delta=args.delta,
        num_samples=args.num_samples,
        seed=args.seed,
        overrides=parse_overrides(args.set),
        progress=not args.quiet,
        name=args.out_dataset,
    )
    spent = release_dataset(
        ds, synth.ledger, args.out_dataset, epsilon_budget=args.epsilon, delta=args.delta, overwrite=args.overwrite,
        environment=sensitive.info,
    )
    if args.save:  # the fitted model is a release too: written only if its ledger fits the budget
        from privsynth.privacy.guard import guarded_save_model

        guarded_save_model(synth, args.save, args.epsilon, args.delta)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    summary = {
        "method": args.method,
        "epsilon": spent,
        "delta": args.delta,
        "accounting": synth.card()["native_accounting"],
        "out_dataset": args.out_dataset,
        "transitions": len(ds),
        "seconds": seconds,
        "peak_rss_mb": peak,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        where = f"wrote {args.out_dataset}" if args.out_dataset else "nothing written (no --out-dataset)"
        print(
            f"{args.method}: {len(ds)} transitions, epsilon {spent:.4g} at delta {args.delta:g} "
            f"({summary['accounting']}); {where}; "
            + ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items())
            + f"; peak RSS {peak:.0f} MB"
        )
        print(synth.ledger.render_markdown())
    return 0


# --------------------------------------------------------------------------------------- benchmark-runner cell
def synthesize_cell(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Runner cell: fit baseline ``params['synthesizer']`` and write ``synthetic.npz``, the checkpoint and the ledger.

    Params: ``synthesizer`` (pgm|privsyn|pategan|prepategan), ``epsilon``, ``delta``, ``num_samples``, ``seed``,
    ``data: {public: [...], sensitive: ...}``, optional ``baseline_config: {field: value}``. The result carries the
    cost fields the ``cost`` cell reads (PrivORL Table XI) and the ledger's ε.
    """
    from privsynth.errors import InvalidData
    from privsynth.evaluation.bench.sources import save_dataset
    from privsynth.release import release_dataset

    method = params.get("synthesizer")
    if method not in NAMES:
        raise InvalidData(f"unknown baseline '{method}': choose one of {', '.join(NAMES)}")
    if params.get("epsilon") is None:
        raise InvalidData("the baselines have no non-private mode: give an epsilon")
    names = params["data"]["public"]
    public = [ctx.dataset(n) for n in ([names] if isinstance(names, str) else names)]
    sensitive = ctx.dataset(params["data"]["sensitive"])
    epsilon, delta = float(params["epsilon"]), float(params.get("delta", 1e-5))
    synth, ds, seconds = run_baseline(
        method,
        public,
        sensitive,
        epsilon=epsilon,
        delta=delta,
        num_samples=int(params.get("num_samples", 50_000)),
        seed=int(params.get("seed", 0)),
        overrides=dict(params.get("baseline_config") or {}),
    )
    spent = release_dataset(ds, synth.ledger, None, epsilon_budget=epsilon, delta=delta)  # checks only
    save_dataset(ds, ctx.artifact_dir / "synthetic.npz")
    suffix = ".pt" if method in ("pategan", "prepategan") else ".json"
    from privsynth.evaluation.bench.records import holder_only
    from privsynth.privacy.guard import guarded_save_model

    # a model fitted on the sensitive set is a release too: written through the guard, as `privsynth finetune` does
    ckpt = guarded_save_model(synth, Path(ctx.artifact_dir) / f"model{suffix}", epsilon, delta)
    (Path(ctx.artifact_dir) / "ledger.json").write_text(synth.ledger.to_json())
    return holder_only({
        "dp_epsilon": spent,
        "accounting": synth.card()["native_accounting"],
        "pretrain_seconds": seconds["pretrain"],
        "finetune_seconds": seconds["finetune"],
        "sample_seconds": seconds["sample"],
        "n_synthetic": len(ds),
        "checkpoint_mb": ckpt.stat().st_size / 2**20,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }, "finetune_seconds", "peak_rss_mb")  # measured on the sensitive run, outside DP: the holder's own
