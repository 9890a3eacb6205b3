"""Pre-train PrivORL-n on a transfer suite's public data with a chosen denoiser size: the capacity study of issue 37
(docs/transfer.md, "Third round"). The public datasets are the suite's own (its pretrain stage's ``data.public``),
built by the bench's registered dataset sources from the suite's YAML, so the script and the suite cannot drift apart;
the preset and row representation are the suite's (``cpu``, Δs next state).

    OMP_NUM_THREADS=1 python scripts/pretrain_transfer_public.py --width 512 --depth 4 --out walker_512x4.pt
    OMP_NUM_THREADS=1 python scripts/transfer_study.py --checkpoint walker_512x4.pt --real 53.5 --public 8.8 \
        --schedule epochs=150,dp=0 --schedule epochs=150 --schedule ft=0
"""
from __future__ import annotations

import argparse
import json
import time


def public_datasets(suite_path: str) -> list:
    """The public datasets of the suite's pretrain stage, each built by its registered source (nothing cached)."""
    from privsynth.evaluation.bench import sources  # noqa: F401  (registers the dataset sources)
    from privsynth.evaluation.bench.registry import dataset_source
    from privsynth.evaluation.bench.suite import expand_stage, load_suite

    suite = load_suite(suite_path)
    stage = next(s for s in suite.stages if s.kind == "pretrain")
    out = []
    for name in expand_stage(stage)[0]["data"]["public"]:
        spec = dict(suite.datasets[name])
        spec.pop("sensitive", None)
        ds = dataset_source(spec.pop("source"))(**spec)
        ds.info.name = name
        out.append(ds)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--suite", default="evaluation/suites/transfer_walker2d.yaml", help="a transfer suite's YAML")
    ap.add_argument("--width", type=int, default=256, help="residual trunk width W (cpu preset: 256)")
    ap.add_argument("--depth", type=int, default=2, help="residual blocks (cpu preset: 2)")
    ap.add_argument("--epochs", type=float, default=100.0, help="public pre-training epochs (the suites' 100)")
    ap.add_argument("--out", required=True, help="checkpoint to write")
    args = ap.parse_args()

    import torch

    from privsynth.synth import registry

    torch.set_num_threads(1)
    public = public_datasets(args.suite)
    synth = registry.make("privorl-n", preset="cpu", next_state="delta",
                          denoiser={"width": args.width, "depth": args.depth}, pretrain={"epochs": args.epochs})
    t0 = time.time()
    registry.pretrain(synth, public, progress=True)
    synth.save(args.out)
    print(json.dumps({"suite": args.suite, "public": [p.info.name for p in public], "width": args.width,
                      "depth": args.depth, "epochs": args.epochs, "parameters": synth.n_parameters(),
                      "pretrain_s": round(time.time() - t0, 1)}))


if __name__ == "__main__":
    main()
