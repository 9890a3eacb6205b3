"""Privacy-preserving kickstarting (Gohari et al. 2021): a teacher answers a student's queries with Dirichlet-noised
action distributions under a per-query (ε, δ) ledger; the PPO student's penalty ignores answers inside the noise ball.

See docs/kickstarting.md. Modules: :mod:`.dirichlet` (mechanism and Theorem 1), :mod:`.teacher` (budget, schedule,
query ledger), :mod:`.ppo` (kickstarted PPO student), :mod:`.offline` (teacher trained on an offline / DP synthetic
dataset).
"""
from privsynth.methods.kickstart.dirichlet import (
    DirichletMechanism,
    QueryCost,
    concentration_radius,
    delta_mc,
    delta_union_bound,
    eps_floor,
    eps_paper,
    eps_tight,
    lipschitz_upper_bound,
    log_tau_for_delta,
    restrict,
    sample_dirichlet,
    tau_for_delta,
)
from privsynth.methods.kickstart.ppo import KickstartedPPO, PPOConfig, privacy_aware_penalty
from privsynth.methods.kickstart.teacher import QUERY_UNIT, PrivateTeacher, QueryLedger, TeacherConfig

__all__ = [
    "DirichletMechanism", "QueryCost", "concentration_radius", "delta_mc", "delta_union_bound", "eps_floor",
    "eps_paper", "eps_tight", "lipschitz_upper_bound", "log_tau_for_delta", "restrict", "sample_dirichlet",
    "tau_for_delta", "KickstartedPPO", "PPOConfig", "privacy_aware_penalty", "QUERY_UNIT", "PrivateTeacher",
    "QueryLedger", "TeacherConfig",
]
