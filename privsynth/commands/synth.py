"""``privsynth pretrain | finetune | sample | synthesize``: the PrivORL-n transition synthesizer from the shell.

Thin wrappers over :class:`privsynth.synth.TransitionSynthesizer` and :func:`privsynth.release.synthesize`.
``finetune`` also runs under ``torchrun --nproc_per_node N`` (data-parallel DP-SGD, :mod:`privsynth.privacy.distributed`;
rank 0 writes the checkpoint); ``sample --shards K`` splits a large draw over workers (:mod:`privsynth.synth.sharded`).
See docs/scale_out.md.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from privsynth.commands._surface import add_set, example, hidden_option, hidden_parser, overrides
from privsynth.commands._types import refuse_existing
from privsynth.errors import InvalidData

CONFIGS = ("cpu", "demo", "paper", "tiny")


def _config(args: argparse.Namespace):
    from privsynth.synth import registry

    cfg = registry.make("privorl-n", preset=args.config).config
    if getattr(args, "seed", None) is not None:
        cfg.seed = args.seed
    if getattr(args, "pretrain_epochs", None) is not None:
        cfg.pretrain.epochs = args.pretrain_epochs
    if getattr(args, "finetune_epochs", None) is not None:
        cfg.finetune.epochs = args.finetune_epochs
    if getattr(args, "no_curiosity", False):
        cfg.pretrain_curiosity = False
    if getattr(args, "finetune_curiosity", False):
        cfg.finetune_curiosity = True
    if getattr(args, "curiosity_rate", None) is not None:
        cfg.curiosity.rate = args.curiosity_rate
    if getattr(args, "accountant", None):
        cfg.dp.accountant = args.accountant
    if getattr(args, "noise_multiplicity", None) is not None:
        cfg.dp.noise_multiplicity = args.noise_multiplicity
    if getattr(args, "sampler", None):
        cfg.sampler.method = args.sampler
    if getattr(args, "steps", None):
        if cfg.sampler.method == "heun":
            cfg.sampler.heun_steps = args.steps
        else:
            cfg.sampler.steps = args.steps
    if getattr(args, "checkpoint_every", None):
        cfg.pretrain.checkpoint_every = args.checkpoint_every
    return cfg


def _ids(text: str | None) -> list[str]:
    return [t.strip() for t in (text or "").split(",") if t.strip()]


def _load_all(ids: list[str]):
    from privsynth.release import as_dataset

    return [as_dataset(i) for i in ids]


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", choices=CONFIGS, default="cpu", metavar="PRESET",
                   help="cpu, demo (privorl-n), paper or tiny (seconds; smoke tests)")
    p.add_argument("--seed", type=int, default=None, help="non-private randomness (None: the preset's; never DP noise)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")


def _add_dp(p: argparse.ArgumentParser, *, short: bool = False) -> None:
    """The privacy request; with ``short`` (synthesize) the PrivORL-n settings are hidden old spellings of
    ``--set`` fields."""
    p.add_argument("--epsilon", type=float, required=True, help="target epsilon of the DP fine-tuning")
    p.add_argument("--delta", type=float, default=1e-5, help="target delta (must be below 1/N)")
    p.add_argument("--unit", choices=("transition", "trajectory"), default=None, metavar="UNIT",
                   help="privacy unit: transition | trajectory (None: the synthesizer's first)")
    if short:
        hidden_option(p, "--finetune-epochs", dest="finetune_epochs", type=float, default=None)
        hidden_option(p, "--accountant", dest="accountant", choices=("rdp", "prv", "pld"), default=None)
        hidden_option(p, "--noise-multiplicity", dest="noise_multiplicity", type=int, default=None)
        hidden_option(p, "--finetune-curiosity", dest="finetune_curiosity", action="store_true", default=False)
        return
    p.add_argument("--accountant", choices=("rdp", "prv", "pld"), default=None,
                   help="privacy accountant (None: the preset's)")
    p.add_argument("--finetune-epochs", type=float, default=None, help="DP fine-tuning epochs (None: the preset's)")
    p.add_argument("--noise-multiplicity", type=int, default=None, help="noise draws per record (DPDM)")
    p.add_argument("--finetune-curiosity", action="store_true", help="FineCur ablation")


def _add_postprocess(p: argparse.ArgumentParser, *, short: bool = False) -> None:
    if short:
        p.add_argument("--postprocess", nargs="?", const="all", default=None, metavar="STEPS",
                       help="repair rows with the public environment before writing: all, or some of "
                            "clip,resimulate,reward,walls,goals (docs/privacy.md)")
        p.add_argument("--no-topup", dest="topup", action="store_false", help="keep only the rows --postprocess left")
        return
    p.add_argument("--postprocess", nargs="?", const="all", default=None, metavar="STEPS",
                   help="before writing, repair the rows with the public environment (free under DP; PointMaze and "
                        "MuJoCo locomotion). Alone: every step (clip: actions clipped, resimulate: s' re-simulated, "
                        "reward: reward recomputed, walls: states in walls dropped, goals: goals in walls "
                        "dropped); or the steps named, e.g. --postprocess clip,reward (docs/privacy.md)")
    p.add_argument("--no-topup", dest="topup", action="store_false",
                   help="with --postprocess: keep only the rows left after dropping (default: sample more from the "
                        "same model until the requested number of rows is kept; free under DP)")


def _pretrained_help() -> str:
    from privsynth.synth.pretrained import list_pretrained

    return ", ".join(list_pretrained()) or "none installed"


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
    from privsynth.privacy import distributed as dist_dp
    from privsynth.release import as_dataset
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.pretrained import resolve_pretrained

    from privsynth.release import check_model_fits, check_pretrained_public, load_synthesizer, record_dp_request
    from privsynth.synth.pretrained import pretrained_card

    refuse_existing(args.out, args.overwrite)
    group = dist_dp.init_from_env()  # under torchrun: join the job; every rank loads the same model and data
    try:
        synth = load_synthesizer(resolve_pretrained(args.model))
        cfg = _config(args)
        # what the checkpoint was trained as stays (architecture, row representation); the rest is the preset's
        cfg.denoiser, cfg.edm, cfg.next_state = synth.config.denoiser, synth.config.edm, synth.config.next_state
        synth.config = cfg
        sens = as_dataset(args.sensitive).mark_sensitive(True)
        check_model_fits(synth, sens)
        check_pretrained_public(synth, sens, pretrained_card(args.model))  # its public data is not the sensitive set
        main = group is None or group.rank == 0
        args.unit = args.unit or "transition"
        record_dp_request(synth.config, args.epsilon, args.delta, args.unit)
        synth.finetune(sens, args.epsilon, args.delta, args.unit, progress=main and not args.quiet)
        if main:
            from privsynth.privacy.guard import guarded_save_model

            guarded_save_model(synth, args.out, args.epsilon, args.delta)
            ranks = f" on {group.world_size} processes" if group is not None else ""
            h = synth.history[-1]  # its timing stays off the saved checkpoint (a release) but is the holder's to see
            print(f"fine-tuned on {sens.info.name}{ranks}: epsilon {synth.ledger.epsilon():.4g} at delta "
                  f"{args.delta:g} ({args.unit}), {h['steps']} steps in {h['seconds']:.1f} s -> {args.out}")
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


def _post_note(stats: dict) -> str:
    """One line of :func:`privsynth.release.postprocess.postprocess` stats for the command's summary."""
    return (f"; post-processed: {stats['rows_kept']}/{stats['rows_in']} rows kept, rewards changed "
            f"{stats['reward_changed']:.1%}, mean |Δs′| {stats['next_state_mean_change']:.3g}")


def _pair(text: str | None, flag: str) -> tuple[float, float] | None:
    """``"LOW,HIGH"`` -> (low, high)."""
    if text is None:
        return None
    try:
        low, high = (float(v) for v in text.split(","))
    except ValueError:
        raise InvalidData(f"{flag} takes LOW,HIGH (two numbers), got '{text}'") from None
    if not high > low:
        raise InvalidData(f"{flag}: HIGH must exceed LOW, got '{text}'")
    return low, high


def _registered_options(args: argparse.Namespace):
    """The config of a registered synthesizer other than privorl-n, from the preset and the CLI settings that apply
    to it; settings that do not apply are refused."""
    from privsynth.synth import registry

    if args.config == "demo":
        raise InvalidData(f"--config demo is a privorl-n preset; {args.synth} takes cpu, paper or tiny")
    only_n = {"--no-curiosity": args.no_curiosity, "--pretrain-epochs": args.pretrain_epochs is not None,
              "--sampler": args.sampler is not None, "--steps": args.steps is not None,
              "--checkpoint-every": args.checkpoint_every is not None, "--accountant": args.accountant is not None,
              "--noise-multiplicity": args.noise_multiplicity is not None,
              "--finetune-curiosity": args.finetune_curiosity, "--dp-normalizer": args.dp_normalizer is not None}
    given = [k for k, v in only_n.items() if v]
    if given:
        raise InvalidData(f"{', '.join(given)} applies to privorl-n only, not to {args.synth}")
    overrides: dict = {}
    if args.seed is not None:
        overrides["seed"] = args.seed
    if args.finetune_epochs is not None:
        if not registry.entry(args.synth).episodes:
            raise InvalidData(f"--finetune-epochs applies to the diffusion synthesizers, not to {args.synth}")
        overrides["finetune"] = {"epochs": args.finetune_epochs}
    return registry.make(args.synth, preset=args.config, **overrides).config


def cmd_synthesize(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io
    from privsynth.release import synthesize
    from privsynth.synth import registry

    if args.unit is None:
        args.unit = registry.entry(args.synth).units[0]

    if args.save_model:  # refused now, not after minutes of training and a written release
        if Path(args.save_model).is_dir():
            raise InvalidData(f"--save-model {args.save_model} is a directory; give the checkpoint file to write")
        refuse_existing(args.save_model, args.overwrite)
    cfg = _config(args) if args.synth == "privorl-n" else _registered_options(args)
    if args.set:
        from privsynth.config_io import override
        from privsynth.methods.registry import _tuples

        override(cfg, _tuples(overrides(args.set)), where="--set")
    pubs = _ids(args.public)
    res = synthesize(
        args.sensitive,
        epsilon=args.epsilon,
        delta=args.delta,
        public=pubs or None,
        unit=args.unit,
        n=args.n,
        synth=args.synth,
        config=cfg,
        pretrained=args.pretrained,
        pretrain=not args.no_pretrain,
        out_dataset=args.out_dataset,
        overwrite=args.overwrite,
        workdir=args.workdir,
        progress=not args.quiet,
        normalizer_epsilon=args.dp_normalizer,
        obs_bounds=_pair(args.obs_bounds, "--obs-bounds"),
        reward_bounds=_pair(args.reward_bounds, "--reward-bounds"),
        postprocess=args.postprocess,
        topup=args.topup,
    )
    if args.save_model:
        res.synthesizer.save(args.save_model)
    st = getattr(res.synthesizer, "last_sample_stats", None) or {}
    dropped = f", {st['nan_rows_dropped']} NaN rows dropped" if "nan_rows_dropped" in st else ""
    if args.postprocess:
        dropped += _post_note(res.dataset.info.extra["postprocess"])
    print(
        f"wrote {res.dataset.n_transitions} synthetic transitions ({args.synth}) to "
        f"{minari_io.resolve_id(args.out_dataset, for_write=True)}: epsilon "
        f"{res.epsilon:.4g} at delta {args.delta:g} ({args.unit}){dropped}; "
        f"seconds {json.dumps({k: round(v, 1) for k, v in res.seconds.items()})}"
    )
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


def _add_synthesize(p: argparse.ArgumentParser) -> None:
    from privsynth.synth.registry import names

    p.add_argument("--synth", choices=names(), default="privorl-n", metavar="NAME",
                   help=f"{', '.join(names())}")
    p.add_argument("--sensitive", required=True, metavar="ID",
                   help="sensitive dataset id (its environment spec goes on the release)")
    p.add_argument("--public", default=None, metavar="ID,ID",
                   help="comma-separated public dataset ids (not the sensitive one)")
    p.add_argument("--out-dataset", required=True, metavar="ID", help="Minari dataset id to write")
    p.add_argument("-n", "--samples", dest="n", type=int, default=100_000, help="synthetic transitions to release")
    hidden_option(p, "--num-samples", "--n", dest="n", type=int)
    p.add_argument("--pretrained", default=None, metavar="PATH",
                   help=f"shipped pre-trained name or checkpoint; skips pre-training (installed: {_pretrained_help()})")
    hidden_option(p, "--from-checkpoint", dest="pretrained")
    p.add_argument("--no-pretrain", action="store_true", help="DPDM ablation: no pre-training")
    p.add_argument("--workdir", default=None, metavar="DIR", help="stage checkpoints here; a rerun resumes")
    p.add_argument("--dp-normalizer", type=float, default=None, metavar="EPS",
                   help="without public data: spend EPS of --epsilon on a DP normaliser (privorl-n)")
    p.add_argument("--obs-bounds", default=None, metavar="LOW,HIGH", help="public observation bounds (--dp-normalizer)")
    p.add_argument("--reward-bounds", default=None, metavar="LOW,HIGH", help="public reward bounds (--dp-normalizer)")
    p.add_argument("--save-model", default=None, metavar="PATH", help="also save the fine-tuned synthesizer here")
    hidden_option(p, "--save", dest="save_model")
    add_set(p, "synthesizer config")
    _add_postprocess(p, short=True)
    p.add_argument("--overwrite", action="store_true",
                   help="replace the dataset and --save-model; drop bad resume files")
    _add_dp(p, short=True)
    _add_common(p)
    # PrivORL-n settings of the previous release: now --set fields (pretrain.epochs, sampler.method, ...)
    hidden_option(p, "--no-curiosity", dest="no_curiosity", action="store_true", default=False)
    hidden_option(p, "--pretrain-epochs", dest="pretrain_epochs", type=float, default=None)
    hidden_option(p, "--sampler", dest="sampler", choices=("dpm", "heun"), default=None)
    hidden_option(p, "--steps", dest="steps", type=int, default=None)
    hidden_option(p, "--checkpoint-every", dest="checkpoint_every", type=int, default=None)
    p.set_defaults(func=cmd_synthesize)


_SYNTH_EXAMPLE = (
    "--set takes any field of the synthesizer's config, e.g. finetune.epochs=5, sampler.method=heun, "
    "dp.accountant=prv, pretrain_curiosity=false (privorl-n), sampler.max_length=200 (privorl-j).\n" + example(
        "synthesize --synth privorl-n --epsilon 10 -n 100000",
        "--sensitive privsynth/pointmaze-umaze-v0 --public privsynth/pointmaze-open-v0",
        "--out-dataset privsynth/umaze-synthetic-v0"))


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser(
        "synthesize", help="pretrain -> DP finetune -> sample -> release, for any registered synthesizer",
        description="Release a DP synthetic copy of a sensitive dataset with its privacy card "
                    "(privsynth.release.synthesize), for any registered synthesizer.",
        epilog=_SYNTH_EXAMPLE)
    _add_synthesize(p)

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
