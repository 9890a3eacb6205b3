"""Membership inference against diffusion synthesizers: adapters, attacks, metrics, and the audit driver.

``run_audit(synth, members, non_members)`` runs the loss attack (PrivORL), PIA adapted to EDM, and, given a public
reference model, the calibrated loss attack (white-box, one adapter per synthesizer class).
``run_data_audit(release, members, non_members, reference=...)`` runs the data-only attacks on a released dataset
(DCR, calibrated DCR, DOMIAS; per episode for trajectories). ``canary.run_canary_audit`` lower-bounds ε for the
release pipeline; ``epsilon`` tests data-only and white-box scores against the card's ε (a one-run bound on
member/non-member pairs). Metrics follow the members-positive convention (TPR at the last ROC point with FPR ≤ α); reports
come from ``report.write_report``. See ``docs/audit.md``.
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
from privsynth.evaluation.mia.audit import default_attacks, default_data_attacks, plot_roc, run_audit, run_data_audit
from privsynth.evaluation.mia.data_attacks import (
    DATA_ATTACKS,
    CalibratedDCRAttack,
    DataAttack,
    DCRAttack,
    DOMIASAttack,
    TrajectoryScore,
    make_data_attack,
)
from privsynth.evaluation.mia.metrics import attack_metrics, bootstrap_intervals, roc, tpr_at_fpr

__all__ = [
    "DiffusionAdapter", "EDMAdapter", "TrajectoryAdapter", "as_adapter", "Attack", "LossAttack", "PIAAttack",
    "ReferenceAttack", "ScoreNormAttack", "make_attack", "ATTACKS", "run_audit", "default_attacks", "plot_roc",
    "attack_metrics", "roc", "tpr_at_fpr", "bootstrap_intervals", "run_data_audit", "default_data_attacks",
    "DataAttack", "DCRAttack", "CalibratedDCRAttack", "DOMIASAttack", "TrajectoryScore", "make_data_attack",
    "DATA_ATTACKS",
]
