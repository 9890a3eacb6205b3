"""White-box audit of the classic baselines (PrivSyn, PGM, PATE-GAN) on PointMaze umaze, at ε = 1, 10 and 10⁴.

Members and non-members are a random split of the same 8,000 transitions (the unit of transition-level DP), so the
episode-level correlation of the data does not masquerade as membership. Public data: 20k open-map transitions.

    OMP_NUM_THREADS=1 python scripts/audit_baselines.py privsyn,pategan
"""
import sys
import time

import torch

torch.set_num_threads(1)
from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze
from privsynth.evaluation.runner import split_transitions
from privsynth.release import synthesize
from privsynth.evaluation.mia import run_audit
pool = generate_pointmaze(PointMazeConfig(maze="umaze", steps=8000, seed=2, ref_episodes=1), progress=False)
members, non = split_transitions(pool, 0.5, seed=0)
members = members.mark_sensitive()
pub = generate_pointmaze(PointMazeConfig(maze="open", steps=20000, seed=1, ref_episodes=1), progress=False)
for name in (sys.argv[1] if len(sys.argv) > 1 else "privsyn,pategan").split(","):
    for eps in (1.0, 10.0, 1e4):
        t = time.time()
        # the one route (issue 38): pre-train on pub, DP fine-tune on members, nothing sampled or written (n=0)
        s = synthesize(members, synth=name, preset="cpu", public=pub, epsilon=eps, delta=1e-5, unit="transition",
                       n=0, out_dataset=None, progress=False).synthesizer
        r = run_audit(s, members, non, max_units=1000, seed=0, n_boot=200)
        a = r["attacks"]["loss"]
        print(name, eps, "AUC %.3f TPR@1%% %.3f CI %s fit+audit %.0fs" % (a["auc"], a["tpr_at_fpr"]["0.01"], a["ci"]["tpr_at_fpr"]["0.01"], time.time()-t), flush=True)
