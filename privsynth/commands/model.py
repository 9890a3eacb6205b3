"""``privsynth model pretrain | finetune | sample``: one stage of the PrivORL-n transition synthesizer at a time.

Thin wrappers over :class:`privsynth.synth.TransitionSynthesizer`. ``model finetune`` also runs under
``torchrun --nproc_per_node N`` (data-parallel DP-SGD, :mod:`privsynth.privacy.distributed`; rank 0 writes the
checkpoint); ``model sample --shards K`` splits a large draw over workers (:mod:`privsynth.synth.sharded`). See
docs/scale_out.md. The top-level ``pretrain``, ``finetune`` and ``sample`` of the previous release are hidden aliases.
"""
from __future__ import annotations

import argparse
from pathlib import Path

from privsynth.commands._surface import example, hidden_option, hidden_parser
from privsynth.commands._types import refuse_existing
from privsynth.commands.synth import (_add_common, _add_dp, _add_postprocess, _config, _ids, _load_all, _post_note,
                                      _pretrained_help)
from privsynth.errors import InvalidData


def cmd_pretrain(args: argparse.Namespace) -> int:
    from privsynth.release import check_resume_files
    from privsynth.synth import TransitionSynthesizer

    refuse_existing(args.out, args.overwrite)
    ckpt = Path(args.out).with_suffix(".checkpoint.pt")
    check_resume_files([ckpt], overwrite=args.overwrite)
    pubs = _load_all(_ids(args.public))
    if not pubs:
        raise InvalidData("--public needs at least one dataset id")
    synth = TransitionSynthesizer(_config(args))
    if ckpt.exists():
        print(f"resuming pre-training from {ckpt}")
    synth.pretrain(pubs, progress=not args.quiet, checkpoint=ckpt)
    synth.save(args.out, ema_only=args.ema_only)
    h = synth.history[-1]
    print(f"pre-trained on {','.join(synth.public_data)}: {h['steps']} steps, {h['seconds_per_epoch']:.1f} s/epoch -> {args.out}")
    return 0


def cmd_finetune(args: argparse.Namespace) -> int:
    """DP fine-tune a pre-trained checkpoint through the one release route (:func:`privsynth.release.synthesize` with
    ``n=0``: its checks, the fine-tune, the ledger within the budget) and save it through the guard."""
    from privsynth.commands._types import budget_from_args
    from privsynth.privacy import distributed as dist_dp
    from privsynth.privacy.guard import guarded_save_model
    from privsynth.release import synthesize

    refuse_existing(args.out, args.overwrite)
    group = dist_dp.init_from_env()  # under torchrun: join the job; every rank loads the same model and data
    try:
        main = group is None or group.rank == 0
        budget = budget_from_args(args, "transition")
        # the checkpoint keeps what it was trained as (architecture, row representation); the rest is the preset's
        res = synthesize(args.sensitive, budget=budget, pretrained=args.model, config=_config(args), n=0,
                         out_dataset=None, progress=main and not args.quiet)
        synth = res.synthesizer
        if main:
            guarded_save_model(synth, args.out, budget.epsilon, budget.delta)
            ranks = f" on {group.world_size} processes" if group is not None else ""
            h = synth.history[-1]  # its timing stays off the saved checkpoint (a release) but is the holder's to see
            print(f"fine-tuned on {args.sensitive}{ranks}: epsilon {synth.ledger.epsilon():.4g} at delta "
                  f"{budget.delta:g} ({budget.unit}), {h['steps']} steps in {h['seconds']:.1f} s -> {args.out}")
    finally:
        dist_dp.shutdown()
    return 0


def cmd_sample(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io
    from privsynth.privacy.guard import check_budget
    from privsynth.release import check_release_request, load_synthesizer, prepare_release, release_dataset
    from privsynth.synth.pretrained import resolve_pretrained

    check_release_request(args.out_dataset, overwrite=args.overwrite, n=args.n)
    model = resolve_pretrained(args.model)
    synth = load_synthesizer(model)
    if synth.ledger is None:
        raise InvalidData("this model was never DP fine-tuned: there is nothing releasable to sample")
    budget = args.budget
    if budget is None:  # the budget the last DP fine-tune was asked for; never the ledger's own ε (always passes)
        targets = [h.get("target_epsilon") for h in synth.history if h.get("private")]
        budget = targets[-1] if targets else None
        if not budget:
            raise InvalidData("the model records no target epsilon from its DP fine-tune; pass --budget EPS, the "
                              "largest epsilon this release may spend")
    check_budget(synth.ledger, budget)  # refuse before spending minutes sampling
    # the environment's public facts: the given dataset's metadata (no rows), else those the fine-tune adopted (the
    # checkpoint keeps them; it does not name the sensitive dataset)
    if args.sensitive:
        environment = minari_io.read_info(args.sensitive)
    elif synth.template is not None:
        environment = synth.template
    else:
        raise InvalidData("the model carries no environment facts; pass --sensitive ID so the release carries its "
                          "environment spec")
    if args.postprocess == "none":  # as synthesize takes it; a saved model's samples are repaired only when asked
        args.postprocess = None
    if args.postprocess:  # refuse before spending minutes sampling
        from privsynth.release.postprocess import check_supported

        check_supported(environment, args.postprocess)
    if args.shards > 1:
        from privsynth.evaluation.executors import make_executor
        from privsynth.synth.sharded import sample_sharded

        with make_executor(args.executor, workers=args.workers, address=args.address) as ex:
            ds = sample_sharded(synth, model, args.n, shards=args.shards, executor=ex, seed=args.seed,
                                method=args.sampler, steps=args.steps, name=args.out_dataset)
    else:
        ds = synth.sample(args.n, seed=args.seed, method=args.sampler, steps=args.steps, progress=not args.quiet,
                          name=args.out_dataset)
    ds = prepare_release(ds, environment)
    note = ""
    if args.postprocess:
        from privsynth.release.postprocess import draw_seed, postprocess, step_options, topped_up

        if args.topup:
            base = synth.config.seed if args.seed is None else args.seed
            ds, stats = topped_up(ds, lambda k, i: prepare_release(
                synth.sample(k, seed=draw_seed(base, i), method=args.sampler, steps=args.steps,
                             name=args.out_dataset), environment), args.n, **step_options(args.postprocess))
        else:
            ds, stats = postprocess(ds, **step_options(args.postprocess))
        note = _post_note(stats)
    spent = release_dataset(ds, synth.ledger, args.out_dataset, epsilon_budget=budget, overwrite=args.overwrite)
    st = synth.last_sample_stats
    shards = f"; {len(st['shards'])} shards, seeds {[s['seed'] for s in st['shards']]}" if "shards" in st else ""
    print(f"wrote {ds.n_transitions} transitions to {minari_io.resolve_id(args.out_dataset, for_write=True)} "
          f"(epsilon {spent:.4g}; {st['nan_rows_dropped']} NaN rows dropped; "
          f"{st['returned'] / st['seconds']:.0f} rows/s{shards}){note}")
    return 0


def _add_pretrain(p: argparse.ArgumentParser) -> None:
    p.add_argument("--public", required=True, metavar="ID,ID", help="comma-separated public dataset ids")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="checkpoint file to write (refused if it exists, unless --overwrite)")
    p.add_argument("--pretrain-epochs", type=float, default=None, help="pre-training epochs (None: the preset's)")
    p.add_argument("--no-curiosity", action="store_true", help="PDP-Diffusion ablation (no curiosity)")
    p.add_argument("--curiosity-rate", type=float, default=None, help="curiosity mixing rate (None: the preset's)")
    p.add_argument("--checkpoint-every", type=int, default=None, help="steps between resumable checkpoints")
    p.add_argument("--ema-only", action="store_true", help="store only the EMA weights (half the size)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace --out, and discard an unreadable resume checkpoint")
    _add_common(p)
    p.set_defaults(func=cmd_pretrain)


def _add_finetune(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="PATH",
                   help=f"checkpoint path or shipped pre-trained name (installed: {_pretrained_help()})")
    p.add_argument("--sensitive", required=True, metavar="ID", help="sensitive dataset id")
    p.add_argument("--out", required=True, metavar="PATH",
                   help="checkpoint file to write, carrying the ledger (refused if it exists, unless --overwrite)")
    p.add_argument("--overwrite", action="store_true", help="replace --out")
    _add_dp(p)
    _add_common(p)
    p.set_defaults(func=cmd_finetune)


def _add_sample(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", required=True, metavar="PATH", help="DP fine-tuned checkpoint (carries the ledger)")
    p.add_argument("--sensitive", default=None, metavar="ID",
                   help="dataset whose environment spec the release carries (None: the one the model was "
                        "fine-tuned on; only its metadata is read)")
    p.add_argument("-n", "--samples", dest="n", type=int, default=100_000, help="transitions to sample")
    p.add_argument("--out-dataset", required=True, metavar="ID", help="Minari dataset id to write")
    p.add_argument("--sampler", choices=("dpm", "heun"), default=None, help="ODE solver (None: the model's)")
    p.add_argument("--steps", type=int, default=None, help="solver steps (None: the model's)")
    p.add_argument("--epsilon", dest="budget", type=float, default=None,
                   help="largest epsilon the release may spend (default: the last DP fine-tune's target epsilon)")
    hidden_option(p, "--budget", dest="budget", type=float)
    p.add_argument("--overwrite", action="store_true", help="replace an existing dataset with this id")
    p.add_argument("--seed", type=int, default=None,
                   help="base seed (with --shards, each shard's seed derives from it)")
    p.add_argument("--shards", type=int, default=1, help="split the draw into this many independent shards")
    p.add_argument("--workers", type=int, default=1, help="local processes for the shards (--executor local)")
    p.add_argument("--executor", choices=("local", "ray"), default="local", help="where the shards run")
    p.add_argument("--address", default=None, metavar="HOST:PORT",
                   help="Ray cluster to join (None: a local Ray instance)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    _add_postprocess(p)
    p.set_defaults(func=cmd_sample)


def register(subparsers: argparse._SubParsersAction) -> None:
    m = subparsers.add_parser("model", help="one stage at a time: pretrain, DP finetune, sample a synthesizer model")
    msub = m.add_subparsers(dest="model_command", metavar="ACTION", required=True)
    stages = (
        ("pretrain", "pre-train a transition synthesizer on public datasets (no DP)", _add_pretrain,
         ("model pretrain --public privsynth/pointmaze-open-v0 --out public.pt",)),
        ("finetune", "DP fine-tune a synthesizer on a sensitive dataset", _add_finetune,
         ("model finetune --model public.pt --epsilon 10 --out dp.pt",
          "--sensitive privsynth/pointmaze-umaze-v0")),
        ("sample", "sample a DP fine-tuned synthesizer and release a Minari dataset", _add_sample,
         ("model sample --model dp.pt -n 100000 --out-dataset privsynth/umaze-synthetic-v0",)),
    )
    for name, helptext, add, ex in stages:
        add(msub.add_parser(name, help=helptext, description=helptext[0].upper() + helptext[1:] + ".",
                            epilog=example(*ex)))
        add(hidden_parser(subparsers, name, f"model {name}"))
