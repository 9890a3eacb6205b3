"""``privsynth agents train``: train offline-RL agents on a dataset and score them in the real environment."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from privsynth.commands._types import require_counts, seed_list


def register(subparsers) -> None:
    from privsynth.commands._surface import example

    p = subparsers.add_parser("agents", help="train IQL / TD3+BC / EDAC on a dataset, scored in the real environment")
    sub = p.add_subparsers(dest="agents_command", metavar="ACTION", required=True)
    t = sub.add_parser(
        "train",
        help="train agents on a (real or synthetic) dataset; final and best normalised score, mean ± std over seeds",
        description="Agents use CORL's hyperparameters (docs/agents.md); states are normalised with the training "
        "data's own statistics. The environment and reference scores come from --eval-from (the REAL dataset) "
        "or, by default, from the training data's own info.",
        epilog=example("agents train --data privsynth/umaze-synthetic-v0 --out runs/umaze",
                       "--eval-from privsynth/pointmaze-umaze-v0 --agents td3bc,iql --seeds 0,1,2"),
    )
    t.add_argument("--data", required=True, metavar="ID", help="Minari dataset id of the training data")
    t.add_argument("--eval-from", metavar="ID", help="Minari id of the real dataset whose environment and reference scores are used")
    t.add_argument("--agents", default="td3bc,iql", metavar="A,B", help="comma list of iql, td3bc, edac (default: %(default)s)")
    t.add_argument("--seeds", default="0,1,2", metavar="N|LIST", help="comma list of seeds (default: %(default)s)")
    t.add_argument("--updates", type=int, default=30_000, help="gradient updates per run (CORL: 1M; default %(default)s)")
    t.add_argument("--eval-every", type=int, default=2_000)
    t.add_argument("--eval-episodes", type=int, default=20, help="episodes per evaluation (CORL maze2d: 100)")
    t.add_argument("--final-k", type=int, default=10, help="final score = mean of the last K evaluations (paper: 10)")
    t.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="matrix products (bf16: about 1.5x faster with avx512_bf16 or AMX, other scores than fp32; "
                        "docs/agents.md; default %(default)s)")
    t.add_argument("--out", type=Path, metavar="DIR", help="folder for per-run JSON files and summary.json (a folder holding an "
                   "earlier run's summary.json is refused unless --overwrite, which removes that run's files first)")
    t.add_argument("--overwrite", action="store_true", help="replace an earlier run's results in --out")
    t.add_argument("--quiet", action="store_true", help="no progress bars")
    t.set_defaults(func=run_train)


def run_train(args: argparse.Namespace) -> int:
    from privsynth.data.minari_io import load_dataset
    from privsynth.errors import InvalidData
    from privsynth.evaluation.agents import AGENTS, run_seeds

    agents = [a.strip() for a in args.agents.split(",") if a.strip()]
    unknown = [a for a in agents if a not in AGENTS]
    if unknown or not agents:
        raise InvalidData(f"unknown agent(s) {', '.join(unknown) or '(none given)'}; choose from {', '.join(AGENTS)}")
    seeds = seed_list(args.seeds, count=False)
    require_counts((("--updates", args.updates), ("--eval-every", args.eval_every),
                    ("--eval-episodes", args.eval_episodes), ("--final-k", args.final_k)))
    if args.out:
        _prepare_out(args.out, args.overwrite)
    train = load_dataset(args.data)
    eval_info = load_dataset(args.eval_from).info if args.eval_from else train.info
    summaries = {}
    for agent in agents:
        summary = run_seeds(train, eval_info, agent, seeds=seeds, num_updates=args.updates, eval_every=args.eval_every,
                            eval_episodes=args.eval_episodes, final_k=args.final_k, progress=not args.quiet,
                            precision=args.precision)
        print(summary, flush=True)
        summaries[agent] = summary
        if args.out:
            args.out.mkdir(parents=True, exist_ok=True)
            for r in summary.runs:
                r.save_json(args.out / f"{agent}-seed{r.seed}.json")
    if args.out:
        payload = {
            "train_data": train.info.name,
            "eval_env": eval_info.env_id,
            "ref_scores": [eval_info.ref_min_score, eval_info.ref_max_score],
            "agents": {a: {k: v for k, v in s.to_dict().items() if k != "runs"} for a, s in summaries.items()},
        }
        (args.out / "summary.json").write_text(json.dumps(payload, indent=1))
        print(f"wrote {args.out / 'summary.json'}")
    return 0


def _prepare_out(out: Path, overwrite: bool) -> None:
    """Refuse to mix runs: an earlier run's summary.json in ``out`` needs ``--overwrite``, which removes that run's
    summary and per-run files (``AGENT-seedN.json``) before any training, so no stale seed is left beside new ones."""
    from privsynth.errors import InvalidData

    if out.exists() and not out.is_dir():
        raise InvalidData(f"--out {out} is a file; give a folder")
    earlier = [out / "summary.json", *out.glob("*-seed*.json")] if out.is_dir() else []
    earlier = [f for f in earlier if f.exists()]
    if earlier and not overwrite:
        raise InvalidData(f"{out} holds an earlier run's results ({len(earlier)} files); pass --overwrite to replace "
                          "them or choose another --out")
    for f in earlier:
        f.unlink()
