"""Held-out public denoising loss of pre-trained transition synthesizers: did a rebuild of ``pretrained/`` improve them?

    OMP_NUM_THREADS=1 python scripts/pretrained_heldout_loss.py pretrained/pointmaze-umaze/model.pt OTHER.pt ...

For each checkpoint: fresh PointMaze transitions of its public maps (its card's, else open + medium + large), made with
a generator seed no checkpoint was trained on (``--seed``), are normalised with the checkpoint's own public normaliser
and scored with the EDM loss of its released (EMA) weights at a fixed grid of noise levels σ with fixed noise draws
(the same draws for every checkpoint of the same row width), so differences are the models', not the draws'. The
training log's last loss is no substitute: it is one noisy, curiosity-weighted minibatch. Public data only.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze  # noqa: E402
from privsynth.synth import TransitionSynthesizer  # noqa: E402

SIGMAS = (0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0)  # around EDM's ln σ ~ N(-1.2, 1.2²) training distribution


def public_maps(ckpt: Path) -> list[str]:
    card = ckpt.parent / "card.json"
    if card.is_file():
        return [d["config"]["maze"] for d in json.loads(card.read_text()).get("public_data", [])]
    return ["open", "medium", "large"]


def heldout_loss(synth: TransitionSynthesizer, rows: np.ndarray, repeats: int) -> dict[str, float]:
    """Mean EDM loss per σ (and over the grid) on ``rows``, with noise seeded by σ's index and the repeat."""
    assert synth.normalizer is not None
    x = torch.as_tensor(synth.normalizer.normalize(rows))
    out: dict[str, float] = {}
    for i, s in enumerate(SIGMAS):
        losses = []
        for r in range(repeats):
            g = torch.Generator().manual_seed(1000 * i + r)
            noise = torch.randn(x.shape, generator=g)
            losses.append(synth.edm_loss(x, torch.full((len(x),), s), noise).mean().item())
        out[f"sigma={s:g}"] = float(np.mean(losses))
    out["mean"] = float(np.mean([out[f"sigma={s:g}"] for s in SIGMAS]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("checkpoints", nargs="+", type=Path)
    ap.add_argument("--steps", type=int, default=5000, help="held-out transitions generated per public map")
    ap.add_argument("--seed", type=int, default=97, help="generator seed of the held-out data (not a training seed)")
    ap.add_argument("--repeats", type=int, default=4, help="noise draws per σ")
    args = ap.parse_args()
    torch.set_num_threads(1)
    cache: dict[str, np.ndarray] = {}
    for ckpt in args.checkpoints:
        synth = TransitionSynthesizer.load(ckpt)
        maps = public_maps(ckpt)
        for m in maps:
            if m not in cache:
                cache[m] = generate_pointmaze(PointMazeConfig(maze=m, steps=args.steps, seed=args.seed, ref_episodes=1),
                                              progress=False).transition_matrix()
        rows = np.concatenate([cache[m] for m in maps])
        res = heldout_loss(synth, rows, args.repeats)
        grid = "  ".join(f"{k} {v:.4f}" for k, v in res.items() if k != "mean")
        print(f"{ckpt}: held-out loss {res['mean']:.4f} on {len(rows)} rows of {'+'.join(maps)} (seed {args.seed})  "
              f"[{grid}]", flush=True)


if __name__ == "__main__":
    main()
