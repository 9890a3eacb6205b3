"""Benchmark of the PrivORL-n transition synthesizer on PointMaze (one run prints everything).

Prints: pre-training and DP fine-tuning time per epoch (wall and CPU seconds; the DP fine-tune runs through the one
route, privsynth.release.synthesize with n=0, and its wall time is the route's ``seconds["finetune"]``), fidelity (marginal = 1 − mean KS,
correlation similarity = mean 1 − |ρ_real − ρ_syn| / 2, terminal column excluded, as PrivORL Table III / SDV; computed
by privsynth.evaluation.fidelity) of
the ε releases against the sensitive data, and sampling throughput of DPM-Solver++-20 vs EDM Heun-128 with the
fidelity of each. ``--arch-sweep`` instead compares denoiser sizes on *public* data only (architecture choice must
not look at sensitive data).

    OMP_NUM_THREADS=1 python scripts/bench_synth.py                       # demo scale (umaze 20k transitions)
    OMP_NUM_THREADS=1 python scripts/bench_synth.py --scale benchmark     # umaze 100k
    OMP_NUM_THREADS=1 python scripts/bench_synth.py --million             # also time 1M DPM-20 samples
    OMP_NUM_THREADS=1 python scripts/bench_synth.py --arch-sweep
    OMP_NUM_THREADS=1 python scripts/bench_synth.py --sampling            # rows/CPU-s vs chunk size, fidelity vs
                                                                          # DPM steps (public data), 1M rows on 2 cores

Data are generated with :mod:`privsynth.data.pointmaze` (or read from the Minari store if ``--sensitive`` / ``--public``
name existing dataset ids). CPU seconds are reported beside wall seconds because the machines are shared.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from privsynth.data.dataset import OfflineDataset  # noqa: E402
from privsynth.release import synthesize  # noqa: E402
from privsynth.synth import TransitionSynthesizer  # noqa: E402
from privsynth.synth.config import DenoiserConfig, cpu_config, demo_config  # noqa: E402

SCALES = {"demo": (20_000, 50_000), "benchmark": (100_000, 100_000)}  # (sensitive, public per map) transitions


def fidelity(real: np.ndarray, syn: np.ndarray, *, max_rows: int = 20_000, seed: int = 0) -> tuple[float, float]:
    """(marginal, correlation) of transition matrices with privsynth.evaluation.fidelity; terminal column excluded."""
    from privsynth.evaluation.fidelity import correlation_score, marginal_score

    real, syn = real[:, :-1], syn[:, :-1]
    return (
        marginal_score(real, syn, max_rows=max_rows, seed=seed),
        correlation_score(real, syn, max_rows=max_rows, seed=seed),
    )


def load_maze(maze: str, steps: int, seed: int) -> OfflineDataset:
    from privsynth.data import minari_io
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze

    ds_id = f"bench/pointmaze-{maze}-{steps // 1000}k-s{seed}-v0"
    if minari_io.dataset_exists(ds_id):
        return minari_io.load_dataset(ds_id)
    ds = generate_pointmaze(PointMazeConfig(maze=maze, steps=steps, seed=seed, ref_episodes=5), progress=False)
    minari_io.write_dataset(ds, ds_id, overwrite=True)
    return ds


def timed(fn):
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - t, time.process_time() - c


def fold_ratio(net, dim: int, rows: int, reps: int = 20) -> float:
    """CPU time of the denoiser module over its folded sampling forward, per call at one noise level (same rows)."""
    x, c = torch.randn(rows, dim), torch.tensor(0.3)
    folded = net.folded()
    with torch.no_grad():
        for _ in range(2):  # warm-up
            net(x, c.expand(rows)), folded(x, c)
        _, _, module_cpu = timed(lambda: [net(x, c.expand(rows)) for _ in range(reps)])
        _, _, folded_cpu = timed(lambda: [folded(x, c) for _ in range(reps)])
    return module_cpu / folded_cpu


def arch_sweep(args: argparse.Namespace) -> None:
    """Denoiser size vs fidelity on public data: train on 80% of medium's episodes, score on the other 20%."""
    med = load_maze("medium", SCALES["demo"][1], seed=1)
    train, test = med.split_episodes(0.8, seed=0)
    m0, c0 = fidelity(test.transition_matrix(), train.transition_matrix())
    print(f"real-vs-real (held-out episodes): marginal {m0:.4f} correlation {c0:.4f}")
    for w, d in [(128, 2), (256, 2), (256, 4), (512, 3), (512, 4), (1024, 6)]:
        cfg = cpu_config()
        cfg.denoiser = DenoiserConfig(width=w, depth=d)
        cfg.pretrain_curiosity = False
        cfg.pretrain.epochs, cfg.pretrain.max_steps = 1e9, args.sweep_steps
        synth = TransitionSynthesizer(cfg)
        _, wall, cpu = timed(lambda: synth.pretrain(train, progress=False))
        syn, swall, scpu = timed(lambda: synth.sample(20_000))
        m, c = fidelity(test.transition_matrix(), syn.transition_matrix())
        print(
            f"W={w:4d} L={d} params={synth.n_parameters():>8d} train {1000 * cpu / args.sweep_steps:6.1f} cpu-ms/step "
            f"sample {20_000 / scpu:7.0f} rows/cpu-s  marginal {m:.4f} correlation {c:.4f}",
            flush=True,
        )


def sampling_bench(args: argparse.Namespace) -> None:
    """Issue 17 item 3: sampling speed of the shipped public model, on public data only (invariant 9).

    1. rows per CPU-second of DPM-Solver-20 against the rows per sampler call (cache effects);
    2. fidelity against the model's public training data as a function of the DPM-Solver step count;
    3. one million rows over two worker processes (``privsynth.synth.sharded``) with the chosen step count.
    """
    from privsynth.evaluation.executors import LocalExecutor
    from privsynth.synth.pretrained import pretrained_card, resolve_pretrained
    from privsynth.synth.sampling import CHUNK_ROWS, sample_dpm
    from privsynth.synth.sharded import sample_sharded

    path = resolve_pretrained(args.sampling_model)
    synth = TransitionSynthesizer.load(path)
    model, dim = synth.released.eval(), synth.data_dim
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; model {args.sampling_model} "
          f"({synth.n_parameters()} parameters, {dim} columns); torch threads {torch.get_num_threads()}", flush=True)
    print(f"folded sampling forward vs the module, {CHUNK_ROWS} rows, one thread: "
          f"{fold_ratio(model.net, dim, CHUNK_ROWS):.2f}x", flush=True)
    total = args.chunk_rows_total
    rates = {}
    for rep in range(2):  # the first pass warms up; the second is reported
        for rows in (1024, 2048, 4096, 8192, 16384, 50_000):
            gen = torch.Generator().manual_seed(0)
            _, wall, cpu = timed(lambda: [sample_dpm(model, rows, dim, 20, gen) for _ in range(max(total // rows, 1))])
            done = max(total // rows, 1) * rows
            rates[rows] = done / cpu
            if rep:
                print(f"chunk {rows:6d} rows: {done / cpu:7.0f} rows/cpu-s ({done / wall:7.0f} rows/wall-s) -> 1M rows "
                      f"in {1e6 / (done / cpu):5.0f} cpu-s at DPM-20", flush=True)
    print(f"sampling uses chunks of {CHUNK_ROWS} rows (privsynth.synth.sampling.CHUNK_ROWS): "
          f"{rates[CHUNK_ROWS] / rates[50_000]:.2f}x the rows/cpu-s of the old 50k batches", flush=True)

    maps = [d["config"] for d in pretrained_card(args.sampling_model).get("public_data", [])]
    public = np.concatenate([load_maze(c["maze"], args.public_steps, seed=c["seed"]).transition_matrix() for c in maps])
    print(f"fidelity against {len(public)} public rows ({', '.join(c['maze'] for c in maps)}, seed of the card, "
          f"{args.public_steps} steps each); {args.n_eval} synthetic rows per point", flush=True)
    curve = {}
    for order in (2, 3):
        synth.config.sampler.solver_order = order
        for steps in args.steps_grid:
            syn, wall, cpu = timed(lambda: synth.sample(args.n_eval, seed=1, method="dpm", steps=steps))
            curve[order, steps] = fidelity(public, syn.transition_matrix())
            print(f"DPM-Solver++({order}M) {steps:3d} steps: marginal {curve[order, steps][0]:.4f} correlation "
                  f"{curve[order, steps][1]:.4f} ({args.n_eval / cpu:6.0f} rows/cpu-s)", flush=True)
    ref_m, ref_c = curve[2, max(args.steps_grid)]  # the most accurate integration of the ODE
    ok = [k for k in sorted(curve, key=lambda k: (k[1], -k[0]))
          if curve[k][0] >= ref_m - args.tolerance and curve[k][1] >= ref_c - args.tolerance]
    chosen = ok[0]
    print(f"fewest steps within {args.tolerance} of the 2M {max(args.steps_grid)}-step fidelity: "
          f"{chosen[1]} steps of DPM-Solver++({chosen[0]}M)", flush=True)

    for order, steps in dict.fromkeys([chosen, (2, 20)]):
        synth.config.sampler.solver_order = order
        with LocalExecutor(2) as ex:
            _, wall, _ = timed(lambda: sample_sharded(synth, path, 1_000_000, shards=2, executor=ex, seed=3,
                                                      method="dpm", steps=steps))
        shard_s = [s["seconds"] for s in synth.last_sample_stats["shards"]]
        print(f"1,000,000 rows, DPM-Solver++({order}M) {steps} steps, 2 worker processes: {wall:.1f} s wall "
              f"(shards {shard_s[0]:.1f} s and {shard_s[1]:.1f} s; load average {os.getloadavg()[0]:.1f})", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--scale", choices=tuple(SCALES), default="demo")
    ap.add_argument("--config", choices=("cpu", "demo"), default="demo")
    ap.add_argument("--epsilons", default="10,1")
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--pretrained", default=None, help="skip pre-training: shipped name or checkpoint path")
    ap.add_argument("--pretrain-epochs", type=float, default=None)
    ap.add_argument("--finetune-epochs", type=float, default=None)
    ap.add_argument("--n-eval", type=int, default=20_000, help="synthetic rows per fidelity evaluation")
    ap.add_argument("--million", action="store_true", help="time sampling 1,000,000 rows with DPM-Solver-20")
    ap.add_argument("--arch-sweep", action="store_true")
    ap.add_argument("--sweep-steps", type=int, default=3000)
    ap.add_argument("--probe-steps", type=int, default=200, help="with --pretrained: steps timed to get s/epoch")
    ap.add_argument("--json", default=None, help="also write the numbers to this file")
    ap.add_argument("--sampling", action="store_true", help="sampling speed and fidelity-vs-steps (issue 17 item 3)")
    ap.add_argument("--sampling-model", default="pointmaze-umaze", help="shipped public model for --sampling")
    ap.add_argument("--chunk-rows-total", type=int, default=100_000, help="rows timed per chunk size")
    ap.add_argument("--public-steps", type=int, default=30_000, help="public transitions per map for --sampling")
    ap.add_argument("--steps-grid", type=int, nargs="+", default=[4, 6, 8, 10, 12, 16, 20, 30, 50])
    ap.add_argument("--tolerance", type=float, default=0.005, help="fidelity loss allowed against the most steps")
    args = ap.parse_args()
    torch.set_num_threads(1)
    if args.sampling:
        sampling_bench(args)
        return
    if args.arch_sweep:
        arch_sweep(args)
        return
    n_sens, n_pub = SCALES[args.scale]
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; scale {args.scale}", flush=True)
    sens = load_maze("umaze", n_sens, seed=0).mark_sensitive(True)
    real = sens.transition_matrix()
    out: dict = {"scale": args.scale, "sensitive_transitions": sens.n_transitions}
    cfg = cpu_config() if args.config == "cpu" else demo_config()
    if args.pretrain_epochs is not None:
        cfg.pretrain.epochs = args.pretrain_epochs
    if args.finetune_epochs is not None:
        cfg.finetune.epochs = args.finetune_epochs
    if args.pretrained:
        from privsynth.synth.pretrained import resolve_pretrained

        base_path = resolve_pretrained(args.pretrained)
        # pre-training time per epoch, measured on a short run (the shipped model's card has the full run)
        pubs = [load_maze(m, n_pub, seed=1) for m in ("open", "medium", "large")]
        probe_cfg = cpu_config() if args.config == "cpu" else demo_config()
        probe_cfg.pretrain.max_steps = args.probe_steps
        probe = TransitionSynthesizer(probe_cfg)
        probe.config.curiosity.refresh_every = max(args.probe_steps // 2, 1)
        probe.pretrain(pubs, progress=False)
        h = probe.history[-1]
        out["pretrain_probe"] = h
        print(
            f"pre-train probe ({h['steps']} steps of {sum(p.n_transitions for p in pubs)} public rows, curiosity on): "
            f"{h['seconds_per_epoch']:.1f} s/epoch wall, {h['cpu_seconds_per_epoch']:.1f} cpu-s/epoch",
            flush=True,
        )
    else:
        pubs = [load_maze(m, n_pub, seed=1) for m in ("open", "medium", "large")]
        base = TransitionSynthesizer(cfg)
        base.pretrain(pubs, progress=True)
        h = base.history[-1]
        out["pretrain"] = h
        print(
            f"pre-train on {sum(p.n_transitions for p in pubs)} public rows: {h['epochs']:.1f} epochs, "
            f"{h['seconds_per_epoch']:.1f} s/epoch wall, {h['cpu_seconds_per_epoch']:.1f} cpu-s/epoch "
            f"(curiosity sampling {h['curiosity_sampling_seconds']:.1f} s total)",
            flush=True,
        )
        base_path = base.save("/tmp/bench_synth_pretrained.pt")
    base = TransitionSynthesizer.load(base_path)
    syn = base.sample(args.n_eval, seed=1)
    m, c = fidelity(real, syn.transition_matrix())
    out["pretrained_only"] = {"marginal": m, "correlation": c}
    print(f"pre-trained only (no sensitive data): marginal {m:.4f} correlation {c:.4f}", flush=True)
    released = None
    for eps in [float(e) for e in args.epsilons.split(",") if e]:
        synth = TransitionSynthesizer.load(base_path)
        synth.config.finetune = cfg.finetune
        synth.config.dp = cfg.dp
        # the DP fine-tune through the one route (issue 38): n=0 samples nothing, out_dataset=None writes nothing;
        # the step timed is the route's fine-tune, res.seconds["finetune"] (the same DP-SGD call as before)
        res = synthesize(sens, pretrained=synth, epsilon=eps, delta=args.delta, unit="transition", n=0,
                         out_dataset=None, progress=True)
        synth = res.synthesizer
        h = synth.history[-1]
        syn = synth.sample(args.n_eval, seed=1)
        m, c = fidelity(real, syn.transition_matrix())
        out[f"eps{eps:g}"] = {"marginal": m, "correlation": c, "finetune": h, "finetune_seconds": res.seconds["finetune"],
                              "card_epsilon": syn.info.privacy_card["epsilon"]}
        print(
            f"eps={eps:g}: spent {h['epsilon']:.4f} (sigma {h['noise_multiplier']:.3f}, q {h['sample_rate']:.4g}, "
            f"{h['steps']} steps); fine-tune {res.seconds['finetune']:.1f} s wall in all, "
            f"{h['seconds_per_epoch']:.1f} s/epoch wall, "
            f"{h['cpu_seconds_per_epoch']:.1f} cpu-s/epoch; marginal {m:.4f} correlation {c:.4f}",
            flush=True,
        )
        released = released or synth
    if released is None:
        return
    for method, steps in (("dpm", 20), ("heun", 128)):
        n = args.n_eval if method == "dpm" else max(args.n_eval // 4, 2000)
        syn = released.sample(n, seed=2, method=method, steps=steps)
        st = released.last_sample_stats
        m, c = fidelity(real, syn.transition_matrix())
        out[f"sample_{method}{steps}"] = {
            "rows_per_s": n / st["seconds"], "rows_per_cpu_s": n / st["cpu_seconds"], "marginal": m, "correlation": c,
            "nan_rows": st["nan_rows_dropped"],
        }
        print(
            f"sampler {method}-{steps}: {n / st['seconds']:.0f} rows/s wall, {n / st['cpu_seconds']:.0f} rows/cpu-s; "
            f"marginal {m:.4f} correlation {c:.4f}; NaN rows {st['nan_rows_dropped']}",
            flush=True,
        )
    if args.million:
        _, wall, cpu = timed(lambda: released.sample_normalised(1_000_000, seed=3, method="dpm", steps=20, progress=True))
        out["million_dpm20"] = {"wall_s": wall, "cpu_s": cpu}
        print(f"1,000,000 rows DPM-Solver-20: {wall:.0f} s wall, {cpu:.0f} cpu-s", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1, default=str)


if __name__ == "__main__":
    main()
