"""DP-VAPVI (Algorithm 2 of "Offline Reinforcement Learning with Differential Privacy"), VAPVI and PEVI.

All three run on trajectories of a linear MDP with a known feature map ``Phi[S, A, d]`` (‖φ‖₂ ≤ 1 is checked: every
sensitivity below assumes it; :mod:`~privsynth.methods.linear_mdp` rescales). Steps are 0-indexed, so the paper's H−h+1 is ``H - h``.

DP-VAPVI releases five statistics per step h, each a Gaussian mechanism at ρ₀ = ρ/(5H) given the already-released past
(adaptive zCDP composition over 5H releases). Replace-one-trajectory sensitivities (derived from the paper's section 4 and its Algorithm 2):

=====================  =========================  ===================================
statistic              sensitivity                noise
=====================  =========================  ===================================
Σ φ̄φ̄ᵀ                  √2 (Frobenius)             (Z+Zᵀ)/√2, Var Z = 1/(2ρ₀) (+ (E/2)·I)
Σ φ̄·Ṽ²_{h+1}           2H²                        N(0, 2H⁴/ρ₀)  (H⁴, not the text's H²)
Σ φ̄·Ṽ_{h+1}            2H                         N(0, 2H²/ρ₀)
Σ φφᵀ/σ̃²               √2 (Frobenius)             as the first row
Σ φ(r+Ṽ_{h+1})/σ̃²      2H                         N(0, 2H²/ρ₀)
=====================  =========================  ===================================

The paper's matrix noise Var Z = 1/(4ρ₀) is ρ₀-zCDP only for add/remove neighbours; under replace-one it costs 2ρ₀
(the Frobenius sensitivity is √2). ``matrix_noise="replace_one"`` (default) uses 1/(2ρ₀); ``"paper"`` uses 1/(4ρ₀) and the ledger charges
2ρ₀ per matrix, so the total is then 7ρ/5 (stated honestly rather than hidden).

Noisy Gram matrices are projected to eigenvalues ≥ λ (a data-independent floor, post-processing) and the
bonus uses the noisy Λ̃ only: every quantity downstream of a release is computed from released quantities. VAPVI is the same code path with every noise term and E set to zero; PEVI is
unweighted ridge LSVI with bonus β‖φ‖_{Λ⁻¹}. Why our own code: no public implementation exists; everything is a
10×10 linear solve.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from privsynth.errors import InvalidData
from privsynth.methods.tabular_mdp import Trajectories, greedy
from privsynth.methods.zcdp import ZcdpLedger, check_rho
from privsynth.privacy.ledger import LedgerEvent
from privsynth.privacy.mechanisms import gaussian_mechanism
from privsynth.privacy.noise import NoiseSource, as_noise_source

__all__ = [
    "VAPVIConfig",
    "PEVIConfig",
    "NoiseScales",
    "vapvi_noise_scales",
    "variance_statistics",
    "regression_statistics",
    "step_statistics",
    "theory_D",
    "LinearResult",
    "vapvi",
    "dp_vapvi",
    "pevi",
]


@dataclass
class VAPVIConfig:
    """Constants of (DP-)VAPVI; defaults are the ``practical`` preset (section 5 of the paper gives no constants)."""

    lam: float = 0.01  # ridge λ (theory needs λ < κ; λ = 1 over-regularises with normalised features)
    c_bonus: float = 0.1  # C in Γ = C·√d·‖φ‖_{Λ̃⁻¹} + D/K
    d_bonus: float = 0.0  # D (theory: 2H³√d for VAPVI, theory_D(...) for DP-VAPVI)
    delta: float = 0.05  # utility failure probability used for E (not the privacy δ)
    matrix_noise: str = "replace_one"  # or "paper" (Var 1/(4ρ₀), charged 2ρ₀ under replace-one)
    split: bool = False  # theory: two independent halves (variance on D', regression on D); experiments: no split
    tie_break: str = "random"

    @classmethod
    def practical(cls, **overrides: Any) -> "VAPVIConfig":
        return cls(**overrides)

    @classmethod
    def theory(cls, H: int, d: int, *, rho: float | None = None, kappa: float = 0.0, **overrides: Any) -> "VAPVIConfig":
        """C = 1 and D from the bound (D = 2H³√d non-private; :func:`theory_D` with ρ). κ = 0 gives D = ∞ (trivial)."""
        D = 2.0 * H**3 * math.sqrt(d) if rho is None else theory_D(H, d, rho, kappa, overrides.get("delta", 0.05))
        return cls(**{"c_bonus": 1.0, "d_bonus": D, **overrides})


@dataclass
class PEVIConfig:
    lam: float = 0.01  # tuned as for VAPVI (PEVI's paper uses λ = 1)
    beta_coef: float = 0.01  # β = beta_coef·d·H (theory: β = c·d·H·√ζ)
    tie_break: str = "random"


@dataclass(frozen=True)
class NoiseScales:
    """Per-release noise of DP-VAPVI at one step (all steps are equal)."""

    rho: float
    rho0: float  # ρ/(5H)
    sigma_vsq: float  # std of φ₁ (Σφ̄Ṽ²): H²·√(2/ρ₀)
    sigma_v: float  # std of φ₂ (Σφ̄Ṽ): H·√(2/ρ₀)
    sigma_w: float  # std of φ₃ (Σφ(r+Ṽ)/σ̃²): H·√(2/ρ₀)
    sigma_z: float  # std of each Z_ij in (Z+Zᵀ)/√2
    rho_matrix: float  # zCDP charged per matrix release under replace-one
    E: float  # 4σ_Z(√(2d) + √(log(2H/δ))): ‖(Z+Zᵀ)/√2‖ ≤ E/2 for all 2H matrices w.p. ≥ 1−δ


def vapvi_noise_scales(H: int, d: int, rho: float, delta: float = 0.05, matrix_noise: str = "replace_one") -> NoiseScales:
    """The noise of Algorithm 2 at budget ρ (paper section 4; scales in the module docstring's table)."""
    rho = check_rho(rho)
    rho0 = rho / (5.0 * H)
    if matrix_noise == "replace_one":
        sigma_z, rho_m = 1.0 / math.sqrt(2.0 * rho0), rho0
    elif matrix_noise == "paper":
        sigma_z, rho_m = 1.0 / (2.0 * math.sqrt(rho0)), 2.0 * rho0
    else:
        raise InvalidData(f"unknown matrix_noise '{matrix_noise}' (use replace_one or paper)")
    E = 4.0 * sigma_z * (math.sqrt(2.0 * d) + math.sqrt(math.log(2.0 * H / delta)))
    return NoiseScales(rho, rho0, H**2 * math.sqrt(2.0 / rho0), H * math.sqrt(2.0 / rho0), H * math.sqrt(2.0 / rho0),
                       sigma_z, rho_m, E)


def theory_D(H: int, d: int, rho: float, kappa: float, delta: float = 0.05) -> float:
    """[GUESS explicit] D = H²L/κ + H⁴E√d/κ^{3/2} + H³√d with L = 2H√((d/ρ₀)·log(6Hd/δ)) (Theorem 4.1 gives orders only); ∞ if κ = 0."""
    if kappa <= 0:
        return math.inf
    ns = vapvi_noise_scales(H, d, rho, delta, "paper")
    L = 2.0 * H * math.sqrt(d / ns.rho0 * math.log(6.0 * H * d / delta))
    return H**2 * L / kappa + H**4 * ns.E * math.sqrt(d) / kappa**1.5 + H**3 * math.sqrt(d)


# ---------------------------------------------------------------------------------------------- statistics
def variance_statistics(Xv: np.ndarray, v_next: np.ndarray) -> dict[str, np.ndarray]:
    """Sensitive statistics of Alg. 2 lines 4-6 on the variance sample D' (before noise and the λI term):
    Σ φ̄φ̄ᵀ, Σ φ̄·Ṽ²_{h+1}(s̄'), Σ φ̄·Ṽ_{h+1}(s̄')."""
    return {"gram_var": Xv.T @ Xv, "vsq": Xv.T @ v_next**2, "v": Xv.T @ v_next}


def regression_statistics(X: np.ndarray, r: np.ndarray, v_next: np.ndarray, wts: np.ndarray) -> dict[str, np.ndarray]:
    """Sensitive statistics of Alg. 2 lines 9-10 on the regression sample D, with ``wts`` = 1/σ̃²(s_h, a_h):
    Σ φφᵀ/σ̃², Σ φ·(r + Ṽ_{h+1}(s'))/σ̃²."""
    return {"gram_w": (X * wts[:, None]).T @ X, "w": X.T @ ((r + v_next) * wts)}


def step_statistics(X: np.ndarray, r: np.ndarray, v_next: np.ndarray, wts: np.ndarray, Xv: np.ndarray,
                    v_next_var: np.ndarray) -> dict[str, np.ndarray]:
    """All five sensitive statistics of one step (for sensitivity checks)."""
    return {**variance_statistics(Xv, v_next_var), **regression_statistics(X, r, v_next, wts)}


class _Noise:
    """Draws and records the noise of one DP-VAPVI run (fresh, independent draws for every release, as the paper's
    footnote 8 requires).

    Every draw comes from the run's :class:`~privsynth.privacy.noise.NoiseSource` (OS entropy unless the caller asked
    for reproducible noise) and lands on the ledger in the same call: vectors through
    :func:`~privsynth.privacy.mechanisms.gaussian_mechanism` (ρ = Δ²/(2σ²)), the symmetrised matrix noise with its
    event (ρ as charged by :func:`vapvi_noise_scales`) recorded next to the draw."""

    def __init__(self, scales: NoiseScales | None, source: NoiseSource | None, ledger: ZcdpLedger | None, H: int):
        self.scales, self.source, self.ledger, self.H = scales, source, ledger, H

    @property
    def E(self) -> float:
        return 0.0 if self.scales is None else self.scales.E

    def vector(self, name: str, x: np.ndarray, sigma: float, sensitivity: float) -> np.ndarray:
        if self.scales is None:
            return x
        noisy, _ = gaussian_mechanism(x, sigma=sigma, sensitivity=sensitivity, name=name, ledger=self.ledger,
                                      source=self.source, rho_event=True, unit="trajectory")
        return noisy

    def matrix(self, name: str, M: np.ndarray) -> np.ndarray:
        if self.scales is None:
            return M
        d = M.shape[0]
        Z = self.source.numpy_rng().normal(0.0, self.scales.sigma_z, (d, d))
        self.ledger.append(LedgerEvent.zcdp(name, rho=self.scales.rho_matrix, sigma=self.scales.sigma_z,
                                            sensitivity=math.sqrt(2.0), noise=self.source.kind, unit="trajectory",
                                            symmetrised=True))
        return M + (self.scales.E / 2.0) * np.eye(d) + (Z + Z.T) / math.sqrt(2.0)


def _psd_inverse(M: np.ndarray, floor: float) -> np.ndarray:
    """Inverse of the symmetric part of M with eigenvalues floored at ``floor`` (post-processing, so free)."""
    evals, U = np.linalg.eigh((M + M.T) / 2.0)
    return (U / np.maximum(evals, floor)) @ U.T


@dataclass
class LinearResult:
    policy: np.ndarray  # [H, S] deterministic greedy policy
    Q: np.ndarray  # [H, S, A]
    method: str
    config: Any
    ledger: ZcdpLedger | None = None
    noise: NoiseScales | None = None

    def summary(self, privacy_delta: float = 1e-5) -> dict[str, Any]:
        out: dict[str, Any] = {"method": self.method, "config": asdict(self.config)}
        if self.noise is not None:
            out["noise"] = asdict(self.noise)
        if self.ledger is not None:
            out["privacy"] = {k: v for k, v in self.ledger.summary(privacy_delta).items() if k != "events"}
        return out


def _check_inputs(traj: Trajectories, Phi: np.ndarray) -> None:
    if np.linalg.norm(Phi, axis=-1).max() > 1.0 + 1e-9:
        raise InvalidData("feature norms exceed 1; rescale the features (synthetic_linear_mdp(normalize_features=True)) "
                          "so the DP-VAPVI sensitivities hold")
    S, A, _ = Phi.shape
    if traj.states.max() >= S or traj.actions.max() >= A:
        raise InvalidData(f"trajectories hold states or actions outside the feature table (S={S}, A={A})")


def _vapvi_core(traj: Trajectories, Phi: np.ndarray, cfg: VAPVIConfig, noise: _Noise, tie_rng: np.random.Generator | None,
                method: str) -> LinearResult:
    """Algorithm 2 (variance-aware pessimistic value iteration); noise off = VAPVI."""
    _check_inputs(traj, Phi)
    K, H = traj.actions.shape
    S, A, d = Phi.shape
    if cfg.split:
        half = K // 2
        reg, var = traj.select(np.arange(half)), traj.select(np.arange(half, 2 * half))
    else:
        reg = var = traj
    K_reg = reg.n_episodes
    rewards = np.clip(reg.rewards, 0.0, 1.0)  # r ∈ [0,1] is what the sensitivity of φ₃ assumes (paper section 4)
    I = np.eye(d)
    V = np.zeros(S)
    pi = np.zeros((H, S), dtype=np.int64)
    Qs = np.zeros((H, S, A))
    ns = noise.scales
    for h in range(H - 1, -1, -1):
        X = Phi[reg.states[:, h], reg.actions[:, h]]
        Xv = Phi[var.states[:, h], var.actions[:, h]]
        v_next, v_next_var = V[reg.states[:, h + 1]], V[var.states[:, h + 1]]
        Hh = H - h
        # private conditional variance (lines 4-8)
        st = variance_statistics(Xv, v_next_var)
        sig_inv = _psd_inverse(noise.matrix(f"h{h}.gram_var", st["gram_var"] + cfg.lam * I), cfg.lam)
        b_vsq = noise.vector(f"h{h}.vsq", st["vsq"], ns.sigma_vsq if ns else 0.0, 2.0 * H**2)
        b_v = noise.vector(f"h{h}.v", st["v"], ns.sigma_v if ns else 0.0, 2.0 * H)
        beta, theta = sig_inv @ b_vsq, sig_inv @ b_v
        var_sa = np.clip(Phi @ beta, 0.0, Hh**2) - np.clip(Phi @ theta, 0.0, Hh) ** 2
        sigma2 = np.maximum(1.0, var_sa)  # [S, A]
        wts = 1.0 / sigma2[reg.states[:, h], reg.actions[:, h]]
        # private variance-weighted ridge regression (lines 9-10)
        st = regression_statistics(X, rewards[:, h], v_next, wts)
        lam_inv = _psd_inverse(noise.matrix(f"h{h}.gram_w", st["gram_w"] + cfg.lam * I), cfg.lam)
        b_w = noise.vector(f"h{h}.w", st["w"], ns.sigma_w if ns else 0.0, 2.0 * H)
        w = lam_inv @ b_w
        # pessimism (lines 11-14); the bonus uses the noisy Λ̃ only
        bonus = cfg.c_bonus * math.sqrt(d) * np.sqrt(np.einsum("sai,ij,saj->sa", Phi, lam_inv, Phi)) + cfg.d_bonus / K_reg
        Q = np.clip(Phi @ w - bonus, 0.0, Hh)
        pi[h] = greedy(Q, tie_rng)
        V = Q.max(-1)
        Qs[h] = Q
    return LinearResult(pi, Qs, method, cfg, noise.ledger, ns)


def vapvi(traj: Trajectories, Phi: np.ndarray, cfg: VAPVIConfig | None = None, seed: int = 0) -> LinearResult:
    """Non-private VAPVI (Yin et al. 2022): Algorithm 2 without noise (φ_i = 0, K_i = 0)."""
    cfg = cfg or VAPVIConfig()
    tie = np.random.default_rng([seed, 2]) if cfg.tie_break == "random" else None
    return _vapvi_core(traj, Phi, cfg, _Noise(None, None, None, traj.horizon), tie, "VAPVI")


def dp_vapvi(traj: Trajectories, Phi: np.ndarray, rho: float, cfg: VAPVIConfig | None = None, seed: int = 0,
             ledger: ZcdpLedger | None = None, noise: NoiseSource | None = None) -> LinearResult:
    """DP-VAPVI at ρ-zCDP (trajectory unit, replace-one). The privacy noise comes from ``noise`` (default: OS
    entropy; ``NoiseSource.reproducible(s)`` for tests, marked not DP), never from ``seed``, which drives only the
    tie-breaking stream [seed, 2] (separate from data and privacy noise); every release is recorded in ``ledger``."""
    cfg = cfg or VAPVIConfig()
    scales = vapvi_noise_scales(traj.horizon, Phi.shape[-1], rho, cfg.delta, cfg.matrix_noise)
    ledger = ledger if ledger is not None else ZcdpLedger()
    tie = np.random.default_rng([seed, 2]) if cfg.tie_break == "random" else None
    noise = _Noise(scales, as_noise_source(noise), ledger, traj.horizon)
    return _vapvi_core(traj, Phi, cfg, noise, tie, f"DP-VAPVI(rho={rho:g})")


def pevi(traj: Trajectories, Phi: np.ndarray, cfg: PEVIConfig | None = None, seed: int = 0) -> LinearResult:
    """PEVI (Jin, Yang & Wang 2021), linear version: ridge LSVI with bonus β‖φ‖_{Λ⁻¹}, β = beta_coef·d·H."""
    cfg = cfg or PEVIConfig()
    K, H = traj.actions.shape
    S, A, d = Phi.shape
    if traj.states.max() >= S or traj.actions.max() >= A:
        raise InvalidData(f"trajectories hold states or actions outside the feature table (S={S}, A={A})")
    tie = np.random.default_rng([seed, 2]) if cfg.tie_break == "random" else None
    beta = cfg.beta_coef * d * H
    rewards = np.clip(traj.rewards, 0.0, 1.0)
    V = np.zeros(S)
    pi = np.zeros((H, S), dtype=np.int64)
    Qs = np.zeros((H, S, A))
    for h in range(H - 1, -1, -1):
        X = Phi[traj.states[:, h], traj.actions[:, h]]
        lam_inv = np.linalg.inv(X.T @ X + cfg.lam * np.eye(d))
        w = lam_inv @ (X.T @ (rewards[:, h] + V[traj.states[:, h + 1]]))
        bonus = beta * np.sqrt(np.einsum("sai,ij,saj->sa", Phi, lam_inv, Phi))
        Q = np.clip(Phi @ w - bonus, 0.0, H - h)
        pi[h] = greedy(Q, tie)
        V = Q.max(-1)
        Qs[h] = Q
    return LinearResult(pi, Qs, "PEVI", cfg)
