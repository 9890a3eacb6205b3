"""PGM baseline: marginal-based synthesis with Private-PGM (McKenna et al. 2019) on discretised transitions.

PrivORL appendix E runs SynMeter's PGM with 10 bins, 50 two-way and 10 three-way marginals and up to 4,000
estimation iterations. Two ways of choosing the marginals are offered (``selection``):

* ``"mst"`` (default): the MST mechanism (McKenna, Miklau & Sheldon 2021), the PGM variant SynMeter ships and the one
  PrivORL's baseline folder runs. ρ/3 measures the one-way marginals (here: the fine histograms that also set the
  bins, :mod:`.discretize`), ρ/3 picks a maximum spanning tree of two-way marginals with D−1 exponential mechanisms
  scored by the L1 gap between the data's pair table and the independent model, ρ/3 measures the D−1 tree marginals.
* ``"appendix_e"``: the appendix's counts, 50 two-way and 10 three-way marginals drawn at random (data-independent,
  so free), kept only while the junction tree stays under ``max_model_mb`` (with 16 columns of 10 bins, 50 random
  pairs alone would make cliques of 10^10 cells; the cap is what makes it run at all). ρ/3 one-way, 2ρ/3 measurement.

The estimation and sampling of the graphical model use the maintained ``mbi`` package (private-pgm, JAX), installed
by the ``privsynth[pgm]`` extra and imported lazily. All measurements are Gaussian, so the native analysis is zCDP;
the ledger records each measurement and the selection as Gaussian / zCDP events and reproduces the same ε.
"""
from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivsynthError
from privsynth.privacy.ledger import LedgerEvent
from privsynth.synth.baselines.common import (
    check_budget_args,
)
from privsynth.synth.baselines.grid import GridBaseline
from privsynth.privacy.mechanisms import exponential_mechanism, gaussian_mechanism
from privsynth.privacy.noise import NoiseSource
from privsynth.synth.baselines.discretize import (
    Discretizer,
    gaussian_sigma_for_rho,
    marginal_counts,
    zcdp_rho_for,
)

__all__ = ["PGMConfig", "PGMSynthesizer", "require_mbi", "mst_scores", "MST_SCORE_SENSITIVITY"]

# Add/remove one transition changes one cell of a pair's exact count table by one and nothing else in the score
# (the independent model is built from already released noisy one-way marginals and their noisy total), so the L1
# score moves by at most 1.
MST_SCORE_SENSITIVITY = 1.0


def mst_scores(
    codes: np.ndarray, sizes: list[int], noisy_one_way: list[np.ndarray], pairs: list[tuple[int, int]]
) -> dict[tuple[int, int], float]:
    """MST's edge scores: the L1 gap between each pair's exact count table and the independent model
    ``n̂ · p̂_i ⊗ p̂_j`` built from the *noisy* one-way marginals (McKenna, Miklau & Sheldon 2021, section 4: the
    model is estimated from the noisy measurements). n̂ is the noisy total (mean over columns of the noisy
    one-way sums), not the exact count n: with n the score would move by up to 2 when one transition is added
    (1 in the exact table, 1 in ``n · p̂_i ⊗ p̂_j``), while the exponential mechanism is calibrated for 1."""
    ones = [np.maximum(np.asarray(o, dtype=np.float64), 0.0) for o in noisy_one_way]
    n_hat = max(float(np.mean([np.asarray(o, dtype=np.float64).sum() for o in noisy_one_way])), 1.0)
    probs = [o / o.sum() if o.sum() > 0 else np.full(len(o), 1 / len(o)) for o in ones]
    return {
        (i, j): float(np.abs(marginal_counts(codes, (i, j), sizes) - n_hat * np.outer(probs[i], probs[j])).sum())
        for i, j in pairs
    }


def require_mbi() -> Any:
    """Import ``mbi`` (with JAX in float64, as its authors advise) or say how to install it."""
    try:
        import warnings

        import jax

        jax.config.update("jax_enable_x64", True)
        with warnings.catch_warnings():  # mbi warns at import about JAX settings that do not apply here
            warnings.simplefilter("ignore")
            import mbi
    except ImportError:
        raise PrivsynthError(
            "the PGM baseline needs the private-pgm package: pip install 'privsynth[pgm]' (installs mbi and jax)"
        ) from None
    return mbi


@dataclass
class PGMConfig:
    bins: int = 10  # coarse bins per continuous column (PrivORL appendix E)
    fine_bins: int = 64  # public equal-width grid measured once to place the coarse bins
    selection: str = "mst"  # "mst" or "appendix_e"
    two_way: int = 50  # appendix_e: random two-way marginals (appendix E)
    three_way: int = 10  # appendix_e: random three-way marginals (appendix E)
    max_model_mb: float = 64.0  # appendix_e: junction-tree size cap (mbi.junction_tree.hypothetical_model_size)
    iters: int = 4000  # Private-PGM mirror-descent iterations (appendix E: maximum 4,000)
    one_way_share: float = 1 / 3  # share of ρ for the one-way histograms (MST)
    select_share: float = 1 / 3  # share of ρ for the MST selection (given to measurement under appendix_e)
    max_categories: int = 4  # columns with at most this many public values are categorical
    seed: int = 0  # non-private randomness only: appendix_e's random marginals, sampling; never the DP noise
    noise_seed: int | None = None  # None: DP noise from OS entropy; an int: reproducible, NOT DP, refused on release

    def __post_init__(self) -> None:
        if self.selection not in ("mst", "appendix_e"):
            raise InvalidData(f"unknown PGM selection '{self.selection}': choose mst or appendix_e")
        if self.bins < 2 or self.fine_bins < self.bins:
            raise InvalidData("PGM needs bins >= 2 and fine_bins >= bins")
        if not (0 < self.one_way_share < 1 and 0 <= self.select_share < 1 and self.one_way_share + self.select_share < 1):
            raise InvalidData("PGM budget shares must be positive and leave some budget for measurement")


class PGMSynthesizer(GridBaseline):
    """``PGMSynthesizer().pretrain(public).finetune(sensitive, 10, 1e-5).sample(n)``."""

    name = "pgm"
    label = "PGM"
    config_cls = PGMConfig
    state_key = "measurements"
    native_accounting = "zcdp"
    mechanism = "MST / Private-PGM: Gaussian marginal measurements + graphical-model estimation (mbi)"

    def __init__(self, config: PGMConfig | None = None) -> None:
        super().__init__(config or PGMConfig())
        self.discretizer: Discretizer | None = None
        self.measurements: list[dict[str, Any]] = []  # {"clique": [col idx], "y": noisy counts, "stddev": float}
        self._model: Any = None

    # ------------------------------------------------------------------------------------------------ fit
    def finetune(
        self, sensitive: OfflineDataset, epsilon: float, delta: float, unit: str = "transition", **kwargs: Any
    ) -> "PGMSynthesizer":
        """Measure the chosen marginals of the sensitive transitions with (ε, δ)-DP and fit the graphical model."""
        check_budget_args(sensitive, epsilon, delta, unit)
        self._require_grid()
        self._set_dims(sensitive)
        mbi = require_mbi()
        cfg = self.config
        t0 = time.perf_counter()
        rng = np.random.default_rng(cfg.seed)  # data-independent choices only (appendix_e's random marginals)
        source = NoiseSource(cfg.noise_seed)  # every DP draw; OS entropy unless noise_seed is set (then NOT DP)
        ledger = self._start_ledger(delta, unit)
        self._set_template(sensitive)
        rows = sensitive.transition_matrix()
        rho = zcdp_rho_for(epsilon, delta)
        rho_one = cfg.one_way_share * rho
        rho_sel = cfg.select_share * rho if cfg.selection == "mst" else 0.0
        rho_meas = rho - rho_one - rho_sel

        disc = self.discretizer
        ledger.append(disc.fit_dp_sensitive(rows, rho=rho_one, coarse_bins=cfg.bins, source=source))
        codes = disc.encode(rows)
        sizes = disc.sizes
        d = disc.dim
        sigma_one = gaussian_sigma_for_rho(rho_one, d)
        self.measurements = []
        for j in range(d):
            merged = np.bincount(disc.groups[j], minlength=sizes[j]).mean()
            self.measurements.append(
                {"clique": [j], "y": disc.coarse_one_way(j).tolist(), "stddev": float(sigma_one * np.sqrt(merged))}
            )

        if cfg.selection == "mst":
            cliques = self._select_mst(codes, sizes, rho_sel, source)
            ledger.append(
                LedgerEvent.zcdp(
                    "MST selection (exponential mechanism per tree edge)",
                    rho=rho_sel,
                    unit="transition",
                    rounds=d - 1,
                    epsilon_per_round=float(np.sqrt(8 * rho_sel / max(d - 1, 1))),
                    score_sensitivity=MST_SCORE_SENSITIVITY,
                    score="L1 gap to the independent model from the noisy one-way marginals and noisy total",
                    noise=source.kind,
                )
            )
        else:
            cliques = self._select_random(sizes, rng, mbi)
        if cliques:
            sigma = gaussian_sigma_for_rho(rho_meas, len(cliques))
            tables = [marginal_counts(codes, cl, sizes).ravel() for cl in cliques]
            noisy, _ = gaussian_mechanism(  # one call, len(cliques) tables of L2 sensitivity 1 each
                np.concatenate(tables),
                sigma=sigma,
                sensitivity=1.0,
                count=len(cliques),
                name=f"{len(cliques)} marginal measurements ({cfg.selection})",
                ledger=ledger,
                source=source,
                unit="transition",
                rho=float(rho_meas),
                cliques=[[disc.names[c] for c in cl] for cl in cliques],
            )
            for cl, y in zip(cliques, np.split(noisy, np.cumsum([len(t) for t in tables])[:-1])):
                self.measurements.append({"clique": list(cl), "y": y.tolist(), "stddev": float(sigma)})
        t_meas = time.perf_counter() - t0
        self._estimate()
        self.history.append(
            {
                "phase": "finetune",
                "epsilon_target": float(epsilon),
                "delta": float(delta),
                "rho": float(rho),
                "selection": cfg.selection,
                "n_cliques": len(cliques),
                "measure_seconds": t_meas,
                "estimate_seconds": time.perf_counter() - t0 - t_meas,
            }
        )
        return self

    def _select_mst(self, codes: np.ndarray, sizes: list[int], rho_sel: float, source: NoiseSource) -> list[tuple[int, ...]]:
        """Kruskal's algorithm where each edge is an exponential-mechanism draw (MST, McKenna et al. 2021); the
        d − 1 draws together cost ``rho_sel`` (the caller records that one zCDP event)."""
        disc = self.discretizer
        d = disc.dim
        if d < 2:
            return []
        pairs = list(itertools.combinations(range(d), 2))
        score = mst_scores(codes, sizes, [disc.coarse_one_way(j) for j in range(d)], pairs)
        eps_round = np.sqrt(8 * rho_sel / (d - 1))
        comp = list(range(d))

        def find(a: int) -> int:
            while comp[a] != a:
                comp[a] = comp[comp[a]]
                a = comp[a]
            return a

        chosen = []
        for _ in range(d - 1):
            cand = [p for p in pairs if find(p[0]) != find(p[1])]
            k, _ = exponential_mechanism(
                np.array([score[p] for p in cand]), epsilon=float(eps_round), sensitivity=MST_SCORE_SENSITIVITY,
                name="MST edge", source=source,
            )
            i, j = cand[k]
            comp[find(i)] = find(j)
            chosen.append((i, j))
        return chosen

    def _select_random(self, sizes: list[int], rng: np.random.Generator, mbi: Any) -> list[tuple[int, ...]]:
        """Appendix E's random two- and three-way marginals, kept while the junction tree fits ``max_model_mb``."""
        from mbi.junction_tree import hypothetical_model_size

        cfg = self.config
        d = len(sizes)
        names = [f"c{j}" for j in range(d)]
        domain = mbi.Domain(names, sizes)
        pairs = list(itertools.combinations(range(d), 2))
        triples = list(itertools.combinations(range(d), 3))
        picks = [pairs[i] for i in rng.permutation(len(pairs))[: cfg.two_way]]
        picks += [triples[i] for i in rng.permutation(len(triples))[: cfg.three_way]]
        chosen: list[tuple[int, ...]] = []
        for cl in picks:
            trial = chosen + [cl]
            if hypothetical_model_size(domain, [tuple(names[c] for c in t) for t in trial]) <= cfg.max_model_mb:
                chosen.append(cl)
        return chosen

    def _estimate(self) -> None:
        mbi = require_mbi()
        disc = self.discretizer
        names = [f"c{j}" for j in range(disc.dim)]
        domain = mbi.Domain(names, disc.sizes)
        meas = [
            mbi.LinearMeasurement(np.asarray(m["y"], dtype=np.float64), tuple(names[c] for c in m["clique"]), stddev=m["stddev"])
            for m in self.measurements
        ]
        self._model = mbi.estimation.MirrorDescent().estimate(domain, meas, iters=self.config.iters)

    # --------------------------------------------------------------------------------------------- sample
    def sample(self, n: int, *, seed: int | None = None, name: str | None = None, **kwargs: Any) -> OfflineDataset:
        """``n`` synthetic transitions drawn from the graphical model and decoded to continuous values."""
        if n < 1:
            raise InvalidData(f"number of samples must be positive, got {n}")
        if self._ledger is None or self.discretizer is None:
            raise InvalidData("PGM has not been fitted on sensitive data yet")
        if self._model is None:
            self._estimate()
        seed = self.config.seed if seed is None else seed
        state = np.random.get_state()
        np.random.seed(seed)  # mbi draws from the global numpy generator
        try:
            syn = self._model.synthetic_data(int(n), method="sample")
        finally:
            np.random.set_state(state)
        d = self.discretizer.dim
        codes = np.stack([np.asarray(syn.data[f"c{j}"], dtype=np.int64) for j in range(d)], 1)
        rows = self.discretizer.decode(codes, np.random.default_rng(seed + 1))
        return self._to_dataset(rows, name, {"requested": int(n), "seed": seed})
