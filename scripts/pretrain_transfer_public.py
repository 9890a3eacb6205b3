"""Pre-train PrivORL-n (cpu preset, Δs rows) on the Walker2d transfer suite's public data with a chosen denoiser size:
the capacity study of issue 37 (docs/transfer.md, "Third round"). Public data only: Walker2d random, HalfCheetah
medium and medium-replay, each 20k steps of our own rollouts, exactly as evaluation/suites/transfer_walker2d.yaml.

    OMP_NUM_THREADS=1 python scripts/pretrain_transfer_public.py --width 512 --depth 4 --out walker_512x4.pt
    OMP_NUM_THREADS=1 python scripts/transfer_study.py --checkpoint walker_512x4.pt --real 53.5 --public 8.8 \
        --schedule epochs=150,dp=0 --schedule epochs=150 --schedule ft=0
"""
from __future__ import annotations

import argparse
import json
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=256, help="residual trunk width W (cpu preset: 256)")
    ap.add_argument("--depth", type=int, default=2, help="residual blocks (cpu preset: 2)")
    ap.add_argument("--epochs", type=float, default=100.0, help="public pre-training epochs (the suite's 100)")
    ap.add_argument("--out", required=True, help="checkpoint to write")
    args = ap.parse_args()

    import torch

    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion
    from privsynth.synth import registry

    torch.set_num_threads(1)
    public = [generate_locomotion(LocomotionConfig(env=env, kind=kind, steps=20000, seed=seed))
              for env, kind, seed in (("walker2d", "random", 1), ("halfcheetah", "medium", 2),
                                      ("halfcheetah", "medium-replay", 3))]
    synth = registry.make("privorl-n", preset="cpu", next_state="delta",
                          denoiser={"width": args.width, "depth": args.depth}, pretrain={"epochs": args.epochs})
    t0 = time.time()
    registry.pretrain(synth, public, progress=True)
    synth.save(args.out)
    print(json.dumps({"width": args.width, "depth": args.depth, "epochs": args.epochs,
                      "parameters": synth.n_parameters(), "pretrain_s": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
