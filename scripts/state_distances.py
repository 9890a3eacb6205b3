"""How close saved releases' states come to a locomotion transfer proxy's sensitive states (docs/transfer.md,
sixteenth round): closeness and coverage (privsynth.evaluation.state_distance) and the k-NN policy R² on real states
(privsynth.evaluation.fidelity.policy_r2), with fresh rollouts of the sensitive policy (another seed) as the scale.

    python scripts/state_distances.py --env hopper rel/hopper_20000_epochs150_seed120_route1_finecur1_cols1.npz ...

Every dataset is our own public rollout ("sensitive" by role only); saved releases are read as arrays and JSON.
"""
from __future__ import annotations

import argparse
import pathlib


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--env", default="walker2d", choices=["walker2d", "hopper"], help="the suite's sensitive body")
    ap.add_argument("releases", nargs="*", help=".npz files written by scripts/transfer_study.py --save")
    args = ap.parse_args()

    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion
    from privsynth.evaluation.bench.dataset_cache import load_dataset_file
    from privsynth.evaluation.fidelity import policy_r2
    from privsynth.evaluation.state_distance import state_distance

    sens = generate_locomotion(LocomotionConfig(env=args.env, kind="medium", steps=20_000, seed=0))
    fresh = generate_locomotion(LocomotionConfig(env=args.env, kind="medium", steps=20_000, seed=1))
    print("| rows | closeness | coverage | policy R² |\n|---|---|---|---|")
    for name, rows in [("fresh rollouts of the sensitive policy (seed 1)", fresh)] + [
            (pathlib.Path(p).stem, load_dataset_file(pathlib.Path(p))) for p in args.releases]:
        near = state_distance(rows, sens)
        print(f"| {name} | {near['closeness']:.2f} | {near['coverage']:.2f} | {policy_r2(rows, sens):.2f} |",
              flush=True)


if __name__ == "__main__":
    main()
