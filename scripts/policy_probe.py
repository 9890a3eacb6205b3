"""Probes of the DP behaviour policy behind the action relabel (issue 37, docs/transfer.md "Fifth round").

    OMP_NUM_THREADS=1 python scripts/policy_probe.py r2 --env walker2d --release REL.npz --epsilon 1 --epsilon 3
    OMP_NUM_THREADS=1 python scripts/policy_probe.py bc --env walker2d --rows A.npz --rows B.npz --real

``r2``: the R² on held-out real states (10k fresh steps of the same medium policy, seed 7) of the state → action
map of: the release's own rows (k-NN, ``privsynth.evaluation.fidelity.policy_r2``, the ``--diagnose`` figure), the
network fitted without privacy on the release's rows (π̂), π̂ DP fine-tuned on the 20k sensitive (s, a) pairs at each
``--epsilon`` (π̃, ``privsynth.synth.dp_policy.fit_dp``, its own DP count), and the network fitted without privacy on
the sensitive pairs (the no-DP ceiling). ``bc``: a plain behaviour-cloning fit (``fit_plain``) on each dataset, rolled
out for ``--episodes`` episodes in the environment (normalised returns): does the data carry a behaviour? Every
dataset here is our own public rollout or a release saved by ``scripts/transfer_study.py --save``.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import pathlib

import numpy as np


def _r2(y: np.ndarray, pred: np.ndarray) -> float:
    return round(float(1 - ((y - pred) ** 2).sum() / ((y - y.mean(0)) ** 2).sum()), 3)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("probe", choices=["r2", "bc"])
    ap.add_argument("--env", default="walker2d", choices=["walker2d", "hopper"])
    ap.add_argument("--release", help="r2: a release saved by transfer_study.py --save (.npz)")
    ap.add_argument("--epsilon", type=float, action="append", default=[], help="r2: the DP policy's epsilon")
    ap.add_argument("--rows", action="append", default=[], help="bc: a saved dataset (.npz; repeatable)")
    ap.add_argument("--real", action="store_true", help="bc: also the sensitive set itself")
    ap.add_argument("--episodes", type=int, default=4)
    args = ap.parse_args()

    import torch

    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion
    from privsynth.evaluation.bench.dataset_cache import load_dataset_file
    from privsynth.synth.dp_policy import DPPolicyConfig, fit_dp, fit_plain

    torch.manual_seed(0)
    sens = generate_locomotion(LocomotionConfig(env=args.env, kind="medium", steps=20_000, seed=0))
    cfg = DPPolicyConfig()
    if args.probe == "r2":
        from privsynth.evaluation.fidelity import policy_r2

        test = generate_locomotion(LocomotionConfig(env=args.env, kind="medium", steps=10_000, seed=7))
        rel = load_dataset_file(pathlib.Path(args.release))
        start = fit_plain(rel, cfg)
        out = {"env": args.env, "release": args.release, "release_knn": round(policy_r2(rel, test), 3),
               "release_fit": _r2(test.actions, start.act(test.observations)),
               "sensitive_fit_no_dp": _r2(test.actions, fit_plain(sens, dataclasses.replace(cfg, warm_epochs=30))
                                          .act(test.observations))}
        for eps in args.epsilon:
            policy, res = fit_dp(sens.mark_sensitive(), start, cfg, epsilon=eps, delta=1e-5)
            out[f"dp_eps{eps:g}"] = {"r2": _r2(test.actions, policy.act(test.observations)),
                                     "sigma": round(res.noise_multiplier, 2), "steps": res.steps}
        print(json.dumps(out), flush=True)
        return
    from privsynth.data.envs import make_env

    sets = [(p, load_dataset_file(pathlib.Path(p))) for p in args.rows] + ([("real", sens)] if args.real else [])
    env = make_env(sens.info)
    lo, hi = sens.info.ref_min_score, sens.info.ref_max_score
    try:
        for name, data in sets:
            pol = fit_plain(data, dataclasses.replace(cfg, warm_epochs=15))  # our own rollouts and saved releases
            returns = []
            for ep in range(args.episodes):
                obs, total = env.reset(seed=ep)[0], 0.0
                for _ in range(1000):
                    obs, rew, term, trunc, _ = env.step(pol.act(obs[None])[0])
                    total += float(rew)
                    if term or trunc:
                        break
                returns.append(round(100 * (total - lo) / (hi - lo), 1))
            print(json.dumps({"env": args.env, "rows": name, "bc_normalised_returns": returns}), flush=True)
    finally:
        env.close()


if __name__ == "__main__":
    main()
