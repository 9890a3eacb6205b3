"""PrivORL-j acceptance run: trajectory-level DP synthesis on PointMaze umaze at ε = 10, against two baselines.

Stage ``synth`` (one model per call, so the three can run as parallel processes): pre-train on the public mazes,
DP fine-tune on the sensitive umaze trajectories (unit = trajectory), stitch as many trajectories as the real data has,
release through the guard as a Minari dataset, save the checkpoint and a JSON of the run.

Stage ``eval`` (one or more ``--sets``, parallel processes welcome): for the real data or a released synthetic dataset,
train IQL agents (real environment, normalised score), TrajScore against the real trajectories (encoder fitted on
public data only), the RL checks (dynamics consistency against the simulator) and the stitching seams; one
``eval-<set>.json`` each. Stage ``report`` collects them into ``results.md``.

    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/run_privorl_j.py synth --model privorl-j
    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/run_privorl_j.py eval --sets real
    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/run_privorl_j.py report
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch

MODELS = {"privorl-j": "privorl-j", "privorl-j-u": "privorl-j-unet", "dp-transformer": "dp-transformer"}  # registry names
DEFAULT_SENSITIVE = "privsynth/pointmaze-umaze-dense-100k-v0"
DEFAULT_PUBLIC = ["privsynth/pointmaze-open-dense-40k-v0", "privsynth/pointmaze-medium-dense-40k-v0"]


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, (np.floating, np.integer)):
        return x.item()
    if isinstance(x, np.ndarray):
        return x.tolist()
    return x


def synth_id(model: str, eps: float, tag: str) -> str:
    return f"privsynth/traj-{model}-eps{eps:g}{tag}-v0"


def stage_synth(args: argparse.Namespace) -> None:
    """One model through the one release route (:func:`privsynth.release.synthesize`): pre-train, DP fine-tune,
    stitch, guarded release; then the checkpoint (through the guard too) and a JSON of the run."""
    from privsynth.data.minari_io import load_dataset
    from privsynth.privacy.budget import Budget
    from privsynth.privacy.guard import guarded_save_model
    from privsynth.release import synthesize
    from privsynth.synth import registry

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sensitive = load_dataset(args.sensitive)
    cfg = registry.make(MODELS[args.model], preset=args.preset).config
    if args.finetune_epochs is not None:
        cfg.finetune.epochs = args.finetune_epochs
    if args.pretrain_epochs is not None:
        cfg.pretrain.epochs = args.pretrain_epochs
    if args.dp_batch is not None:
        cfg.dp.batch_size = args.dp_batch
    cfg.seed = args.seed
    torch.manual_seed(args.seed)
    did = synth_id(args.model, args.epsilon, args.tag)
    res = synthesize(sensitive, budget=Budget(args.epsilon, args.delta, "trajectory"), public=args.public,
                     synth=MODELS[args.model], config=cfg, episodes=args.n_traj or sensitive.n_episodes,
                     out_dataset=did, overwrite=True, progress=not args.quiet)
    synth, ds = res.synthesizer, res.dataset
    guarded_save_model(synth, out / f"{args.model}{args.tag}.pt", args.epsilon, args.delta)
    record = {
        "model": args.model, "backbone": cfg.backbone, "dataset_id": did, "epsilon_spent": res.epsilon,
        "delta": args.delta, "parameters": synth.n_parameters(), "preset": args.preset,
        "seconds": {k: res.seconds[k] for k in ("pretrain", "finetune", "sample")},
        "history": synth.history, "sample": synth.last_sample_stats,
        "transitions": ds.n_transitions, "trajectories": ds.n_episodes,
    }
    (out / f"synth-{args.model}{args.tag}.json").write_text(json.dumps(_jsonable(record), indent=1))
    print(json.dumps(_jsonable({k: record[k] for k in ("model", "epsilon_spent", "seconds", "sample")}), indent=1))


def stage_eval(args: argparse.Namespace) -> None:
    """Evaluate each name in ``--sets`` (``real`` and/or model names); one JSON per set, so sets can run in parallel."""
    from privsynth.data.minari_io import load_dataset
    from privsynth.errors import InvalidData
    from privsynth.evaluation.agents import train_agent
    from privsynth.evaluation.rl_checks import rl_checks
    from privsynth.evaluation.trajscore import TrajScoreConfig, fit_trajscore_encoder, trajscore, trajscore_baseline

    out = Path(args.out)
    real = load_dataset(args.sensitive)
    public = [load_dataset(p) for p in args.public]
    enc = fit_trajscore_encoder(public, TrajScoreConfig(window=args.window))  # public data only, same seed every run
    for name in args.sets:
        ds = real if name == "real" else load_dataset(synth_id(name, args.epsilon, args.tag))
        r: dict[str, Any] = {"set": name, "sensitive": args.sensitive, "public": args.public, "epsilon": args.epsilon,
                             "agent": args.agent, "updates": args.updates, "seeds": args.seeds,
                             "eval_episodes": args.eval_episodes, "trajscore_window": args.window,
                             "transitions": ds.n_transitions, "trajectories": ds.n_episodes,
                             "mean_length": float(ds.episode_lengths().mean())}
        if name == "real":
            r["trajscore"] = trajscore_baseline(real, enc)  # real vs real (disjoint halves): the ceiling
        else:
            card = ds.info.privacy_card or {}
            r["epsilon_spent"] = card.get("epsilon")
            r["stitching"] = (ds.info.extra or {}).get("sample")
            try:
                r["trajscore"] = trajscore(ds, real, enc)
            except InvalidData as exc:  # no synthetic trajectory reaches one window
                r["trajscore"] = {"trajscore": None, "error": str(exc)}
        r["rl_checks"] = rl_checks(ds, real)
        runs = []
        for seed in args.seeds:
            run = train_agent(ds, real.info, args.agent, seed=seed, num_updates=args.updates,
                              eval_every=args.eval_every, eval_episodes=args.eval_episodes, final_k=args.final_k,
                              progress=not args.quiet)
            runs.append({"seed": seed, "final": run.final_score, "best": run.best_score, "curve": run.curve})
            print(name, seed, f"final {run.final_score:.1f} best {run.best_score:.1f}", flush=True)
        finals = [x["final"] for x in runs]
        r["agent_scores"] = {"runs": runs, "final_mean": float(np.mean(finals)), "final_std": float(np.std(finals))}
        (out / f"eval-{name}{args.tag}.json").write_text(json.dumps(_jsonable(r), indent=1))


def stage_report(args: argparse.Namespace) -> None:
    out = Path(args.out)
    sets = {}
    for name in args.sets:
        f = out / f"eval-{name}{args.tag}.json"
        if f.exists():
            sets[name] = json.loads(f.read_text())
    text = render(sets)
    (out / f"results{args.tag}.md").write_text(text)
    print(text)


def render(sets: dict[str, Any]) -> str:
    first = next(iter(sets.values()))
    lines = [
        f"# PrivORL-j on {first['sensitive']} at ε = {first['epsilon']:g} (unit = trajectory)",
        "",
        f"Agent {first['agent'].upper()}, {first['updates']} updates, seeds {first['seeds']}, {first['eval_episodes']} "
        f"eval episodes per evaluation; score = mean of the last evaluations (normalised, 0 random, 100 expert). "
        f"TrajScore window {first['trajscore_window']}; the real row is real-vs-real (disjoint halves). Dynamics error: "
        "L2 between the recorded next state and the simulator's, on the state dims. Seam gap: L2 between a fragment's "
        "first state and the previous fragment's last next state; inner gap: the same between consecutive rows "
        "inside fragments (raw units).",
        "",
        "| data | ε spent | trajectories | mean len | agent score | TrajScore | dyn. err (mean) | dyn. within tol | seam gap (mean / p95) | inner gap (mean) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    nan = float("nan")
    for name, r in sets.items():
        dyn = (r["rl_checks"]["synthetic"] or {}).get("dynamics") or {}
        ts = r.get("trajscore") or {}
        st = r.get("stitching") or {}
        bg, ig = st.get("boundary_gap") or {}, st.get("inner_gap") or {}
        eps = r.get("epsilon_spent")
        a = r["agent_scores"]
        lines.append(
            f"| {name} | {'-' if eps is None else f'{eps:.3f}'} | {r['trajectories']} | {r['mean_length']:.1f} | "
            f"{a['final_mean']:.1f} ± {a['final_std']:.1f} | {ts.get('trajscore') or nan:.3f} | "
            f"{dyn.get('mean_error', nan):.4f} | {dyn.get('within_tol', nan):.3f} | "
            f"{bg.get('mean') or nan:.4f} / {bg.get('p95') or nan:.4f} | {ig.get('mean') or nan:.4f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("stage", choices=["synth", "eval", "report"])
    ap.add_argument("--model", choices=list(MODELS), default="privorl-j")
    ap.add_argument("--sets", nargs="+", default=["real", *MODELS], help="eval/report: real and/or model names")
    ap.add_argument("--sensitive", default=DEFAULT_SENSITIVE)
    ap.add_argument("--public", nargs="+", default=DEFAULT_PUBLIC)
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--preset", default="cpu", choices=["cpu", "paper", "tiny"])
    ap.add_argument("--finetune-epochs", type=float)
    ap.add_argument("--pretrain-epochs", type=float)
    ap.add_argument("--dp-batch", type=int, help="expected trajectories per DP step")
    ap.add_argument("--n-traj", type=int, help="trajectories to generate (default: as many as the sensitive data)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--tag", default="", help="suffix of dataset ids and result files")
    ap.add_argument("--out", default="evaluation/privorl_j")
    ap.add_argument("--agent", default="iql")
    ap.add_argument("--updates", type=int, default=20_000)
    ap.add_argument("--eval-every", type=int, default=2_000)
    ap.add_argument("--eval-episodes", type=int, default=20)
    ap.add_argument("--final-k", type=int, default=3)
    ap.add_argument("--seeds", type=int, nargs="+", default=[0])
    ap.add_argument("--window", type=int, default=16, help="TrajScore window (transitions)")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    {"synth": stage_synth, "eval": stage_eval, "report": stage_report}[args.stage](args)


if __name__ == "__main__":
    main()
