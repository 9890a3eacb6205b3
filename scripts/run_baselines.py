"""Cost of the classic DP baselines (PrivORL Table XI style): wall time per phase and peak memory, each run in a
fresh process so that its peak RSS is its own.

Generates the PointMaze datasets of ``evaluation/suites/baselines_umaze.yaml`` into a Minari store (skipped when they
exist), then runs ``privsynth baseline METHOD ... --json`` once per method and ε and writes a markdown table.

    OMP_NUM_THREADS=1 python scripts/run_baselines.py --store /tmp/bl-store --out evaluation/baselines/cost.md
    OMP_NUM_THREADS=1 python scripts/run_baselines.py --methods privsyn pategan --epsilons 10   # a subset
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

DATASETS = {  # same specs as evaluation/suites/baselines_umaze.yaml
    "bl-public-open": dict(maze="open", steps=10000, seed=11, dense=True, ref_episodes=1),
    "bl-public-medium": dict(maze="medium", steps=10000, seed=12, dense=True, ref_episodes=1),
    "bl-public-large": dict(maze="large", steps=10000, seed=13, dense=True, ref_episodes=1),
    "bl-umaze": dict(maze="umaze", steps=20000, seed=2, dense=True, ref_episodes=10),
}


def make_datasets() -> None:
    from privsynth.data import minari_io
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze

    for name, spec in DATASETS.items():
        if minari_io.dataset_exists(name):
            continue
        ds = generate_pointmaze(PointMazeConfig(**spec, name=name), progress=False)
        minari_io.write_dataset(ds, name)
        print(f"made {name}: {len(ds)} transitions", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", default=None, help="MINARI_DATASETS_PATH to use (default: the current one)")
    ap.add_argument("--methods", nargs="+", default=["pgm", "privsyn", "pategan", "prepategan"])
    ap.add_argument("--epsilons", nargs="+", type=float, default=[1.0, 10.0])
    ap.add_argument("--num-samples", type=int, default=50_000)
    ap.add_argument("--out", default="evaluation/baselines/cost.md")
    args = ap.parse_args()
    if args.store:
        os.environ["MINARI_DATASETS_PATH"] = args.store
    make_datasets()
    public = [n for n in DATASETS if n.startswith("bl-public")]
    rows = []
    for method in args.methods:
        for eps in args.epsilons:
            cmd = [sys.executable, "-m", "privsynth", "baseline", method, "--sensitive", "bl-umaze", "--public", *public,
                   "--epsilon", str(eps), "--num-samples", str(args.num_samples), "--json", "--quiet"]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                print(f"{method} eps={eps} failed: {proc.stderr.strip().splitlines()[-1:]}", flush=True)
                continue
            res = json.loads(proc.stdout.strip().splitlines()[-1])
            res["process_seconds"] = wall
            rows.append(res)
            print(json.dumps(res), flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    lines = [
        "| method | ε (ledger) | pretrain s | fit (DP) s | sample s | process wall s | peak RSS MB |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        s = r["seconds"]
        lines.append(
            f"| {r['method']} | {r['epsilon']:.3f} | {s['pretrain']:.1f} | {s['finetune']:.1f} | {s['sample']:.1f} "
            f"| {r['process_seconds']:.1f} | {r['peak_rss_mb']:.0f} |"
        )
    header = (f"Measured by `python scripts/run_baselines.py` ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}), "
              f"{args.num_samples} samples, one process per run on a shared 2-core CPU.\n\n")
    out.write_text(header + "\n".join(lines) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
