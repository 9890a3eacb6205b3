"""``privsynth privacy``: ε of a DP-SGD run, the noise for a target ε, and a ledger's privacy card."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from privsynth.commands._surface import hidden_option, hidden_parser
from privsynth.errors import PrivacyError


def add_engine_options(p: argparse.ArgumentParser) -> None:
    """Options of the DP-SGD engine audit (``privsynth audit engine``; the hidden ``privacy audit`` of the previous
    release takes the same, its old spellings hidden)."""
    p.add_argument("--epsilon", dest="target_epsilon", type=float, default=1.0,
                   help="epsilon the engine calibrates to; the claim tested (the run's epsilon)")
    hidden_option(p, "--target-epsilon", dest="target_epsilon", type=float)
    p.add_argument("--delta", type=float, default=1e-5)
    p.add_argument("--epochs", type=float, default=4.0)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--canaries", type=int, default=1000, help="canaries, each included with probability 1/2")
    p.add_argument("--guesses", type=int, default=150, help="guesses on each side (top 'in', bottom 'out')")
    p.add_argument("--clipping", dest="mode", choices=["ghost", "hooks", "bk"], default="bk",
                   help="clipping mode to audit")
    hidden_option(p, "--mode", dest="mode", choices=["ghost", "hooks", "bk"])
    p.add_argument("--accountant", choices=["rdp", "pld", "prv"], default="rdp")
    p.add_argument("--noise-multiplier", type=float, default=None,
                   help="override the calibrated noise (0 simulates an engine with noise disabled)")
    hidden_option(p, "--claimed-epsilon", dest="claimed_epsilon", type=float, default=None)
    p.add_argument("--seed", type=int, default=0, help="picks the canaries (never the DP noise)")
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(func=_audit)


def register(subparsers: argparse._SubParsersAction) -> None:
    from privsynth.commands._surface import example

    parser = subparsers.add_parser("privacy", help="privacy accounting: epsilon, noise calibration, privacy cards")
    sub = parser.add_subparsers(dest="privacy_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--sample-rate", type=float, required=True, help="Poisson sampling rate q = batch / N")
        p.add_argument("--steps", type=int, required=True, help="number of DP-SGD steps T")
        p.add_argument("--delta", type=float, required=True, help="target delta")
        p.add_argument("--accountant", choices=["rdp", "pld", "prv"], default="rdp")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    eps = sub.add_parser("epsilon", help="epsilon spent by T steps of Poisson-subsampled Gaussian noise",
                         epilog=example("privacy epsilon --noise-multiplier 1.1 --sample-rate 0.01 --steps 10000",
                                        "--delta 1e-5"))
    eps.add_argument("--noise-multiplier", type=float, required=True, help="noise std / clip norm (sigma)")
    common(eps)
    eps.set_defaults(func=_epsilon)

    noise = sub.add_parser("noise", help="smallest noise multiplier whose run spends at most the target epsilon",
                           epilog=example("privacy noise --epsilon 1 --sample-rate 0.01 --steps 10000 --delta 1e-5"))
    noise.add_argument("--epsilon", type=float, required=True, help="target epsilon")
    common(noise)
    noise.set_defaults(func=_noise)

    # deprecated alias (one release): the DP-SGD engine audit is `privsynth audit engine`
    audit = hidden_parser(sub, "audit", "audit engine (--target-epsilon is --epsilon, --mode is --clipping)")
    add_engine_options(audit)

    card = sub.add_parser("card",
                          help="print the privacy card of a released dataset, a ledger JSON file or a directory",
                          epilog=example("privacy card privsynth/umaze-synthetic-v0"))
    card.add_argument("ledger", help="a released dataset id (e.g. privsynth/umaze-synthetic-v0), its Minari folder, "
                                     "privacy_ledger.json, or a released directory that contains it")
    card.add_argument("--json", action="store_true", help="print the card as JSON instead of markdown")
    card.set_defaults(func=_card)


def _report(args: argparse.Namespace, epsilon: float, sigma: float) -> int:
    out = {
        "epsilon": epsilon,
        "delta": args.delta,
        "noise_multiplier": sigma,
        "sample_rate": args.sample_rate,
        "steps": args.steps,
        "accountant": args.accountant,
    }
    if args.json:
        print(json.dumps(out))
    else:
        print(
            f"epsilon = {epsilon:.4f} at delta = {args.delta:g} ({args.accountant}) for noise multiplier {sigma:.4f}, "
            f"sample rate {args.sample_rate:g}, {args.steps} steps"
        )
    return 0


def _epsilon(args: argparse.Namespace) -> int:
    from privsynth.privacy.accounting import dpsgd_epsilon

    return _report(args, dpsgd_epsilon(args.noise_multiplier, args.sample_rate, args.steps, args.delta, args.accountant),
                   args.noise_multiplier)


def _noise(args: argparse.Namespace) -> int:
    from privsynth.privacy.accounting import calibrate_noise_multiplier, dpsgd_epsilon

    sigma = calibrate_noise_multiplier(args.epsilon, args.delta, args.sample_rate, args.steps, args.accountant)
    return _report(args, dpsgd_epsilon(sigma, args.sample_rate, args.steps, args.delta, args.accountant), sigma)


def _audit(args: argparse.Namespace) -> int:
    from privsynth.privacy.audit import audit_dp_train
    from privsynth.privacy.dpsgd import DPSGDConfig

    cfg = DPSGDConfig(target_epsilon=args.target_epsilon, delta=args.delta, epochs=args.epochs,
                      batch_size=args.batch_size, grad_sample_mode=args.mode, accountant=args.accountant,
                      noise_multiplier=args.noise_multiplier)  # noise from OS entropy; --seed picks the canaries
    claimed = args.claimed_epsilon
    if claimed is None and args.noise_multiplier == 0:
        claimed = args.target_epsilon  # a noiseless run still "claims" the target: does the audit notice?
    audit, run = audit_dp_train(cfg, canaries=args.canaries, k_pos=args.guesses, k_neg=args.guesses,
                                claimed_epsilon=claimed, seed=args.seed)
    out = audit.to_dict() | {"noise_multiplier": run.noise_multiplier, "sample_rate": run.sample_rate,
                             "steps": run.steps, "grad_sample_mode": args.mode}
    if args.json:
        print(json.dumps(out))
    else:
        verdict = "consistent with" if audit.consistent else "REFUTES"
        print(f"empirical epsilon lower bound {audit.epsilon_lower_bound:.3f} ({audit.correct}/{audit.guesses} correct "
              f"guesses, {audit.canaries} canaries, {audit.confidence:.0%} confidence) {verdict} the claimed "
              f"epsilon {audit.claimed_epsilon:.3f} (sigma {run.noise_multiplier:.3f}, {run.steps} steps)")
    return 0 if audit.consistent else 1


def _card(args: argparse.Namespace) -> int:
    from privsynth.privacy.guard import LEDGER_FILE
    from privsynth.privacy.ledger import Ledger

    path = Path(args.ledger)
    if not path.exists():
        return _dataset_card(args)
    if path.is_dir() and not (path / LEDGER_FILE).is_file() and (path / "data" / "metadata.json").is_file():
        from privsynth.data import minari_io  # a Minari dataset folder: the card in its metadata

        return _print_dataset_card(str(path), minari_io.read_card_at(path), args.json)
    if path.is_dir():
        path = path / LEDGER_FILE
    if not path.is_file():
        raise PrivacyError(f"no ledger at {path} (pass a ledger file, a folder holding {LEDGER_FILE}, a Minari "
                           "dataset folder or a local dataset id)")
    from privsynth.data.safe_files import read_text

    ledger = Ledger.from_json(read_text(path, f"{path}, not a ledger"))
    print(json.dumps(ledger.card(), indent=2) if args.json else ledger.render_markdown())
    return 0


def _dataset_card(args: argparse.Namespace) -> int:
    """The card a released dataset carries in its Minari metadata (``privsynth privacy card DATASET_ID``)."""
    from privsynth.data import minari_io
    from privsynth.errors import DatasetNotFound, InvalidData

    try:
        full = minari_io.resolve_id(args.ledger)
    except (DatasetNotFound, InvalidData):
        raise PrivacyError(f"'{args.ledger}' is neither a local dataset id nor a ledger file or directory") from None
    return _print_dataset_card(full, minari_io.read_card(full), args.json)


def _print_dataset_card(full: str, card: dict | None, as_json: bool) -> int:
    """Print a released dataset's card (markdown, or JSON with ``as_json``)."""
    from privsynth.data import minari_io
    from privsynth.privacy.ledger import Ledger

    if card is None:
        raise PrivacyError(f"dataset '{full}' carries no privacy card (it is not a DP release)")
    if as_json:
        print(json.dumps(card, indent=2, default=str))
        return 0
    print(f"# {full}\n")
    print(minari_io.card_summary(card) + "\n")
    if isinstance(card.get("ledger"), dict):
        print(Ledger.from_dict(card["ledger"]).render_markdown())
    return 0
