"""The Dirichlet mechanism on the probability simplex and its per-query (ε, δ) (Gohari et al. 2021, Sec. 3-4).

A teacher policy ``f: R^d -> Δ_{m,η}`` answers a query observation ``X`` with ``x ~ Dirichlet(k · f(X))``: the answer
stays on the simplex and its mean is ``f(X)``. Theorem 1 makes ``Dir_k ∘ f`` (ε, δ)-DP for **b-adjacent query
observations** (``‖X − X'‖₂ ≤ b``, Def. 1): a metric, per-query guarantee on the student's input, *not* dataset-level
DP on the teacher's training records (the paper hedges this itself, Sec. 6).

- ε follows eq. 12 (:func:`eps_paper`); an adjacency-aware bound (:func:`eps_tight`, our extension) is offered for
  comparison only.
- δ (eq. 6) is ``1 − P(Dir_k(p*) ∈ Δ_{m,τ})`` at the vertex ``p* = [η, …, η, 1 − (m−1)η]``. We charge the
  deterministic union bound over Beta marginals (:func:`delta_union_bound`), which is a rigorous upper bound; the
  Monte-Carlo estimate (:func:`delta_mc`) is a cross-check (the paper's Chebyshev bound has N² where N belongs).
- τ must be the same in ε and δ and is re-chosen for every k (:func:`tau_for_delta`): at a fixed τ, δ → 1 as k → 0
  (while ε tends to the floor of :func:`eps_floor`), so a fixed τ would make a decaying schedule look cheaper than it is.

Own code rather than a library: no DP library ships the Dirichlet mechanism; sampling is done in log space
(``log g = log Gamma(α+1) + log(U)/α``) because ``Dirichlet(α)`` with tiny α underflows to all-zero rows.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy.optimize import brentq
from scipy.special import betaln, digamma, gammaln
from scipy.stats import beta as beta_dist

from privsynth.errors import PrivacyError

__all__ = [
    "restrict",
    "sample_dirichlet",
    "vertex",
    "eps_paper",
    "eps_tight",
    "eps_floor",
    "delta_union_bound",
    "delta_mc",
    "tau_for_delta",
    "log_tau_for_delta",
    "concentration_radius",
    "lipschitz_upper_bound",
    "QueryCost",
    "DirichletMechanism",
]


# ---------------------------------------------------------------------------------------------- simplex helpers
def restrict(pi: np.ndarray, eta: float) -> np.ndarray:
    """Map a softmax output into Δ_{m,η} by mixing with the uniform policy: ``(1 − mη)·π + η`` (Theorem 1 needs every
    probability ≥ η).

    The map is ``(1 − mη)``-Lipschitz; its factor belongs in the teacher's Lipschitz constant L.
    """
    pi = np.asarray(pi, dtype=np.float64)
    m = pi.shape[-1]
    if not 0 < eta < 1.0 / m:
        raise PrivacyError(f"eta must lie in (0, 1/m) = (0, {1.0 / m:.3g}), got {eta}")
    return (1.0 - m * eta) * pi + eta


def sample_dirichlet(pi: np.ndarray, k: float, rng: np.random.Generator) -> np.ndarray:
    """One draw of ``Dir_k(π)`` (eq. 5) for each row of ``pi`` (shape [..., m]), computed in log space."""
    if not k > 0:
        raise PrivacyError(f"the Dirichlet concentration k must be positive, got {k}")
    alpha = k * np.asarray(pi, dtype=np.float64)
    if np.any(alpha <= 0):
        raise PrivacyError("the Dirichlet mechanism needs every teacher probability above 0 (use restrict)")
    g = rng.standard_gamma(alpha + 1.0)
    u = rng.random(alpha.shape)
    log_g = np.log(g) + np.log(np.maximum(u, np.finfo(np.float64).tiny)) / alpha
    log_g -= log_g.max(axis=-1, keepdims=True)
    x = np.exp(log_g)
    return x / x.sum(axis=-1, keepdims=True)


def vertex(m: int, eta: float) -> np.ndarray:
    """The vertex ``[η, …, η, 1 − (m−1)η]`` of Δ_{m,η} where δ is worst (Thm 1 proof; the paper's eq. 9 has a sign typo)."""
    p = np.full(m, float(eta))
    p[-1] = 1.0 - (m - 1) * eta
    return p


# ------------------------------------------------------------------------------------------------ (ε, δ) of Thm 1
def _log_tau(tau: float | None, log_tau: float | None) -> float:
    if log_tau is not None:
        return float(log_tau)
    if tau is None or not tau > 0:
        raise PrivacyError("tau must be positive")
    return math.log(tau)


def eps_paper(k: float, m: int, eta: float, tau: float | None, L: float, b: float, *, log_tau: float | None = None) -> float:
    """Eq. 12: ``√m·L·b·k·ln(1/τ) + (m−1)lnΓ(kη) + lnΓ(k(1−(m−1)η)) − m·lnΓ(k/m)``.

    Pass ``log_tau`` instead of ``tau`` when τ underflows a float (small k at a small δ)."""
    lt = _log_tau(tau, log_tau)
    return float(
        math.sqrt(m) * L * b * k * (-lt)
        + (m - 1) * gammaln(k * eta)
        + gammaln(k * (1 - (m - 1) * eta))
        - m * gammaln(k / m)
    )


def eps_tight(k: float, m: int, eta: float, tau: float | None, L: float, b: float, *, log_tau: float | None = None) -> float:
    """Adjacency-aware bound ([EXT], not in the paper): the Γ-terms are bounded by the digamma slope over ``‖π−π'‖ ≤ Lb``."""
    lt = _log_tau(tau, log_tau)
    psi = max(abs(digamma(k * eta)), abs(digamma(k * (1 - (m - 1) * eta))))
    return float(math.sqrt(m) * k * L * b * (-lt + psi))


def eps_floor(m: int, eta: float) -> float:
    """The k → 0 limit of eq. 12's Γ-terms: ``−(m−1)ln η − ln(1−(m−1)η) − m ln m``."""
    return float(-(m - 1) * math.log(eta) - math.log(1 - (m - 1) * eta) - m * math.log(m))


def _log_beta_cdf_upper(log_x: float, a: float, b: float) -> float:
    """log of P(Beta(a, b) < x): exact (scipy) for moderate x, else the upper bound
    ``∫_0^x t^{a-1}(1-t)^{b-1} dt / B(a,b) ≤ x^a/(a·B(a,b))·max(1, (1-x)^{b-1})``, valid for any x in (0, 1)."""
    if log_x > -600.0:
        return float(beta_dist.logcdf(math.exp(log_x), a, b))
    extra = (b - 1.0) * math.log1p(-math.exp(log_x)) if b < 1 else 0.0
    return float(a * log_x - math.log(a) - betaln(a, b) + extra)


def delta_union_bound(k: float, m: int, eta: float, tau: float | None, *, log_tau: float | None = None) -> float:
    """Rigorous upper bound on eq. 6: ``Σ_i P(Beta(kp_i, k(1−p_i)) < τ)`` at the vertex p*."""
    lt = _log_tau(tau, log_tau)
    p = vertex(m, eta)
    return float(min(1.0, sum(math.exp(_log_beta_cdf_upper(lt, k * pi, k * (1 - pi))) for pi in p)))


def delta_mc(
    k: float, m: int, eta: float, tau: float, n: int = 200_000, rng: np.random.Generator | None = None,
    conf: float = 1e-6,
) -> tuple[float, float]:
    """Monte-Carlo estimate of eq. 6 and its Clopper-Pearson upper bound at confidence ``1 − conf``."""
    rng = rng or np.random.default_rng(0)
    z = sample_dirichlet(np.broadcast_to(vertex(m, eta), (n, m)), k, rng)
    s = int((z.min(axis=1) < tau).sum())
    upper = 1.0 if s == n else float(beta_dist.ppf(1 - conf, s + 1, n - s))
    return s / n, upper


def log_tau_for_delta(k: float, m: int, eta: float, delta: float) -> float:
    """log of the largest τ < 1/m whose union-bound δ (:func:`delta_union_bound`) is at most ``delta``."""
    if not 0 < delta < 1:
        raise PrivacyError(f"per-query delta must lie in (0, 1), got {delta}")
    f = lambda lt: delta_union_bound(k, m, eta, None, log_tau=lt) - delta  # noqa: E731
    hi = math.log(1.0 / m) - 1e-12
    if f(hi) <= 0:
        return hi
    lo = -1.0
    while f(lo) > 0:
        lo *= 2.0
        if lo < -1e300:
            raise PrivacyError(f"no tau reaches per-query delta {delta:g} at k={k:g}")
    lt = brentq(f, lo, hi, xtol=1e-12, rtol=1e-12)
    step = 1e-9 * max(1.0, abs(lt))
    while f(lt) > 0:  # stay on the safe side of the root
        lt -= step
    return lt


def tau_for_delta(k: float, m: int, eta: float, delta: float) -> float:
    """τ of :func:`log_tau_for_delta` (underflows to 0 for small k; prefer the log form)."""
    return math.exp(log_tau_for_delta(k, m, eta, delta))


def concentration_radius(k: float | np.ndarray, beta: float, lam: float) -> float | np.ndarray:
    """Eq. 15: ``α_λ = λ·sqrt(ln(1/β) / (2(k+1)))``; a heuristic dead-zone radius (Lemma 1 is not a valid tail bound
    near uniform π; a Monte-Carlo check of the 2-norm tail)."""
    return lam * np.sqrt(math.log(1.0 / beta) / (2.0 * (np.asarray(k) + 1.0)))


def lipschitz_upper_bound(net: torch.nn.Module, eta: float | None = None, input_scale: float = 1.0) -> float:
    """Product of spectral norms of the Linear layers (tanh/ReLU and softmax are 1-Lipschitz in ℓ2), times the
    restriction factor ``(1 − mη)`` and the observation preprocessing scale (Theorem 1's L)."""
    L = float(input_scale)
    m = None
    for mod in net.modules():
        if isinstance(mod, torch.nn.Linear):
            L *= float(torch.linalg.matrix_norm(mod.weight.detach(), ord=2))
            m = mod.out_features
    if m is None:
        raise PrivacyError("the teacher network has no Linear layers to bound")
    if eta is not None:
        L *= 1.0 - m * eta
    return L


# --------------------------------------------------------------------------------------------------- mechanism
@dataclass(frozen=True)
class QueryCost:
    """The (ε, δ) of one answered query at concentration k, with log τ (τ splits R_1/R_2)."""

    k: float
    epsilon: float
    delta: float
    log_tau: float


@dataclass
class DirichletMechanism:
    """``Dir_k ∘ restrict_η ∘ f`` with its per-query cost (Thm 1).

    ``m`` actions, ``eta`` floor of the restricted teacher, ``L`` Lipschitz constant of the restricted teacher in
    raw observation units, ``b`` adjacency radius (L2, raw observation units), ``delta_per_query`` the δ every answer
    is calibrated to (τ is re-chosen per k). ``bound``: ``paper`` (eq. 12, default) or ``tight`` (:func:`eps_tight`).
    """

    m: int
    L: float
    b: float
    eta: float = 0.1  # [GUESS: the paper does not report η]
    delta_per_query: float = 1e-6
    bound: str = "paper"
    _cache: dict[float, QueryCost] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.m < 2:
            raise PrivacyError("the Dirichlet mechanism needs at least 2 actions")
        if not 0 < self.eta < 1.0 / self.m:
            raise PrivacyError(f"eta must lie in (0, 1/m), got {self.eta}")
        if self.L < 0 or self.b < 0:
            raise PrivacyError("L and b must be non-negative")
        if self.bound not in ("paper", "tight"):
            raise PrivacyError("bound must be 'paper' or 'tight'")

    def cost(self, k: float) -> QueryCost:
        """(ε, δ, τ) of one answer at concentration ``k`` (cached per k)."""
        key = float(k)
        if key not in self._cache:
            lt = log_tau_for_delta(key, self.m, self.eta, self.delta_per_query)
            fn = eps_paper if self.bound == "paper" else eps_tight
            eps = max(0.0, fn(key, self.m, self.eta, None, self.L, self.b, log_tau=lt))
            self._cache[key] = QueryCost(key, eps, delta_union_bound(key, self.m, self.eta, None, log_tau=lt), lt)
        return self._cache[key]

    def release(self, pi_raw: np.ndarray, k: float, rng: np.random.Generator) -> np.ndarray:
        """Restrict the teacher's softmax output to Δ_{m,η} and sample ``Dir_k`` of it."""
        return sample_dirichlet(restrict(pi_raw, self.eta), k, rng)
