"""Regenerate evaluation/dp_vapvi/: gap vs K on the synthetic linear MDP and gap vs n on two tabular MDPs.

    OMP_NUM_THREADS=1 python scripts/run_dp_vapvi.py [--quick]

Runs ``privsynth methods dp-vapvi`` and ``privsynth methods dp-apvi`` (random MDP and gridworld) with the settings the
committed tables were made with; ``--quick`` uses 2 seeds and a short grid (a smoke run, not for the tables).
"""
from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # this checkout's privsynth

from privsynth.cli import main  # noqa: E402

OUT = "evaluation/dp_vapvi"


def run(argv: list[str]) -> None:
    t0 = time.time()
    print("$ privsynth " + " ".join(argv), flush=True)
    code = main(argv)
    print(f"  ({time.time() - t0:.0f} s, exit {code})", flush=True)
    if code:
        sys.exit(code)


if __name__ == "__main__":
    quick = "--quick" in sys.argv
    seeds = ["--seeds", "2"] if quick else ["--seeds", "10"]
    out = ["--out", OUT + ("_quick" if quick else "")]
    ks = ["--ks", "10,100,1000,10000"] if quick else ["--ks", "5,10,20,50,100,200,500,1000,3000,10000,30000,100000,300000"]
    run(["methods", "dp-vapvi", *out, *seeds, *ks, "--rhos", "10,100", "--synthetic-rhos", "10,100"])
    ns = ["--ns", "100,1000,10000"] if quick else ["--ns", "100,300,1000,3000,10000,30000,100000,300000"]
    run(["methods", "dp-apvi", *out, *seeds, *ns, "--env", "random", "--rhos", "0.1,1,10"])
    run(["methods", "dp-apvi", *out, *seeds, *ns, "--env", "gridworld", "--rhos", "0.1,1,10"])
