"""The replay attack at a claimed ε = 1: bound with replayable noise, with secure noise, and with no noise.

    python scripts/replay_attack.py [--seed 1]

An attacker regenerates DP-SGD's noise from the seed they would read on a card, subtracts it and runs the one-run
canary audit on what is left (privsynth.privacy.replay). See docs/privacy.md, "Randomness".
"""
from __future__ import annotations

import argparse

import torch

from privsynth.privacy.audit import audit_dp_train
from privsynth.privacy.dpsgd import DPSGDConfig
from privsynth.privacy.noise import NoiseSource
from privsynth.privacy.replay import replay_attack


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seed", type=int, default=1, help="picks the canaries (the auditor's own randomness)")
    ap.add_argument("--claim", type=float, default=1.0, help="claimed epsilon")
    args = ap.parse_args()
    torch.set_num_threads(1)

    def cfg(**kw) -> DPSGDConfig:
        return DPSGDConfig(target_epsilon=args.claim, delta=1e-5, epochs=4, batch_size=50, grad_sample_mode="bk", **kw)

    rows = []
    a, _ = replay_attack(cfg(noise_seed=0), lambda: NoiseSource.reproducible(0).torch_generator(),
                         claimed_epsilon=args.claim, seed=args.seed)
    rows.append(("reproducible noise (seed on the card), replayed", a))
    a, _ = replay_attack(cfg(), lambda: torch.Generator().manual_seed(0), claimed_epsilon=args.claim, seed=args.seed)
    rows.append(("secure noise (OS entropy), replayed from seed 0", a))
    a, _ = audit_dp_train(cfg(noise_multiplier=0.0), claimed_epsilon=args.claim, seed=args.seed, k_pos=100, k_neg=100)
    rows.append(("no noise (reference)", a))
    print(f"claimed epsilon {args.claim:g}; one-run lower bound at 95% confidence")
    for label, r in rows:
        print(f"  {label:52s} bound {r.epsilon_lower_bound:6.2f}  ({r.correct}/{r.guesses} correct)")


if __name__ == "__main__":
    main()
