"""Micro-benchmark: time of one DP-SGD step over one non-private step, per clipping mode, in one run.

Models (feasibility notes §4):
* residual MLP denoiser, width 1024, depth 6 (about 6.4 M parameters), batch 256, EDM loss with per-example noise;
* small transformer over sequences (d 128, 4 layers, 4 heads, length 32, batch 128) built from Linear layers
  (linear-layer attention, see docs/privacy.md), the per-unit loss summed over the sequence.

A DP step is what :func:`privsynth.privacy.dp_train` does per step on a fixed batch: forward, per-unit clipping
(``ghost`` = Opacus ghost clipping, ``hooks`` = Opacus per-sample gradients, ``bk`` = our book-keeping clipping),
Gaussian noise, Adam. The non-private step is forward, mean-loss backward, Adam. Poisson sampling is excluded (a mask
over N units, negligible). Medians over ``--steps`` steps after ``--warmup``. ``bk σ=0`` is the bk step without
its noise (the clipping's own cost); the last line of each model times the noise draw alone (one normal per
parameter from torch's CPU generator, ~6-8 ns each here): for the 6.4 M-parameter MLP at batch 256 that draw is
about 0.2x of a non-private step, a floor no clipping method removes on one thread. ``bk ahead`` is the bk step as
:func:`~privsynth.privacy.dp_train` runs it on one process: the next step's noise is drawn on a helper thread
(``_DrawAhead``) while the step computes, so on a second core the draw leaves the critical path. It still costs
what the "noise alone" line says, on that core: the wall ratio hides the draw, it does not remove it.

    OMP_NUM_THREADS=1 python scripts/bench_dp_step.py            # all models and modes
    OMP_NUM_THREADS=1 python scripts/bench_dp_step.py --quick    # fewer steps
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from privsynth.privacy.dpsgd import _Engine  # noqa: E402  (the engine's per-step core, without sampling)


# ----------------------------------------------------------------------------------------------------------- models
class ResidualMLPLoss(nn.Module):
    """EDM-style denoiser loss on 32-d vectors with a 16-d condition; each example draws its own σ and noise."""

    def __init__(self, d: int = 32, cond: int = 16, width: int = 1024, depth: int = 6) -> None:
        super().__init__()
        self.register_buffer("freqs", torch.randn(8) * 3)  # frozen Fourier features of c_noise
        self.inp = nn.Linear(d + cond + 16, width)
        self.blocks = nn.ModuleList(nn.ModuleDict({"norm": nn.LayerNorm(width), "lin": nn.Linear(width, width)})
                                    for _ in range(depth))
        self.out_norm = nn.LayerNorm(width)
        self.out = nn.Linear(width, d)

    def forward(self, x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        sigma = torch.exp(torch.randn(x.shape[0], 1) * 1.2 - 1.2)
        noisy = x + sigma * torch.randn_like(x)
        cn = torch.log(sigma) / 4 * self.freqs
        h = self.inp(torch.cat([noisy / torch.sqrt(sigma**2 + 1), c, torch.sin(cn), torch.cos(cn)], 1))
        for blk in self.blocks:
            h = h + F.silu(blk["lin"](blk["norm"](h)))
        f = self.out(F.silu(self.out_norm(h)))
        den = noisy / (sigma**2 + 1) + f * sigma / torch.sqrt(sigma**2 + 1)
        weight = (sigma**2 + 1) / sigma**2
        return (weight * (den - x) ** 2).mean(1)


class LinearAttention(nn.Module):
    """Multi-head self-attention whose parameters live in nn.Linear layers only (Opacus- and bk-compatible)."""

    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        b, t, d = h.shape
        q, k, v = self.qkv(h).reshape(b, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        out = F.scaled_dot_product_attention(q, k, v)
        return self.proj(out.transpose(1, 2).reshape(b, t, d))


class TransformerLoss(nn.Module):
    """Pre-LN transformer denoiser over a sequence; returns one loss per sequence (summed over its steps)."""

    def __init__(self, d_in: int = 12, d: int = 128, layers: int = 4, heads: int = 4, length: int = 32) -> None:
        super().__init__()
        pos = torch.arange(length)[:, None] * torch.exp(-math.log(1e4) * torch.arange(0, d, 2) / d)
        self.register_buffer("pos", torch.cat([torch.sin(pos), torch.cos(pos)], 1))  # fixed sinusoidal encoding
        self.embed = nn.Linear(d_in, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict({"ln1": nn.LayerNorm(d), "attn": LinearAttention(d, heads), "ln2": nn.LayerNorm(d),
                           "fc1": nn.Linear(d, 4 * d), "fc2": nn.Linear(4 * d, d)})
            for _ in range(layers)
        )
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, d_in)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        eps = torch.randn_like(x)
        a = torch.rand(x.shape[0], 1, 1)
        h = self.embed(a.sqrt() * x + (1 - a).sqrt() * eps) + self.pos
        for blk in self.blocks:
            h = h + blk["attn"](blk["ln1"](h))
            h = h + blk["fc2"](F.gelu(blk["fc1"](blk["ln2"](h))))
        return (self.head(self.ln(h)) - eps).pow(2).mean(-1).sum(-1)


class TrajectoryMLPLoss(nn.Module):
    """Residual MLP applied per step of a padded trajectory [B, L, D]; one loss per trajectory (masked sum)."""

    def __init__(self, d: int = 12, width: int = 256, depth: int = 4) -> None:
        super().__init__()
        self.inp = nn.Linear(d, width)
        self.blocks = nn.ModuleList(nn.ModuleDict({"norm": nn.LayerNorm(width), "lin": nn.Linear(width, width)})
                                    for _ in range(depth))
        self.out = nn.Linear(width, d)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        eps = torch.randn_like(x)
        h = self.inp(x + eps)
        for blk in self.blocks:
            h = h + F.silu(blk["lin"](blk["norm"](h)))
        return ((self.out(h) - eps).pow(2).mean(-1) * mask).sum(-1)


# -------------------------------------------------------------------------------------------------------- timing
def bench(name: str, make_model, batch: tuple[torch.Tensor, ...], modes: list[str], steps: int, warmup: int) -> None:
    """Time the non-private step and each DP mode in interleaved rounds, so load drift hits all of them alike."""
    b = batch[0].shape[0]
    variants: dict[str, callable] = {}
    engines = []
    torch.manual_seed(0)
    plain = make_model()
    n_params = sum(p.numel() for p in plain.parameters() if p.requires_grad)
    plain_opt = torch.optim.Adam(plain.parameters(), lr=1e-4)

    def plain_step() -> None:
        plain_opt.zero_grad(set_to_none=True)
        plain(*batch).mean().backward()
        plain_opt.step()

    variants["non-private"] = plain_step
    labels = list(modes) + (["bk ahead", "bk σ=0"] if "bk" in modes else [])
    for label in labels:
        mode, sigma = (label, 1.0) if label in modes else ("bk", 0.0 if label == "bk σ=0" else 1.0)
        torch.manual_seed(0)
        model = make_model()
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        engine = _Engine(model, opt, mode, sigma=sigma, max_grad_norm=1.0, expected_batch=b,
                         gen=torch.Generator().manual_seed(0))
        if label == "bk ahead":  # what dp_train does for bk on one process: the next noise drawn on a helper thread
            engine.draw_ahead(b, 1.0, warmup + steps)
        engines.append(engine)
        variants[label] = (lambda e: (lambda: e.step(batch, b)))(engine)
    times: dict[str, list[float]] = {k: [] for k in variants}
    try:
        for r in range(warmup + steps):
            for key, fn in variants.items():
                t0 = time.perf_counter()
                fn()
                if r >= warmup:
                    times[key].append(time.perf_counter() - t0)
    finally:
        for e in engines:
            e.close()
    base = statistics.median(times["non-private"])
    print(f"{name}: {n_params / 1e6:.2f} M parameters, batch {b}; non-private step {base * 1e3:.1f} ms", flush=True)
    for mode in labels:
        t = statistics.median(times[mode])
        ratios = sorted(x / y for x, y in zip(times[mode], times["non-private"]))
        print(f"  {mode:6s} DP step {t * 1e3:8.1f} ms   ratio of medians {t / base:5.2f}x   "
              f"median per-round ratio {statistics.median(ratios):5.2f}x", flush=True)
    buf, gen = torch.empty(n_params), torch.Generator().manual_seed(0)
    draws = []
    for _ in range(5):
        t0 = time.perf_counter()
        buf.normal_(0.0, 1.0, generator=gen)
        draws.append(time.perf_counter() - t0)
    print(f"  the noise alone ({n_params / 1e6:.2f} M normal draws from the CPU generator): "
          f"{statistics.median(draws) * 1e3:.1f} ms = {statistics.median(draws) / base:.2f}x of a non-private step",
          flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="5 timed steps after 2 warm-up steps")
    parser.add_argument("--hooks-mlp", action="store_true", help="also time Opacus hooks on the big MLP (slow, ~8 GB)")
    parser.add_argument("--no-trajectory", action="store_true", help="skip the long-trajectory case")
    args = parser.parse_args()
    if args.quick:
        args.steps, args.warmup = 5, 2
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    print(f"torch {torch.__version__}, {torch.get_num_threads()} thread(s)")
    g = torch.Generator().manual_seed(0)
    mlp_batch = (torch.randn(256, 32, generator=g), torch.randn(256, 16, generator=g))
    modes = ["ghost", "bk"] + (["hooks"] if args.hooks_mlp else [])
    bench("residual MLP w1024 d6", ResidualMLPLoss, mlp_batch, modes, args.steps, args.warmup)
    seq_batch = (torch.randn(128, 32, 12, generator=g),)
    bench("transformer d128 L4 H4 T32", TransformerLoss, seq_batch, ["ghost", "bk", "hooks"], args.steps, args.warmup)
    if not args.no_trajectory:
        traj_batch = (torch.randn(16, 1000, 12, generator=g), torch.ones(16, 1000))
        bench("trajectory MLP w256 d4, 16 trajectories of 1000 steps", TrajectoryMLPLoss, traj_batch, ["ghost", "bk"],
              args.steps, args.warmup)


if __name__ == "__main__":
    main()
