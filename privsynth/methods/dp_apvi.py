"""DP-APVI (Algorithm 1 of "Offline Reinforcement Learning with Differential Privacy") and its non-private APVI.

Pipeline (0-indexed steps h = 0..H-1; the privacy unit is one trajectory, neighbours replace one trajectory):

A. Count visits n[h,s,a] and n[h,s,a,s'] and add independent noise to every cell (zero cells too), then clip at 0
   (eq. 2). Gaussian: one trajectory moves 4H cells by ±1, so Δ₂² = 4H and σ² = 2H/ρ gives ρ-zCDP. Laplace variant:
   Δ₁ = 4H and scale 4H/ε gives pure ε-DP.
B. Make the counts consistent (eq. 3/4): per (h,s,a) the LP argmin_x max_s' |x − n'| s.t. |Σx − n'_sa| ≤ E/2, x ≥ 0,
   solved in closed form (:func:`project_counts`); ñ_sa = Σ_s' ñ_sas'.
C. Private kernel (eq. 5): P̃ = ñ_sas'/ñ_sa where ñ_sa > E, uniform otherwise.
D. Pessimistic value iteration with the bonus Γ = c1·√(Var_P̃(V)·ι/(ñ−E)) + (c2·S·H·E + c2_np·H)·ι/ñ, or C·H where
   ñ ≤ E (Alg. 1 line 8; ``c2_np`` is APVI's lower-order H·ι/n term, zero in the paper's DP statement).

Everything after step A is post-processing. APVI is the same path with the true counts and E = 0. The consistent counts
are also a DP synthetic-data release (:class:`CountRelease`): a tabular model (d̃1, μ̃, P̃, and known or privatised
rewards) that can be sampled at no extra privacy cost (post-processing of the eq. 2 release).

The threshold E uses a *utility* failure probability ``delta`` (paper section 3); the privacy δ only enters the (ε, δ)
conversion of the ledger. Constants are exposed in :class:`APVIConfig` with ``theory()`` and ``practical()`` presets;
the theory constants make every Q clip to 0 at realistic n (Theorem 3.3's C₂·S·H·E·ι term).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from privsynth.errors import InvalidData, PrivacyError
from privsynth.methods.tabular_mdp import TabularMDP, Trajectories, greedy
from privsynth.methods.zcdp import ZcdpLedger, check_rho, gaussian_sigma
from privsynth.privacy.mechanisms import gaussian_mechanism, laplace_mechanism
from privsynth.privacy.noise import NoiseSource, as_noise_source

__all__ = [
    "APVIConfig",
    "APVIResult",
    "CountRelease",
    "count_visits",
    "count_noise_scale",
    "consistency_threshold",
    "project_counts",
    "private_kernel",
    "pessimism_bonus",
    "pessimistic_value_iteration",
    "release_counts_sensitive",
    "apvi",
    "dp_apvi",
]


@dataclass
class APVIConfig:
    """Constants of (DP-)APVI. Defaults are the ``practical`` preset."""

    c1: float = math.sqrt(2.0)  # main Bernstein term (Alg. 1: C1 = √2)
    c2: float = 0.0  # privacy lower-order term c2·S·H·E·ι/ñ (Alg. 1: C2 = 16; 0 in practice)
    c2_np: float = 0.0  # APVI lower-order term c2_np·H·ι/n (APVI paper ≈ 16; 0 in practice)
    c_fallback: float = 2.0  # Γ = C·H where ñ ≤ E (Alg. 1 needs C > 1, so those Q clip to 0)
    delta: float = 0.1  # utility failure probability in ι = log(HSA/δ) and E (not the privacy δ)
    bonus: str = "bernstein"  # or "hoeffding": c1·H·√(ι/(ñ−E)) (paper eq. 8)
    tie_break: str = "random"  # "random" among maximisers (seeded stream) or "first"

    @classmethod
    def theory(cls, **overrides: Any) -> "APVIConfig":
        return cls(**{"c1": math.sqrt(2.0), "c2": 16.0, "c2_np": 16.0, **overrides})

    @classmethod
    def practical(cls, **overrides: Any) -> "APVIConfig":
        return cls(**overrides)


# ------------------------------------------------------------------------------------------------- step A: counts
def count_visits(traj: Trajectories, S: int, A: int) -> tuple[np.ndarray, np.ndarray]:
    """n[h,s,a] and n[h,s,a,s'] (non-stationary, one table per step)."""
    K, H = traj.actions.shape
    if traj.states.max() >= S or traj.actions.max() >= A or traj.states.min() < 0 or traj.actions.min() < 0:
        raise InvalidData(f"trajectories hold states or actions outside S={S}, A={A}")
    h = np.broadcast_to(np.arange(H), (K, H)).reshape(-1)
    s, a, s2 = traj.states[:, :-1].reshape(-1), traj.actions.reshape(-1), traj.states[:, 1:].reshape(-1)
    n_sas = np.zeros((H, S, A, S))
    np.add.at(n_sas, (h, s, a, s2), 1.0)
    return n_sas.sum(-1), n_sas


def reward_sums(traj: Trajectories, S: int, A: int) -> np.ndarray:
    """Σ_τ r_h^τ per (h,s,a) with rewards clipped to [0, 1] (needed to privatise data-derived rewards)."""
    K, H = traj.actions.shape
    out = np.zeros((H, S, A))
    h = np.broadcast_to(np.arange(H), (K, H)).reshape(-1)
    np.add.at(out, (h, traj.states[:, :-1].reshape(-1), traj.actions.reshape(-1)), np.clip(traj.rewards, 0, 1).reshape(-1))
    return out


def count_sensitivity(H: int, private_rewards: bool = False, norm: str = "l2") -> float:
    """Replace-one sensitivity of the released vector (n_sa, n_sas'[, reward sums]): 4H cells move by 1 (Δ₂² = 4H,
    Δ₁ = 4H); reward sums add 2 cells per step moving by ≤ 1 (Δ₂² += 2H, Δ₁ += 2H)."""
    if norm == "l2":
        return math.sqrt(4.0 * H + (2.0 * H if private_rewards else 0.0))
    return 4.0 * H + (2.0 * H if private_rewards else 0.0)


def count_noise_scale(H: int, rho: float, private_rewards: bool = False) -> float:
    """Gaussian std per count: σ² = Δ₂²/(2ρ) = 2H/ρ (eq. 2), or 3H/ρ when reward sums are released too."""
    return gaussian_sigma(count_sensitivity(H, private_rewards), rho)


def consistency_threshold(H: int, S: int, A: int, delta: float, *, sigma: float | None = None,
                          laplace_scale: float | None = None) -> float:
    """E such that every count's noise is below E/2 with probability ≥ 1−δ (union over ≤ 2HS²A counts).

    Gaussian: E = 2σ√(2 log(4HS²A/δ)), which is Alg. 1's E_ρ = 4√(H log(4HS²A/δ)/ρ) at σ² = 2H/ρ.
    Laplace: E = 2b·log(4HS²A/δ), i.e. (8H/ε)·log(4HS²A/δ) at b = 4H/ε (paper section 3; [GUESS] constant).
    """
    log_term = math.log(4.0 * H * S * S * A / delta)
    if sigma is not None:
        return 2.0 * sigma * math.sqrt(2.0 * log_term)
    if laplace_scale is not None:
        return 2.0 * laplace_scale * log_term
    return 0.0


# ------------------------------------------------------------------------------------------------ step B: the LP
def project_counts(n_sas: np.ndarray, n_sa: np.ndarray, E: float) -> np.ndarray:
    """Closed-form optimum of LP (3)/(4), vectorised over leading axes.

    For each cell with noisy (clipped) counts n' = n_sas[..., :] and n'_sa: if Σn' lies in [n'_sa − E/2, n'_sa + E/2]
    keep n'; if it is below, shift every entry up by the shortfall / S; if it is above, water-fill down: x = max(0, n' − t)
    with Σx = n'_sa + E/2. Each branch attains the minimal max-deviation t (the optimum is not unique).
    """
    n_sas = np.asarray(n_sas, dtype=np.float64)
    n_sa = np.asarray(n_sa, dtype=np.float64)
    S = n_sas.shape[-1]
    tot = n_sas.sum(-1)
    lo, hi = n_sa - E / 2.0, n_sa + E / 2.0
    x = n_sas.copy()
    up = tot < lo
    if up.any():
        x[up] = n_sas[up] + ((lo - tot)[up] / S)[:, None]
    down = tot > hi
    if down.any():
        v = -np.sort(-n_sas[down], axis=-1)  # descending
        cs = np.cumsum(v, axis=-1)
        t = (cs - hi[down][:, None]) / np.arange(1, S + 1)
        v_next = np.concatenate([v[:, 1:], np.zeros((v.shape[0], 1))], axis=-1)
        first = np.argmax(t >= v_next - 1e-12, axis=-1)  # the first k whose level lies in [v_{k+1}, v_k]
        level = np.maximum(t[np.arange(len(first)), first], 0.0)
        x[down] = np.maximum(0.0, n_sas[down] - level[:, None])
    return x


# --------------------------------------------------------------------------------------------- step C: the kernel
def private_kernel(n_sas_tilde: np.ndarray, E: float) -> tuple[np.ndarray, np.ndarray]:
    """(P̃[h,s,a,s'], ñ[h,s,a]) of eq. (5): P̃ = ñ_sas'/ñ_sa where ñ_sa > E, uniform otherwise (always a distribution)."""
    n_sa = n_sas_tilde.sum(-1)
    S = n_sas_tilde.shape[-1]
    ok = n_sa > max(E, 0.0)
    P = np.full(n_sas_tilde.shape, 1.0 / S)
    P[ok] = n_sas_tilde[ok] / n_sa[ok][:, None]
    return P, n_sa


# ---------------------------------------------------------------------------------------------- step D: planning
def pessimism_bonus(var: np.ndarray, n: np.ndarray, E: float, H: int, S: int, iota: float, cfg: APVIConfig) -> np.ndarray:
    """Γ_h(s,a) of Alg. 1 line 8: c1·√(Var·ι/(ñ−E)) + (c2·S·H·E + c2_np·H)·ι/ñ where ñ > E, else C·H.
    The Hoeffding variant replaces √Var by H (eq. 8)."""
    ok = n > E
    gap = np.where(ok, n - E, 1.0)
    if cfg.bonus == "bernstein":
        main = cfg.c1 * np.sqrt(np.maximum(var, 0.0) * iota / gap)
    elif cfg.bonus == "hoeffding":
        main = cfg.c1 * H * np.sqrt(iota / gap)
    else:
        raise InvalidData(f"unknown bonus '{cfg.bonus}' (use bernstein or hoeffding)")
    lower = (cfg.c2 * S * H * E + cfg.c2_np * H) * iota / np.where(ok, n, 1.0)
    return np.where(ok, main + lower, cfg.c_fallback * H)


def pessimistic_value_iteration(P: np.ndarray, n: np.ndarray, E: float, R: np.ndarray, cfg: APVIConfig,
                                rng: np.random.Generator | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Backward induction with the pessimism bonus; returns (π̂[h,s], Q̂[h,s,a]). Q̂ is clipped to [0, H−h]."""
    H, S, A, _ = P.shape
    iota = math.log(H * S * A / cfg.delta)
    V = np.zeros(S)
    pi = np.zeros((H, S), dtype=np.int64)
    Qs = np.zeros((H, S, A))
    tie_rng = rng if cfg.tie_break == "random" else None
    for h in range(H - 1, -1, -1):
        PV = P[h] @ V
        var = P[h] @ (V**2) - PV**2
        Q = np.clip(R[h] + PV - pessimism_bonus(var, n[h], E, H, S, iota, cfg), 0.0, H - h)
        pi[h] = greedy(Q, tie_rng)
        V = Q.max(-1)
        Qs[h] = Q
    return pi, Qs


# ------------------------------------------------------------------------------------------------ the release
@dataclass
class CountRelease:
    """The privatised, consistent counts of DP-APVI: a DP tabular model that can be sampled for free.

    ``n_sas`` are the consistent counts ñ[h,s,a,s']; ``reward`` is the public reward table (known-reward setting) or the
    privatised mean reward r̃ = clip(noisy reward sum / ñ_sa, 0, 1) (0 where ñ_sa ≤ E); ``threshold`` is E.
    """

    n_sas: np.ndarray
    threshold: float
    reward: np.ndarray
    reward_source: str  # "known" or "private"
    mechanism: str
    noise_scale: float
    ledger: ZcdpLedger
    delta: float  # utility δ used for E
    n_episodes: int  # treated as public (stated on the card)
    noisy_n_sa: np.ndarray | None = None  # n'[h,s,a] (noisy, clipped at 0; DP like everything here)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def shape(self) -> tuple[int, int, int]:
        H, S, A, _ = self.n_sas.shape
        return H, S, A

    def kernel(self) -> tuple[np.ndarray, np.ndarray]:
        return private_kernel(self.n_sas, self.threshold)

    def behaviour(self) -> np.ndarray:
        """μ̃[h,s,a] ∝ ñ_sa on cells above E (uniform if none), the behaviour policy of the synthetic data."""
        H, S, A = self.shape
        n_sa = self.n_sas.sum(-1)
        w = np.where(n_sa > self.threshold, n_sa, 0.0)
        tot = w.sum(-1, keepdims=True)
        return np.where(tot > 0, w / np.where(tot > 0, tot, 1.0), 1.0 / A)

    def initial(self) -> np.ndarray:
        """d̃1(s) ∝ Σ_a ñ[0,s,a] (uniform if all zero)."""
        w = self.n_sas[0].sum((-1, -2))
        return w / w.sum() if w.sum() > 0 else np.full(len(w), 1.0 / len(w))

    def model(self) -> TabularMDP:
        P, _ = self.kernel()
        return TabularMDP(P, self.reward, self.initial(), name="dp-count-model")

    def sample(self, n_episodes: int, rng: np.random.Generator) -> Trajectories:
        """Synthetic trajectories from the DP model (post-processing: no extra privacy cost)."""
        return self.model().sample(self.behaviour(), n_episodes, rng)

    def card(self, privacy_delta: float = 1e-5) -> dict[str, Any]:
        """Privacy metadata for the release (σ, E and ρ travel with it so DP-aware consumers can add pessimism)."""
        H, S, A = self.shape
        return {
            "method": "DP-APVI noisy visitation counts (Qiao & Wang, Alg. 1 steps A-C)",
            "mechanism": self.mechanism,
            "noise_scale_per_count": self.noise_scale,
            "consistency_threshold_E": self.threshold,
            "utility_delta": self.delta,
            "rewards": self.reward_source,
            "n_episodes_public": self.n_episodes,
            "H": H, "S": S, "A": A,
            **self.ledger.summary(privacy_delta),
            **self.meta,
        }


def release_counts_sensitive(traj: Trajectories, S: int, A: int, noise: NoiseSource | None = None, *,
                             rho: float | None = None, epsilon: float | None = None, delta: float = 0.1,
                             reward: np.ndarray | None = None, ledger: ZcdpLedger | None = None) -> CountRelease:
    """Steps A-B on sensitive trajectories: noisy counts (Gaussian at ``rho`` or Laplace at ``epsilon``), clipped and
    made consistent. ``reward`` is the public reward table; if None the per-(h,s,a) reward sums are privatised in the
    same mechanism (the sensitivity grows from 4H to 6H cells). The release is recorded in ``ledger``.

    The noise comes from ``noise`` (default: OS entropy, :class:`~privsynth.privacy.noise.NoiseSource`) through
    :mod:`privsynth.privacy.mechanisms`; ``NoiseSource.reproducible(seed)`` replays it for tests and marks the ledger
    not DP."""
    if isinstance(noise, np.random.Generator):
        raise TypeError("release_counts_sensitive takes a NoiseSource for its privacy noise, not a seeded Generator "
                        "(use NoiseSource.reproducible(seed) in tests)")
    src = as_noise_source(noise)
    H = traj.horizon
    if (rho is None) == (epsilon is None):
        raise PrivacyError("give exactly one of rho (Gaussian, zCDP) or epsilon (Laplace, pure DP)")
    private_rewards = reward is None
    if rho is not None:
        rho = check_rho(rho)
    elif not (epsilon and epsilon > 0 and math.isfinite(epsilon)):
        raise PrivacyError(f"epsilon must be a positive finite number, got {epsilon}")
    n_sa, n_sas = count_visits(traj, S, A)
    stats = [n_sa.reshape(-1), n_sas.reshape(-1)] + ([reward_sums(traj, S, A).reshape(-1)] if private_rewards else [])
    flat = np.concatenate(stats)
    ledger = ledger if ledger is not None else ZcdpLedger()
    if rho is not None:
        scale = count_noise_scale(H, rho, private_rewards)
        noisy, _ = gaussian_mechanism(flat, sigma=scale, sensitivity=count_sensitivity(H, private_rewards),
                                      name="dp_apvi.counts", ledger=ledger, source=src, rho_event=True,
                                      unit="trajectory")
        E = consistency_threshold(H, S, A, delta, sigma=scale)
        mechanism = "gaussian"
    else:
        scale = count_sensitivity(H, private_rewards, "l1") / epsilon
        noisy, _ = laplace_mechanism(flat, scale=scale, sensitivity=count_sensitivity(H, private_rewards, "l1"),
                                     name="dp_apvi.counts", ledger=ledger, source=src, unit="trajectory")
        E = consistency_threshold(H, S, A, delta, laplace_scale=scale)
        mechanism = "laplace"
    m1, m2 = n_sa.size, n_sas.size
    n_sa_noisy = np.maximum(noisy[:m1].reshape(n_sa.shape), 0.0)
    n_sas_noisy = np.maximum(noisy[m1:m1 + m2].reshape(n_sas.shape), 0.0)
    n_sas_tilde = project_counts(n_sas_noisy, n_sa_noisy, E)
    if private_rewards:
        n_tilde = n_sas_tilde.sum(-1)
        rsum = noisy[m1 + m2:].reshape(n_sa.shape)
        reward_tab = np.where(n_tilde > E, np.clip(rsum / np.where(n_tilde > 0, n_tilde, 1.0), 0.0, 1.0), 0.0)
    else:
        reward_tab = np.asarray(reward, dtype=np.float64)
    return CountRelease(n_sas_tilde, E, reward_tab, "private" if private_rewards else "known", mechanism, scale, ledger,
                        delta, traj.n_episodes, n_sa_noisy)


# ------------------------------------------------------------------------------------------------ the learners
@dataclass
class APVIResult:
    policy: np.ndarray  # [H, S] deterministic greedy policy
    Q: np.ndarray  # [H, S, A] pessimistic Q
    config: APVIConfig
    release: CountRelease | None = None

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"config": asdict(self.config)}
        if self.release is not None:
            out["release"] = {k: v for k, v in self.release.card().items() if k != "events"}
        return out


def apvi(traj: Trajectories, R: np.ndarray, S: int, A: int, cfg: APVIConfig | None = None, seed: int = 0) -> APVIResult:
    """Non-private APVI: the empirical kernel P̂ (uniform where n = 0) and the bonus with ñ = n, E = 0."""
    cfg = cfg or APVIConfig()
    _, n_sas = count_visits(traj, S, A)
    P, n = private_kernel(n_sas, 0.0)
    pi, Q = pessimistic_value_iteration(P, n, 0.0, np.asarray(R, dtype=np.float64), cfg, np.random.default_rng([seed, 2]))
    return APVIResult(pi, Q, cfg)


def plan_on_release(release: CountRelease, cfg: APVIConfig | None = None, seed: int = 0) -> APVIResult:
    """Steps C-D of DP-APVI on a count release (post-processing)."""
    cfg = cfg or APVIConfig()
    P, n = release.kernel()
    pi, Q = pessimistic_value_iteration(P, n, release.threshold, release.reward, cfg, np.random.default_rng([seed, 2]))
    return APVIResult(pi, Q, cfg, release)


def dp_apvi(traj: Trajectories, R: np.ndarray | None, S: int, A: int, *, rho: float | None = None,
            epsilon: float | None = None, cfg: APVIConfig | None = None, seed: int = 0,
            ledger: ZcdpLedger | None = None, noise: NoiseSource | None = None) -> APVIResult:
    """DP-APVI (ρ-zCDP with ``rho``; pure ε-DP Laplace variant with ``epsilon``). ``R`` is the known reward table
    (the paper's setting); pass None to privatise the rewards too. The privacy noise comes from ``noise`` (default:
    OS entropy; ``NoiseSource.reproducible(s)`` for tests, marked not DP), never from ``seed``; ``seed`` drives only
    the tie-breaking stream [seed, 2] (separate from data and privacy noise)."""
    cfg = cfg or APVIConfig()
    release = release_counts_sensitive(traj, S, A, noise, rho=rho, epsilon=epsilon,
                                       delta=cfg.delta, reward=R, ledger=ledger)
    return plan_on_release(release, cfg, seed)
