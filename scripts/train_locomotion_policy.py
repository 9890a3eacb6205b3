"""Train a SAC behaviour policy on a gymnasium MuJoCo env and ship actor snapshots to pretrained/locomotion/<env>/.

    OMP_NUM_THREADS=1 python scripts/train_locomotion_policy.py --env halfcheetah --steps 60000 --max-minutes 20

Every ``--snapshot-every`` environment steps the actor is saved (float16) and scored by one deterministic episode
(seed 10_000). At the end the card picks "expert" = the best-scoring snapshot and "medium" = the earliest snapshot
whose score reaches ``--medium-frac`` (default 0.4) of the expert's, and measures the random and expert reference
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
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    env_id = env_id_of(args.env)
    out = Path(args.out or Path(__file__).resolve().parents[1] / "pretrained" / "locomotion" / args.env)
    (out / "snapshots").mkdir(parents=True, exist_ok=True)

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

    # levels from the (float16) snapshots as shipped
    from privsynth.data.locomotion.policies import load_actor

    expert = max(snapshots, key=lambda s: s["eval_return"])
    medium = next((s for s in snapshots if s["eval_return"] >= args.medium_frac * expert["eval_return"]), expert)
    seed_ref = 20_000
    rand = rollout_returns(env_id, None, args.ref_episodes, seed_ref)
    exp_r = rollout_returns(env_id, load_actor(args.env, expert["step"], out.parent), args.ref_episodes, seed_ref)
    med_r = rollout_returns(env_id, load_actor(args.env, medium["step"], out.parent), args.ref_episodes, seed_ref)
    card = {
        "env": args.env,
        "env_id": env_id,
        "algorithm": "SAC (privsynth.data.locomotion.sac), 256x256 MLPs, lr 3e-4, batch 256, auto-entropy",
        "command": "OMP_NUM_THREADS=1 python scripts/train_locomotion_policy.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "seed": args.seed,
        "steps_trained": steps_done,
        "learning_starts": cfg.learning_starts,
        "train_seconds": round(train_seconds, 1),
        "snapshot_every": args.snapshot_every,
        "snapshots": snapshots,
        "train_episode_returns": [[int(s), round(r, 2)] for s, r in ep_returns],
        "levels": {"medium": medium["step"], "expert": expert["step"], "medium_frac": args.medium_frac},
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
    (out / "card.json").write_text(json.dumps(card, indent=1) + "\n")
    write_card_readme(card, out)
    print(json.dumps({k: card[k] for k in ("steps_trained", "levels", "reference")}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
