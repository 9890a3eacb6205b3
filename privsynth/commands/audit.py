"""``privsynth audit``: membership inference against a synthesizer checkpoint (members = its fine-tuning records)."""
from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

from privsynth.errors import InvalidData


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "audit",
        help="membership-inference audit of a synthesizer checkpoint: TPR at 1%%/10%% FPR, AUC, ROC",
        description="Score the fine-tuning records (members) and held-out records from the same distribution "
        "(non-members) with white-box attacks on the released EMA weights; members are the positive class. "
        "See docs/audit.md.",
    )
    p.add_argument("--checkpoint", required=True, help="synthesizer checkpoint (.pt) to attack")
    p.add_argument("--members", required=True, help="Minari dataset id (or .npz cache) of the fine-tuning records")
    p.add_argument("--non-members", required=True, help="Minari dataset id (or .npz cache) of held-out records")
    p.add_argument("--out", required=True, help="where to write the audit JSON")
    p.add_argument("--reference", default=None, help="public pre-trained checkpoint: enables the calibrated attack")
    p.add_argument("--attacks", default="loss,pia,loss_ref", help="comma list of loss, pia, score_norm, loss_ref")
    p.add_argument("--unit", choices=["transition", "trajectory"], default="transition", help="what one member is")
    p.add_argument("--sigma", type=float, default=0.1, help="noise level of the loss attack (PrivORL: 0.1)")
    p.add_argument("--repeats", type=int, default=64, help="noise draws averaged by the loss attack (PrivORL: 64)")
    p.add_argument("--max-units", type=int, default=1000, help="members and non-members scored, each (PrivORL: 1000)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plot", default=None, help="also write the ROC plot here (.png)")
    p.set_defaults(func=run)


def _load_synth(path: str):
    from privsynth.synth import TransitionSynthesizer

    return TransitionSynthesizer.load(path)


def _load_records(ref: str):
    if ref.endswith(".npz") and Path(ref).is_file():
        from privsynth.evaluation.runner import load_dataset_file

        return load_dataset_file(Path(ref))
    from privsynth.data import minari_io

    return minari_io.load_dataset(ref)


def build_attacks(names: str, *, sigma: float, repeats: int, reference) -> list:
    from privsynth.evaluation.mia import LossAttack, ReferenceAttack, make_attack

    attacks = []
    for name in [n.strip() for n in names.split(",") if n.strip()]:
        if name == "loss":
            attacks.append(LossAttack(sigma=sigma, repeats=repeats))
        elif name.endswith("_ref"):
            if reference is None:
                raise InvalidData(f"attack '{name}' needs --reference (a public pre-trained checkpoint)")
            base = LossAttack(sigma=sigma, repeats=repeats) if name == "loss_ref" else make_attack(name[:-4])
            attacks.append(ReferenceAttack(base, reference))
        else:
            attacks.append(make_attack(name))
    return attacks


def run(args: argparse.Namespace) -> int:
    from privsynth.evaluation.mia import as_adapter, plot_roc, run_audit

    target = _load_synth(args.checkpoint)
    reference = as_adapter(_load_synth(args.reference)) if args.reference else None
    names = args.attacks
    if reference is None and args.attacks == "loss,pia,loss_ref":
        names = "loss,pia"  # the default drops the calibrated attack when no public model is given
    attacks = build_attacks(names, sigma=args.sigma, repeats=args.repeats, reference=reference)
    result = run_audit(target, _load_records(args.members), _load_records(args.non_members), attacks,
                       unit=args.unit, max_units=args.max_units, seed=args.seed)
    result.update(checkpoint=str(args.checkpoint), members=args.members, non_members=args.non_members,
                  reference=args.reference)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_text(json.dumps(result, indent=1))
    os.replace(tmp, out)
    if args.plot:
        plot_roc(result, args.plot, title=f"MIA on {Path(args.checkpoint).name}")
    print(f"{'attack':<12} {'AUC':>6} {'TPR@0.1%':>9} {'TPR@1%':>8} {'TPR@10%':>8}   ({result['unit']}s: "
          f"{next(iter(result['attacks'].values()))['n_members']} members, "
          f"{next(iter(result['attacks'].values()))['n_non_members']} non-members)")
    for name, att in result["attacks"].items():
        t = att["tpr_at_fpr"]
        print(f"{name:<12} {att['auc']:6.3f} {t['0.001']:9.3f} {t['0.01']:8.3f} {t['0.1']:8.3f}")
    print(f"wrote {out}")
    return 0
