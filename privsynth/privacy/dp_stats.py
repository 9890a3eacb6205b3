"""DP normalisation statistics: clipped mean and standard deviation under the Gaussian mechanism.

For users without public data: each column is clipped to a public box [low, high] and scaled to u = (x − c)/r ∈ [−1, 1]
(centre c = (low + high)/2, half-width r), so that every column gets the same noise relative to its own range (with
raw sums, one wide column set the noise of all: a 6.5 °C-wide temperature got the noise of a 115 bpm-wide heart rate).
The released quantities, over the k kept columns, are

    S₁ = Σ_u ū_u              (L2 sensitivity √k)
    S₂ = Σ_u ((u²)‾_u − 1/2)  (L2 sensitivity √k/2)

where u runs over privacy units and ū_u is the unit's scaled row (transition unit) or the mean of its rows (trajectory
unit, so one trajectory moves each sum by at most one clipped row), and the count S₀ = N (sensitivity 1). Each gets
Gaussian noise of std z × its sensitivity: three Gaussian mechanisms with noise multiplier z, i.e. one with z/√3, and z
is set by the analytic calibration (Balle & Wang 2018) for the requested (ε, δ) (or by bisection under RDP). All three
sensitivities are those of add/remove one unit, the relation on every card; N is private under it, so the divisor is
the noisy count Ñ = max(1, S̃₀), never N (privsynth.privacy.count).
Then mean = c + r·clip(S̃₁/Ñ, −1, 1) and var = r²·clip(S̃₂/Ñ + 1/2 − (S̃₁/Ñ)², v₀, 1) with the floor v₀ = z·(√k/2)/Ñ,
the noise std of the scaled variance estimate (post-processing of the noisy count): a variance the noise cannot tell
from zero becomes the noise level, never a near-zero std that blows the normalised rows up (a floor of (1e-3·r)² did,
and a release normalised by it scored marginal 0.33). Skipped columns (the terminal flag, one-hot columns) read no
data and take ``fallback`` statistics (default mean 0, std 1).
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
    fallback: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[np.ndarray, np.ndarray, LedgerEvent]:
    """DP (mean, std, ledger event) of the columns of a sensitive matrix [N, D], clipped to [low, high].

    The noise is calibrated so that the event alone costs ``epsilon`` at ``delta`` under ``accountant`` (use the
    ledger's accountant; the Gaussian mechanism is tight under pld/prv, RDP needs a little more noise). It is drawn
    from OS entropy (:class:`~privsynth.privacy.noise.NoiseSource`); ``noise_seed`` makes it reproducible for tests
    only, and the event then says ``noise="reproducible"`` (not DP, refused by the release guard). ``fallback``:
    public (mean, std) per column, used for the ``skip`` columns (no data read there). The caller must
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
    if not keep.any():
        raise InvalidData("every column is skipped: nothing to estimate")
    centre, radius = (lo + hi) / 2, (hi - lo) / 2
    u = (np.clip(x, lo, hi)[:, keep] - centre[keep]) / radius[keep]  # each kept column scaled to [-1, 1]
    first, second = u, u**2 - 0.5
    if unit == "trajectory":
        if episode_ids is None or len(episode_ids) != len(x):
            raise InvalidData("trajectory-level statistics need one episode id per row")
        _, inverse, counts = np.unique(np.asarray(episode_ids), return_inverse=True, return_counts=True)
        first = np.stack([np.bincount(inverse, weights=first[:, j]) for j in range(first.shape[1])], 1) / counts[:, None]
        second = np.stack([np.bincount(inverse, weights=second[:, j]) for j in range(second.shape[1])], 1) / counts[:, None]
    n_units = first.shape[0]
    acc.check_delta(delta, n_units)  # a refusal for the data holder (docs/privacy.md, "Refusals")

    z_mult = acc.calibrate_gaussian_multiplier(epsilon, delta, 3, accountant)  # three releases, multiplier z each
    k = first.shape[1]
    sens1, sens2 = float(np.sqrt(k)), float(np.sqrt(k) / 2)  # one unit moves ū by ≤ 1 and (u²)‾ − 1/2 by ≤ 1/2 per column
    # one call of the Gaussian mechanism on (S₀, S₁/Δ₁, S₂/Δ₂): three releases of sensitivity 1, noise std z each
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
    mean_u = np.clip(noisy[1:k + 1] * sens1 / n_noisy, -1.0, 1.0)
    floor = min(1.0, z_mult * sens2 / n_noisy)  # the noise std of the scaled variance: post-processing of Ñ
    var_u = np.clip(noisy[k + 1:] * sens2 / n_noisy + 0.5 - mean_u**2, floor, 1.0)
    mean, std = np.zeros(d), np.ones(d)
    if fallback is not None:
        mean[:] = np.broadcast_to(np.asarray(fallback[0], dtype=np.float64), (d,))
        std[:] = np.broadcast_to(np.asarray(fallback[1], dtype=np.float64), (d,))
    mean[keep] = centre[keep] + radius[keep] * mean_u
    std[keep] = radius[keep] * np.sqrt(var_u)
    return mean, std, event


def dp_normalizer(sensitive_rows: np.ndarray, **kwargs) -> tuple[Normalizer, LedgerEvent]:
    """A :class:`Normalizer` (source ``"dp"``) from DP statistics of sensitive rows, and its ledger event."""
    mean, std, event = dp_normalizer_stats(sensitive_rows, **kwargs)
    return Normalizer.from_stats(mean, std, source="dp"), event


def dp_normalizer_from_dataset(dataset, **kwargs) -> tuple[Normalizer, LedgerEvent]:
    """:func:`dp_normalizer` on an :class:`~privsynth.data.OfflineDataset`'s transition matrix (episode ids included)."""
    kwargs.setdefault("episode_ids", dataset.episode_ids)
    return dp_normalizer(dataset.transition_matrix(), **kwargs)
