"""Train a SAC behaviour policy on a gymnasium MuJoCo env and ship actor snapshots to pretrained/locomotion/<env>/.

    OMP_NUM_THREADS=1 python scripts/train_locomotion_policy.py --env halfcheetah --steps 60000 --max-minutes 20

Every ``--snapshot-every`` environment steps the actor is saved (float16) and scored by one deterministic episode
(seed 10_000). At the end the card picks "expert" = the best-scoring snapshot and "medium" = the earlier snapshot
whose score is closest to ``--medium-frac`` (default 0.4) of the expert's (D4RL: about a third), and measures the random and expert reference
returns over ``--ref-episodes`` episodes. Training stops early at ``--max-minutes`` (the card records the real steps).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from privsynth.data.locomotion.policies import ENVS, env_id_of, rollout_returns, write_card_readme  # noqa: E402
from privsynth.data.locomotion.sac import SAC, ReplayBuffer, SACConfig  # noqa: E402

EVAL_SEED = 10_000


def finalize(args: argparse.Namespace, env_id: str, out: Path, snapshots: list[dict], ep_returns: list,
             steps_done: int, train_seconds: float, learning_starts: int, command: str) -> dict:
    """Pick the levels, measure random / medium / expert returns of the shipped (float16) actors, write the card."""
    from privsynth.data.locomotion.policies import load_actor

    expert = max(snapshots, key=lambda s: s["eval_return"])
    earlier = [s for s in snapshots if s["step"] < expert["step"]] or [expert]
    target = args.medium_frac * expert["eval_return"]
    medium = min(earlier, key=lambda s: abs(s["eval_return"] - target))
    seed_ref = 20_000
    rand = rollout_returns(env_id, None, args.ref_episodes, seed_ref)
    exp_r = rollout_returns(env_id, load_actor(args.env, expert["step"], out.parent), args.ref_episodes, seed_ref)
    med_r = rollout_returns(env_id, load_actor(args.env, medium["step"], out.parent), args.ref_episodes, seed_ref)
    card = {
        "env": args.env,
        "env_id": env_id,
        "algorithm": "SAC (privsynth.data.locomotion.sac), 256x256 MLPs, lr 3e-4, batch 256, auto-entropy",
        "command": command,
        "seed": args.seed,
        "steps_trained": steps_done,
        "learning_starts": learning_starts,
        "train_seconds": train_seconds,
        "snapshot_every": args.snapshot_every,
        "snapshots": snapshots,
        "train_episode_returns": ep_returns,
        "levels": {"medium": medium["step"], "expert": expert["step"], "medium_frac": args.medium_frac,
                   "rule": "expert = best snapshot; medium = earlier snapshot closest to medium_frac x best"},
        "reference": {
            "episodes": args.ref_episodes,
            "seed": seed_ref,
            "random_return": float(rand.mean()),
            "random_return_std": float(rand.std()),
            "expert_return": float(exp_r.mean()),
            "expert_return_std": float(exp_r.std()),
            "medium_return": float(med_r.mean()),
            "medium_return_std": float(med_r.std()),
        },
    }
    if args.prune:
        unused = [s for s in snapshots if medium["step"] < s["step"] != expert["step"]]
        for s in unused:
            (out / s["file"]).unlink(missing_ok=True)
        card["pruned"] = ("snapshots between the medium and expert steps and after the expert step are not shipped "
                          "(no dataset kind uses them); their scores stay listed")
    (out / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    write_card_readme(card, out)
    print(json.dumps({k: card[k] for k in ("steps_trained", "levels", "reference")}, indent=1))
    return card


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--env", default="halfcheetah", choices=list(ENVS))
    ap.add_argument("--steps", type=int, default=60_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--snapshot-every", type=int, default=5000)
    ap.add_argument("--learning-starts", type=int, default=5000)
    ap.add_argument("--max-minutes", type=float, default=20.0)
    ap.add_argument("--medium-frac", type=float, default=0.4)
    ap.add_argument("--ref-episodes", type=int, default=5)
    ap.add_argument("--out", default=None, help="default pretrained/locomotion/<env>")
    ap.add_argument("--prune", action="store_true",
                    help="delete the snapshots no dataset kind uses (after the medium step, except the expert)")
    ap.add_argument("--finalize-only", action="store_true",
                    help="no training: re-pick the levels and re-measure the references from an existing card")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env_id = env_id_of(args.env)
    out = Path(args.out or Path(__file__).resolve().parents[1] / "pretrained" / "locomotion" / args.env)
    (out / "snapshots").mkdir(parents=True, exist_ok=True)

    if args.finalize_only:
        old = json.loads((out / "card.json").read_text())
        args.snapshot_every, args.seed = old["snapshot_every"], old["seed"]  # facts of the training run
        finalize(args, env_id, out, old["snapshots"], old["train_episode_returns"], old["steps_trained"],
                 old["train_seconds"], old["learning_starts"], old["command"])
        return 0
    env = gym.make(env_id, max_episode_steps=1000)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    cfg = SACConfig(learning_starts=args.learning_starts, buffer_size=args.steps)
    agent = SAC(obs_dim, act_dim, cfg)
    buf = ReplayBuffer(obs_dim, act_dim, args.steps)
    obs, _ = env.reset(seed=args.seed)
    ep_ret, ep_returns, snapshots = 0.0, [], []
    t0 = time.perf_counter()
    steps_done = 0
    for t in range(1, args.steps + 1):
        if t <= cfg.learning_starts:
            a = rng.uniform(-1, 1, size=act_dim).astype(np.float32)
        else:
            a = agent.actor.act(obs, deterministic=False, rng=rng)
        obs2, r, term, trunc, _ = env.step(a)
        buf.add(obs, a, r, obs2, term)
        ep_ret += float(r)
        obs = obs2
        if term or trunc:
            ep_returns.append((t, ep_ret))
            obs, _ = env.reset()
            ep_ret = 0.0
        if t > cfg.learning_starts:
            agent.update(buf.sample(cfg.batch_size, rng))
        steps_done = t
        if t % args.snapshot_every == 0:
            path = out / "snapshots" / f"step_{t:07d}.pt"
            torch.save(agent.actor.to_payload(), path)
            score = float(rollout_returns(env_id, agent.actor, 1, EVAL_SEED)[0])
            elapsed = time.perf_counter() - t0
            snapshots.append({"step": t, "file": f"snapshots/{path.name}", "eval_return": score})
            last = ep_returns[-1][1] if ep_returns else float("nan")
            print(f"step {t}: eval {score:.1f}, last train episode {last:.1f}, {elapsed / 60:.1f} min", flush=True)
            if elapsed > args.max_minutes * 60:
                print("time limit reached", flush=True)
                break
    env.close()
    train_seconds = time.perf_counter() - t0

    command = "OMP_NUM_THREADS=1 python scripts/train_locomotion_policy.py " + " ".join(
        sys.argv[1:] if argv is None else argv)
    finalize(args, env_id, out, snapshots, [[int(t), round(r, 2)] for t, r in ep_returns], steps_done,
             round(train_seconds, 1), cfg.learning_starts, command)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
