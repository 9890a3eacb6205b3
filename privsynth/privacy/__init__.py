"""Differential privacy for privsynth: accounting, the ledger and release guard, the DP-SGD engine, DP statistics,
and auditing. See docs/privacy.md."""
from privsynth.privacy.accounting import (
    calibrate_gaussian_multiplier,
    calibrate_noise_multiplier,
    dpsgd_epsilon,
    dpsgd_event,
    events_epsilon,
    gaussian_sigma,
    laplace_scale,
    zcdp_epsilon,
)
from privsynth.privacy.budget import Budget
from privsynth.privacy.audit import AuditResult, audit_dp_train, audit_scores, epsilon_lower_bound
from privsynth.privacy.dp_stats import dp_normalizer, dp_normalizer_from_dataset, dp_normalizer_stats
from privsynth.privacy.dpsgd import DPSGDConfig, DPTrainResult, dp_train
from privsynth.privacy.guard import check_budget, guarded_write
from privsynth.privacy.ledger import Ledger, LedgerEvent

__all__ = [
    "Budget",
    "AuditResult",
    "audit_dp_train",
    "audit_scores",
    "epsilon_lower_bound",
    "DPSGDConfig",
    "DPTrainResult",
    "Ledger",
    "LedgerEvent",
    "calibrate_noise_multiplier",
    "calibrate_gaussian_multiplier",
    "check_budget",
    "dp_normalizer",
    "dp_normalizer_from_dataset",
    "dp_normalizer_stats",
    "dp_train",
    "dpsgd_epsilon",
    "dpsgd_event",
    "events_epsilon",
    "gaussian_sigma",
    "guarded_write",
    "laplace_scale",
    "zcdp_epsilon",
]
