"""Micro-benchmark: agent updates per second at batch 256 with PointMaze dimensions (and evaluation steps per second).

    OMP_NUM_THREADS=1 python scripts/bench_agents.py                     # IQL, TD3+BC, EDAC on one thread
    OMP_NUM_THREADS=2 python scripts/bench_agents.py --threads 2 --agents iql
    python scripts/bench_agents.py --reference                            # also a CORL-style unfused IQL loop
    OMP_NUM_THREADS=1 python scripts/bench_agents.py --batched            # K = 1, 4, 8 stacked agents (issue 17)

Goal (issue "Evaluation harness", part 1): at least 150 IQL updates/s at batch 256 on 2 cores. The machine is shared,
so the script prints the load average next to the numbers and, besides wall-clock updates/s, updates per second of
the process's own CPU time (with one thread, close to what an idle core gives; with N threads divide by N).

``--batched`` (issue 17, item 1) times the unbatched learner beside batched learners of K = 1, 4, 8 agents
(:mod:`privsynth.evaluation.agents.batched`) in one process, interleaved round by round so that load changes hit all
variants alike, and reports agent-updates per CPU-second per core (K updates of a K-batch count K). On a CPU with
native bf16 products (``avx512_bf16`` or AMX) it also times every variant with bf16 products in the wide layers
(``--precisions``). The last lines are the K = 8 speed-ups per core of IQL and TD3+BC over the unbatched fp32 learner,
first with bf16 products (where timed), then, last, with fp32.
"""
from __future__ import annotations

import argparse
import copy
import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from privsynth.data import DatasetInfo, OfflineDataset
from privsynth.evaluation.agents import AGENTS, Evaluator, Policy, ReplayBuffer, fit_state_normalizer, make_agent
from privsynth.evaluation.agents.nets import MATMUL_PRECISIONS, native_bf16


def random_dataset(n: int, obs_dim: int, act_dim: int, seed: int = 0) -> OfflineDataset:
    rng = np.random.default_rng(seed)
    ids = np.arange(n) // 300
    timeouts = np.r_[ids[1:] != ids[:-1], True]
    return OfflineDataset(rng.normal(size=(n, obs_dim)), rng.uniform(-1, 1, (n, act_dim)), rng.normal(size=n),
                          rng.normal(size=(n, obs_dim)), np.zeros(n, bool), timeouts, ids,
                          info=DatasetInfo(name="bench"))


def time_updates(step, sample, n: int, warmup: int) -> tuple[float, float]:
    """(updates per wall-clock second, updates per second of this process's CPU time)."""
    for _ in range(warmup):
        step(sample())
    t0, c0 = time.perf_counter(), time.process_time()
    for _ in range(n):
        step(sample())
    return n / (time.perf_counter() - t0), n / (time.process_time() - c0)


def corl_style_iql(obs_dim: int, act_dim: int, hidden: int = 256):
    """CORL's IQL structure for comparison: separate V, twin Q and actor, three optimisers and backward passes."""
    def net(i, o, tanh=False):
        layers = [nn.Linear(i, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, o)]
        return nn.Sequential(*(layers + [nn.Tanh()] if tanh else layers))

    q1, q2, v, pi = net(obs_dim + act_dim, 1), net(obs_dim + act_dim, 1), net(obs_dim, 1), net(obs_dim, act_dim, True)
    log_std = nn.Parameter(torch.zeros(act_dim))
    qt1, qt2 = copy.deepcopy(q1), copy.deepcopy(q2)
    vo = torch.optim.Adam(v.parameters(), 3e-4)
    qo = torch.optim.Adam([*q1.parameters(), *q2.parameters()], 3e-4)
    po = torch.optim.Adam([*pi.parameters(), log_std], 3e-4)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(po, 1_000_000)
    q_params, qt_params = [*q1.parameters(), *q2.parameters()], [*qt1.parameters(), *qt2.parameters()]

    def step(b):
        sa = torch.cat([b.obs, b.act], 1)
        with torch.no_grad():
            next_v = v(b.next_obs).squeeze(-1)
            target_q = torch.min(qt1(sa), qt2(sa)).squeeze(-1)
        adv = target_q - v(b.obs).squeeze(-1)
        v_loss = (torch.abs(0.7 - (adv < 0).float()) * adv**2).mean()
        vo.zero_grad(); v_loss.backward(); vo.step()
        y = b.rew + (1 - b.done) * 0.99 * next_v
        q_loss = (nn.functional.mse_loss(q1(sa).squeeze(-1), y) + nn.functional.mse_loss(q2(sa).squeeze(-1), y)) / 2
        qo.zero_grad(); q_loss.backward(); qo.step()
        with torch.no_grad():
            for t, s in zip(qt_params, q_params):
                t.mul_(0.995).add_(s, alpha=0.005)
        exp_adv = torch.exp(3.0 * adv.detach()).clamp(max=100)
        dist = torch.distributions.Normal(pi(b.obs), log_std.clamp(-20, 2).exp())
        pi_loss = (exp_adv * -dist.log_prob(b.act).sum(-1)).mean()
        po.zero_grad(); pi_loss.backward(); po.step(); sched.step()

    return step


def update_flops(name: str, args) -> float:
    """FLOPs of one update (mean over two: TD3+BC's actor step runs every second update), by torch's counter."""
    from torch.utils.flop_counter import FlopCounterMode

    agent = make_agent(name, args.obs_dim, args.act_dim, num_updates=1_000_000)
    buf = ReplayBuffer(random_dataset(1000, args.obs_dim, args.act_dim), seed=0)
    total = 0
    for _ in range(2):
        with FlopCounterMode(display=False) as counter:
            agent.update(buf.sample(args.batch))
        total += counter.get_total_flops()
    return total / 2


def matmul_gflops(k: int, threads: int, width: int = 256, batch: int = 256, dtype: torch.dtype = torch.float32) -> float:
    """GFLOP/s per core of a ``[k, batch, width] x [k, width, width]`` batched product in ``dtype``, this process's
    CPU time (float32: ``baddbmm`` as the stacked layers run it; bf16: ``matmul`` as :func:`bf16_matmul_add`)."""
    x, w, b = (torch.randn(k, batch, width, dtype=dtype), torch.randn(k, width, width, dtype=dtype),
               torch.randn(k, 1, width, dtype=dtype))
    run = (lambda: torch.baddbmm(b, x, w)) if dtype == torch.float32 else (lambda: torch.matmul(x, w))
    for _ in range(3):
        run()
    c0 = time.process_time()
    for _ in range(20):
        run()
    return 20 * 2 * k * batch * width * width / (time.process_time() - c0) / threads / 1e9


def _learner(name: str, args, seed: int, precision: str):
    torch.manual_seed(seed)
    x = make_agent(name, args.obs_dim, args.act_dim, num_updates=1_000_000, precision=precision)
    x.generator = torch.Generator().manual_seed(seed)
    return x


def bench_batched(args, data) -> None:
    """Unbatched vs batched K in (1, 4, 8), in each precision, interleaved; agent-updates per CPU-second per core.
    Every ratio is against the unbatched fp32 learner timed in the same rounds."""
    from privsynth.evaluation.agents.batched import stack_batches, stack_learners

    ks = [int(k) for k in args.ks]
    speedups: dict[str, dict[str, float]] = {p: {} for p in args.precisions}
    threads = torch.get_num_threads()
    for name in args.agents:
        per_round = max(args.updates // args.rounds, 1)  # --updates timed updates per variant, over the rounds
        n = max(per_round // 20, 2) if name == "edac" else per_round
        variants = {}  # label -> (step, sample, agents per step)
        for precision in args.precisions:
            suffix = "" if precision == "fp32" else f" {precision}"
            single = _learner(name, args, 0, precision)
            buf = ReplayBuffer(data, fit_state_normalizer(data), seed=0)
            variants["unbatched" + suffix] = (single.update, lambda b=buf: b.sample(args.batch), 1)
            for k in ks:
                model = stack_learners([_learner(name, args, j, precision) for j in range(k)])
                bufs = [ReplayBuffer(data, fit_state_normalizer(data), seed=j) for j in range(k)]
                variants[f"K={k}{suffix}"] = (model.update,
                                              lambda bs=bufs: stack_batches([b.sample(args.batch) for b in bs]), k)
        cpu = dict.fromkeys(variants, 0.0)
        wall = dict.fromkeys(variants, 0.0)
        done = dict.fromkeys(variants, 0)
        for step, sample, _ in variants.values():  # warm-up
            for _ in range(args.warmup):
                step(sample())
        labels = list(variants)
        for r in range(args.rounds):
            for label in labels[r % len(labels):] + labels[: r % len(labels)]:  # rotate the order every round
                step, sample, k = variants[label]
                t0, c0 = time.perf_counter(), time.process_time()
                for _ in range(n):
                    step(sample())
                wall[label] += time.perf_counter() - t0
                cpu[label] += time.process_time() - c0
                done[label] += n * k
        base = done["unbatched"] / cpu["unbatched"] / threads
        flop = update_flops(name, args)
        for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            if precision in args.precisions:
                gflops = matmul_gflops(8, threads, dtype=dtype)
                print(f"{name:6s} {flop / 1e9:.3f} GFLOP per update; batched 256x256 {precision} products run at "
                      f"{gflops:.0f} GFLOP/s per core now, so at most {gflops * 1e9 / flop:.0f} updates/s per core "
                      "if nothing but such products ran")
        for label in labels:
            per_core = done[label] / cpu[label] / threads
            print(f"{name:6s} {label:14s} {per_core:8.1f} agent-updates/s per core (CPU time), "
                  f"{done[label] / wall[label]:8.1f} per wall-second, x{per_core / base:5.2f} vs unbatched fp32")
        for precision in args.precisions:
            label = "K=8" + ("" if precision == "fp32" else f" {precision}")
            if label in variants:
                speedups[precision][name] = (done[label] / cpu[label]) / (done["unbatched"] / cpu["unbatched"])
    print(f"load average {os.getloadavg()[0]:.2f} (after)")
    names = {"iql": "IQL", "td3bc": "TD3+BC", "edac": "EDAC"}
    for precision in sorted(args.precisions, key=lambda p: p == "fp32"):  # the fp32 line last, as issue 17 asks
        parts = [f"{names[a]} {speedups[precision][a]:.2f}x" for a in ("iql", "td3bc") if a in speedups[precision]]
        if parts:
            what = "" if precision == "fp32" else f" {precision}"
            print(f"batched K=8{what} speedup per core: " + ", ".join(parts)
                  + ("" if precision == "fp32" else " (vs unbatched fp32)"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--agents", nargs="+", default=list(AGENTS), choices=list(AGENTS))
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--obs-dim", type=int, default=6, help="PointMaze observation+desired_goal = 6")
    ap.add_argument("--act-dim", type=int, default=2)
    ap.add_argument("--updates", type=int, default=500, help="timed updates per agent (EDAC uses a fifth)")
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--reference", action="store_true", help="also time a CORL-style unfused IQL loop")
    ap.add_argument("--eval-episodes", type=int, default=0, help="also time N PointMaze evaluation episodes")
    ap.add_argument("--batched", action="store_true", help="unbatched vs batched K = 1, 4, 8 agents (issue 17)")
    ap.add_argument("--ks", nargs="+", default=["1", "4", "8"], help="batch sizes K for --batched")
    ap.add_argument("--rounds", type=int, default=4, help="interleaved rounds for --batched")
    ap.add_argument("--precisions", nargs="+", choices=MATMUL_PRECISIONS, default=None,
                    help="matmul precisions for --batched (default: fp32, plus bf16 if this CPU has native bf16)")
    args = ap.parse_args()
    if args.precisions is None:
        args.precisions = ["fp32", "bf16"] if native_bf16() else ["fp32"]
    if "fp32" not in args.precisions:
        args.precisions.insert(0, "fp32")  # the baseline every ratio is taken against

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    data = random_dataset(100_000, args.obs_dim, args.act_dim)
    buf = ReplayBuffer(data, fit_state_normalizer(data), seed=0)
    sample = lambda: buf.sample(args.batch)  # noqa: E731
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, batch {args.batch}, "
          f"obs/act {args.obs_dim}/{args.act_dim}, load average {os.getloadavg()[0]:.2f} (before)")
    if args.batched:
        bench_batched(args, data)
        return
    for name in args.agents:
        n = max(args.updates // 5, 20) if name == "edac" else args.updates
        agent = make_agent(name, args.obs_dim, args.act_dim, num_updates=1_000_000)
        ups, cpu = time_updates(agent.update, sample, n, args.warmup)
        print(f"{name:6s} {ups:7.1f} updates/s wall, {cpu:7.1f} per CPU-second  ({n} timed updates)")
    if args.reference:
        ups, cpu = time_updates(corl_style_iql(args.obs_dim, args.act_dim), sample, args.updates, args.warmup)
        print(f"iql, CORL-style unfused: {ups:7.1f} updates/s wall, {cpu:7.1f} per CPU-second")
    if args.eval_episodes:
        info = DatasetInfo(name="bench", env_id="PointMaze_UMazeDense-v3", obs_keys=["observation", "desired_goal"],
                           env_kwargs={"continuing_task": True, "reset_target": False, "max_episode_steps": 300},
                           ref_min_score=0.0, ref_max_score=1.0)
        ev = Evaluator(info, episodes=args.eval_episodes, seed=0)
        agent = make_agent("iql", args.obs_dim, args.act_dim)
        policy = Policy(agent.act, buf.normalizer, ev.action_low, ev.action_high)
        t0 = time.perf_counter()
        ev(policy)
        dt = time.perf_counter() - t0
        print(f"eval   {args.eval_episodes} episodes x 300 steps in {dt:.2f} s "
              f"({args.eval_episodes * 300 / dt:.0f} env steps/s with batched policy)")
    print(f"load average {os.getloadavg()[0]:.2f} (after)")


if __name__ == "__main__":
    main()
