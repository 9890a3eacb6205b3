"""Sweep behind the Table VI settings: fine-tune the suite's pre-trained PrivORL-n without DP on N random member
transitions for E epochs, then run the attacks at several σ against 1000 held-out transitions.

    OMP_NUM_THREADS=1 python evaluation/scripts/mia_sweep.py 300 2000   # N members, E epochs

Needs `privsynth bench evaluation/suites/table6_mia.yaml` to have run (it reads that suite's data and checkpoint).
"""
import glob
import sys
import time

import torch

torch.set_num_threads(1)
from privsynth.synth import TransitionSynthesizer
from privsynth.evaluation.runner import load_dataset_file, split_transitions
from privsynth.evaluation.mia import LossAttack, PIAAttack, ScoreNormAttack, ReferenceAttack, as_adapter, run_audit
R = "evaluation/results/table6_mia"
pre = glob.glob(f"{R}/artifacts/pretrain-*/model.pt")[0]
umaze = load_dataset_file(glob.glob(f"{R}/data/umaze-*.npz")[0])
n_mem, epochs = int(sys.argv[1]), float(sys.argv[2])
members, rest = split_transitions(umaze, n_mem / umaze.n_transitions, seed=0)
ref = as_adapter(TransitionSynthesizer.load(pre))
s = TransitionSynthesizer.load(pre)
s.config.private = False
s.config.finetune.epochs = epochs
t0 = time.time()
s.finetune(members.mark_sensitive(), 1.0, 1e-5, progress=False)
print("n_mem", n_mem, "epochs", epochs, "steps", s.history[-1].get("steps"), "sec", round(time.time() - t0), "loss", s.history[-1].get("final_loss"))
atts = [LossAttack(sigma=x, repeats=16, name=f"loss{x}") for x in (0.01, 0.03, 0.1, 0.3)]
atts += [ReferenceAttack(LossAttack(sigma=x, repeats=16), ref, name=f"ref{x}") for x in (0.01, 0.03, 0.1)]
atts += [PIAAttack(), PIAAttack(sigmas=(0.05, 0.1), name="pia_small"), ScoreNormAttack()]
res = run_audit(s, members, rest, atts, max_units=1000)
for k, v in res["attacks"].items():
    print(f"{k:10s} auc {v['auc']:.3f} tpr@1% {v['tpr_at_fpr']['0.01']:.3f} tpr@10% {v['tpr_at_fpr']['0.1']:.3f}")
