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
        help="membership-inference audit of a released dataset (data-only) and/or a synthesizer checkpoint "
        "(white-box); canary audit of the release pipeline",
        description="Score the fine-tuning records (members) and held-out records from the same distribution "
        "(non-members); members are the positive class. --release: data-only attacks on the published synthetic "
        "data (DCR, calibrated DCR, DOMIAS); --checkpoint: white-box attacks on the released EMA weights; "
        "--canaries M: insert M canaries into --sensitive, run the real release pipeline and lower-bound epsilon. "
        "Writes the JSON, a markdown report and a ROC plot. See docs/audit.md.",
    )
    p.add_argument("--release", default=None, help="Minari id (or .npz cache) of the released synthetic dataset")
    p.add_argument("--checkpoint", default=None, help="synthesizer checkpoint (.pt) to attack with white-box attacks")
    p.add_argument("--members", default=None, help="Minari dataset id (or .npz cache) of the fine-tuning records")
    p.add_argument("--non-members", default=None, help="Minari dataset id (or .npz cache) of held-out records")
    p.add_argument("--out", required=True, help="where to write the audit JSON (report: same stem, .md and -roc.png)")
    p.add_argument("--reference", default=None,
                   help="attacker's reference records from the same population (dataset id: data-only calibrated "
                   "attacks); a .pt path is taken as --reference-model")
    p.add_argument("--reference-model", default=None, help="public pre-trained checkpoint: the calibrated white-box attack")
    p.add_argument("--attacks", default=None,
                   help="white-box: comma list of loss, pia, score_norm, loss_ref (default loss,pia[,loss_ref])")
    p.add_argument("--data-attacks", default=None,
                   help="data-only: comma list of dcr, dcr_ref, domias (default dcr[,dcr_ref,domias with --reference])")
    p.add_argument("--unit", choices=["transition", "trajectory"], default="transition", help="what one member is")
    p.add_argument("--sigma", type=float, default=0.1, help="noise level of the loss attack (PrivORL: 0.1)")
    p.add_argument("--repeats", type=int, default=64, help="noise draws averaged by the loss attack (PrivORL: 64)")
    p.add_argument("--max-units", type=int, default=1000, help="members and non-members scored, each (PrivORL: 1000)")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates for the intervals (0 = none)")
    p.add_argument("--seed", type=int, default=0, help="subsampling, attack noise draws and bootstrap (not privacy)")
    p.add_argument("--plot", default=None, help="ROC plot path (default: <out stem>-roc.png)")
    p.add_argument("--report", default=None, help="markdown report path (default: <out stem>.md)")
    c = p.add_argument_group("canary audit of the release pipeline (privsynth.release.synthesize)")
    c.add_argument("--canaries", type=int, default=0, help="number m of canary units (each included w.p. 1/2)")
    c.add_argument("--sensitive", default=None, help="sensitive dataset id the canaries are inserted into")
    c.add_argument("--public", default=None, help="comma-separated public dataset ids (pre-training, canary design)")
    c.add_argument("--pretrained", default=None, help="shipped pre-trained name or checkpoint (skips pre-training)")
    c.add_argument("--epsilon", type=float, default=1.0, help="claimed epsilon of the audited release")
    c.add_argument("--delta", type=float, default=1e-5)
    c.add_argument("--noise", choices=["on", "off", "both"], default="both",
                   help="off = the no-privacy ablation of the same config (noise and clipping disabled)")
    c.add_argument("--canary-length", type=int, default=None,
                   help="transitions per canary (default: 16 with --unit trajectory, 1 with --unit transition)")
    c.add_argument("--samples", type=int, default=20_000, help="synthetic transitions released per run")
    c.add_argument("--finetune-epochs", type=float, default=50.0, help="fine-tuning epochs of the audited runs")
    c.add_argument("--finetune-batch-size", type=int, default=256, help="transitions per step (unit transition, noise off)")
    c.add_argument("--guesses", type=int, default=None, help="guesses on each side (default m/10); fixed in advance")
    c.add_argument("--config", choices=["demo", "cpu"], default="demo", help="synthesizer preset")
    p.set_defaults(func=run)


def _load_synth(path: str):
    """Any registered synthesizer's checkpoint (``privsynth.synth.load``: the file's format tag decides)."""
    from privsynth.synth.registry import load

    return load(path)


def _load_records(ref: str):
    if ref.endswith(".npz") and Path(ref).is_file():
        from privsynth.evaluation.bench.sources import load_dataset_file

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
                raise InvalidData(f"attack '{name}' needs --reference-model (a public pre-trained checkpoint)")
            base = LossAttack(sigma=sigma, repeats=repeats) if name == "loss_ref" else make_attack(name[:-4])
            attacks.append(ReferenceAttack(base, reference))
        else:
            attacks.append(make_attack(name))
    return attacks


def _card(ds) -> dict:
    card = getattr(getattr(ds, "info", None), "privacy_card", None) or {}
    return {k: card.get(k) for k in ("epsilon", "delta", "unit", "accountant", "private", "synthesizer") if k in card}


def _print_table(title: str, result: dict) -> None:
    first = next(iter(result["attacks"].values()))
    print(f"{title} ({result['unit']}s: {first['n_members']} members, {first['n_non_members']} non-members)")
    print(f"{'attack':<12} {'AUC':>6} {'TPR@0.1%':>9} {'TPR@1%':>8} {'TPR@1% 95% CI':>16} {'TPR@10%':>8}")
    for name, att in result["attacks"].items():
        t = att["tpr_at_fpr"]
        ci = att.get("ci", {}).get("tpr_at_fpr", {}).get("0.01")
        ci_s = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        print(f"{name:<12} {att['auc']:6.3f} {t['0.001']:9.3f} {t['0.01']:8.3f} {ci_s:>16} {t['0.1']:8.3f}")


def run(args: argparse.Namespace) -> int:
    from privsynth.evaluation.mia import as_adapter, run_audit
    from privsynth.evaluation.mia.audit import run_data_audit
    from privsynth.evaluation.mia.data_attacks import make_data_attack
    from privsynth.evaluation.mia.report import write_report

    ref_model = args.reference_model
    ref_data = args.reference
    if ref_data and ref_data.endswith(".pt") and not ref_model:
        ref_model, ref_data = ref_data, None  # back-compatible: --reference public.pt
    if args.canaries:
        return _run_canary(args, ref_model)
    if not args.release and not args.checkpoint:
        raise InvalidData("nothing to attack: give --release (data-only), --checkpoint (white-box), or --canaries")
    if not args.members or not args.non_members:
        raise InvalidData("--members and --non-members are required (the fine-tuning records and held-out ones)")
    members, non_members = _load_records(args.members), _load_records(args.non_members)
    report: dict = {"title": f"MIA audit of {args.release or Path(args.checkpoint).name}",
                    "target": {"release": args.release, "checkpoint": args.checkpoint, "members": args.members,
                               "non_members": args.non_members, "reference": ref_data, "reference_model": ref_model},
                    "command": _command_line()}
    if args.release:
        release = _load_records(args.release)
        report["card"] = _card(release)
        reference = _load_records(ref_data) if ref_data else None
        names = args.data_attacks or ("dcr,dcr_ref,domias" if reference is not None else "dcr")
        attacks = [make_data_attack(n.strip(), args.unit) for n in names.split(",") if n.strip()]
        report["data_only"] = run_data_audit(release, members, non_members, attacks, reference=reference,
                                             unit=args.unit, max_units=args.max_units, seed=args.seed,
                                             n_boot=args.bootstrap)
    if args.checkpoint:
        target = _load_synth(args.checkpoint)
        reference = as_adapter(_load_synth(ref_model)) if ref_model else None
        if args.attacks:
            names = args.attacks
        elif not as_adapter(target, args.unit).has_denoiser:  # baselines, DP-Transformer: the loss attack only
            names = "loss,loss_ref" if reference is not None else "loss"
        else:
            names = "loss,pia,loss_ref" if reference is not None else "loss,pia"
        attacks = build_attacks(names, sigma=args.sigma, repeats=args.repeats, reference=reference)
        report["white_box"] = run_audit(target, members, non_members, attacks, unit=args.unit,
                                        max_units=args.max_units, seed=args.seed, n_boot=args.bootstrap)
        if not report.get("card"):
            report["card"] = _card_of_synth(target)
    out = Path(args.out)
    written = write_report(report, out, args.report, args.plot)
    if report.get("data_only"):
        _print_table("data-only attacks on the release", report["data_only"])
    if report.get("white_box"):
        _print_table("white-box attacks on the weights", report["white_box"])
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return 0


def _card_of_synth(synth) -> dict:
    try:
        card = synth.card()
    except Exception:  # stand-ins and old checkpoints carry no card
        return {}
    return {k: card.get(k) for k in ("epsilon", "delta", "unit", "accountant", "private", "synthesizer") if k in card}


def _command_line() -> str | None:
    """The command as typed, when this process is the ``privsynth`` command (not a test calling ``main``)."""
    import shlex
    import sys

    prog = Path(sys.argv[0]).name if sys.argv else ""
    if prog not in ("privsynth", "__main__.py") or len(sys.argv) < 2:
        return None
    return "privsynth " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _run_canary(args: argparse.Namespace, ref_model: str | None) -> int:
    from privsynth.evaluation.mia.canary import CanaryAuditConfig, run_canary_audit
    from privsynth.evaluation.mia.report import write_report

    if not args.sensitive:
        raise InvalidData("--canaries needs --sensitive (the dataset the canaries are inserted into)")
    if not args.public and not args.pretrained:
        raise InvalidData("--canaries needs --public datasets or a --pretrained synthesizer")
    cfg = CanaryAuditConfig(
        canaries=args.canaries, unit=args.unit, epsilon=args.epsilon, delta=args.delta, samples=args.samples,
        canary_length=args.canary_length or (16 if args.unit == "trajectory" else 1),
        finetune_epochs=args.finetune_epochs, finetune_batch_size=args.finetune_batch_size, guesses=args.guesses,
        preset=args.config, seed=args.seed,
        noise=("on", "off") if args.noise == "both" else (args.noise,),
    )
    public = [_load_records(p) for p in args.public.split(",")] if args.public else []
    canary = run_canary_audit(_load_records(args.sensitive), public, cfg, pretrained=args.pretrained,
                              reference_model=ref_model)
    report = {"title": f"Canary audit of the release pipeline on {args.sensitive}",
              "target": {"release": f"privsynth.release.synthesize on {args.sensitive}"},
              "card": canary["runs"][0].get("card", {}), "canary": canary,
              "command": _command_line()}
    written = write_report(report, Path(args.out), args.report, args.plot)
    print(f"{'run':<10} {'scored from':<12} {'correct/guesses':>16} {'eps lower bound':>16} {'claimed eps':>12}")
    code = 0
    for run_ in canary["runs"]:
        for src, a in run_["audits"].items():
            print(f"{run_['label']:<10} {src:<12} {a['correct']:>8}/{a['guesses']:<7} "
                  f"{a['epsilon_lower_bound']:16.3f} {a['claimed_epsilon']:12.3f}")
            if run_["noise"] == "on" and not a["consistent"]:
                code = 1  # the audit proved the release's claim wrong
    print(f"(the largest bound this design can show, every guess right: {canary['max_bound']:.3f})")
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return code
