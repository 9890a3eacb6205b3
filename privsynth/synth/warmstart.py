"""DP self-pre-training for PrivORL-n when nothing public exists (issue 37, item 4): an accounted warm start.

A share of ε buys a PrivSyn summary of the sensitive transitions (one-way histograms, noisy pair selection, pair
marginals; :mod:`privsynth.synth.baselines.privsyn`) on a grid fixed by public bounds only (the schema's, or the
environment's spaces and the given reward bounds). A corpus drawn from that summary is a DP output, so pre-training
the diffusion model on it is free post-processing; DP-SGD then fine-tunes on the sensitive data with the rest of ε.
Every event of the summary enters the release's ledger (as exact Gaussian events, so the PLD accountant composes
them with DP-SGD and the unit count), and the release guard checks the composed total against ε.

Whether a pre-trained model or public data exists is a public fact, so a default on that rule would cost nothing;
measured on a public proxy (PointMaze umaze, docs/transfer.md) the warm start lost utility, so it is off by default.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy.accounting import zcdp_gaussian_sigma
from privsynth.privacy.events import LedgerEvent

__all__ = ["WARM_START_SHARE", "WARM_CORPUS_ROWS", "column_grid", "public_grid", "warm_corpus", "gaussian_events",
           "resolve_warm_share"]

WARM_START_SHARE = 0.0  # of epsilon, by default when nothing public exists: off. Measured on the public umaze proxy
#                        (docs/transfer.md, "DP self-pre-training"): a 0.2 share scored IQL -1.1 against 18.3 without it
WARM_CORPUS_ROWS = 20_000  # rows drawn from the summary (a public constant, never the sensitive N)


def resolve_warm_share(share: float | None, *, default_applies: bool, unit: str) -> float:
    """The share of ε the warm start spends: ``share`` as given (0 = off), or by default :data:`WARM_START_SHARE`
    when ``default_applies`` (no public data, no pre-trained model: public facts) and the unit is a transition
    (PrivSyn's unit). One-line errors for a share outside [0, 1)."""
    if share is None:
        return WARM_START_SHARE if default_applies and unit == "transition" else 0.0
    if isinstance(share, bool) or not 0 <= float(share) < 1:
        raise PrivacyError(f"warm_start is a share of epsilon in [0, 1), got {share!r}")
    if share and unit != "transition":
        raise PrivacyError(f"the warm start's summary (PrivSyn) protects transitions; unit '{unit}' is not supported")
    return float(share)


def column_grid(schema: Any) -> tuple[np.ndarray, np.ndarray, list[list[float] | None]]:
    """Public bounds and categorical supports of the stored transition columns (state | action | reward | next state
    | terminal) from a schema (declared, or the environment's, :func:`privsynth.release.support.environment_schema`):
    discrete columns are categorical over their stored numbers, the terminal flag over {0, 1}."""
    from privsynth.data.schema import RowCodec

    codec = RowCodec(schema)
    low, high, cats = [], [], []
    for j, c in enumerate(codec.parts):
        if c.discrete:
            values = codec.reward_values.tolist() if j == codec.reward_at and codec.reward_values is not None \
                else list(range(c.width))
            lo, hi = float(min(values)), float(max(values))
            low.append(lo)
            high.append(hi if hi > lo else lo + 1.0)
            cats.append([float(v) for v in values])
        else:
            low.append(float(c.low))
            high.append(float(c.high))
            cats.append(None)
    low.append(0.0)
    high.append(1.0)
    cats.append([0.0, 1.0])
    return np.asarray(low), np.asarray(high), cats


def public_grid(info: Any, obs_dim: int, act_dim: int, *, obs_bounds: tuple[float, float] | None = None,
                reward_bounds: tuple[float, float] | None = None) -> tuple[tuple[Any, Any, list], str] | None:
    """``(grid, source)`` for a grid baseline or the warm start without public data, from public facts only: the
    declared schema, else the environment's (:func:`privsynth.release.support.environment_schema`: its spaces,
    ``obs_bounds`` where they have none, and the reward bounds), else, with no environment, the given bounds and the
    action box (:func:`privsynth.release.support.normaliser_bounds`, every column continuous but the terminal flag);
    None when no reward bounds are known there either."""
    from privsynth.release.support import environment_schema, normaliser_bounds

    if info.schema:
        return column_grid(info.schema), "schema bounds"
    schema = environment_schema(info, obs_dim, act_dim, obs_bounds=obs_bounds, reward_bounds=reward_bounds)
    if schema is not None:
        return column_grid(schema), f"{info.env_id} spaces and reward bounds"
    if reward_bounds is None:
        return None
    low, high = normaliser_bounds(info, obs_dim, act_dim, obs_bounds=obs_bounds, reward_bounds=reward_bounds)
    return (low, high, [None] * (len(low) - 1) + [[0.0, 1.0]]), "given bounds"


def gaussian_events(events: list[LedgerEvent]) -> list[LedgerEvent]:
    """PrivSyn's ledger events with each zCDP event of Gaussian measurements (the pair marginals) written as the one
    Gaussian mechanism with the same privacy loss (σ = 1/√(2ρ) at sensitivity 1: composed Gaussians are exactly a
    Gaussian), so the PLD accountant composes the whole release in one group at the full δ."""
    out = []
    for ev in events:
        if ev.mechanism == "zcdp":
            if "sigmas" not in ev.params or ev.params.get("xi", 0.0):
                raise PrivacyError(f"event '{ev.name}' is not a set of Gaussian measurements: cannot convert it")
            rho = float(ev.params["rho"])
            params = {k: v for k, v in ev.params.items() if k not in ("rho", "xi", "sensitivity")}
            ev = LedgerEvent.gaussian(ev.name, sigma=zcdp_gaussian_sigma(1.0, rho), sensitivity=1.0, rho=rho, **params)
        out.append(ev)
    return out


def warm_corpus(sensitive: OfflineDataset, grid: tuple[Any, Any, list[list[float] | None]], *, epsilon: float, delta: float, unit: str = "transition",
                rows: int = WARM_CORPUS_ROWS, noise_seed: int | None = None, seed: int = 0
                ) -> tuple[OfflineDataset, list[LedgerEvent]]:
    """``(corpus, events)``: a PrivSyn summary of ``sensitive`` at (``epsilon``, ``delta``) on the public ``grid``
    (low, high, categorical supports per stored column: :func:`column_grid`), and ``rows`` transitions drawn from it (post-processing). ``events`` (Gaussian,
    :func:`gaussian_events`) must go to the release's ledger. The corpus is a DP output, not marked sensitive."""
    from privsynth.synth.baselines.privsyn import PrivSynConfig, PrivSynSynthesizer

    if len(grid[0]) != sensitive.obs_dim * 2 + sensitive.act_dim + 2:
        raise InvalidData(f"the schema describes {len(grid[0])} transition columns, the data has "
                          f"{sensitive.obs_dim * 2 + sensitive.act_dim + 2}")
    summary = PrivSynSynthesizer(PrivSynConfig(noise_seed=noise_seed, seed=seed))
    summary.grid_from_bounds(grid, sensitive.obs_dim, sensitive.act_dim, "public bounds")
    summary.finetune(sensitive, float(epsilon), float(delta), unit)
    corpus = summary.sample(int(rows), name=f"{sensitive.info.name}-warm-corpus")
    assert summary.ledger is not None
    return corpus, gaussian_events(list(summary.ledger.events))
