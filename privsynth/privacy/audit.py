"""One-run privacy auditing: an empirical lower bound on ε from canaries (Steinke, Nasr & Jagielski 2023).

Protocol. m canaries are each included in the training data independently with probability 1/2. After one training
run the auditor scores every canary, guesses "in" for the k₊ highest scores and "out" for the k₋ lowest (abstaining on
the rest), and counts the correct guesses v out of r = k₊ + k₋. For an (ε, δ)-DP algorithm the number of correct
guesses is stochastically dominated by Binomial(r, e^ε/(1+e^ε)) up to a δ term (their Theorem 3 / Proposition 5):

    P[V ≥ v] ≤ P[Bin(r, p_ε) ≥ v] + 2mδ · max_{1≤i≤v} P[v−i ≤ Bin(r, p_ε) < v] / i,   p_ε = 1/(1+e^{−ε}).

The reported lower bound is the largest ε whose p-value is still below 1 − confidence (default 0.95): with that
confidence, the algorithm is not (ε', δ)-DP for any ε' below it.

Canaries for the DP-SGD engine (:func:`audit_dp_train`) are **gradient canaries** in the white-box setting of Nasr
et al. 2023: a linear "model" w ∈ ℝᴰ and, per canary k, a unit loss −⟨w, u_k⟩ whose gradient is the fixed direction
−u_k (norm above the clip norm, so each sampled canary contributes exactly C·u_k). The score of a canary is the
projection ⟨w_T − w_0, u_k⟩ of the total update on its direction. The run goes through :func:`dp_train` itself, so the
audit exercises the engine's sampling, clipping, noise and calibration, in any ``grad_sample_mode``. With m ≪ D the
directions are nearly orthogonal and the audit is as strong as a one-run audit can be; the bound it can reach is capped
near log(r / log(1/(1−confidence))) even for a non-private run.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch
from scipy import stats
from torch import nn

from privsynth.errors import PrivacyError
from privsynth.privacy.dpsgd import DPSGDConfig, DPTrainResult, dp_train

__all__ = ["AuditResult", "p_value", "epsilon_lower_bound", "design_size_needed", "SEARCH_CAP", "audit_scores",
           "audit_dp_train"]

SEARCH_CAP = 1_000_000  # design_size_needed looks no further: "more than 1,000,000"


def p_value(m: int, r: int, v: int, epsilon: float, delta: float) -> float:
    """Probability of at least ``v`` correct guesses out of ``r`` (m canaries) under (ε, δ)-DP."""
    if not 0 <= v <= r <= m:
        raise ValueError("need 0 <= v <= r <= m")
    p = 1.0 / (1.0 + math.exp(-epsilon))
    tail = float(stats.binom.sf(v - 1, r, p))  # P[Bin(r, p) >= v]
    if delta == 0 or v == 0:
        return min(1.0, tail)
    pmf = stats.binom.pmf(np.arange(v - 1, -1, -1), r, p)  # P[Bin = v-1], P[Bin = v-2], ..., P[Bin = 0]
    window = np.cumsum(pmf) / np.arange(1, v + 1)  # P[v-i <= Bin < v] / i for i = 1..v
    return min(1.0, tail + 2 * m * delta * float(window.max()))


def epsilon_lower_bound(m: int, r: int, v: int, delta: float = 0.0, confidence: float = 0.95) -> float:
    """Largest ε rejected at ``confidence``: P[V ≥ v] under (ε, δ)-DP stays below 1 − confidence. 0 if none."""
    alpha = 1.0 - confidence
    if r == 0 or p_value(m, r, v, 0.0, delta) > alpha:
        return 0.0
    lo, hi = 0.0, 1.0
    while p_value(m, r, v, hi, delta) <= alpha:
        lo, hi = hi, hi * 2
        if hi > 1e3:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        if p_value(m, r, v, mid, delta) <= alpha:
            lo = mid
        else:
            hi = mid
    return lo


def design_size_needed(rejects: Callable[[int, int], bool], *, units: int, guesses: int,
                       cap: int = SEARCH_CAP) -> dict:
    """The smallest design that could refute a claim: ``{"units", "guesses_per_side", "more_than"}``.

    A design of n units (canaries, or member/non-member pairs) keeps the audited design's share of guesses,
    k(n) = n·guesses // units on each side; ``rejects(n, k)`` says whether 2k guesses out of 2k right on n units
    reject the claimed ε (the bound function's own test, so "bound > claim"). The search runs over k (for a given k
    the fewest units, n = ⌈k·units / guesses⌉, give the best bound: the δ term grows with n), in steps of a quarter
    up to the cap, then bisects down to the first k that rejects. It assumes the best bound rises with k up to its
    peak (the δ term can make it fall after it). ``units`` and ``more_than`` are None / the cap accordingly.
    """
    if guesses < 1 or 2 * guesses > units:
        raise ValueError("need 1 <= guesses <= units / 2")

    def n_of(k: int) -> int:
        return -(-k * units // guesses)  # smallest n with n·guesses // units >= k

    k_max = cap * guesses // units
    lo, hi, k = 0, None, 1
    while k <= k_max:
        if rejects(n_of(k), k):
            hi = k
            break
        lo = k
        k = min(max(k + 1, int(k * 1.25)), k_max) if k < k_max else k_max + 1
    if hi is None:
        return {"units": None, "guesses_per_side": None, "more_than": cap}
    while hi - lo > 1:  # rejects(n_of(hi)) and not rejects(n_of(lo))
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if rejects(n_of(mid), mid) else (mid, hi)
    return {"units": n_of(hi), "guesses_per_side": hi, "more_than": None}


@dataclass
class AuditResult:
    """Outcome of a one-run audit: the empirical lower bound against the claimed ε."""

    epsilon_lower_bound: float
    claimed_epsilon: float
    delta: float
    canaries: int
    guesses: int
    correct: int
    confidence: float

    @property
    def consistent(self) -> bool:
        """False when the audit proves the claim wrong (lower bound above the claimed ε)."""
        return self.epsilon_lower_bound <= self.claimed_epsilon

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["consistent"] = self.consistent
        return d


def audit_scores(
    scores: np.ndarray,
    included: np.ndarray,
    *,
    k_pos: int,
    k_neg: int,
    delta: float,
    claimed_epsilon: float,
    confidence: float = 0.95,
) -> AuditResult:
    """Guess "in" for the ``k_pos`` highest scores and "out" for the ``k_neg`` lowest; bound ε from the hits.

    ``k_pos`` and ``k_neg`` must be fixed before looking at the scores (choosing them afterwards voids the bound).
    """
    scores = np.asarray(scores, dtype=np.float64)
    included = np.asarray(included, dtype=bool)
    m = len(scores)
    if included.shape != (m,) or k_pos + k_neg > m or min(k_pos, k_neg) < 0:
        raise PrivacyError("audit needs one inclusion flag per score and k_pos + k_neg <= number of canaries")
    order = np.argsort(scores, kind="stable")
    correct = int(included[order[m - k_pos :]].sum()) if k_pos else 0
    correct += int((~included[order[:k_neg]]).sum())
    r = k_pos + k_neg
    return AuditResult(
        epsilon_lower_bound=epsilon_lower_bound(m, r, correct, delta, confidence),
        claimed_epsilon=float(claimed_epsilon),
        delta=float(delta),
        canaries=m,
        guesses=r,
        correct=correct,
        confidence=confidence,
    )


class _GradientCanaryLoss(nn.Module):
    """Loss −⟨w, u⟩ per canary: its gradient in w is the canary direction itself, whatever w is."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, 1, bias=False)
        nn.init.zeros_(self.lin.weight)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        return -self.lin(u).squeeze(-1)


def audit_dp_train(
    cfg: DPSGDConfig,
    *,
    canaries: int = 1000,
    dim: int = 5000,
    k_pos: int | None = None,
    k_neg: int | None = None,
    confidence: float = 0.95,
    claimed_epsilon: float | None = None,
    seed: int = 0,
) -> tuple[AuditResult, DPTrainResult]:
    """Audit :func:`dp_train` with gradient canaries; returns the audit and the training run it attacked.

    ``cfg`` is used as given (batch size, epochs, σ or target ε, clipping mode); its unit is the canary. The claimed ε
    defaults to the ε the engine reports for the run. Guess counts default to 10% of the canaries on each side.
    """
    rng = np.random.default_rng(seed)
    k_pos = canaries // 10 if k_pos is None else k_pos
    k_neg = canaries // 10 if k_neg is None else k_neg
    directions = rng.normal(size=(canaries, dim)).astype(np.float32)
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    included = rng.random(canaries) < 0.5
    if included.sum() < cfg.batch_size:
        raise PrivacyError(f"only {int(included.sum())} canaries were included, fewer than the batch size {cfg.batch_size}")
    # norm 2C: each sampled canary is clipped to exactly C·u_k in every clipping mode
    items = torch.tensor(directions[included] * 2 * cfg.max_grad_norm, dtype=torch.float32)
    model = _GradientCanaryLoss(dim)
    start = model.lin.weight.detach().clone()
    # the canaries' count is the auditor's own design, not a secret: the run is audited at q = B/N exactly
    result = dp_train(model, (items,), cfg, make_optimizer=lambda ps: torch.optim.SGD(ps, lr=1.0),
                      n_units_noisy=int(items.shape[0]))
    update = (model.lin.weight.detach() - start).double().numpy().reshape(-1)
    scores = directions @ update
    audit = audit_scores(
        scores,
        included,
        k_pos=k_pos,
        k_neg=k_neg,
        delta=cfg.delta,
        claimed_epsilon=result.epsilon if claimed_epsilon is None else claimed_epsilon,
        confidence=confidence,
    )
    return audit, result
