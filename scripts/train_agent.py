"""Train downstream agents on a dataset and score them in the real environment; mean ± std over seeds.

Real-data baseline on a generated PointMaze umaze dataset (the dataset's own info gives the evaluation env):

    OMP_NUM_THREADS=1 python scripts/train_agent.py --pointmaze umaze --steps 1000000 --dense \\
        --agents td3bc iql --seeds 0 1 2 --updates 30000 --eval-every 2000 --eval-episodes 20 --final-k 5 \\
        --out runs/agents/umaze-dense-real

Synthetic data stored in Minari, evaluated in the real dataset's environment with its reference scores:

    python scripts/train_agent.py --train privsynth/umaze-synthetic-v0 --eval-from privsynth/pointmaze-umaze-dense-v0

Writes one JSON per run (curve, final/best, timings, config) and ``summary.json`` under ``--out``; prints one line per
agent: final (mean of the last ``--final-k`` evaluations) and best (max), mean ± std over seeds.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

import torch  # noqa: E402

from privsynth.errors import PrivsynthError  # noqa: E402
from privsynth.evaluation.agents import AGENTS, run_seeds  # noqa: E402


def load_training_data(args: argparse.Namespace):
    if args.train:
        from privsynth.data.minari_io import load_dataset

        return load_dataset(args.train)
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze

    cfg = PointMazeConfig(maze=args.pointmaze, steps=args.steps, seed=args.data_seed, dense=args.dense)
    t0 = time.perf_counter()
    data = generate_pointmaze(cfg, progress=not args.quiet)
    print(f"generated {data.info.name}: {data.n_transitions} transitions, {data.n_episodes} episodes, "
          f"ref scores {data.info.ref_min_score:.2f}/{data.info.ref_max_score:.2f} in {time.perf_counter() - t0:.0f} s")
    return data


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--train", help="Minari dataset id of the training data (real or synthetic)")
    src.add_argument("--pointmaze", metavar="MAZE", help="generate real PointMaze data in-process: open|umaze|medium|large")
    ap.add_argument("--steps", type=int, default=1_000_000, help="with --pointmaze: environment steps (D4RL: 1M)")
    ap.add_argument("--dense", action="store_true", help="with --pointmaze: dense reward (maze2d-*-dense)")
    ap.add_argument("--data-seed", type=int, default=0, help="with --pointmaze: generator seed")
    ap.add_argument("--eval-from", help="Minari id of the REAL dataset whose env and reference scores are used "
                                        "(default: the training data's own info)")
    ap.add_argument("--agents", nargs="+", default=["td3bc", "iql"], choices=list(AGENTS))
    ap.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    ap.add_argument("--updates", type=int, default=30_000, help="gradient updates per run (CORL: 1M)")
    ap.add_argument("--eval-every", type=int, default=2_000)
    ap.add_argument("--eval-episodes", type=int, default=20, help="CORL maze2d: 100")
    ap.add_argument("--final-k", type=int, default=5, help="final score = mean of the last K evaluations (paper: 10)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", type=Path, help="directory for per-run JSON files and summary.json")
    ap.add_argument("--quiet", action="store_true", help="no progress bars")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)

    try:
        train = load_training_data(args)
        if args.eval_from:
            from privsynth.data.minari_io import load_dataset

            eval_info = load_dataset(args.eval_from).info
        else:
            eval_info = train.info
        summaries = {}
        for agent in args.agents:
            summary = run_seeds(train, eval_info, agent, seeds=args.seeds, num_updates=args.updates,
                                eval_every=args.eval_every, eval_episodes=args.eval_episodes, final_k=args.final_k,
                                progress=not args.quiet)
            ups = sum(r.updates_per_s for r in summary.runs) / len(summary.runs)
            print(f"{summary}; {args.updates} updates, {ups:.0f} updates/s, "
                  f"{sum(r.wall_time for r in summary.runs) / len(summary.runs):.0f} s per run", flush=True)
            summaries[agent] = summary
            if args.out:
                args.out.mkdir(parents=True, exist_ok=True)
                for run in summary.runs:
                    run.save_json(args.out / f"{agent}-seed{run.seed}.json")
        if args.out:
            payload = {
                "command": " ".join(["python", *sys.argv]),
                "train_data": train.info.name,
                "eval_env": eval_info.env_id,
                "ref_scores": [eval_info.ref_min_score, eval_info.ref_max_score],
                "agents": {a: {k: v for k, v in s.to_dict().items() if k != "runs"} for a, s in summaries.items()},
            }
            (args.out / "summary.json").write_text(json.dumps(payload, indent=1))
    except PrivsynthError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
