"""PrivSyn baseline (Zhang et al., USENIX Security 2021): DenseMarg selection + GUM synthesis, our own implementation.

PrivORL appendix E runs PrivSyn with at most 32 bins per attribute. The pipeline, all in zCDP as in the paper:

1. **One-way marginals** (share ``one_way_share`` of ρ): the fine histograms of :mod:`.discretize`, which also place
   the (at most ``max_bins``) equal-mass coarse bins.
2. **Selection** (share ``select_share``): the InDif score of every attribute pair, Σ|M_ab − M_a ⊗ M_b / N|, gets
   Gaussian noise (sensitivity 4, as in the paper); pairs are taken in decreasing noisy InDif while the dependency
   error they remove exceeds the noise error that measuring them adds (the paper's greedy rule, with the error of a
   c-cell marginal measured with ρ_i taken as c·√(2/π)/√(2ρ_i)).
3. **Measurement** (the rest): each selected pair table with Gaussian noise, the budget split ∝ c_i^(2/3) (the
   allocation that minimises the summed expected error); tables are clipped at zero and rescaled to the record count.
4. **GUM** (gradually update method) at sampling time: records start independent draws from the one-way marginals;
   each round, for every selected marginal, a fraction α of the surplus records of over-full cells move to under-full
   cells, half by rewriting the two attributes (replace) and half by copying a record already in the target cell
   (duplicate), with α decaying over rounds. Sampling is post-processing of the noisy marginals: free.

Left out from the paper, for size: the merging of selected pairs into larger cliques and the iterative consistency
step between overlapping marginals (GUM already reconciles them approximately). Why our own code: PrivSyn has no
maintained package (the authors' and SynMeter's code are research scripts pinned to old stacks).
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.privacy.ledger import LedgerEvent
from privsynth.synth.baselines.common import (
    check_budget_args,
)
from privsynth.synth.baselines.grid import GridBaseline
from privsynth.synth.baselines.discretize import (
    Discretizer,
    gaussian_sigma_for_rho,
    marginal_counts,
    zcdp_rho_for,
)
from privsynth.privacy.mechanisms import gaussian_mechanism
from privsynth.privacy.noise import NoiseSource

__all__ = ["PrivSynConfig", "PrivSynSynthesizer", "gum"]

INDIF_SENSITIVITY = 4.0  # Zhang et al. 2021, section 4


@dataclass
class PrivSynConfig:
    max_bins: int = 32  # PrivORL appendix E
    fine_bins: int = 64
    one_way_share: float = 0.1  # of ρ: one-way histograms / bins
    select_share: float = 0.1  # of ρ: noisy InDif scores
    max_pairs: int | None = None  # optional cap on the selected pairs
    gum_rounds: int = 50
    gum_alpha: float = 0.6  # initial update rate
    gum_decay: float = 0.93  # α_t = max(α·decay^t, 0.02)
    max_categories: int = 4
    seed: int = 0  # non-private randomness only (GUM sampling); never the DP noise
    noise_seed: int | None = None  # None: DP noise from OS entropy; an int: reproducible, NOT DP, refused on release

    def __post_init__(self) -> None:
        if self.max_bins < 2 or self.fine_bins < self.max_bins:
            raise InvalidData("PrivSyn needs max_bins >= 2 and fine_bins >= max_bins")
        if not (0 < self.one_way_share and 0 < self.select_share and self.one_way_share + self.select_share < 1):
            raise InvalidData("PrivSyn budget shares must be positive and leave some budget for measurement")


def _allocation(cells: np.ndarray, rho: float) -> np.ndarray:
    """Per-marginal ρ_i ∝ c_i^(2/3) summing to ρ (minimises Σ c_i σ_i)."""
    w = cells ** (2.0 / 3.0)
    return rho * w / w.sum()


def _noise_error(cells: np.ndarray, rho: float) -> float:
    if len(cells) == 0:
        return 0.0
    rho_i = _allocation(cells, rho)
    return float(np.sum(cells * math.sqrt(2 / math.pi) / np.sqrt(2 * rho_i)))


class PrivSynSynthesizer(GridBaseline):
    """``PrivSynSynthesizer().pretrain(public).finetune(sensitive, 10, 1e-5).sample(n)``."""

    name = "privsyn"
    label = "PrivSyn"
    config_cls = PrivSynConfig
    state_key = "marginals"
    native_accounting = "zcdp"
    mechanism = "PrivSyn: noisy InDif selection (Gaussian) + Gaussian marginals + GUM"

    def __init__(self, config: PrivSynConfig | None = None) -> None:
        super().__init__(config or PrivSynConfig())
        self.discretizer: Discretizer | None = None
        self.marginals: list[dict[str, Any]] = []  # {"cols": [i, j], "y": noisy table (flat)}

    def finetune(
        self, sensitive: OfflineDataset, epsilon: float, delta: float, unit: str = "transition", **kwargs: Any
    ) -> "PrivSynSynthesizer":
        """One-way histograms, noisy pair selection and pair measurements on the sensitive transitions, (ε, δ)-DP."""
        check_budget_args(sensitive, epsilon, delta, unit)
        self._require_grid()
        self._set_dims(sensitive)
        cfg = self.config
        t0 = time.perf_counter()
        source = NoiseSource(cfg.noise_seed)  # every DP draw; OS entropy unless noise_seed is set (then NOT DP)
        ledger = self._start_ledger(delta, unit)
        self._set_template(sensitive)
        rows = sensitive.transition_matrix()
        rho = zcdp_rho_for(epsilon, delta)
        rho_one, rho_sel = cfg.one_way_share * rho, cfg.select_share * rho
        rho_meas = rho - rho_one - rho_sel
        disc = self.discretizer
        ledger.append(disc.fit_dp_sensitive(rows, rho=rho_one, coarse_bins=cfg.max_bins, source=source))
        codes = disc.encode(rows)
        sizes = disc.sizes
        n = codes.shape[0]

        # --- DenseMarg selection: noisy InDif of every pair (only pairs of non-constant columns)
        live = [j for j in range(disc.dim) if sizes[j] > 1]
        pairs = list(itertools.combinations(live, 2))
        selected: list[tuple[int, int]] = []
        if pairs:
            sigma_sel = gaussian_sigma_for_rho(rho_sel, len(pairs), INDIF_SENSITIVITY)
            ones = [marginal_counts(codes, (j,), sizes) for j in range(disc.dim)]
            indif = np.array(
                [np.abs(marginal_counts(codes, p, sizes) - np.outer(ones[p[0]], ones[p[1]]) / n).sum() for p in pairs]
            )
            noisy, _ = gaussian_mechanism(
                indif,
                sigma=sigma_sel,
                sensitivity=INDIF_SENSITIVITY,
                count=len(pairs),
                name="InDif pair scores (selection)",
                ledger=ledger,
                source=source,
                unit="transition",
                rho=float(rho_sel),
            )
            selected = self._greedy_select(pairs, noisy, sizes, rho_meas)

        # --- measure the selected pair tables with the c^(2/3) allocation
        self.marginals = []
        if selected:
            cells = np.array([sizes[i] * sizes[j] for i, j in selected], dtype=np.float64)
            rho_i = _allocation(cells, rho_meas)
            sigmas = np.sqrt(1.0 / (2.0 * rho_i))
            assert math.isclose(float(np.sum(1.0 / (2.0 * sigmas**2))), rho_meas, rel_tol=1e-9)
            # charged before the first table is measured: a run stopped inside the loop keeps the tables measured so
            # far (sample() uses them), so the ledger must already hold their cost
            ledger.append(
                LedgerEvent.zcdp(
                    # the count of pairs is in params (pairs, sigmas: DP outputs); the name stays the same on D and D+1
                    "pair marginals (Gaussian, sigma_i from the c^(2/3) allocation)",
                    # the c^(2/3) allocation sums to rho_meas by construction; charging the planned rho_meas (not
                    # the float sum of 1/(2 sigma_i^2), whose last digits depend on which pairs the noisy selection
                    # kept) keeps the card free of anything but DP outputs
                    rho=float(rho_meas),
                    unit="transition",
                    sigmas=[float(s) for s in sigmas],
                    pairs=[[disc.names[i], disc.names[j]] for i, j in selected],
                    sensitivity=1.0,
                    noise=source.kind,
                )
            )
            for (i, j), s in zip(selected, sigmas):
                # each pair table: its own Gaussian mechanism (sensitivity 1, std σ_i = ρ_i-zCDP); the events are
                # summed into the one zCDP event above
                y, _ = gaussian_mechanism(marginal_counts(codes, (i, j), sizes), sigma=float(s), sensitivity=1.0,
                                          name=f"pair marginal {disc.names[i]},{disc.names[j]}", source=source,
                                          rho_event=True)
                self.marginals.append({"cols": [i, j], "y": y.ravel().tolist(), "sigma": float(s)})
        self.history.append(
            {
                "phase": "finetune",
                "epsilon_target": float(epsilon),
                "delta": float(delta),
                "rho": float(rho),
                "pairs_considered": len(pairs),
                "pairs_selected": len(selected),
                "seconds": time.perf_counter() - t0,
            }
        )
        return self

    def _greedy_select(
        self, pairs: list[tuple[int, int]], noisy: np.ndarray, sizes: list[int], rho_meas: float
    ) -> list[tuple[int, int]]:
        """The prefix of pairs (by decreasing noisy InDif), at least one, that minimises dependency error + measurement
        noise."""
        order = np.argsort(-noisy)
        cells = np.array([sizes[pairs[k][0]] * sizes[pairs[k][1]] for k in order], dtype=np.float64)
        gaps = np.maximum(noisy[order], 0.0)
        limit = len(order) if self.config.max_pairs is None else min(self.config.max_pairs, len(order))
        if limit == 0:
            return []
        # at least the top pair is measured: measuring nothing would leave the measurement budget unspent and the
        # release with one-way marginals only (the choice is post-processing of the noisy scores either way)
        best_k, best_err = 1, float(gaps[1:].sum()) + _noise_error(cells[:1], rho_meas)
        for k in range(2, limit + 1):
            err = float(gaps[k:].sum()) + _noise_error(cells[:k], rho_meas)
            if err < best_err:
                best_k, best_err = k, err
        return [pairs[k] for k in order[:best_k]]

    # --------------------------------------------------------------------------------------------- sample
    def sample(self, n: int, *, seed: int | None = None, name: str | None = None, **kwargs: Any) -> OfflineDataset:
        """``n`` records by GUM from the noisy marginals, decoded to continuous values."""
        if n < 1:
            raise InvalidData(f"number of samples must be positive, got {n}")
        if self._ledger is None or self.discretizer is None:
            raise InvalidData("PrivSyn has not been fitted on sensitive data yet")
        seed = self.config.seed if seed is None else seed
        rng = np.random.default_rng(seed)
        disc = self.discretizer
        ones = [disc.coarse_one_way(j) for j in range(disc.dim)]
        targets = [(tuple(m["cols"]), np.asarray(m["y"], dtype=np.float64)) for m in self.marginals]
        codes = gum(ones, targets, disc.sizes, int(n), self.config, rng)
        rows = disc.decode(codes, rng)
        return self._to_dataset(rows, name, {"requested": int(n), "seed": seed, "gum_rounds": self.config.gum_rounds})


def _normalise(table: np.ndarray, n: int) -> np.ndarray:
    t = np.maximum(table, 0.0)
    return t * (n / t.sum()) if t.sum() > 0 else np.full(t.shape, n / t.size)


def gum(
    one_way: list[np.ndarray],
    targets: list[tuple[tuple[int, ...], np.ndarray]],
    sizes: list[int],
    n: int,
    cfg: PrivSynConfig,
    rng: np.random.Generator,
) -> np.ndarray:
    """Gradually Update Method (Zhang et al. 2021, section 5): integer records [n, D] matching the target marginals."""
    d = len(sizes)
    codes = np.empty((n, d), dtype=np.int64)
    for j in range(d):
        p = np.maximum(one_way[j], 0.0)
        p = p / p.sum() if p.sum() > 0 else np.full(len(p), 1 / len(p))
        codes[:, j] = rng.choice(len(p), size=n, p=p)
    goals = [(cols, _normalise(y, n)) for cols, y in targets]
    goals += [((j,), _normalise(one_way[j], n)) for j in range(d) if sizes[j] > 1]
    for t in range(cfg.gum_rounds):
        alpha = max(cfg.gum_alpha * cfg.gum_decay**t, 0.02)
        for k in rng.permutation(len(goals)):
            cols, goal = goals[k]
            _gum_step(codes, cols, goal, sizes, alpha, rng)
    return codes


def _gum_step(
    codes: np.ndarray, cols: tuple[int, ...], goal: np.ndarray, sizes: list[int], alpha: float, rng: np.random.Generator
) -> None:
    shape = tuple(sizes[c] for c in cols)
    cell = np.ravel_multi_index(tuple(codes[:, c] for c in cols), shape)
    have = np.bincount(cell, minlength=goal.size).astype(np.float64)
    over = np.maximum(have - goal, 0.0)
    under = np.maximum(goal - have, 0.0)
    if under.sum() < 1:
        return
    quota = np.floor(alpha * over + rng.uniform(size=over.size)).astype(np.int64)
    quota = np.minimum(quota, have.astype(np.int64))
    if quota.sum() == 0:
        return
    # pick `quota[c]` random records of every over-full cell c
    perm = rng.permutation(len(cell))
    order = perm[np.argsort(cell[perm], kind="stable")]
    starts = np.concatenate([[0], np.cumsum(have.astype(np.int64))[:-1]])
    rank = np.empty(len(cell), dtype=np.int64)
    rank[order] = np.arange(len(cell)) - starts[cell[order]]
    moved = np.flatnonzero(rank < quota[cell])
    dest = rng.choice(goal.size, size=len(moved), p=under / under.sum())
    dup = rng.uniform(size=len(moved)) < 0.5
    # duplicate: copy a whole record already in the destination cell (keeps its other attributes' dependencies)
    donors_by_cell = order  # records sorted by cell
    have_i = have.astype(np.int64)
    can = dup & (have_i[dest] > 0)
    if can.any():
        pick = starts[dest[can]] + (rng.uniform(size=int(can.sum())) * have_i[dest[can]]).astype(np.int64)
        codes[moved[can]] = codes[donors_by_cell[pick]]
    rest = ~can
    if rest.any():
        values = np.unravel_index(dest[rest], shape)
        for c, v in zip(cols, values):
            codes[moved[rest], c] = v
