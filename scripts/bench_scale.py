"""Scale-out benchmark: a small suite on the local executor vs Ray, and DP fine-tuning step time on 1 vs 2 processes.

    OMP_NUM_THREADS=1 python scripts/bench_scale.py                   # both parts
    OMP_NUM_THREADS=1 python scripts/bench_scale.py --part executor   # only the suite (needs privsynth[ray] for Ray)
    OMP_NUM_THREADS=1 python scripts/bench_scale.py --part finetune --epochs 2 --rows 4096

Part 1 runs the same suite (``--cells`` echo cells that each sleep ``--sleep`` seconds, so the work is known and the
difference is the executors' overhead) with ``privsynth bench``'s two executors at 2 workers / 2 Ray CPUs, and reports
wall time, with and without Ray's start-up. Part 2 runs the real CLI, ``torchrun --standalone --nproc_per_node N -m
privsynth finetune`` on the shipped ``pointmaze-umaze`` model and ``--rows`` random transitions with its dimensions,
for N = 1 and 2 (gloo), and reports seconds per DP step (from the checkpoint's history) and the ledger's ε, which must
agree. On a 2-core machine shared with other jobs expect no speed-up from either: the point is that it runs; the
load average is printed next to the numbers.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def bench_executors(cells: int, sleep: float, workers: int) -> dict:
    from privsynth.evaluation.bench.execute import run_suite
    from privsynth.evaluation.bench.suite import load_suite

    out: dict = {"cells": cells, "sleep_per_cell_s": sleep, "workers": workers}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "scale.yaml"
        path.write_text(textwrap.dedent(f"""
            name: scale
            stages:
              - {{kind: echo, grid: {{seed: {list(range(cells))}}}, params: {{sleep: {sleep}}}}}
            tables:
              - {{name: t, rows: [seed], values: [sleep]}}
            """))
        tables = {}
        t0 = time.perf_counter()
        suite = load_suite(path, results_dir=Path(tmp) / "local")
        run_suite(suite, workers=workers, progress=False, log=lambda _: None)
        out["local_s"] = round(time.perf_counter() - t0, 2)
        tables["local"] = (suite.out / "tables" / "t.md").read_text()
        try:
            import ray
        except ImportError:
            out["ray"] = "not installed (pip install 'privsynth[ray]')"
            return out
        t0 = time.perf_counter()
        ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        out["ray_start_s"] = round(time.perf_counter() - t0, 2)
        try:
            t1 = time.perf_counter()
            suite = load_suite(path, results_dir=Path(tmp) / "ray")
            run_suite(suite, workers=workers, progress=False, log=lambda _: None, executor="ray")
            out["ray_s"] = round(time.perf_counter() - t1, 2)
            out["ray_incl_start_s"] = round(time.perf_counter() - t0, 2)
            tables["ray"] = (suite.out / "tables" / "t.md").read_text()
        finally:
            ray.shutdown()
        out["same_table"] = tables["local"] == tables["ray"]
    return out


def bench_finetune(rows: int, epochs: float, procs: list[int]) -> dict:
    import torch

    from privsynth.data.dataset import OfflineDataset
    from privsynth.data.minari_io import write_dataset
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.pretrained import resolve_pretrained

    model = resolve_pretrained("pointmaze-umaze")
    synth = TransitionSynthesizer.load(model)
    out: dict = {"model": "pointmaze-umaze", "parameters": synth.n_parameters(), "rows": rows, "epochs": epochs,
                 "runs": {}}
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "MINARI_DATASETS_PATH": str(Path(tmp) / "minari"), "OMP_NUM_THREADS": "1",
               "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
        os.environ["MINARI_DATASETS_PATH"] = env["MINARI_DATASETS_PATH"]
        rng = np.random.default_rng(0)
        o, a = synth.obs_dim, synth.act_dim
        ids = np.arange(rows) // 100
        ds = OfflineDataset(rng.normal(size=(rows, o)).astype(np.float32), rng.uniform(-1, 1, (rows, a)).astype(np.float32),
                            rng.normal(size=rows).astype(np.float32), rng.normal(size=(rows, o)).astype(np.float32),
                            np.zeros(rows, bool), np.r_[ids[1:] != ids[:-1], True], ids,
                            info=dataclasses.replace(synth.template, name="bench-scale", sensitive=True))
        write_dataset(ds, "bench/scale-v0")
        for n in procs:
            ckpt = Path(tmp) / f"ft{n}.pt"
            cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(n),
                   "-m", "privsynth", "finetune", "--model", str(model), "--sensitive", "bench/scale-v0",
                   "--out", str(ckpt), "--epsilon", "10", "--delta", "1e-5", "--finetune-epochs", str(epochs),
                   "--quiet"]
            t0 = time.perf_counter()
            proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - t0
            if proc.returncode != 0:
                raise SystemExit(f"finetune on {n} processes failed:\n{proc.stderr[-2000:]}")
            ft = TransitionSynthesizer.load(ckpt)
            h = ft.history[-1]
            # the released checkpoint holds no fine-tune timing (sensitive): the command prints it to the holder
            timed = re.search(r"(\d+) steps in ([\d.]+) s", proc.stdout)
            if timed is None:
                raise SystemExit(f"finetune on {n} processes printed no timing:\n{proc.stdout[-500:]}")
            out["runs"][n] = {"steps": h["steps"], "batch": h["batch_size"], "sample_rate": h["sample_rate"],
                              "noise_multiplier": round(h["noise_multiplier"], 6), "epsilon": ft.ledger.epsilon(),
                              "s_per_step": round(float(timed.group(2)) / int(timed.group(1)), 3), "wall_s_incl_launch": round(wall, 1),
                              "printed": proc.stdout.strip().splitlines()[-1]}
        eps = {r["epsilon"] for r in out["runs"].values()}
        out["same_epsilon"] = len(eps) == 1
    del torch
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--part", choices=("all", "executor", "finetune"), default="all")
    ap.add_argument("--cells", type=int, default=4)
    ap.add_argument("--sleep", type=float, default=1.0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--rows", type=int, default=4096, help="sensitive transitions (cpu preset batch is 2048)")
    ap.add_argument("--epochs", type=float, default=2.0, help="fine-tuning epochs (steps = epochs / q)")
    ap.add_argument("--procs", default="1,2")
    args = ap.parse_args()
    import torch

    torch.set_num_threads(1)
    report = {"load_average": [round(x, 1) for x in os.getloadavg()], "cpus": os.cpu_count()}
    if args.part in ("all", "executor"):
        report["executor"] = bench_executors(args.cells, args.sleep, args.workers)
    if args.part in ("all", "finetune"):
        report["finetune"] = bench_finetune(args.rows, args.epochs, [int(p) for p in args.procs.split(",")])
    report["load_average_after"] = [round(x, 1) for x in os.getloadavg()]
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
