"""``privsynth synthesize-traj`` (deprecated alias of ``privsynth synthesize --synth privorl-j``): trajectory-level DP synthesis (PrivORL-j and its baselines) from the shell.

Its options are translated to ``privsynth synthesize``'s and run by that command's handler: pre-train on public
datasets, DP fine-tune on the sensitive one with the trajectory as the privacy unit, stitch ``--n`` trajectories, and
release them through the guard as a Minari dataset.
"""
from __future__ import annotations

import argparse
import json
from typing import Any

from privsynth.errors import InvalidData

# --model -> the registered name of ``privsynth synthesize --synth``
NAMES = {"privorl-j": "privorl-j", "privorl-j-unet": "privorl-j-unet", "privorl-j-u": "privorl-j-unet",
         "dp-transformer": "dp-transformer"}


def register(subparsers: Any) -> None:
    from privsynth.commands._surface import hidden_parser

    # deprecated alias (one release): `privsynth synthesize --synth privorl-j --unit trajectory`
    p = hidden_parser(subparsers, "synthesize-traj",
                      "synthesize --synth privorl-j|privorl-j-unet|dp-transformer --out-dataset ID")
    p.add_argument("--sensitive", required=True, help="Minari id of the sensitive dataset (one trajectory = one unit)")
    p.add_argument("--public", default="", help="comma-separated Minari ids of public datasets for pre-training")
    p.add_argument("--from-checkpoint", default=None, help="start from a saved (pre-trained) trajectory synthesizer")
    p.add_argument("--model", choices=list(NAMES), default="privorl-j")
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


# the alias's options that are ``--set`` fields of the trajectory synthesizer's config in ``privsynth synthesize``
SETTINGS = {"pretrain_epochs": "pretrain.epochs", "finetune_epochs": "finetune.epochs",
            "batch_trajectories": "dp.batch_size", "fragments_per_trajectory": "dp.fragments_per_trajectory",
            "accountant": "dp.accountant", "max_length": "sampler.max_length"}


def run(args: argparse.Namespace) -> int:
    """The alias, translated to ``privsynth synthesize --synth NAME --unit trajectory --episodes N`` and run by its
    handler (:func:`privsynth.commands.synth.run_synthesize`); prints this command's JSON line."""
    from privsynth.commands.synth import run_synthesize, synthesize_args

    if args.from_checkpoint:
        raise InvalidData("--from-checkpoint has no equivalent in 'privsynth synthesize' for the trajectory "
                          "synthesizers (only privorl-n starts from a checkpoint): pre-train on --public instead")
    argv = ["--synth", NAMES[args.model], "--sensitive", args.sensitive, "--unit", "trajectory",
            "--epsilon", repr(args.epsilon), "--delta", repr(args.delta), "--config", args.config,
            "--seed", str(args.seed), "--episodes", str(args.n), "--out-dataset", args.out]
    argv += ["--public", args.public] if args.public else []
    argv += ["--save-model", args.save] if args.save else []
    for attr, field in SETTINGS.items():
        if getattr(args, attr) is not None:
            argv += ["--set", f"{field}={getattr(args, attr)}"]
    argv += ["--set", "sampler.snap=true"] if args.snap else []
    argv += ["--overwrite"] * args.overwrite + ["--quiet"] * args.quiet
    res, _ = run_synthesize(synthesize_args(argv))
    st = res.synthesizer.last_sample_stats
    print(json.dumps({
        "released": args.out, "model": res.synthesizer.name, "epsilon": round(res.epsilon, 4), "delta": args.delta,
        "unit": "trajectory", "trajectories": st["trajectories"], "transitions": st["transitions"],
        "ended_by": st["ended_by"], "seam_gap_mean": st["boundary_gap"]["mean"],
    }))
    return 0
