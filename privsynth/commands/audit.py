"""``privsynth audit``: membership inference against a release or a synthesizer checkpoint (members = its fine-tuning
records), tested against the privacy card's ε; the canary audit of the release pipeline.

Why this module is long: one command serves three audit targets (a release, a checkpoint, the canary pipeline) with
one verdict rule and one set of exit codes; the parser, the three runs and the shared verdict printing stay together
so the rule cannot drift between them. The modes are subcommands (membership, canary, engine);
the flat form of the previous release is the hidden ``audit legacy``.
"""
from __future__ import annotations

import argparse
import os
from pathlib import Path

from privsynth.data.units import DATA_UNITS
from privsynth.commands._types import refuse_existing
from privsynth.errors import InvalidData

EXIT_VIOLATION = 1  # the audit refutes the claimed ε
EXIT_UNINFORMATIVE = 3  # no VIOLATION, but the design could not have shown one (2 is a refused request)
EXIT_CODES = ("exit status: 0 = consistent (the design could have refuted the claim and did not), or no claim to "
              "test; 1 = VIOLATION (the audit refutes the claimed epsilon); 2 = a refused request or bad input; "
              "3 = uninformative (even every guess right could not refute the claim; the report says how many "
              "members, or canaries, a test of it needs)")


_DESCRIPTION = (
    "Score members (the fine-tuning records) against held-out non-members: data-only attacks on --release (DCR, "
    "DOMIAS), white-box attacks on --checkpoint; test the card's epsilon. Writes JSON, a report and a ROC plot "
    "(from sensitive data: not covered by the card). See docs/audit.md.")


def _membership_options(p: argparse.ArgumentParser, *, legacy: bool = False) -> None:
    p.add_argument("--release", default=None, metavar="ID",
                   help="Minari id (or .npz cache) of the released synthetic dataset")
    p.add_argument("--checkpoint", default=None, metavar="PATH",
                   help="synthesizer checkpoint (.pt) to attack with white-box attacks")
    p.add_argument("--members", default=None, metavar="ID",
                   help="Minari dataset id (or .npz cache) of the fine-tuning records")
    p.add_argument("--non-members", default=None, metavar="ID",
                   help="Minari dataset id (or .npz cache) of held-out records")
    p.add_argument("--reference", default=None, metavar="ID",
                   help="attacker's reference records from the same population (data-only calibrated attacks)")
    p.add_argument("--reference-model", default=None, metavar="PATH",
                   help="public pre-trained checkpoint: the calibrated white-box attack")
    p.add_argument("--attacks", default=None, metavar="A,B",
                   help="white-box: comma list of loss, pia, score_norm, loss_ref (default loss,pia[,loss_ref])")
    p.add_argument("--data-attacks", default=None, metavar="A,B",
                   help="data-only: comma list of dcr, dcr_ref, domias (default dcr[,dcr_ref,domias])")
    p.add_argument("--sigma", type=float, default=0.1, help="noise level of the loss attack (PrivORL: 0.1)")
    p.add_argument("--repeats", type=int, default=64, help="noise draws averaged by the loss attack (PrivORL: 64)")
    p.add_argument("--max-units", type=int, default=1000, help="members and non-members scored, each (PrivORL: 1000)")
    if not legacy:
        p.add_argument("--epsilon", dest="claimed_epsilon", type=float, default=None,
                       help="claimed epsilon to test (default: the privacy card's)")


def _canary_options(p: argparse.ArgumentParser, *, legacy: bool = False) -> None:
    c = p.add_argument_group("canary audit of the release pipeline (privsynth.release.synthesize)") if legacy else p
    c.add_argument("--canaries", type=int, default=0, required=not legacy,
                   help="number m of canary units (each included w.p. 1/2)")
    c.add_argument("--sensitive", default=None, metavar="ID",
                   help="sensitive dataset id the canaries are inserted into")
    c.add_argument("--public", default=None, metavar="ID,ID",
                   help="comma-separated public dataset ids (pre-training, canary design)")
    c.add_argument("--pretrained", default=None, metavar="PATH",
                   help="shipped pre-trained name or checkpoint (skips pre-training)")
    c.add_argument("--epsilon", type=float, default=1.0, help="claimed epsilon of the audited release")
    c.add_argument("--delta", type=float, default=1e-5)
    c.add_argument("--noise", choices=["on", "off", "both"], default="both",
                   help="off = the no-privacy ablation of the same config (noise and clipping disabled)")
    c.add_argument("--canary-length", type=int, default=None,
                   help="transitions per canary (default: 16 with --unit trajectory, 1 with --unit transition)")
    c.add_argument("-n", "--samples", dest="samples", type=int, default=20_000,
                   help="synthetic transitions released per run")
    c.add_argument("--finetune-epochs", type=float, default=50.0, help="fine-tuning epochs of the audited runs")
    c.add_argument("--finetune-batch-size", type=int, default=256,
                   help="transitions per step (unit transition, noise off)")
    c.add_argument("--config", choices=["demo", "cpu"], default="demo", metavar="PRESET",
                   help="synthesizer preset: demo | cpu")


def _shared_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", required=True, metavar="PATH",
                   help="the audit JSON to write, a .json path (report: same stem, .md and -roc.png)")
    p.add_argument("--unit", choices=DATA_UNITS, default="transition", metavar="UNIT",
                   help="what one member is: transition | trajectory")
    p.add_argument("--bootstrap", type=int, default=1000, help="bootstrap replicates for the intervals (0 = none)")
    p.add_argument("--seed", type=int, default=0,
                   help="subsampling, pairing, attack noise draws and bootstrap (the audit's design, not privacy)")
    p.add_argument("--guesses", type=int, default=None,
                   help="guesses on each side of the one-run epsilon test, fixed in advance (default: a tenth of "
                        "the member/non-member pairs; m/10 canaries)")
    p.add_argument("--plot", default=None, metavar="PATH", help="ROC plot path (default: <out stem>-roc.png)")
    p.add_argument("--report", default=None, metavar="PATH", help="markdown report path (default: <out stem>.md)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace the JSON, report and plot of an earlier audit at these paths (refused otherwise)")


def _defaults(*adders) -> dict:
    """The defaults of the options a mode does not take (``run`` reads one namespace for every mode)."""
    full = argparse.ArgumentParser(add_help=False)
    for add in adders:
        add(full)
    return {a.dest: a.default for a in full._actions}


def register(subparsers) -> None:
    from privsynth.commands._surface import example, hidden_parser
    from privsynth.commands.privacy import add_engine_options

    p = subparsers.add_parser(
        "audit", help="audits: membership inference (release / checkpoint), canaries through the release "
                      "pipeline, the DP-SGD engine")
    sub = p.add_subparsers(dest="audit_command", metavar="MODE", required=True)
    exit_codes = EXIT_CODES[0].upper() + EXIT_CODES[1:] + ".\n"
    mem = sub.add_parser(
        "membership", help="membership inference on a release (data-only) and/or a checkpoint (white-box)",
        description=_DESCRIPTION, epilog=exit_codes + example(
            "audit membership --release privsynth/umaze-synthetic-v0 --out audit/umaze.json",
            "--members privsynth/umaze-members-v0 --non-members privsynth/umaze-nonmembers-v0"))
    _membership_options(mem)
    _shared_options(mem)
    mem.set_defaults(func=run, **{**_defaults(_canary_options), "canaries": 0})
    can = sub.add_parser(
        "canary", help="insert m canaries into --sensitive, run the release pipeline, lower-bound epsilon",
        description="Canary audit of the release pipeline (privsynth.release.synthesize): each canary is included "
                    "with probability 1/2, the pipeline runs for real, and the guesses give an empirical lower "
                    "bound on epsilon tested against --epsilon. See docs/audit.md.",
        epilog=exit_codes + example(
            "audit canary --canaries 200 --epsilon 1 --out audit/canary.json",
            "--sensitive privsynth/pointmaze-umaze-v0 --public privsynth/pointmaze-open-v0"))
    _canary_options(can)
    _shared_options(can)
    can.set_defaults(func=run, **{k: v for k, v in _defaults(_membership_options).items() if k != "epsilon"})
    eng = sub.add_parser(
        "engine", help="one-run canary audit of the DP-SGD engine: an empirical lower bound on epsilon",
        description="Train the DP-SGD engine on a toy task with canaries and test the empirical epsilon lower "
                    "bound against the claim (the accountant's epsilon for --epsilon). Exit status 1 if refuted.",
        epilog=example("audit engine --epsilon 1 --canaries 1000 --clipping bk"))
    add_engine_options(eng)
    # the flat `privsynth audit --release ...` of the previous release (cli._legacy_argv routes it here)
    legacy = hidden_parser(sub, "legacy", "audit membership (or: audit canary)", old="audit --OPTIONS",
                           description=_DESCRIPTION)
    _membership_options(legacy, legacy=True)
    _shared_options(legacy)
    _canary_options(legacy, legacy=True)
    legacy.set_defaults(func=run)


def _load_synth(path: str):
    """Any registered synthesizer's checkpoint (``privsynth.synth.load``: the file's format tag decides)."""
    from privsynth.synth.registry import load

    return load(path)


def _load_npz(path: Path, flag: str):
    """A ``.npz``: the benchmark's cache (arrays + info) or ``privsynth datasets export`` / D4RL-style arrays.

    Read through :func:`privsynth.data.safe_files.load_npz`: each array's declared size is checked against what the
    file stores before anything is allocated, and nothing is unpickled; a bad file is one :class:`InvalidData` line."""
    import json

    from privsynth.data.d4rl_arrays import D4RL_KEYS, from_d4rl_arrays
    from privsynth.data.dataset import ARRAY_FIELDS, DatasetInfo, OfflineDataset
    from privsynth.data.safe_files import load_npz
    from privsynth.errors import PrivsynthError

    label = f"{flag} {path}"
    arrays = load_npz(path, what=label)
    wanted = ARRAY_FIELDS if "info" in arrays else D4RL_KEYS
    missing = [k for k in wanted if k not in arrays]
    if missing:
        raise InvalidData(f"{label} lacks the arrays {', '.join(missing)} (expected a `privsynth datasets export` "
                          "file: observations, actions, rewards, next_observations, terminals, timeouts, episode_ids)")
    try:
        if "info" in arrays:  # the benchmark's cache: every array and the info as JSON
            info = DatasetInfo.from_dict(json.loads(str(arrays["info"])))
            return OfflineDataset(**{k: arrays[k] for k in ARRAY_FIELDS}, info=info)
        return from_d4rl_arrays({k: v for k, v in arrays.items() if k in D4RL_KEYS + ("timeouts", "episode_ids")},
                                DatasetInfo(name=path.stem))
    except PrivsynthError as exc:
        raise InvalidData(f"{label} cannot be read as a dataset: {exc}") from None
    except (ValueError, TypeError, RecursionError) as exc:  # the info is not JSON, an array of the wrong kind
        raise InvalidData(f"{label} cannot be read as a dataset ({type(exc).__name__}: "
                          f"{(str(exc).splitlines() or [''])[0][:120]})") from None


def _load_records(ref: str, flag: str = "dataset"):
    """A Minari dataset id, or a ``.npz`` file (the benchmark cache or a ``privsynth datasets export`` file)."""
    if ref.lower().endswith(".npz"):
        path = Path(ref).expanduser()
        if not path.exists():
            raise InvalidData(f"{flag} {ref}: file not found")
        if not path.is_file():
            raise InvalidData(f"{flag} {ref} is not a file")
        return _load_npz(path, flag)
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


_CARD_KEYS = ("epsilon", "delta", "unit", "accountant", "private", "synthesizer", "neighbouring_relation")


def _card(ds) -> dict:
    card = getattr(getattr(ds, "info", None), "privacy_card", None) or {}
    return {k: card.get(k) for k in _CARD_KEYS if k in card}


def _print_table(title: str, result: dict) -> None:
    from privsynth.evaluation.mia.report import plural

    first = next(iter(result["attacks"].values()))
    print(f"{title} ({plural(result['unit'])}: {first['n_members']} members, {first['n_non_members']} non-members)")
    print(f"{'attack':<12} {'AUC':>6} {'TPR@0.1%':>9} {'TPR@1%':>8} {'TPR@1% 95% CI':>16} {'TPR@10%':>8} "
          f"{'eps LB (right/guesses)':>24}")

    def num(v, width):
        return f"{'n/a':>{width}}" if v is None else f"{v:{width}.3f}"

    for name, att in result["attacks"].items():
        t = att["tpr_at_fpr"]
        ci = (att.get("ci") or {}).get("tpr_at_fpr", {}).get("0.01")
        ci_s = f"[{ci[0]:.3f}, {ci[1]:.3f}]" if ci else ""
        et = att.get("epsilon_test") or {}
        lb = et.get("epsilon_lower_bound")
        et_s = f"{lb:.3f} ({et['correct']}/{et['guesses']})" if lb is not None else ("n/a" if et else "")
        print(f"{name:<12} {att['auc']:6.3f} {num(t.get('0.001'), 9)} {num(t.get('0.01'), 8)} {ci_s:>16} "
              f"{num(t.get('0.1'), 8)} {et_s:>24}")
    if any(v is None for att in result["attacks"].values() for v in att["tpr_at_fpr"].values()):
        print(f"(n/a: a TPR at FPR α needs at least 1/α non-members; {first['n_non_members']} scored)")


def _write(report: dict, args: argparse.Namespace) -> list:
    """The JSON, markdown and plot of ``report``; an OS error (disk full, permission) in one line."""
    from privsynth.evaluation.mia.report import write_report

    try:
        return write_report(report, Path(args.out), args.report, args.plot)
    except OSError as exc:
        raise InvalidData(f"cannot write the report: {exc.strerror or exc} ({getattr(exc, 'filename', '')})") from None


def _check_output(path: str | Path, flag: str, *, overwrite: bool = False) -> None:
    """One-line refusal of an output path that cannot be written, or that holds an earlier result and ``--overwrite``
    was not given (checked before any data is read)."""
    p = Path(path).expanduser()
    if p.is_dir():
        raise InvalidData(f"{flag} {p} is a directory; give the path of the file to write")
    refuse_existing(p, overwrite, label=f"{flag} ", what=" (an earlier audit?)")
    anc = p.parent
    while not anc.exists() and anc != anc.parent:
        anc = anc.parent
    if anc.exists() and not anc.is_dir():
        raise InvalidData(f"cannot write {flag} {p}: {anc} is a file, not a directory")
    if anc.exists() and not os.access(anc, os.W_OK | os.X_OK):
        raise InvalidData(f"cannot write {flag} {p}: the directory {anc} is not writable")


def _check_args(args: argparse.Namespace) -> None:
    """Every refusal that needs no data, before any is read."""
    import math

    from privsynth.evaluation.mia.report import report_paths

    if args.canaries < 0 or args.canaries == 1:
        raise InvalidData(f"--canaries must be at least 2 (0 = no canary audit), got {args.canaries}")
    if args.max_units is not None and args.max_units < 1:
        raise InvalidData(f"--max-units must be at least 1 (members and non-members scored, each), "
                          f"got {args.max_units}")
    if args.bootstrap < 0:
        raise InvalidData(f"--bootstrap must be 0 (no intervals) or a number of replicates, got {args.bootstrap}")
    if args.guesses is not None and args.guesses < 1:
        raise InvalidData(f"--guesses must be at least 1 per side, got {args.guesses}")
    if not (args.sigma > 0 and math.isfinite(args.sigma)):
        raise InvalidData(f"--sigma must be a positive noise level, got {args.sigma:g}")
    if args.repeats < 1:
        raise InvalidData(f"--repeats must be at least 1, got {args.repeats}")
    if args.canaries:
        if not (args.epsilon > 0 and math.isfinite(args.epsilon)):
            raise InvalidData(f"--epsilon must be a positive finite claimed epsilon, got {args.epsilon:g}")
        if not 0 <= args.delta < 1:
            raise InvalidData(f"--delta must be in [0, 1), got {args.delta:g}")
        if not args.sensitive:
            raise InvalidData("--canaries needs --sensitive (the dataset the canaries are inserted into)")
        if not args.public:
            raise InvalidData("--canaries needs --public datasets: the canaries are crafted from public statistics "
                              "(also with --pretrained)")
        if args.guesses is not None and 2 * args.guesses > args.canaries:
            raise InvalidData(f"--guesses must be at most half of --canaries ({args.canaries // 2}), "
                              f"got {args.guesses}")
        if args.canary_length is not None and args.canary_length < 1:
            raise InvalidData(f"--canary-length must be at least 1, got {args.canary_length}")
        if args.samples < 1:
            raise InvalidData(f"--samples must be at least 1, got {args.samples}")
    paths = report_paths(args.out, args.report, args.plot)
    for flag, path in zip(("--out", "--report", "--plot"), paths):
        _check_output(path, flag, overwrite=args.overwrite)


def run(args: argparse.Namespace) -> int:
    from privsynth.evaluation.mia import as_adapter, run_audit
    from privsynth.evaluation.mia.audit import check_environments, infer_split, run_data_audit, withhold_unsupported
    from privsynth.evaluation.mia.data_attacks import make_data_attack
    from privsynth.evaluation.mia.epsilon import EpsilonTest, assess_claim, claim_of

    _check_args(args)
    ref_model = args.reference_model
    ref_data = args.reference
    if ref_data and ref_data.endswith(".pt") and not ref_model:
        ref_model, ref_data = ref_data, None  # back-compatible: --reference public.pt
    if args.canaries:
        return _run_canary(args, ref_model)
    if not args.release and not args.checkpoint:
        raise InvalidData("nothing to attack: give --release (data-only), --checkpoint (white-box), or --canaries")
    _check_unused(args, ref_data, ref_model)
    if not args.members or not args.non_members:
        raise InvalidData("--members and --non-members are required (the fine-tuning records and held-out ones)")
    if args.members == args.non_members:
        raise InvalidData(f"--members and --non-members are the same dataset ({args.members}): a record cannot be "
                          "both; audit two disjoint parts of one random split")
    members = _load_records(args.members, "--members")
    non_members = _load_records(args.non_members, "--non-members")
    release = _load_records(args.release, "--release") if args.release else None
    reference = _load_records(ref_data, "--reference") if (ref_data and args.release) else None
    check_environments({"--members": members, "--non-members": non_members, "--release": release,
                        "--reference": reference})
    target = _load_synth(args.checkpoint) if args.checkpoint else None
    card = _card(release) if release is not None else {}
    if not card and target is not None:
        card = _card_of_synth(target)
    # the claim under test and the design of the guesses, fixed before any score is seen
    if getattr(args, "claimed_epsilon", None) is not None:  # --epsilon overrides the card's claim
        card = {**card, "epsilon": args.claimed_epsilon}
    claim, _ = claim_of(card)
    data_names = wb_names = []
    if release is not None:
        names = args.data_attacks or ("dcr,dcr_ref,domias" if reference is not None else "dcr")
        data_names = [n.strip() for n in names.split(",") if n.strip()]
    ref_adapter = None
    if target is not None:
        ref_adapter = as_adapter(_load_synth(ref_model)) if ref_model else None
        if args.attacks:
            wb = args.attacks
        elif not as_adapter(target, args.unit).has_denoiser:  # baselines, DP-Transformer: the loss attack only
            wb = "loss,loss_ref" if ref_adapter is not None else "loss"
        else:
            wb = "loss,pia,loss_ref" if ref_adapter is not None else "loss,pia"
        wb_names = [n.strip() for n in wb.split(",") if n.strip()]
    n_tests = len(data_names) + len(wb_names)
    test = None
    if claim is not None and n_tests:
        test = EpsilonTest(epsilon=claim["epsilon"], delta=claim["delta"], relation=claim["relation"],
                           guesses=args.guesses, confidence=1 - 0.05 / n_tests, family_confidence=0.95,
                           tests=n_tests, seed=args.seed)
    report: dict = {"title": f"MIA audit of {args.release or Path(args.checkpoint).name}",
                    "target": {"release": args.release, "checkpoint": args.checkpoint, "members": args.members,
                               "non_members": args.non_members, "reference": ref_data, "reference_model": ref_model,
                               "unit": args.unit},
                    "card": card,
                    "command": _command_line()}
    if release is not None:
        attacks = [make_data_attack(n, args.unit) for n in data_names]
        report["data_only"] = withhold_unsupported(run_data_audit(
            release, members, non_members, attacks, reference=reference, unit=args.unit, max_units=args.max_units,
            seed=args.seed, n_boot=args.bootstrap, test=test))
    if target is not None:
        attacks = build_attacks(",".join(wb_names), sigma=args.sigma, repeats=args.repeats, reference=ref_adapter)
        report["white_box"] = withhold_unsupported(run_audit(
            target, members, non_members, attacks, unit=args.unit, max_units=args.max_units, seed=args.seed,
            n_boot=args.bootstrap, test=test))
    split = infer_split(members, non_members) if claim is not None else None
    report["epsilon_audit"] = assess_claim(card, args.unit, split, {"data-only": report.get("data_only"),
                                                                    "white-box": report.get("white_box")})
    written = _write(report, args)
    if report.get("data_only"):
        _print_table("data-only attacks on the release", report["data_only"])
    if report.get("white_box"):
        _print_table("white-box attacks on the weights", report["white_box"])
    ea = report["epsilon_audit"]
    print(ea["line"])
    for note in ea.get("notes", []):
        print(f"note: {note}")
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return exit_code(ea["status"])


def exit_code(status: str) -> int:
    """The command's exit status for a verdict (``EXIT_CODES``)."""
    return {"violation": EXIT_VIOLATION, "uninformative": EXIT_UNINFORMATIVE}.get(status, 0)


def _check_unused(args: argparse.Namespace, ref_data: str | None, ref_model: str | None) -> None:
    """Refuse options the requested attacks would silently ignore (the report would not show what was asked)."""
    if args.data_attacks and not args.release:
        raise InvalidData("--data-attacks chooses the data-only attacks, which need --release (the published rows)")
    if ref_data and not args.release:
        raise InvalidData(f"--reference {ref_data} is reference data for the data-only attacks, which need --release; "
                          "the calibrated white-box attack takes a public checkpoint: --reference-model FILE.pt")
    if args.attacks and not args.checkpoint:
        raise InvalidData("--attacks chooses the white-box attacks, which need --checkpoint (the released model)")
    if ref_model and not args.checkpoint:
        raise InvalidData("--reference-model calibrates the white-box attacks, which need --checkpoint")


def _card_of_synth(synth) -> dict:
    try:
        card = synth.card()
    except Exception:  # stand-ins and old checkpoints carry no card
        return {}
    return {k: card.get(k) for k in _CARD_KEYS if k in card}


def _command_line() -> str | None:
    """The command as typed, when this process is the ``privsynth`` command (not a test calling ``main``)."""
    import shlex
    import sys

    prog = Path(sys.argv[0]).name if sys.argv else ""
    if prog not in ("privsynth", "__main__.py") or len(sys.argv) < 2:
        return None
    return "privsynth " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def _run_canary(args: argparse.Namespace, ref_model: str | None) -> int:
    from privsynth.evaluation.mia.canary import CanaryAuditConfig, assess_power, run_canary_audit

    cfg = CanaryAuditConfig(
        canaries=args.canaries, unit=args.unit, epsilon=args.epsilon, delta=args.delta, samples=args.samples,
        canary_length=args.canary_length or (16 if args.unit == "trajectory" else 1),
        finetune_epochs=args.finetune_epochs, finetune_batch_size=args.finetune_batch_size, guesses=args.guesses,
        preset=args.config, seed=args.seed,
        noise=("on", "off") if args.noise == "both" else (args.noise,),
    )
    public = [_load_records(p, "--public") for p in args.public.split(",") if p.strip()]
    canary = run_canary_audit(_load_records(args.sensitive, "--sensitive"), public, cfg, pretrained=args.pretrained,
                              reference_model=ref_model)
    canary = assess_power(canary)
    report = {"title": f"Canary audit of the release pipeline on {args.sensitive}",
              "target": {"release": f"privsynth.release.synthesize on {args.sensitive}", "unit": args.unit},
              "card": canary["runs"][0].get("card", {}), "canary": canary,
              "command": _command_line()}
    written = _write(report, args)
    print(f"{'run':<10} {'scored from':<12} {'correct/guesses':>16} {'eps lower bound':>16} {'claimed eps':>12}  "
          "verdict")
    for run_ in canary["runs"]:
        for src, a in run_["audits"].items():
            print(f"{run_['label']:<10} {src:<12} {a['correct']:>8}/{a['guesses']:<7} "
                  f"{a['epsilon_lower_bound']:16.3f} {a['claimed_epsilon']:12.3f}  {a.get('verdict', '')}")
    print(f"(the largest bound this design can show, every guess right: {canary['max_bound']:.3f})")
    for src, pw in canary.get("power", {}).items():
        if pw["informative"] is False:
            print(f"UNINFORMATIVE ({src}): {pw['reason']}")
        elif pw["informative"] is None:
            print(f"power unknown ({src}): {pw['reason']}")
    print("wrote " + ", ".join(str(p) for p in written.values()))
    return exit_code(canary["status"])  # violation: a noise-on run refuted the claim
