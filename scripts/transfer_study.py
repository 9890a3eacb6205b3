"""A quick study of PrivORL-n's DP fine-tuning schedule on the Walker2d transfer proxy (issue 37): from the suite's
public pre-trained checkpoint, DP fine-tune at ε = 10 with each schedule, sample 50k rows, train 3 IQL agents
(20k updates, batched) and print the share of the public-to-real gap closed.

    OMP_NUM_THREADS=1 python scripts/transfer_study.py --checkpoint PATH --real 53.5 --public 8.8 \
        --schedule epochs=30 --schedule epochs=150 [--schedule epochs=150,lr=1e-3]

The pre-trained checkpoint and the real / public-alone scores come from `evaluation/suites/transfer_walker2d.yaml`
(its pretrain artifact and its agent_real / agent_public cells). Every dataset is our own public rollout; nothing
here reads a data holder's data.
"""
from __future__ import annotations

import argparse
import copy
import json
import time

import numpy as np


def _schedule(text: str) -> dict[str, float]:
    out = {}
    for part in text.split(","):
        k, _, v = part.partition("=")
        out[k.strip()] = float(v)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--checkpoint", required=True, help="the suite's pretrain artifact (model.pt)")
    ap.add_argument("--real", type=float, required=True, help="real-data IQL final score (the suite's agent_real)")
    ap.add_argument("--public", type=float, required=True, help="public-alone IQL final score (agent_public)")
    ap.add_argument("--schedule", action="append", default=[], help="epochs=E[,lr=L][,batch=B] (repeatable)")
    ap.add_argument("--epsilon", type=float, default=10.0)
    ap.add_argument("--updates", type=int, default=20_000)
    args = ap.parse_args()

    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion
    from privsynth.evaluation.agents import AgentJob, train_batched
    from privsynth.synth import registry

    sens = generate_locomotion(LocomotionConfig(env="walker2d", kind="medium", steps=20000, seed=0)).mark_sensitive()
    base = registry.load(args.checkpoint)
    for text in args.schedule or ["epochs=30"]:
        sched = _schedule(text)
        synth = copy.deepcopy(base)
        cfg = synth.config
        cfg.dp.trainable = "all"
        cfg.finetune.epochs = sched.get("epochs", cfg.finetune.epochs)
        cfg.finetune.lr = sched.get("lr", cfg.finetune.lr)
        cfg.finetune.batch_size = int(sched.get("batch", cfg.finetune.batch_size))
        t0 = time.time()
        synth.finetune(sens, args.epsilon, 1e-5, "transition", progress=False)
        rows = registry.sample(synth, n_transitions=50_000, seed=0)
        ft = time.time() - t0
        runs = train_batched([AgentJob(rows, sens.info, s) for s in (0, 1, 2)], "iql", num_updates=args.updates,
                             eval_every=2000, eval_episodes=5, final_k=3, progress=False)
        scores = np.array([r.final_score for r in runs])
        gap = (scores.mean() - args.public) / (args.real - args.public)
        print(json.dumps({"schedule": sched, "epsilon": args.epsilon, "dp_steps": synth.history[-1]["steps"],
                          "iql_final": [round(float(s), 1) for s in scores], "iql_mean": round(float(scores.mean()), 1),
                          "gap_closed": round(float(gap), 2), "finetune_and_sample_s": round(ft, 1)}), flush=True)


if __name__ == "__main__":
    main()
