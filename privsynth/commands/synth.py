"""``privsynth synthesize``: pretrain -> DP finetune -> sample -> release for any registered synthesizer, a thin
wrapper over :func:`privsynth.release.synthesize`; its settings are the preset's config plus ``--set`` fields.
The option builders and the PrivORL-n config shared with ``privsynth model`` (:mod:`privsynth.commands.model`) live
here too.
"""
from __future__ import annotations

import argparse
import json
import sys
from typing import Any
from pathlib import Path

from privsynth.data.units import DATA_UNITS
from privsynth.commands._surface import add_set, example, hidden_option, overrides
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
    p.add_argument("--unit", choices=DATA_UNITS, default=None, metavar="UNIT",
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
                       help="repair rows with the public simulator: all | clip,resimulate,reward,walls,goals,"
                            "terminal,healthy,rollout")
        p.add_argument("--no-topup", dest="topup", action="store_false", help="keep only the rows --postprocess left")
        return
    p.add_argument("--postprocess", nargs="?", const="all", default=None, metavar="STEPS",
                   help="before writing, repair the rows with the public environment (free under DP; PointMaze and "
                        "MuJoCo locomotion). Steps: clip (actions), resimulate (s'), reward, walls / goals (states / "
                        "goals in walls dropped), terminal (flag from s'), healthy (rows from a fallen state dropped), "
                        "rollout (rows continued as simulator rollouts; by name only, not in all); "
                        "alone: all; none: off. synthesize's default: clip,resimulate,reward,terminal,healthy on "
                        "MuJoCo locomotion (plus rollout at epsilon <= 1); every PointMaze repair plus rollout when "
                        "nothing public is learnt from; none elsewhere")
    p.add_argument("--no-topup", dest="topup", action="store_false",
                   help="with --postprocess: keep only the rows left after dropping (default: sample more from the "
                        "same model until the requested number of rows is kept; free under DP)")


def _pretrained_help() -> str:
    from privsynth.synth.pretrained import list_pretrained

    return ", ".join(list_pretrained()) or "none installed"


def _post_note(stats: dict) -> str:
    """One line of :func:`privsynth.release.postprocess.postprocess` stats for the command's summary."""
    note = (f"; post-processed: {stats['rows_kept']}/{stats['rows_in']} rows kept, rewards changed "
            f"{stats['reward_changed']:.1%}, mean |Δs′| {stats['next_state_mean_change']:.3g}")
    roll = stats.get("rollout")
    if roll:  # the rows are now simulator rollouts: say so, a user reads episodes, not single transitions
        note += f", rolled out as {roll['chains']} simulator episodes of up to {roll['horizon']} steps"
    return note


def _post_request(text: str | None) -> str | bool:
    """``--postprocess`` as the pipeline takes it: absent -> ``"auto"`` (the environment's default), ``none`` -> no
    post-processing, else the steps named (``all`` when given alone)."""
    if text is None:
        return "auto"
    return False if text == "none" else text


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
              "--finetune-curiosity": args.finetune_curiosity, "--dp-normalizer": args.dp_normalizer is not None,
              "--warm-start": args.warm_start is not None, "--policy-share": args.policy_share is not None}
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


def synthesize_args(argv: list[str]) -> argparse.Namespace:
    """``privsynth synthesize`` options parsed from ``argv``: the deprecated aliases (``baseline``,
    ``synthesize-traj``) translate their options to these and run :func:`run_synthesize`. ``--out-dataset`` may be
    left out here (``baseline`` printed the card only): nothing is written, the release guard's checks still run."""
    p = argparse.ArgumentParser(prog="privsynth synthesize")
    _add_synthesize(p, out_required=False)
    return p.parse_args(argv)


def cmd_synthesize(args: argparse.Namespace) -> int:
    from privsynth.data import minari_io

    res, budget = run_synthesize(args)
    st = getattr(res.synthesizer, "last_sample_stats", None) or {}
    dropped = f", {st['nan_rows_dropped']} NaN rows dropped" if "nan_rows_dropped" in st else ""
    if "policy_relabel" in res.dataset.info.extra:  # --policy-share: before the repair
        rec = res.dataset.info.extra["policy_relabel"]
        dropped += (f"; actions relabelled by a DP policy (sigma {rec['noise_multiplier']:.3g}, composed into the "
                    f"epsilon above)")
    if "postprocess" in res.dataset.info.extra:  # asked for, or the locomotion default
        dropped += _post_note(res.dataset.info.extra["postprocess"])
    print(
        f"wrote {res.dataset.n_transitions} synthetic transitions ({args.synth}) to "
        f"{minari_io.resolve_id(args.out_dataset, for_write=True)}: epsilon "
        f"{res.epsilon:.4g} at delta {args.delta:g} ({args.unit}){dropped}; "
        f"seconds {json.dumps({k: round(v, 1) for k, v in res.seconds.items()})}"
    )
    return 0


def _layout_hint(ds: Any, layout: str) -> None:
    """A large release of one-step episodes: say that ``--layout chained`` would write it about five times smaller,
    and at what cost (issue 40), without choosing for the publisher."""
    from privsynth.release.layout import CHAIN_THRESHOLD

    if ds is None or layout != "transitions" or len(ds) <= CHAIN_THRESHOLD or ds.n_episodes < len(ds):
        return
    print(f"privsynth: hint: {len(ds):,} transitions in as many one-step Minari episodes cost about 7.7x their rows "
          "on disk; --layout chained writes them about 5x smaller, each state snapped to the previous row's next "
          "state (docs/datasets.md, 'Chained layout')", file=sys.stderr)


NOISY_SIGMA = 1.5  # between the two noise multipliers the transfer proxies measured (docs/transfer.md, third round)


def noise_hint(synth: Any) -> str | None:
    """A hint when the last DP fine-tune ran at a noise multiplier of at least :data:`NOISY_SIGMA`: on the transfer
    proxies a release fine-tuned at σ 2.25 (ε 10, 20k transitions) closed 0.03-0.16 of the gap between the public
    model and the real data; at σ 0.63 (200k transitions, the same steps) Hopper's two releases closed 0.41 and 0.05.
    Reads σ from the run's history (a function of ε, the schedule and the DP unit count); no count is printed."""
    runs = [h for h in getattr(synth, "history", []) if h.get("phase") == "finetune" and h.get("private")]
    sigma = runs[-1].get("noise_multiplier") if runs else None
    if sigma is None or sigma < NOISY_SIGMA:
        return None
    return (f"the DP fine-tune ran at noise multiplier {sigma:.2f}; on the transfer proxies, releases at 2.25 "
            "carried little of what the public data lacked, and at 0.63 one of two closed about half "
            "(docs/transfer.md, 'Third round'): more sensitive units or a larger epsilon lower it")


def run_synthesize(args: argparse.Namespace):
    """The one handler of ``privsynth synthesize`` and its aliases: the options -> config and
    :class:`~privsynth.privacy.Budget` -> :func:`privsynth.release.synthesize` (-> ``--save-model`` through the guard).
    Returns ``(SynthesisResult, Budget)``."""
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
    from privsynth.commands._types import budget_from_args
    from privsynth.synth import registry

    budget = budget_from_args(args, registry.entry(args.synth).units[0])
    res = synthesize(
        args.sensitive,
        budget=budget,
        public=pubs or None,
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
        postprocess=_post_request(args.postprocess),
        topup=args.topup,
        episodes=args.episodes,
        layout=getattr(args, "layout", "transitions"),
        warm_start=getattr(args, "warm_start", None),
        policy_share="auto" if getattr(args, "policy_share", None) is None else args.policy_share,
    )
    if args.save_model:  # the fine-tuned model is a release too: through the guard, within the same budget
        from privsynth.privacy.guard import guarded_save_model

        guarded_save_model(res.synthesizer, args.save_model, budget.epsilon, budget.delta)
    _layout_hint(res.dataset, getattr(args, "layout", "transitions"))
    hint = noise_hint(res.synthesizer)
    if hint:
        print(f"privsynth: hint: {hint}", file=sys.stderr)
    for line in res.warnings:  # released values that break the schema (recorded in the release's metadata)
        print(f"privsynth: warning: {line} (released rows against the schema)", file=sys.stderr)
    return res, budget


def _add_synthesize(p: argparse.ArgumentParser, *, out_required: bool = True) -> None:
    from privsynth.synth.registry import names
    from privsynth.synth.warmstart import WARM_START_SHARE

    p.add_argument("--synth", choices=names(), default="privorl-n", metavar="NAME",
                   help=f"{', '.join(names())}")
    p.add_argument("--sensitive", required=True, metavar="ID",
                   help="sensitive dataset id (its environment spec goes on the release)")
    p.add_argument("--public", default=None, metavar="ID,ID",
                   help="comma-separated public dataset ids (not the sensitive one)")
    p.add_argument("--out-dataset", required=out_required, metavar="ID", help="Minari dataset id to write")
    p.add_argument("-n", "--samples", dest="n", type=int, default=100_000, help="synthetic transitions to release")
    p.add_argument("--episodes", type=int, default=None, metavar="N",
                   help="whole episodes instead of -n (episode synthesizers: privorl-j, ...)")
    p.add_argument("--layout", choices=("transitions", "chained", "auto"), default="transitions", metavar="KIND",
                   help="transitions (exact; default) | chained (~5x smaller, snaps states) | auto")
    hidden_option(p, "--num-samples", "--n", dest="n", type=int)
    p.add_argument("--pretrained", default=None, metavar="PATH",
                   help=f"shipped model or checkpoint; no pre-training (installed: {_pretrained_help()})")
    hidden_option(p, "--from-checkpoint", dest="pretrained")
    p.add_argument("--no-pretrain", action="store_true", help="DPDM ablation: no pre-training")
    p.add_argument("--workdir", default=None, metavar="DIR", help="stage checkpoints here; a rerun resumes")
    p.add_argument("--dp-normalizer", type=float, default=None, metavar="EPS",
                   help="no public data: EPS for a DP normaliser (schema: 1/16 of epsilon; 0: none)")
    p.add_argument("--warm-start", type=float, default=None, metavar="SHARE",
                   help=f"no public data: SHARE of epsilon for DP self-pre-training ({WARM_START_SHARE:g}: off)")
    p.add_argument("--obs-bounds", default=None, metavar="LO,HI",
                   help="without public data: observation bounds where the environment has none")
    p.add_argument("--reward-bounds", default=None, metavar="LO,HI",
                   help="without public data: one step's reward bounds (default: environment's)")
    p.add_argument("--save-model", default=None, metavar="PATH", help="also save the fine-tuned synthesizer here")
    hidden_option(p, "--save", dest="save_model")
    add_set(p, "synthesizer config")
    _add_postprocess(p, short=True)
    p.add_argument("--policy-share", type=float, default=None, metavar="SHARE",
                   help="SHARE of epsilon for a DP policy that relabels actions (re-simulated rows)")
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
