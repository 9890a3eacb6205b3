"""DP normalisation statistics: clipped mean and standard deviation under the Gaussian mechanism.

For users without public data: each column is clipped to a public box [low, high]; with centre
c = (low + high)/2 and half-width r, the released quantities are

    S₁ = Σ_u (x̄_u − c)            (L2 sensitivity ‖r‖₂)
    S₂ = Σ_u ((x−c)²‾_u − r²/2)    (L2 sensitivity ‖r²/2‖₂)

where u runs over privacy units and x̄_u is the unit's row (transition unit) or the mean of its rows (trajectory unit,
so one trajectory moves each sum by at most one clipped row), and the count S₀ = N (sensitivity 1). Each gets Gaussian
noise of std z × its sensitivity: three Gaussian mechanisms with noise multiplier z, i.e. one with z/√3, and z is set
by the analytic calibration (Balle & Wang 2018) for the requested (ε, δ) (or by bisection under RDP). All three
sensitivities are those of add/remove one unit, the relation on every card; N is private under it, so the divisor is
the noisy count Ñ = max(1, S̃₀), never N (privsynth.privacy.count).
Then mean = c + S̃₁/Ñ and var = S̃₂/Ñ + r²/2 − (mean − c)², floored at (1e-3·r)².
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from privsynth.data.units import DATA_UNITS, check_unit
from privsynth.data.normalize import Normalizer
from privsynth.errors import InvalidData
from privsynth.privacy import accounting as acc
from privsynth.privacy.ledger import LedgerEvent
from privsynth.privacy.mechanisms import gaussian_mechanism
from privsynth.privacy.noise import NoiseSource

__all__ = ["dp_normalizer", "dp_normalizer_stats", "dp_normalizer_from_dataset"]


def dp_normalizer_stats(
    sensitive_rows: np.ndarray,
    *,
    low: Sequence[float] | np.ndarray,
    high: Sequence[float] | np.ndarray,
    epsilon: float,
    delta: float,
    unit: str = "transition",
    episode_ids: np.ndarray | None = None,
    skip: Sequence[int] | None = (-1,),
    noise_seed: int | None = None,
    accountant: str = "pld",
) -> tuple[np.ndarray, np.ndarray, LedgerEvent]:
    """DP (mean, std, ledger event) of the columns of a sensitive matrix [N, D], clipped to [low, high].

    The noise is calibrated so that the event alone costs ``epsilon`` at ``delta`` under ``accountant`` (use the
    ledger's accountant; the Gaussian mechanism is tight under pld/prv, RDP needs a little more noise). It is drawn
    from OS entropy (:class:`~privsynth.privacy.noise.NoiseSource`); ``noise_seed`` makes it reproducible for tests
    only, and the event then says ``noise="reproducible"`` (not DP, refused by the release guard). The caller must
    append the returned event to the ledger of whatever uses these statistics
    (:meth:`privsynth.synth.base.NetworkSynthesizer.fit_dp_normalizer` does).
    """
    x = np.asarray(sensitive_rows, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise InvalidData(f"expected a non-empty [N, D] matrix of sensitive rows, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise InvalidData("sensitive rows contain NaN or infinite values")
    d = x.shape[1]
    lo = np.broadcast_to(np.asarray(low, dtype=np.float64), (d,)).copy()
    hi = np.broadcast_to(np.asarray(high, dtype=np.float64), (d,)).copy()
    if not (np.isfinite(lo).all() and np.isfinite(hi).all() and (hi > lo).all()):
        raise InvalidData("clipping bounds must be finite with high > low in every column")
    acc.check_epsilon(epsilon)
    check_unit(unit, DATA_UNITS)

    keep = np.ones(d, dtype=bool)
    for j in skip or ():
        keep[j] = False
    centre, radius = (lo + hi) / 2, (hi - lo) / 2
    z = np.clip(x, lo, hi)[:, keep] - centre[keep]
    r = radius[keep]
    first, second = z, z**2 - r**2 / 2
    if unit == "trajectory":
        if episode_ids is None or len(episode_ids) != len(x):
            raise InvalidData("trajectory-level statistics need one episode id per row")
        _, inverse, counts = np.unique(np.asarray(episode_ids), return_inverse=True, return_counts=True)
        first = np.stack([np.bincount(inverse, weights=first[:, j]) for j in range(first.shape[1])], 1) / counts[:, None]
        second = np.stack([np.bincount(inverse, weights=second[:, j]) for j in range(second.shape[1])], 1) / counts[:, None]
    n_units = first.shape[0]
    acc.check_delta(delta, n_units)  # a refusal for the data holder (docs/privacy.md, "Refusals")

    z_mult = acc.calibrate_gaussian_multiplier(epsilon, delta, 3, accountant)  # three releases, multiplier z each
    sens1, sens2 = float(np.linalg.norm(r)), float(np.linalg.norm(r**2 / 2))
    # one call of the Gaussian mechanism on (S₀, S₁/Δ₁, S₂/Δ₂): three releases of sensitivity 1, noise std z each
    k = r.shape[0]
    scaled = np.concatenate([[float(n_units)], first.sum(0) / sens1, second.sum(0) / sens2])
    noisy, event = gaussian_mechanism(
        scaled,
        sigma=z_mult,
        sensitivity=1.0,
        count=3,
        name="DP normalisation statistics (count, clipped mean and std)",
        source=NoiseSource(noise_seed),
        unit=unit,
        clip_low=lo.tolist(),
        clip_high=hi.tolist(),
        epsilon_target=float(epsilon),
        delta=float(delta),
        accountant=accountant,
    )
    n_noisy = max(1.0, float(noisy[0]))
    s1, s2 = noisy[1:k + 1] * sens1, noisy[k + 1:] * sens2
    mean_k = s1 / n_noisy
    var_k = np.maximum(s2 / n_noisy + r**2 / 2 - mean_k**2, (1e-3 * r) ** 2)
    mean, std = np.zeros(d), np.ones(d)
    mean[keep] = centre[keep] + np.clip(mean_k, -r, r)
    std[keep] = np.sqrt(var_k)
    return mean, std, event


def dp_normalizer(sensitive_rows: np.ndarray, **kwargs) -> tuple[Normalizer, LedgerEvent]:
    """A :class:`Normalizer` (source ``"dp"``) from DP statistics of sensitive rows, and its ledger event."""
    mean, std, event = dp_normalizer_stats(sensitive_rows, **kwargs)
    return Normalizer.from_stats(mean, std, source="dp"), event


def dp_normalizer_from_dataset(dataset, **kwargs) -> tuple[Normalizer, LedgerEvent]:
    """:func:`dp_normalizer` on an :class:`~privsynth.data.OfflineDataset`'s transition matrix (episode ids included)."""
    kwargs.setdefault("episode_ids", dataset.episode_ids)
    return dp_normalizer(dataset.transition_matrix(), **kwargs)
