"""Membership inference against diffusion synthesizers: adapters, attacks, metrics, and the audit driver.

``run_audit(synth, members, non_members)`` runs the loss attack (PrivORL), PIA adapted to EDM, and, given a public
reference model, the calibrated loss attack; metrics follow the members-positive convention (TPR at the last ROC point
with FPR ≤ α). See ``docs/audit.md``.
"""
from privsynth.evaluation.mia.adapters import DiffusionAdapter, EDMAdapter, TrajectoryAdapter, as_adapter
from privsynth.evaluation.mia.attacks import (
    ATTACKS,
    Attack,
    LossAttack,
    PIAAttack,
    ReferenceAttack,
    ScoreNormAttack,
    make_attack,
)
from privsynth.evaluation.mia.audit import default_attacks, plot_roc, run_audit
from privsynth.evaluation.mia.metrics import attack_metrics, roc, tpr_at_fpr

__all__ = [
    "DiffusionAdapter", "EDMAdapter", "TrajectoryAdapter", "as_adapter", "Attack", "LossAttack", "PIAAttack",
    "ReferenceAttack", "ScoreNormAttack", "make_attack", "ATTACKS", "run_audit", "default_attacks", "plot_roc",
    "attack_metrics", "roc", "tpr_at_fpr",
]
