"""What the chained layout costs in fidelity: a transition-level release as one-step episodes vs chained, against
the sensitive data (issue 40).

The chained layout (:mod:`privsynth.release.layout`) replaces the state of every row but an episode's first by the
previous row's next state ("snapped"); everything else is the released row. This prints, for the release as written
one transition per episode and for the same rows chained: the marginal and correlation scores
(:func:`privsynth.evaluation.fidelity.tabular_fidelity`) against the sensitive set, the next-state error against a
linear dynamics model fitted on the sensitive set (:func:`privsynth.evaluation.fidelity.dynamics_error`, in units of
the real step), and the snap distances against the sensitive states' spread. No agent is trained.

    privsynth datasets make pointmaze --maze umaze --steps 20000 --seed 2 --name umaze-sensitive
    privsynth synthesize --pretrained pointmaze-umaze --sensitive umaze-sensitive --epsilon 10 --delta 1e-5 \\
        -n 20000 --layout transitions --out-dataset umaze-synth20k
    OMP_NUM_THREADS=1 python scripts/chained_fidelity.py --release umaze-synth20k --sensitive umaze-sensitive
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--release", required=True, help="a transition-level release (one Minari episode per row)")
    ap.add_argument("--sensitive", required=True, help="the sensitive dataset it was fine-tuned on")
    args = ap.parse_args()
    from privsynth.data.minari_io import load_dataset
    from privsynth.evaluation.fidelity import dynamics_error, tabular_fidelity
    from privsynth.release.layout import chained

    rel, sens = load_dataset(args.release), load_dataset(args.sensitive)
    chain = chained(rel)
    rec = chain.info.extra["layout"]
    print(f"{args.release}: {rel.n_transitions:,} rows; chained: {rec['episodes']:,} episodes (mean length "
          f"{rec['mean_episode_length']:.1f}), {rec['snapped_rows']:,} states snapped, chain ends {rec['chain_ends']}")
    print(f"  {'layout':12s} {'marginal':>9s} {'correlation':>12s} {'dyn. error (real steps)':>24s}")
    for name, ds in (("sensitive", sens), ("transitions", rel), ("chained", chain)):
        fid = tabular_fidelity(ds, sens) if name != "sensitive" else None
        dyn = dynamics_error(ds, sens)["rel_step_mean"]
        m = f"{fid.marginal:9.4f} {fid.correlation:12.4f}" if fid else f"{'1':>9s} {'1':>12s}"
        print(f"  {name:12s} {m} {dyn:24.3f}")
    spread = np.linalg.norm(sens.observations.std(axis=0))
    nn = sens.next_observations - sens.observations
    step = float(np.linalg.norm(nn, axis=1).mean())
    snap = rec["snap_distance"]
    print(f"  snap distance (state units): mean {snap['mean']:.3f}, p95 {snap['p95']:.3f}, max {snap['max']:.3f}; "
          f"sensitive states' spread (norm of per-column std) {spread:.3f}, mean real step |s' - s| {step:.3f}")
    print(f"  snap / spread: mean {snap['mean'] / spread:.3f}, p95 {snap['p95'] / spread:.3f}; "
          f"snap / real step: mean {snap['mean'] / step:.2f}")


if __name__ == "__main__":
    main()
