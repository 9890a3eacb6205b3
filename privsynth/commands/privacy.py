"""``privsynth privacy``: ε of a DP-SGD run, the noise for a target ε, and a ledger's privacy card."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from privsynth.errors import PrivacyError


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("privacy", help="privacy accounting: epsilon, noise calibration, privacy cards")
    sub = parser.add_subparsers(dest="privacy_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: (parser.print_help(), 2)[1])

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--sample-rate", type=float, required=True, help="Poisson sampling rate q = batch / N")
        p.add_argument("--steps", type=int, required=True, help="number of DP-SGD steps T")
        p.add_argument("--delta", type=float, required=True, help="target delta")
        p.add_argument("--accountant", choices=["rdp", "pld", "prv"], default="rdp")
        p.add_argument("--json", action="store_true", help="print one JSON object instead of text")

    eps = sub.add_parser("epsilon", help="epsilon spent by T steps of Poisson-subsampled Gaussian noise")
    eps.add_argument("--noise-multiplier", type=float, required=True, help="noise std / clip norm (sigma)")
    common(eps)
    eps.set_defaults(func=_epsilon)

    noise = sub.add_parser("noise", help="smallest noise multiplier whose run spends at most the target epsilon")
    noise.add_argument("--epsilon", type=float, required=True, help="target epsilon")
    common(noise)
    noise.set_defaults(func=_noise)

    card = sub.add_parser("card", help="print the privacy card of a ledger JSON file (or a directory holding one)")
    card.add_argument("ledger", help="privacy_ledger.json, or a released directory that contains it")
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


def _card(args: argparse.Namespace) -> int:
    from privsynth.privacy.guard import LEDGER_FILE
    from privsynth.privacy.ledger import Ledger

    path = Path(args.ledger)
    if path.is_dir():
        path = path / LEDGER_FILE
    if not path.is_file():
        raise PrivacyError(f"no ledger at {path}")
    ledger = Ledger.from_json(path.read_text())
    print(json.dumps(ledger.card(), indent=2) if args.json else ledger.render_markdown())
    return 0
