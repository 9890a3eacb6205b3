"""``privsynth synthesize-traj`` (deprecated alias of ``privsynth synthesize --synth privorl-j``): trajectory-level DP synthesis (PrivORL-j and its baselines) from the shell.

One command runs the whole pipeline: pre-train on public datasets, DP fine-tune on the sensitive one with the
trajectory as the privacy unit, stitch trajectories, and release them through the guard as a Minari dataset. Thin
wrapper over :class:`privsynth.synth.trajectory.TrajectorySynthesizer`.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from privsynth.errors import InvalidData

MODELS = {"privorl-j": "transformer", "privorl-j-unet": "unet", "privorl-j-u": "unet", "dp-transformer": "dp-transformer"}


def register(subparsers: Any) -> None:
    from privsynth.commands._surface import hidden_parser

    # deprecated alias (one release): `privsynth synthesize --synth privorl-j --unit trajectory`
    p = hidden_parser(subparsers, "synthesize-traj",
                      "synthesize --synth privorl-j|privorl-j-unet|dp-transformer --out-dataset ID")
    p.add_argument("--sensitive", required=True, help="Minari id of the sensitive dataset (one trajectory = one unit)")
    p.add_argument("--public", default="", help="comma-separated Minari ids of public datasets for pre-training")
    p.add_argument("--from-checkpoint", default=None, help="start from a saved (pre-trained) trajectory synthesizer")
    p.add_argument("--model", choices=list(MODELS), default="privorl-j")
    p.add_argument("--config", choices=("cpu", "paper", "tiny"), default="cpu", help="size preset (default cpu)")
    p.add_argument("--epsilon", type=float, required=True)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--accountant", choices=("rdp", "prv", "pld"), default=None)
    p.add_argument("--pretrain-epochs", type=float, default=None)
    p.add_argument("--finetune-epochs", type=float, default=None)
    p.add_argument("--batch-trajectories", type=int, default=None, help="expected trajectories per DP step")
    p.add_argument("--fragments-per-trajectory", type=int, default=None, help="K fragments per sampled trajectory")
    p.add_argument("--n", type=int, default=1000,
                   help="trajectories to generate (default 1000; never the sensitive count, which is private)")
    p.add_argument("--max-length", type=int, default=None, help="maximum generated trajectory length")
    p.add_argument("--snap", action="store_true", help="overwrite each state with the previous next state")
    p.add_argument("--out", required=True, help="Minari id of the released synthetic dataset")
    p.add_argument("--save", default=None, help="also save the fine-tuned synthesizer to this file")
    p.add_argument("--overwrite", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--quiet", action="store_true")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from privsynth.data.minari_io import load_dataset
    from privsynth.release import check_public, check_release_request, release_dataset
    from privsynth.synth.trajectory import TrajectorySynthesizer
    from privsynth.synth.trajectory.config import PRESETS

    check_release_request(args.out, overwrite=args.overwrite, n=args.n, sensitive_id=args.sensitive,
                          public_ids=[i.strip() for i in (args.public or "").split(",") if i.strip()])
    if args.from_checkpoint:
        synth = TrajectorySynthesizer.load(args.from_checkpoint)
        cfg = synth.config
    else:
        cfg = PRESETS[args.config](MODELS[args.model]) if args.config != "paper" else PRESETS["paper"]()
        cfg.backbone = MODELS[args.model]  # type: ignore[assignment]
        synth = None
    cfg.seed = args.seed
    for attr, target, name in (
        ("pretrain_epochs", cfg.pretrain, "epochs"), ("finetune_epochs", cfg.finetune, "epochs"),
        ("batch_trajectories", cfg.dp, "batch_size"), ("fragments_per_trajectory", cfg.dp, "fragments_per_trajectory"),
        ("accountant", cfg.dp, "accountant"), ("max_length", cfg.sampler, "max_length"),
    ):
        if getattr(args, attr) is not None:
            setattr(target, name, getattr(args, attr))
    cfg.sampler.snap = cfg.sampler.snap or args.snap
    sensitive = load_dataset(args.sensitive).mark_sensitive(True)
    if synth is None:
        public = [load_dataset(i.strip()) for i in args.public.split(",") if i.strip()]
        if not public:
            raise InvalidData("--public needs at least one public dataset id (or pass --from-checkpoint)")
        for pub in public:  # pre-training and the normaliser read it unaccounted: it must hold no sensitive record
            check_public(pub, sensitive)
        synth = TrajectorySynthesizer(cfg).pretrain(public, progress=not args.quiet)
    synth.finetune(sensitive, args.epsilon, args.delta, "trajectory", progress=not args.quiet)
    if args.save:  # the fine-tuned model is a release too: written only if its ledger fits the budget
        from privsynth.privacy.guard import guarded_save_model

        guarded_save_model(synth, Path(args.save), args.epsilon, args.delta)
    ds = synth.sample(args.n, seed=args.seed, progress=not args.quiet, name=args.out)
    spent = release_dataset(ds, synth.ledger, args.out, epsilon_budget=args.epsilon, delta=args.delta,
                            overwrite=args.overwrite, environment=sensitive.info)
    st = synth.last_sample_stats
    print(json.dumps({
        "released": args.out, "model": synth.name, "epsilon": round(spent, 4), "delta": args.delta,
        "unit": "trajectory", "trajectories": st["trajectories"], "transitions": st["transitions"],
        "ended_by": st["ended_by"], "seam_gap_mean": st["boundary_gap"]["mean"],
    }))
    return 0
