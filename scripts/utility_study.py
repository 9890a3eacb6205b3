"""PrivORL-n downstream-utility study (issue 20): DP fine-tuning levers, chosen on a PUBLIC proxy, applied to umaze.

Tasks (PointMaze, sparse reward, as the shipped pre-trained checkpoints):

* ``proxy``: pretend-sensitive = PointMaze **medium** (20k transitions, seed 12); public = open + large (50k each,
  seed 1), pre-trained here with ``cpu_config()`` pre-training (10 epochs, curiosity). Every default is chosen here.
* ``mirror`` / ``mirror_dense``: pretend-sensitive = PointMaze **umaze_mirror** (20k transitions, seed 12), sparse or
  dense reward. ``mirror`` starts from the shipped checkpoints (public open + medium + large, sparse, 100k each);
  ``mirror_dense`` (round 4) pre-trains here with the ``cpu`` preset on dense open + medium + large (10k each, seeds
  11-13), the public recipe of ``table1_cpu.yaml``, so that the proxy has the reward type of the table's task.
* ``umaze``: sensitive = PointMaze **umaze** (20k transitions, seed 2), starting from the shipped
  ``pretrained/pointmaze-umaze-absolute`` (public open + medium + large; ``delta_*`` configurations start from the Δs
  model the study used, the 5-epoch ``pointmaze-umaze`` kept in ``evaluation/results/utility_study/checkpoints/``).
  Only the defaults chosen on a proxy are run.

For every (config, epsilon, seed): DP fine-tune -> sample 50k -> fidelity + utility predictor (policy R², dynamics
error) -> IQL and TD3+BC (``--updates`` updates, final = mean of the last 3 evaluations of 10 episodes) in the real
environment. ``real`` rows train the agents on the sensitive data itself. One JSON line per run is appended to
``--out`` (runs already there are skipped), and ``--table`` prints the mean ± std table.

    OMP_NUM_THREADS=1 python scripts/utility_study.py --task proxy --configs base,long --eps 10 --seeds 0
    python scripts/utility_study.py --table evaluation/results/utility_study/proxy.jsonl
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privsynth.data.dataset import OfflineDataset  # noqa: E402
from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze  # noqa: E402
from privsynth.evaluation.cells import _apply  # noqa: E402
from privsynth.evaluation.fidelity import tabular_fidelity, utility_predictor  # noqa: E402
from privsynth.evaluation.bench.sources import load_dataset_file, save_dataset  # noqa: E402
from privsynth.release.calibrate import calibrate_actions  # noqa: E402
from privsynth.release import synthesize  # noqa: E402
from privsynth.release.postprocess import STEPS, draw_seed, postprocess, step_options, topped_up  # noqa: E402
from privsynth.synth import TransitionSynthesizer, cpu_config  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SCRATCH = Path(os.environ.get("PRIVSYNTH_STUDY_DIR", "/tmp/privsynth_utility"))
# the Δs checkpoint every delta_* row started from (scripts/build_pretrained.py --maps umaze --epochs 5 --next-state
# delta): shipped as pretrained/pointmaze-umaze-delta, then as pretrained/pointmaze-umaze until that was rebuilt with
# 10 epochs (2026-11-25); the study keeps the exact file its rows used
DELTA_CKPT = ROOT / "evaluation" / "results" / "utility_study" / "checkpoints" / "pointmaze-umaze-delta-5ep" / "model.pt"
# the absolute-s' rows start from the former default, now pretrained/pointmaze-umaze-absolute
ABSOLUTE_CKPT = ROOT / "pretrained" / "pointmaze-umaze-absolute" / "model.pt"

# Public pre-training epochs of every study row before round 15 (the cpu presets had 10; they have 100 since rounds
# 14-15, so the study pins its own recipe: rows made on a fresh machine match the committed ones).
STUDY_PRETRAIN_EPOCHS = 10.0

# Named fine-tuning configurations: overrides of cpu_config() (finetune / dp sections only; pre-training is fixed).
CONFIGS: dict[str, dict] = {
    "old": {"finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 3e-3}, "dp": {"noise_multiplicity": 1}},
    "long": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3}, "dp": {"noise_multiplicity": 1}},
    "long_bigb": {"finetune": {"epochs": 300.0, "batch_size": 8192, "lr": 3e-3}, "dp": {"noise_multiplicity": 1}},
    "long_k4": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3}, "dp": {"noise_multiplicity": 4}},
    "long_lr1e3": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 1e-3}, "dp": {"noise_multiplicity": 1}},
    "long_head": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3},
                  "dp": {"noise_multiplicity": 1, "trainable": "head"}},
    "long_biasnorm": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3},
                      "dp": {"noise_multiplicity": 1, "trainable": "bias_norm"}},
    "long_ema999": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3, "ema_decay": 0.999},
                    "dp": {"noise_multiplicity": 1}},
    "old_k4": {"finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 3e-3}, "dp": {"noise_multiplicity": 4}},
    "long_b8k": {"finetune": {"epochs": 150.0, "batch_size": 8192, "lr": 3e-3}, "dp": {"noise_multiplicity": 1}},
    "vlong": {"finetune": {"epochs": 400.0, "batch_size": 2048, "lr": 3e-3}, "dp": {"noise_multiplicity": 1}},
    "long_clip01": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3},
                    "dp": {"noise_multiplicity": 1, "max_grad_norm": 0.1}},
    "long_clip10": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3},
                    "dp": {"noise_multiplicity": 1, "max_grad_norm": 10.0}},
    "long_lr1e2": {"finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 1e-2}, "dp": {"noise_multiplicity": 1}},
    # Δs = s' - s rows: start from a model pre-trained with next_state="delta" on the same public data (DELTA_CKPT)
    # every parameter trained, spelled out: a checkpoint pre-trained with today's cpu preset carries bias_norm
    "delta_old": {"checkpoint": "delta", "finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 3e-3},
                  "dp": {"noise_multiplicity": 1, "trainable": "all"}},
    "delta_long": {"checkpoint": "delta", "finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3},
                   "dp": {"noise_multiplicity": 1}},
    "delta_b8k": {"checkpoint": "delta", "finetune": {"epochs": 150.0, "batch_size": 8192, "lr": 3e-3},
                  "dp": {"noise_multiplicity": 1}},
    "delta_head": {"checkpoint": "delta", "finetune": {"epochs": 150.0, "batch_size": 2048, "lr": 3e-3},
                   "dp": {"noise_multiplicity": 1, "trainable": "head"}},
    # round 3 (mirror proxy): levers on top of the Δs default (30 epochs, batch 2048, lr 3e-3, clip 1, K = 1)
    "delta_old_k4": {"checkpoint": "delta", "finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 3e-3},
                     "dp": {"noise_multiplicity": 4}},
    "delta_old_head": {"checkpoint": "delta", "finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 3e-3},
                       "dp": {"noise_multiplicity": 1, "trainable": "head"}},
    "delta_old_biasnorm": {"checkpoint": "delta", "finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 3e-3},
                           "dp": {"noise_multiplicity": 1, "trainable": "bias_norm"}},
    "delta_old_lr1e3": {"checkpoint": "delta", "finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 1e-3},
                        "dp": {"noise_multiplicity": 1}},
    "delta_old_clip01": {"checkpoint": "delta", "finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 3e-3},
                         "dp": {"noise_multiplicity": 1, "max_grad_norm": 0.1}},
    "delta_nodp": {"checkpoint": "delta", "finetune": {"epochs": 100.0, "batch_size": 256, "lr": 3e-3},
                   "dp": {"trainable": "all"}, "private": False},
    "nodp": {"finetune": {"epochs": 100.0, "batch_size": 256, "lr": 3e-3}, "private": False},
    # PrivORL-j (trajectory synthesizer, unit = trajectory): pre-trained per run on J_PUBLIC, then DP fine-tuned
    "j_default": {"synthesizer": "privorl-j"},  # the trajectory cpu preset as committed
    "j_biasnorm": {"synthesizer": "privorl-j", "dp": {"trainable": "bias_norm"}},
    # round 4: 3x the DP fine-tuning epochs (the cpu preset's 10 epochs are 69 DP steps on 20k transitions)
    "j_biasnorm_e30": {"synthesizer": "privorl-j", "dp": {"trainable": "bias_norm"}, "finetune": {"epochs": 30.0}},
    # round 4b: PrivORL-j with the Δs next state (pre-trained with Δs rows too), biases and norms DP fine-tuned
    "j_delta_biasnorm": {"synthesizer": "privorl-j", "dp": {"trainable": "bias_norm"}, "next_state": "delta"},
    # round 14: 10x the public pre-training (the cpu preset's 10 epochs are 300 steps; loss 0.46 -> 0.21 at 100)
    "j_pre100": {"synthesizer": "privorl-j", "dp": {"trainable": "bias_norm"}, "pretrain": {"epochs": 100.0}},
    # ... and that public model alone: no fine-tuning, no sensitive record read (epsilon 0)
    "j_pre100_public": {"synthesizer": "privorl-j", "pretrain": {"epochs": 100.0}, "public_only": True},
    "pretrained": {},  # no fine-tuning at all: the public model alone
    # round 15 (mirror_dense): the task's public pre-training at 100 epochs instead of the cpu preset's 10, then the
    # default DP fine-tune; and that public model alone
    "pre100": {"checkpoint": "pre100"},
    "pre100_public": {"checkpoint": "pre100", "public_only": True},
    # round 6 (dense proxy, 30k updates): keep the public model's coverage while adding the sensitive task
    # blend_public = share of the release's rows sampled from the public (pre-trained) model; the rest from the
    # DP fine-tuned default. Public rows cost no privacy (they never saw the sensitive data).
    "blend50": {"checkpoint": "delta", "blend_public": 0.5},
    # a gentler DP fine-tune: the default (biases and norms, 30 epochs, batch 2048) at a third of its learning rate
    "gentle_lr1e3": {"checkpoint": "delta", "finetune": {"epochs": 30.0, "batch_size": 2048, "lr": 1e-3},
                     "dp": {"noise_multiplicity": 1, "trainable": "bias_norm", "max_grad_norm": 1.0}},
    "default": None,  # cpu_config() as committed (whatever the defaults are now)
}


def dataset(name: str, cfg: PointMazeConfig) -> "OfflineDataset":  # noqa: F821
    path = SCRATCH / "data" / f"{name}.npz"
    if path.exists():
        return load_dataset_file(path)
    # the study's committed results normalise with references rolled out on the data seed (as the suites do)
    ref_seed = cfg.seed if cfg.ref_seed is None else cfg.ref_seed
    ds = generate_pointmaze(dataclasses.replace(cfg, ref_seed=ref_seed), progress=False)
    save_dataset(ds, path)
    return ds


# public maps PrivORL-j pre-trains on in this study (as table1_cpu.yaml: 10k transitions per map, seeds 11-13)
J_PUBLIC = (("open", 11), ("medium", 12), ("large", 13))


def public_maps(dense: bool) -> list:
    """The J_PUBLIC maps (10k transitions each), sparse or dense reward."""
    tag = "-dense" if dense else ""
    return [dataset(f"{m}{tag}-10k-s{sd}", PointMazeConfig(maze=m, steps=10_000, seed=sd, ref_episodes=1, dense=dense))
            for m, sd in J_PUBLIC]


def privorl_j_release(name: str, sens, eps: float, seed: int, n_rows: int, rec: dict):
    """Pre-train PrivORL-j (cpu preset + the configuration's overrides) on the J_PUBLIC maps (with the sensitive
    task's reward type), DP fine-tune it on ``sens`` at unit = trajectory, and stitch ``n_rows`` transitions."""
    from privsynth.synth import registry

    over = {k: v for k, v in CONFIGS[name].items() if k not in ("synthesizer", "public_only")}
    synth = registry.make("privorl-j", preset="cpu")
    synth.config.pretrain.epochs = STUDY_PRETRAIN_EPOCHS  # the rows' recipe; the preset has 100 since round 14
    _apply(synth.config, over)
    synth.config.seed = seed
    public = public_maps(dense="Dense" in (sens.info.env_id or ""))
    if CONFIGS[name].get("public_only"):  # the public model alone: only the environment's public facts
        synth.pretrain(public, progress=False)
        _record_pretrain(synth, rec, over)
        synth.adopt_environment(sens.info)
        return registry.sample(synth, n_transitions=n_rows, seed=seed), synth
    # the one route (issue 38): pre-train on public, DP fine-tune on sens; n=0 samples nothing, nothing is written
    synth = synthesize(sens, synth="privorl-j", config=synth.config, public=public, epsilon=eps, delta=1e-5,
                       unit="trajectory", n=0, out_dataset=None, progress=False).synthesizer
    _record_pretrain(synth, rec, over)
    h = synth.history[-1]
    rec.update({k: h.get(k) for k in ("noise_multiplier", "steps", "sample_rate", "trainable")})
    rec["epsilon_spent"] = h.get("epsilon")
    return registry.sample(synth, n_transitions=n_rows, seed=seed), synth


def _record_pretrain(synth, rec: dict, over: dict) -> None:
    """The public pre-training's steps and loss (its history entry) and the configuration's overrides, into ``rec``."""
    h = next(e for e in reversed(synth.history) if e.get("phase") == "pretrain")
    rec.update(pretrain_steps=h.get("steps"), pretrain_loss=h.get("final_loss"), overrides=over)


def task_data(task: str):
    """(sensitive, pre-trained checkpoint path)."""
    if task == "proxy":
        sens = dataset("medium-20k-s12", PointMazeConfig(maze="medium", steps=20_000, seed=12, ref_episodes=10))
        ckpt = SCRATCH / "proxy_pretrained.pt"
        if not ckpt.exists():
            public = [dataset(f"{m}-50k-s1", PointMazeConfig(maze=m, steps=50_000, seed=1, ref_episodes=1))
                      for m in ("open", "large")]
            cfg = cpu_config()
            cfg.next_state = "absolute"  # the proxy rows of docs/synthesizers.md were absolute s'
            cfg.pretrain.epochs = STUDY_PRETRAIN_EPOCHS
            synth = TransitionSynthesizer(cfg).pretrain(public, progress=False)
            synth.save(ckpt)
        return sens, ckpt
    if task == "mirror":
        sens = dataset("umaze_mirror-20k-s12",
                       PointMazeConfig(maze="umaze_mirror", steps=20_000, seed=12, ref_episodes=10))
        return sens, ABSOLUTE_CKPT
    if task == "mirror_dense":
        sens = dataset("umaze_mirror-dense-20k-s12",
                       PointMazeConfig(maze="umaze_mirror", steps=20_000, seed=12, ref_episodes=10, dense=True))
        return sens, mirror_dense_checkpoint(STUDY_PRETRAIN_EPOCHS)
    if task == "umaze":
        sens = dataset("umaze-20k-s2", PointMazeConfig(maze="umaze", steps=20_000, seed=2, ref_episodes=10))
        return sens, ABSOLUTE_CKPT
    raise SystemExit(f"unknown task {task}")


def mirror_dense_checkpoint(epochs: float) -> Path:
    """mirror_dense's public pre-training: the table1_cpu pretrain cell's recipe (cpu preset, Δs rows, seed 0) for
    ``epochs`` epochs (10: rounds 4-14; 100: round 15's ``pre100``)."""
    tag = "" if epochs == STUDY_PRETRAIN_EPOCHS else f"_e{epochs:g}"
    ckpt = SCRATCH / f"mirror_dense_pretrained{tag}.pt"
    if not ckpt.exists():
        cfg = cpu_config()
        cfg.pretrain.epochs = epochs
        TransitionSynthesizer(cfg).pretrain(public_maps(dense=True), progress=False).save(ckpt)
    return ckpt


def task_public(task: str) -> list:
    """The public data the task's checkpoint was pre-trained on (the reference of ``--calibrate``)."""
    if task == "mirror_dense":
        return public_maps(dense=True)
    if task == "proxy":
        return [dataset(f"{m}-50k-s1", PointMazeConfig(maze=m, steps=50_000, seed=1, ref_episodes=1))
                for m in ("open", "large")]
    # mirror / umaze start from the shipped checkpoints: open + medium + large, 100k each, seed 1
    return [dataset(f"{m}-100k-s1", PointMazeConfig(maze=m, steps=100_000, seed=1, ref_episodes=1))
            for m in ("open", "medium", "large")]


def done_keys(out: Path) -> set[tuple]:
    if not out.exists():
        return set()
    keys = set()
    for line in out.read_text().splitlines():
        r = json.loads(line)
        eps = None if r["epsilon"] is None else float(round(r["epsilon"]))
        keys.add((r["config"], eps, r["seed"]))
    return keys


def run_agents(train, sens, seed: int, agents: list[str], updates: int) -> dict:
    from privsynth.evaluation.agents import train_agent

    out = {}
    for agent in agents:
        run = train_agent(train, sens.info, agent=agent, seed=seed, num_updates=updates, eval_every=updates // 5,
                          eval_episodes=10, final_k=3, progress=False)
        out[agent] = run.final_score
        out[f"{agent}_best"] = run.best_score
    return out


def nonprivate_control(synth: TransitionSynthesizer, sens, eps: float) -> None:
    """The no-DP fine-tune of the ``nodp`` / ``delta_nodp`` rows (config.private False): a non-private control of
    the study, scored here and never released (release.synthesize and the guard refuse its data)."""
    synth.finetune(sens, eps, 1e-5, "transition", progress=False)


def one_run(task: str, name: str, eps: float | None, seed: int, args) -> dict:
    sens, ckpt = task_data(task)
    sens = sens.mark_sensitive()
    t0, c0 = time.perf_counter(), time.process_time()
    rec: dict = {"task": task, "config": name, "epsilon": eps, "seed": seed}
    if name == "real":
        train = sens
    elif (CONFIGS[name] or {}).get("synthesizer") == "privorl-j":
        train, synth = privorl_j_release(name, sens, float(eps or 10.0), seed, args.samples, rec)
        blend = None
    else:
        over = dict(CONFIGS[name] or {})
        start = over.pop("checkpoint", None)
        public_only = name == "pretrained" or over.pop("public_only", False)
        if start == "pre100":  # round 15: the same recipe pre-trained 10x longer (public data only)
            if task != "mirror_dense":
                raise SystemExit("pre100 configurations run on --task mirror_dense")
            ckpt = mirror_dense_checkpoint(100.0)
        elif task == "mirror_dense" and start != "delta" and name not in ("default", "pretrained"):
            raise SystemExit("mirror_dense pre-trains with Δs rows: run delta_* configurations (or default)")
        if start == "delta" and task != "mirror_dense":
            if task == "proxy":
                raise SystemExit("the delta checkpoint is pre-trained on open + medium + large: use --task mirror/umaze")
            ckpt = DELTA_CKPT
        blend = over.pop("blend_public", None)
        synth = TransitionSynthesizer.load(ckpt)
        if CONFIGS[name] is None or not over:
            base = cpu_config()
            over = {"finetune": {k: getattr(base.finetune, k) for k in ("epochs", "batch_size", "lr")},
                    "dp": {"noise_multiplicity": base.dp.noise_multiplicity, "trainable": base.dp.trainable,
                           "max_grad_norm": base.dp.max_grad_norm}}
        _apply(synth.config, over)
        synth.config.seed = seed
        rec["overrides"] = over if blend is None else {**over, "blend_public": blend}
        if not public_only:
            synth.config.private = over.get("private", True)
            if synth.config.private:  # the one route (issue 38): n=0 samples nothing, out_dataset=None writes nothing
                synth = synthesize(sens, pretrained=synth, epsilon=float(eps or 1.0), delta=1e-5, unit="transition",
                                   n=0, out_dataset=None, progress=False).synthesizer
            else:
                nonprivate_control(synth, sens, float(eps or 1.0))
            h = synth.history[-1]
            rec.update({k: h.get(k) for k in ("noise_multiplier", "steps", "sample_rate")})
            rec["epsilon_spent"] = h.get("epsilon")
            rec["finetune_cpu_s"] = time.process_time() - c0
        if blend is None:
            train = synth.sample(args.samples, seed=seed)
        else:  # the public model's share, sampled from the untouched pre-trained checkpoint, labelled like the rest
            n_pub = int(round(blend * args.samples))
            public = TransitionSynthesizer.load(ckpt).sample(n_pub, seed=seed + 7919)
            own = synth.sample(args.samples - n_pub, seed=seed)
            train = OfflineDataset.concatenate([own, public], info=own.info)
    raw = train
    if args.post:
        # the sample carries the public pre-training data's environment (another map): simulate in the sensitive
        # dataset's public environment spec, as the release does
        opts = dict(environment=sens.info, **step_options(args.post_steps))
        if args.post_topup:  # round 10: more draws from the same DP model until --samples rows are kept
            if name == "real" or blend is not None:
                raise SystemExit("--post-topup samples synthesizer configurations without a public blend only")
            if (CONFIGS[name] or {}).get("synthesizer") == "privorl-j":  # round 11: whole episodes, cut to rows
                from privsynth.synth import registry

                draw = lambda k, i: registry.sample(synth, n_transitions=k, seed=draw_seed(seed, i))  # noqa: E731
            else:
                draw = lambda k, i: synth.sample(k, seed=draw_seed(seed, i))  # noqa: E731
            train, rec["post"] = topped_up(train, draw, args.samples, **opts)
        else:
            train, rec["post"] = postprocess(train, **opts)
    if args.calibrate:  # round 8: actions mapped onto the public pre-training data's marginal (free in privacy)
        train, rec["calibrate"] = calibrate_actions(train, task_public(task))
    rec["config"] = name + post_suffix(args)
    if args.paired and train is not raw:  # the unprocessed sample too, scored by the same agents: a paired comparison
        base = {k: v for k, v in rec.items() if k not in ("post", "calibrate")}
        base["config"], base["paired_with"] = name, rec["config"]
        rec["paired"] = score(raw, sens, seed, name, base, args, t0, c0)
    return score(train, sens, seed, name, rec, args, t0, c0)


def score(train, sens, seed: int, name: str, rec: dict, args, t0: float, c0: float) -> dict:
    """Fidelity, the utility predictor and the agents of one training set, added to ``rec``."""
    fid = tabular_fidelity(train, sens, max_rows=20_000, seed=seed)
    rec.update({"marginal": fid.marginal, "correlation": fid.correlation})
    pred = utility_predictor(train, sens, seed=0)
    rec.update({"policy_r2": pred["policy_r2"], "policy_r2_real": pred["policy_r2_real"],
                "dyn_rel_step": pred["dynamics"]["rel_step_mean"], "dyn_rel_nomotion": pred["dynamics"]["rel_nomotion_mean"],
                "predictor": pred})
    rec.update(run_agents(train, sens, seed, args.real_agents if name == "real" else args.agents, args.updates))
    rec["updates"] = args.updates
    rec["cpu_s"] = time.process_time() - c0
    rec["wall_s"] = time.perf_counter() - t0
    return rec


ALL_POST_STEPS = ",".join(STEPS)


def post_suffix(args) -> str:
    """``+post`` for the full post-processing, ``+post[reward,clip]`` for a subset of its steps, ``+calib`` for the
    action calibration, "" without."""
    calib = "+calib" if getattr(args, "calibrate", False) else ""
    if not args.post:
        return calib
    steps = sorted(set(args.post_steps.split(",")))
    return ("+post" if steps == sorted(ALL_POST_STEPS.split(",")) else f"+post[{','.join(steps)}]") + calib


def table(paths: list[Path]) -> str:
    """Mean ± std per (task, config, ε) with ratios to the task's real reference, and how the predictor tracks the
    agents' ratios (Pearson and Spearman over the synthetic configurations of all given files)."""
    from scipy.stats import spearmanr

    rows = [json.loads(x) for path in paths for x in path.read_text().splitlines()]
    for r in rows:  # older lines stored the spent epsilon under "epsilon": group by the target (1 or 10)
        if r["epsilon"] is not None:
            r["epsilon"] = float(round(r["epsilon"]))
    by: dict[tuple, list] = {}
    for r in rows:
        by.setdefault((r["task"], r["config"], r["epsilon"]), []).append(r)
    ref = {}
    for task in {k[0] for k in by}:
        real = by.get((task, "real", None), [])
        ref[task] = {a: float(np.mean([r[a] for r in real])) if real else float("nan") for a in ("iql", "td3bc")}
    lines = ["| task | config | ε | seeds | IQL | ratio | TD3+BC | ratio | policy R² (real ref.) | dyn err / step | "
             "dyn err / no-motion | marginal | σ | steps |", "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]

    def ms(v):
        v = [x for x in v if x is not None]
        if not v:
            return "–"
        return f"{np.mean(v):.1f} ± {np.std(v):.1f}" if len(v) > 1 else f"{v[0]:.1f}"

    def ratio(task, v, a):
        v = [x for x in v if x is not None]
        return f"{np.mean(v) / ref[task][a]:.2f}" if v and ref[task][a] == ref[task][a] else "–"

    pts = []
    order = sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1] != "real", str(kv[0][2]), kv[0][1]))
    for (task, cfg, eps), rs in order:
        iql = [r.get("iql") for r in rs]
        td3 = [r.get("td3bc") for r in rs]
        pr = np.mean([r["policy_r2"] for r in rs])
        prr = np.mean([r["policy_r2_real"] for r in rs])
        sig = rs[0].get("noise_multiplier")
        dyn = float(np.mean([r["dyn_rel_step"] for r in rs]))
        lines.append(
            f"| {task} | {cfg} | {eps if eps is not None else '–'} | {','.join(str(r['seed']) for r in rs)} | "
            f"{ms(iql)} | {ratio(task, iql, 'iql')} | {ms(td3)} | {ratio(task, td3, 'td3bc')} | "
            f"{'–' if cfg == 'real' else f'{pr:.3f}'} ({prr:.3f}) | {dyn:.3f} | "
            f"{np.mean([r['dyn_rel_nomotion'] for r in rs]):.3f} | {np.mean([r['marginal'] for r in rs]):.3f} | "
            f"{f'{sig:.2f}' if sig else '–'} | {rs[0].get('steps') or '–'} |")
        if cfg == "real":
            continue
        for a in ("iql", "td3bc"):
            v = [r.get(a) for r in rs if r.get(a) is not None]
            if v and ref[task][a] == ref[task][a]:
                pts.append((a, pr / prr, dyn, float(np.mean(v)) / ref[task][a], float(np.mean([r["marginal"] for r in rs]))))
    for a in ("iql", "td3bc"):
        p = [x for x in pts if x[0] == a]
        if len(p) >= 3:
            r2, dyn, rat, marg = (np.array([x[i] for x in p]) for i in (1, 2, 3, 4))
            lines.append(
                f"\n{a} over {len(p)} (task, configuration) points: agent ratio vs policy R² ratio Pearson "
                f"{np.corrcoef(r2, rat)[0, 1]:.2f} / Spearman {spearmanr(r2, rat)[0]:.2f}; vs dyn err/step Pearson "
                f"{np.corrcoef(dyn, rat)[0, 1]:.2f} / Spearman {spearmanr(dyn, rat)[0]:.2f}; vs marginal Pearson "
                f"{np.corrcoef(marg, rat)[0, 1]:.2f} / Spearman {spearmanr(marg, rat)[0]:.2f}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--task", choices=["proxy", "mirror", "mirror_dense", "umaze"],
                    help="mirror: pretend-sensitive umaze_mirror 20k (seed 12), public = the shipped pointmaze-umaze")
    ap.add_argument("--configs", default="real,old")
    ap.add_argument("--eps", default="10")
    ap.add_argument("--seeds", default="0")
    ap.add_argument("--agents", default="iql,td3bc")
    ap.add_argument("--real-agents", default="iql,td3bc", help="agents of the 'real' reference rows")
    ap.add_argument("--updates", type=int, default=5000)
    ap.add_argument("--samples", type=int, default=50_000)
    ap.add_argument("--post", action="store_true",
                    help="apply privsynth.release.postprocess to the sample (config name gets '+post')")
    ap.add_argument("--post-steps", default=ALL_POST_STEPS,
                    help="with --post: which steps (reward: recomputed from the public reward function; resimulate: "
                         "s' from the public simulator; walls: rows in walls dropped; clip: actions clipped)")
    ap.add_argument("--post-topup", action="store_true",
                    help="with --post: sample more from the same model until --samples rows are kept (round 10)")
    ap.add_argument("--calibrate", action="store_true",
                    help="map the sample's actions onto the public pre-training data's action marginal "
                         "(privsynth.release.calibrate; config name gets '+calib')")
    ap.add_argument("--paired", action="store_true",
                    help="with --post/--calibrate: also train the agents on the unprocessed sample of the same run "
                         "(a paired comparison; written as its own line)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--table", type=Path, nargs="+", help="print the table of these result files (pooled)")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return
    step_options(args.post_steps)  # unknown step names fail here, before any run
    torch.set_num_threads(1)
    args.agents = [a for a in args.agents.split(",") if a and a != "none"]  # "none": predictor-only screening
    args.real_agents = args.real_agents.split(",")
    out = args.out or ROOT / "evaluation" / "results" / "utility_study" / f"{args.task}.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    for seed in [int(s) for s in args.seeds.split(",")]:
        for name in args.configs.split(","):
            cfg = CONFIGS.get(name) or {}
            no_dp = name in ("real", "nodp", "pretrained") or cfg.get("private") is False or cfg.get("public_only")
            for eps in ([None] if no_dp else [float(e) for e in args.eps.split(",")]):
                if (name + post_suffix(args), eps, seed) in done_keys(out):
                    continue
                rec = one_run(args.task, name, eps, seed, args)
                paired = rec.pop("paired", None)
                with out.open("a") as f:
                    if paired is not None:
                        f.write(json.dumps(paired, default=float) + "\n")
                    f.write(json.dumps(rec, default=float) + "\n")
                if paired is not None:
                    print(f"  paired, unprocessed: IQL {paired.get('iql')} TD3BC {paired.get('td3bc')}", flush=True)
                print(f"[{time.strftime('%H:%M:%S')}] {name} eps={eps} seed={seed}: IQL {rec.get('iql')} "
                      f"TD3BC {rec.get('td3bc')} R2 {rec['policy_r2']:.3f}/{rec['policy_r2_real']:.3f} "
                      f"dyn {rec['dyn_rel_step']:.3f} sigma {rec.get('noise_multiplier')} cpu {rec['cpu_s']:.0f}s",
                      flush=True)


if __name__ == "__main__":
    main()
