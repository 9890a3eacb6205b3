"""``privsynth evaluate``: fidelity, RL checks and (optionally) downstream agents of a synthetic dataset.

Thin wrapper over :func:`privsynth.evaluation.report.evaluate_synthetic`; writes ``--out`` (JSON) and the markdown
summary next to it (same name, ``.md``), and prints the summary's headline numbers.
"""
from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from privsynth.commands._surface import example

from privsynth.commands._types import refuse_existing, require_counts, seed_list
from privsynth.errors import InvalidData


def _csv(value: str) -> list[str]:
    return [v.strip().lower() for v in value.split(",") if v.strip()]


def register(subparsers: Any) -> None:
    p = subparsers.add_parser(
        "evaluate",
        help="score a synthetic dataset against the real one: fidelity, TrajScore, RL checks, agents",
        description="Evaluate a synthetic dataset against the real dataset it imitates and write report.json + "
        "report.md. Datasets are ids in the local Minari store (see `privsynth datasets list`).",
        epilog=example("evaluate --synthetic privsynth/umaze-synthetic-v0 --out reports/umaze.json",
                       "--real privsynth/pointmaze-umaze-v0 --agents td3bc,iql --seeds 3"),
    )
    p.add_argument("--synthetic", required=True, metavar="ID", help="synthetic dataset id")
    p.add_argument("--real", required=True, metavar="ID", help="real dataset id (its environment is the simulator)")
    p.add_argument("--public", metavar="ID", default=None,
                   help="public dataset id whose trajectories train the TrajScore encoder (no TrajScore without it "
                        "or --trajscore-encoder)")
    p.add_argument("--trajscore-encoder", metavar="PATH", default=None,
                   help="encoder file: loaded if it exists, else trained on --public and saved there")
    p.add_argument("--agents", type=_csv, default=[], metavar="A,B",
                   help="comma-separated agents trained on the synthetic data, e.g. td3bc,iql (default: none)")
    p.add_argument("--seeds", default="3", metavar="N|LIST",
                   help="agent seeds: a count N (seeds 0..N-1) or a comma list as in 'agents train' (default 3)")
    p.add_argument("--updates", type=int, default=None, metavar="N",
                   help="agent updates per seed (default: the agent's CORL value, hours on a CPU)")
    p.add_argument("--eval-every", type=int, default=None, metavar="N", help="agent evaluation period in updates")
    p.add_argument("--eval-episodes", type=int, default=None, metavar="N", help="episodes per agent evaluation")
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32",
                   help="agents' matrix products (bf16: faster with avx512_bf16 or AMX; default %(default)s)")
    p.add_argument("--agents-on-real", action="store_true", help="also train the agents on the real data")
    p.add_argument("--max-rows", type=int, default=None, metavar="N",
                   help="cap rows for marginal/correlation (seeded subsample; default: all rows)")
    p.add_argument("--max-transitions", type=int, default=5000, metavar="N",
                   help="transitions per dataset stepped through the simulator (default 5000)")
    p.add_argument("--no-tsne", action="store_true", help="skip the t-SNE plot")
    p.add_argument("--out", type=Path, default=Path("report.json"), metavar="PATH",
                   help="report path (.json), or a directory to write report.json into (default report.json)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an earlier report (JSON, markdown, t-SNE plot) at --out (refused otherwise)")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_evaluate)


def _evaluate(args: argparse.Namespace) -> int:
    from privsynth.data.minari_io import load_dataset
    from privsynth.evaluation.report import evaluate_synthetic
    from privsynth.evaluation.rl_checks import RLCheckConfig

    seeds = seed_list(args.seeds, count=True)
    require_counts((("--updates", args.updates), ("--eval-every", args.eval_every),
                    ("--eval-episodes", args.eval_episodes), ("--max-rows", args.max_rows),
                    ("--max-transitions", args.max_transitions)), must="positive")
    if args.out.is_dir() or args.out.suffix == "":
        args.out = args.out / "report.json"  # a directory: the report goes inside it
    for path in (args.out, args.out.with_suffix(".md"), args.out.with_name(args.out.stem + "_tsne.png")):
        refuse_existing(path, args.overwrite, what=" (an earlier report?)")
    synthetic = load_dataset(args.synthetic)
    real = load_dataset(args.real)
    public = load_dataset(args.public) if args.public else None
    encoder = None
    if args.trajscore_encoder:
        from privsynth.evaluation.trajscore import TrajEncoder, fit_trajscore_encoder

        path = Path(args.trajscore_encoder)
        if path.exists():
            encoder = TrajEncoder.load(path)
        elif public is None:
            raise InvalidData(f"TrajScore encoder '{path}' does not exist and no --public data is given to train it")
        else:
            encoder = fit_trajscore_encoder(public, progress=not args.quiet)
            encoder.save(path)
            print(f"saved TrajScore encoder to {path}")
    agent_kwargs = {k: v for k, v in (("eval_every", args.eval_every), ("eval_episodes", args.eval_episodes))
                    if v is not None}
    agent_kwargs["precision"] = args.precision
    report = evaluate_synthetic(
        synthetic,
        real,
        agents=args.agents,
        seeds=seeds,
        num_updates=args.updates,
        agents_on_real=args.agents_on_real,
        agent_kwargs=agent_kwargs,
        public=public,
        trajscore_encoder=encoder,
        rl_config=RLCheckConfig(max_transitions=args.max_transitions),
        max_rows=args.max_rows,
        tsne=not args.no_tsne,
        out=args.out,
        progress=not args.quiet,
    )
    _print_headline(report)
    print(f"wrote {args.out} and {Path(args.out).with_suffix('.md')}")
    return 0


def _print_headline(report: dict[str, Any]) -> None:
    fid = report["fidelity"]
    parts = [f"marginal {fid['marginal']:.4f}", f"correlation {fid['correlation']:.4f}" if fid["correlation"] is not None
             else "correlation n/a"]
    ts = report.get("trajscore") or {}
    if "trajscore" in ts:
        base, matched = ts.get("baseline"), ts.get("trajscore_matched")
        if base is not None and matched is not None:  # both at one window count (the score grows with the count)
            parts.append(f"TrajScore {matched:.4f} vs real halves {base:.4f} ({ts.get('baseline_windows')} windows)")
        else:
            parts.append(f"TrajScore {ts['trajscore']:.4f}")
    dyn = ((report.get("rl_checks") or {}).get("synthetic") or {}).get("dynamics")
    if dyn:
        parts.append(f"dynamics within tol {dyn['within_tol']:.3f}")
    print(", ".join(parts))
    if report.get("verdict"):  # the holder's verdict, real vs synthetic per column (privsynth.evaluation.verdict)
        from privsynth.evaluation.verdict import verdict_lines

        print("\n".join(verdict_lines(report["verdict"])))
    for name, entry in (report.get("agents") or {}).items():
        if isinstance(entry, dict) and "synthetic" in entry:
            for which in ("synthetic", "real"):
                e = entry.get(which)
                if e and e.get("final_mean") is not None:
                    print(f"{name} trained on {which}: final {e['final_mean']:.1f} ± {e.get('final_std') or 0.0:.1f}, "
                          f"best {e.get('best_mean') or float('nan'):.1f}")
