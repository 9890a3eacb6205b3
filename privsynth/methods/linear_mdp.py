"""Linear MDPs (Jin et al. 2020b) and the synthetic instance of the DP-VAPVI paper's simulation (section 5).

P_h(s'|s,a) = ⟨φ(s,a), ν_h(s')⟩ and r_h(s,a) = ⟨φ(s,a), θ_h⟩ with a known feature map φ. With finitely many states
and actions the model is also a :class:`~privsynth.methods.tabular_mdp.TabularMDP`, so values and gaps are exact.

The synthetic instance (Min et al. 2021; Yin et al. 2022; the DP-VAPVI paper's section 5): S = {0, 1}, A = {0..99}, d = 10,
φ(s,a) = (bits(a)ᵀ, δ(s,a), 1−δ(s,a)) with bits(a) the 8-bit binary code of a and δ(s,a) = 1[1{s=0} = 1{a=0}].
The paper's modifications ("stochastic transition", "more complex reward") are in the missing appendix F; they are
reconstructed as switches (``transition_mode``, ``reward_mode``) and reported with every result.

Feature scale: the raw features have ‖φ‖₂ up to √7, but every DP-VAPVI sensitivity assumes
‖φ‖₂ ≤ 1. ``normalize_features=True`` (the default) divides φ by B = max‖φ‖ and multiplies ν and θ by B, which keeps
P and r exactly and makes the privacy guarantee hold.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from privsynth.errors import InvalidData
from privsynth.methods.tabular_mdp import TabularMDP, Trajectories

__all__ = ["LinearMDP", "synthetic_linear_mdp", "behaviour_policy"]


@dataclass
class LinearMDP:
    """``Phi[S, A, d]``, ``nu[H, d, S]``, ``theta[H, d]``, ``d1[S]``; P and R are derived and checked."""

    Phi: np.ndarray
    nu: np.ndarray
    theta: np.ndarray
    d1: np.ndarray
    name: str = "linear"
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.Phi = np.asarray(self.Phi, dtype=np.float64)
        self.nu = np.asarray(self.nu, dtype=np.float64)
        self.theta = np.asarray(self.theta, dtype=np.float64)
        P = np.einsum("sad,hdt->hsat", self.Phi, self.nu)
        R = np.einsum("sad,hd->hsa", self.Phi, self.theta)
        if (R < -1e-12).any() or (R > 1 + 1e-12).any():
            raise InvalidData("linear MDP rewards must lie in [0, 1]")
        self.tabular = TabularMDP(np.clip(P, 0.0, None), np.clip(R, 0.0, 1.0), self.d1, name=self.name, meta=self.meta)

    @property
    def d(self) -> int:
        return int(self.Phi.shape[-1])

    @property
    def feature_bound(self) -> float:
        """max over (s, a) of ‖φ(s,a)‖₂ (must be ≤ 1 for the DP-VAPVI sensitivities)."""
        return float(np.linalg.norm(self.Phi, axis=-1).max())

    def sample(self, mu: np.ndarray, n_episodes: int, rng: np.random.Generator) -> Trajectories:
        return self.tabular.sample(mu, n_episodes, rng)

    def gap(self, pi: np.ndarray) -> float:
        return self.tabular.gap(pi)


def _bits(A: int, n_bits: int = 8) -> np.ndarray:
    return ((np.arange(A)[:, None] >> np.arange(n_bits)[None, :]) & 1).astype(np.float64)


def synthetic_linear_mdp(H: int = 20, A: int = 100, seed: int = 0, transition_mode: str = "two_alpha",
                         reward_mode: str = "R1", normalize_features: bool = True) -> LinearMDP:
    """The simulation MDP (2 states, ``A`` actions, d = 10, horizon H).

    ``transition_mode``: ``deterministic`` (original, α_h ∈ {0,1}), ``one_alpha`` (ν_h(0) = (0⁸, α_h, 1−α_h), α_h ~ U[0,1])
    or ``two_alpha`` (P(s'=0|s,a) = δ·α_{h,1} + (1−δ)·α_{h,2}). ``reward_mode``: ``orig`` (θ_h = (0⁸, 0.99, 0.01)),
    ``R1`` (θ_h = (0⁸, r_{h,1}, r_{h,2}), r ~ U[0,1]) or ``R2`` (θ_h = (r_h/8·1⁸, 0, 0)). Initial distribution uniform.
    """
    rng = np.random.default_rng(seed)
    S, n_bits = 2, 8
    bits = _bits(A, n_bits)
    delta = np.zeros((S, A))
    delta[0, 0] = 1.0
    delta[1, 1:] = 1.0
    Phi = np.concatenate([np.broadcast_to(bits, (S, A, n_bits)), delta[..., None], 1.0 - delta[..., None]], axis=-1)
    d = Phi.shape[-1]
    nu = np.zeros((H, d, S))
    if transition_mode == "deterministic":
        a1 = rng.integers(0, 2, H).astype(np.float64)
        a2 = 1.0 - a1
    elif transition_mode == "one_alpha":
        a1 = rng.random(H)
        a2 = 1.0 - a1
    elif transition_mode == "two_alpha":
        a1, a2 = rng.random(H), rng.random(H)
    else:
        raise InvalidData(f"unknown transition_mode '{transition_mode}'")
    nu[:, n_bits, 0], nu[:, n_bits + 1, 0] = a1, a2
    nu[:, n_bits, 1], nu[:, n_bits + 1, 1] = 1.0 - a1, 1.0 - a2
    theta = np.zeros((H, d))
    if reward_mode == "orig":
        theta[:, n_bits], theta[:, n_bits + 1] = 0.99, 0.01
    elif reward_mode == "R1":
        theta[:, n_bits], theta[:, n_bits + 1] = rng.random(H), rng.random(H)
    elif reward_mode == "R2":
        theta[:, :n_bits] = rng.random(H)[:, None] / n_bits
    else:
        raise InvalidData(f"unknown reward_mode '{reward_mode}'")
    scale = 1.0
    if normalize_features:
        scale = float(np.linalg.norm(Phi, axis=-1).max())
        Phi, nu, theta = Phi / scale, nu * scale, theta * scale
    meta = {"kind": "synthetic_linear", "H": H, "A": A, "d": d, "seed": seed, "transition_mode": transition_mode,
            "reward_mode": reward_mode, "normalize_features": normalize_features, "feature_scale": scale}
    return LinearMDP(Phi, nu, theta, np.full(S, 0.5), name=f"linear-H{H}-{transition_mode}-{reward_mode}-seed{seed}", meta=meta)


def behaviour_policy(H: int, S: int = 2, A: int = 100, p0: float = 0.6) -> np.ndarray:
    """μ of Yin et al. (2022): action 0 with probability ``p0``, every other action with (1−p0)/(A−1)."""
    mu = np.full((H, S, A), (1.0 - p0) / (A - 1))
    mu[..., 0] = p0
    return mu
