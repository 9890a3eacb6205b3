"""Micro-benchmark of trajectory-level DP-SGD steps: which fragment model fits a CPU.

For each configuration, times one DP step of the per-trajectory loss (B trajectories x K fragments of horizon H,
PointMaze row width) through privsynth's DP-SGD engine, and a non-private step of the same loss for comparison.
Median of ``--steps`` timed steps after warm-up. The CPU default of ``cpu_config`` was chosen from this table.

    PYTHONPATH=. OMP_NUM_THREADS=1 python scripts/bench_traj.py --steps 3 --quick
"""
from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from privsynth.privacy.dpsgd import _Engine  # noqa: PLC2701 - the engine's step is what we time
from privsynth.synth.config import EDMConfig
from privsynth.synth.trajectory.config import ARTransformerConfig, TransformerConfig, UNetConfig
from privsynth.synth.trajectory.diffusion import FragmentEDM
from privsynth.synth.trajectory.dp_transformer import ARTransformer
from privsynth.synth.trajectory.synthesizer import TrajectoryLoss
from privsynth.synth.trajectory.transformer import DiffusionTransformer
from privsynth.synth.trajectory.unet import TemporalUNet

OBS, ACT = 6, 2
D = 2 * OBS + ACT + 3


def build(kind: str, width: int, depth: int, horizon: int, tokens: str) -> torch.nn.Module:
    if kind == "transformer":
        return FragmentEDM(DiffusionTransformer(OBS, ACT, horizon, TransformerConfig(width=width, depth=depth, heads=4, tokens=tokens)), EDMConfig())
    if kind == "unet":
        return FragmentEDM(TemporalUNet(D, horizon, UNetConfig(base=width // 2, mults=(1, 2))), EDMConfig())
    return ARTransformer(OBS, ACT, horizon, ARTransformerConfig(width=width, depth=depth, heads=4))


def time_steps(fn, steps: int) -> float:
    fn()
    out = []
    for _ in range(steps):
        t0 = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t0)
    return statistics.median(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--batch", type=int, default=16, help="trajectories per step")
    ap.add_argument("--fmax", type=int, default=14, help="padded fragments per trajectory item")
    ap.add_argument("--mode", default="bk", help="clipping mode: bk | ghost")
    ap.add_argument("--quick", action="store_true", help="only the CPU defaults of the three models")
    args = ap.parse_args()
    torch.set_num_threads(1)
    grid = [  # (model, width, depth, horizon, tokens, K)
        ("transformer", 64, 2, 16, "step", 4),  # cpu_config
        ("unet", 64, 0, 16, "-", 4),
        ("dp-transformer", 64, 2, 16, "-", 4),
    ]
    if not args.quick:
        grid += [
            ("transformer", 128, 3, 16, "step", 8),
            ("transformer", 128, 3, 16, "component", 4),
            ("transformer", 256, 6, 32, "component", 4),  # paper_config shape (slow on CPU)
        ]
    rows = []
    for kind, w, depth, h, tokens, k in grid:
        torch.manual_seed(0)
        model = build(kind, w, depth, h, tokens)
        loss = TrajectoryLoss(model, k)
        data = torch.randn(args.batch, args.fmax, h, D)
        cond = torch.randn(args.batch, args.fmax, D + 1)
        mask = torch.ones(args.batch, args.fmax, h, dtype=torch.bool)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)

        def plain() -> None:
            opt.zero_grad()
            loss(data, cond, mask).sum().backward()
            opt.step()

        t_plain = time_steps(plain, args.steps)
        eng = _Engine(loss, torch.optim.Adam(model.parameters(), lr=1e-4), args.mode, 1.0, 1.0, args.batch,
                      torch.Generator().manual_seed(0))
        try:
            t_dp = time_steps(lambda: eng.step((data, cond, mask), args.batch), args.steps)
        finally:
            eng.close()
        params = sum(p.numel() for p in model.parameters())
        row = dict(model=kind, width=w, depth=depth, horizon=h, tokens=tokens, k=k, params=params,
                   plain_ms=round(1000 * t_plain, 1), dp_ms=round(1000 * t_dp, 1), ratio=round(t_dp / t_plain, 2),
                   mode=args.mode, batch=args.batch)
        rows.append(row)
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
