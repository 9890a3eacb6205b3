"""Rebuild the shipped pre-trained transition synthesizers in ``pretrained/`` (one per PointMaze map used as sensitive
data, pre-trained on the *other* maps, no DP needed: all of it is public data).

    OMP_NUM_THREADS=1 python scripts/build_pretrained.py [--maps umaze,medium,large] [--steps 100000] [--epochs 10]

Each ``pretrained/pointmaze-<map>/`` gets ``model.pt`` (EMA weights only), ``card.json`` and ``README.md`` (data,
config, the command that rebuilt it, size, time).
"""
from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze  # noqa: E402
from privsynth.synth import TransitionSynthesizer, cpu_config  # noqa: E402
from privsynth.synth.config import config_to_dict  # noqa: E402
from privsynth.synth.pretrained import pretrained_root  # noqa: E402

MAPS = ("open", "umaze", "medium", "large")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--maps", default="umaze,medium,large", help="sensitive maps to build a model for")
    ap.add_argument("--steps", type=int, default=100_000, help="public transitions generated per map")
    ap.add_argument("--seed", type=int, default=1, help="seed of the public data (sensitive data use other seeds)")
    ap.add_argument("--epochs", type=float, default=10.0, help="pre-training epochs (PrivORL: 10)")
    ap.add_argument("--next-state", choices=["absolute", "delta"], default=cpu_config().next_state,
                    help="how rows hold the next state (TransitionSynthConfig.next_state; default: cpu_config()'s)")
    ap.add_argument("--out", default=str(pretrained_root()))
    args = ap.parse_args()
    torch.set_num_threads(1)
    cache: dict[str, object] = {}

    def data(maze: str):
        if maze not in cache:
            cache[maze] = generate_pointmaze(PointMazeConfig(maze=maze, steps=args.steps, seed=args.seed, ref_episodes=10), progress=False)
        return cache[maze]

    for target in args.maps.split(","):
        public_maps = [m for m in MAPS if m != target]
        pubs = [data(m) for m in public_maps]
        cfg = cpu_config()
        cfg.pretrain.epochs = args.epochs
        cfg.next_state = args.next_state
        t0 = time.perf_counter()
        synth = TransitionSynthesizer(cfg).pretrain(pubs, progress=True)
        seconds = time.perf_counter() - t0
        # the default (Δs rows) takes the plain name; an absolute-s' model never shadows it
        name = f"pointmaze-{target}" + ("-absolute" if cfg.next_state == "absolute" else "")
        folder = os.path.join(args.out, name)
        os.makedirs(folder, exist_ok=True)
        path = synth.save(os.path.join(folder, "model.pt"), ema_only=True)
        h = synth.history[-1]
        card = {
            "name": name,
            "synthesizer": synth.name,
            "for_sensitive_map": target,
            "public_data": [
                {"name": p.info.name, "env_id": p.info.env_id, "transitions": p.n_transitions, "generator": "privsynth.data.pointmaze",
                 "config": {"maze": m, "steps": args.steps, "seed": args.seed}}
                for m, p in zip(public_maps, pubs)
            ],
            "normalizer": synth.normalizer.source,
            "discrete_columns": {str(k): v for k, v in synth.discrete_values.items()},
            "parameters": synth.n_parameters(),
            "file_bytes": os.path.getsize(path),
            "pretrain": h,
            "wall_seconds": seconds,
            "config": config_to_dict(synth.config),
            "command": "OMP_NUM_THREADS=1 python scripts/build_pretrained.py " + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "privacy": "trained on public data only; no sensitive data, no privacy budget spent",
        }
        with open(os.path.join(folder, "card.json"), "w") as f:
            json.dump(card, f, indent=1, default=str)
        with open(os.path.join(folder, "README.md"), "w") as f:
            f.write(
                f"# {name}\n\nPrivORL-n transition synthesizer pre-trained (no DP; public data only) on the PointMaze maps "
                f"{', '.join(public_maps)} ({args.steps} transitions each, generator seed {args.seed}), for DP fine-tuning on "
                f"{target} data.\n\n- architecture: residual MLP width {cfg.denoiser.width}, depth {cfg.denoiser.depth}, "
                f"{synth.n_parameters()} parameters; EMA weights only ({os.path.getsize(path) / 1e6:.2f} MB)\n"
                f"- pre-training: {h['epochs']:.1f} epochs, {h['steps']} steps of batch {h['batch_size']}, curiosity rate "
                f"{cfg.curiosity.rate}; {h['cpu_seconds_per_epoch']:.1f} CPU s/epoch, {seconds:.0f} s wall\n"
                f"- rows: next state as {'s′ − s (decoded as s + Δs)' if cfg.next_state == 'delta' else 'absolute s′'}\n"
                f"- rebuild: `{card['command']}`\n- use: `privsynth synthesize --pretrained {name} ...` (the release keeps "
                f"the checkpoint's architecture and row representation)\n"
            )
        print(f"{folder}: {os.path.getsize(path) / 1e6:.2f} MB, {seconds:.0f} s", flush=True)


if __name__ == "__main__":
    main()
