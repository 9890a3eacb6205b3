"""Make the standard PointMaze datasets into the local Minari store (D4RL maze2d sizes by default).

    OMP_NUM_THREADS=1 python scripts/make_datasets.py --steps 1000000 [--maps umaze medium] [--dense] [--overwrite]

Each map becomes ``privsynth/pointmaze-<map>[-dense]-v0`` (same as ``privsynth datasets make pointmaze``).
"""
from __future__ import annotations

import argparse
import sys

from privsynth.cli import main as cli_main


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--maps", nargs="*", default=["open", "umaze", "medium", "large"])
    ap.add_argument("--dense", action="store_true")
    ap.add_argument("--overwrite", action="store_true")
    args = ap.parse_args()
    for maze in args.maps:
        argv = ["datasets", "make", "pointmaze", "--maze", maze, "--steps", str(args.steps), "--seed", str(args.seed)]
        argv += ["--dense"] * args.dense + ["--overwrite"] * args.overwrite
        code = cli_main(argv)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
