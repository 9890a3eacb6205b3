"""Run ``privsynth demo`` with its stage clocks reading CPU seconds instead of wall seconds.

On a shared machine the demo's wall times follow the load; CPU seconds much less. This script replaces
``time.perf_counter`` by the CPU seconds of the process and of its waited-for children (``os.times``) before the
demo starts, so the demo's own ``time (s): ...`` line reports CPU seconds per stage; it works for any checkout, old
or new, so two trees can be compared stage by stage in one session. The last line gives the real wall and CPU seconds
of the whole run and the load average. One torch thread by default (``--threads``), so the CPU figures do not depend
on the load. Stages that run in a child process (the release's Minari write) are timed by the child's own clock.

    OMP_NUM_THREADS=1 python scripts/bench_demo.py /tmp/demo-cpu                    # this checkout
    OMP_NUM_THREADS=1 python scripts/bench_demo.py /tmp/demo-cpu-old --tree ../old  # another checkout
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out", help="output folder of the demo (its Minari store goes inside)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads of the demo (default: %(default)s)")
    ap.add_argument("--tree", default=str(Path(__file__).resolve().parents[1]),
                    help="checkout whose privsynth runs (default: this one), e.g. an older worktree to compare")
    args = ap.parse_args()
    sys.path.insert(0, args.tree)
    wall = time.perf_counter
    start = wall()
    time.perf_counter = _cpu_seconds  # every stage clock of the demo now reads CPU seconds
    from privsynth.cli import main as cli

    rc = cli(["demo", "--out", args.out, "--quiet", "--threads", str(args.threads)])
    print(f"whole run: {wall() - start:.1f} s wall, {_cpu_seconds():.1f} CPU-s; load average {os.getloadavg()[0]:.1f}")
    sys.exit(rc)


if __name__ == "__main__":
    main()
