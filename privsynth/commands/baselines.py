"""``privsynth baseline pgm|privsyn|pategan|prepategan`` (deprecated alias of ``privsynth synthesize --synth
NAME``, translated to it and run by its handler): a classic DP baseline from public + sensitive data to a
released Minari dataset with its privacy card. Also the benchmark-runner cell ``baseline_synthesize``
(``kind: privsynth.commands.baselines:synthesize_cell`` in a suite). See docs/baselines.md."""
from __future__ import annotations

import argparse
import json
import resource
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


def _run(args: argparse.Namespace) -> int:
    """The alias, translated to ``privsynth synthesize --synth METHOD`` and run by its handler
    (:func:`privsynth.commands.synth.run_synthesize`); prints this command's summary (``--json``) or the card."""
    from privsynth.commands._surface import overrides
    from privsynth.commands.synth import run_synthesize, synthesize_args
    from privsynth.synth import registry

    # the --set keys, checked as this command always did (one line naming the baseline), before any data is read
    registry.make(args.method, preset="cpu", **overrides(args.set))
    argv = ["--synth", args.method, "--sensitive", args.sensitive, "--public", ",".join(args.public),
            "--epsilon", repr(args.epsilon), "--delta", repr(args.delta), "--unit", "transition",
            "-n", str(args.num_samples), "--seed", str(args.seed)]
    argv += ["--out-dataset", args.out_dataset] if args.out_dataset else []  # none: the card only, nothing written
    argv += ["--save-model", args.save] if args.save else []
    argv += [a for item in args.set for a in ("--set", item)]
    argv += ["--overwrite"] * args.overwrite + ["--quiet"] * args.quiet
    res, _ = run_synthesize(synthesize_args(argv))
    synth, spent = res.synthesizer, res.epsilon
    seconds = {k: res.seconds[k] for k in ("pretrain", "finetune", "sample")}
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    summary = {
        "method": args.method,
        "epsilon": spent,
        "delta": args.delta,
        "accounting": synth.card()["native_accounting"],
        "out_dataset": args.out_dataset,
        "transitions": len(res.dataset),
        "seconds": seconds,
        "peak_rss_mb": peak,
    }
    if args.json:
        print(json.dumps(summary))
    else:
        where = f"wrote {args.out_dataset}" if args.out_dataset else "nothing written (no --out-dataset)"
        print(
            f"{args.method}: {len(res.dataset)} transitions, epsilon {spent:.4g} at delta {args.delta:g} "
            f"({summary['accounting']}); {where}; "
            + ", ".join(f"{k} {v:.1f}s" for k, v in seconds.items())
            + f"; peak RSS {peak:.0f} MB"
        )
        print(res.ledger.render_markdown())
    return 0


# --------------------------------------------------------------------------------------- benchmark-runner cell
def synthesize_cell(params: dict[str, Any], ctx: Any) -> dict[str, Any]:
    """Runner cell: fit baseline ``params['synthesizer']`` and write ``synthetic.npz``, the checkpoint and the ledger.

    Params: ``synthesizer`` (pgm|privsyn|pategan|prepategan), ``epsilon``, ``delta``, ``num_samples``, ``seed``,
    ``data: {public: [...], sensitive: ...}``, optional ``baseline_config: {field: value}``. The result carries the
    cost fields the ``cost`` cell reads (PrivORL Table XI) and the ledger's ε.
    """
    from privsynth.errors import InvalidData
    from privsynth.evaluation.bench.records import holder_only
    from privsynth.evaluation.bench.sources import save_dataset
    from privsynth.privacy.budget import Budget
    from privsynth.privacy.guard import guarded_save_model
    from privsynth.release import synthesize
    from privsynth.synth import registry

    method = params.get("synthesizer")
    if method not in NAMES:
        raise InvalidData(f"unknown baseline '{method}': choose one of {', '.join(NAMES)}")
    if params.get("epsilon") is None:
        raise InvalidData("the baselines have no non-private mode: give an epsilon")
    names = params["data"]["public"]
    public = [ctx.dataset(n) for n in ([names] if isinstance(names, str) else names)]
    epsilon, delta = float(params["epsilon"]), float(params.get("delta", 1e-5))
    config = registry.make(method, preset="cpu", **{"seed": int(params.get("seed", 0)),
                                                     **(params.get("baseline_config") or {})}).config
    # pre-train, DP fine-tune and sample through the one release route; nothing written there (the guard's checks)
    res = synthesize(ctx.dataset(params["data"]["sensitive"]), budget=Budget(epsilon, delta, "transition"),
                     public=public, synth=method, config=config, n=int(params.get("num_samples", 50_000)),
                     out_dataset=None, progress=False)
    synth, ds, seconds = res.synthesizer, res.dataset, res.seconds
    save_dataset(ds, ctx.artifact_dir / "synthetic.npz")
    suffix = ".pt" if method in ("pategan", "prepategan") else ".json"
    # a model fitted on the sensitive set is a release too: written through the guard, as `privsynth finetune` does
    ckpt = guarded_save_model(synth, Path(ctx.artifact_dir) / f"model{suffix}", epsilon, delta)
    (Path(ctx.artifact_dir) / "ledger.json").write_text(synth.ledger.to_json())
    return holder_only({
        "dp_epsilon": res.epsilon,
        "accounting": synth.card()["native_accounting"],
        "pretrain_seconds": seconds["pretrain"],
        "finetune_seconds": seconds["finetune"],
        "sample_seconds": seconds["sample"],
        "n_synthetic": len(ds),
        "checkpoint_mb": ckpt.stat().st_size / 2**20,
        "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0,
    }, "finetune_seconds", "peak_rss_mb")  # measured on the sensitive run, outside DP: the holder's own
