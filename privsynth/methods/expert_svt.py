"""Expert-level stable-prefix release by the sparse vector technique (seed paper Algorithms 1 and 2).

Sharma, Vinod et al., "Preserving Expert-Level Privacy in Offline RL" (TMLR 2025), Sec. 4–5. The private database is
the set of expert policies Π (add/remove one expert with all its trajectories). For T randomly chosen logged
trajectories, Algorithm 2 releases the longest prefix whose **count** (eq. 8–10)

    count_τ(Π) = Σ_i Π_{j ≤ |τ|} π_i(a_j | s_j)

stays above a noisy threshold θ̂ = θ + (4/ε')ln(1/δ') + Lap(2/ε'), testing each prefix with fresh Lap(4/ε') noise
(Algorithm 1) and stopping at the first failure. Constants (Alg. 2 lines 1–3, Thm 5.3/5.5):

    ε' = ε₁ / sqrt(32 T ln(2/δ₁)),  δ' = δ₁ / (2 T L),  c_min = e^{ε'}/(e^{ε'} − 1),  θ = c_min / p_min

with L a *public* horizon cap (the environment's data horizon, or a cap the user gives; never the longest logged
trajectory, which is a statistic of the sensitive data); each round tests at most L prefixes. Each round is
(2ε', δ₁/(2T))-DP and T rounds compose (advanced composition, Dwork & Roth Thm 3.20, slack δ₁/2) to (ε₁, δ₁);
:func:`svt_constants` re-checks that bound for every input because
the paper applies Cor. 3.21 outside its ε < 1 range.

Ambiguities of the paper's text resolved as follows: Lap(4/ε') for queries, Lap(2/ε') for the threshold (drawn once per
trajectory), the count's "²" is a footnote marker, the inner loop runs to |τ| and halts at the first ⊥.

The guarantee is distributional (the paper's Sec. 5 analysis): it treats each processed trajectory as a fresh rollout of a uniformly
random expert. ``sampler="expert"`` (the default) draws an expert uniformly and then one of its unused trajectories,
which is the analysed A₁ as long as no expert is drawn more than N times (else the release refuses). The paper's
reshuffle, ``sampler="trajectory"`` (T distinct trajectories of the fixed logged dataset), only approximates it; its
ledger event and card say so.

Randomness: the expert / trajectory draws and all Laplace noise come from a
:class:`~privsynth.privacy.noise.NoiseSource` (OS entropy unless ``noise_seed`` is given, which marks the event
not DP), never from a seed someone can read.

δ: the paper ran its experiments at δ = 1/m (m experts = privacy units). privsynth requires δ < 1/N for N privacy
units (:func:`privsynth.privacy.accounting.check_delta`; a δ = 1/N guarantee allows publishing one unit's data
outright), so every path that releases or trains on the experts' data refuses a total δ ≥ 1/m
(:func:`check_expert_delta`) and the default is :func:`default_delta` = 1/(10m).

Everything here is written from the paper's pseudo-code (no public code exists); counts are computed in log space
(logsumexp over experts of cumulative log-probabilities) to avoid underflow.
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from privsynth.errors import InvalidData, PrivacyError
from privsynth.privacy.accounting import check_delta
from privsynth.privacy.count import count_epsilon, noisy_unit_count
from privsynth.privacy.ledger import Ledger, LedgerEvent
from privsynth.privacy.noise import NoiseSource

__all__ = [
    "SVTConstants", "svt_constants", "ExpertPolicies", "log_count", "prefix_counts", "prefix_query",
    "DataReleaseConfig", "ReleaseResult", "data_release", "svt_round", "budget_split", "public_horizon",
    "release_outputs", "release_order", "APPROX_SAMPLER_CAVEAT", "default_delta", "check_expert_delta",
]

APPROX_SAMPLER_CAVEAT = (
    "sampler='trajectory' processes T distinct trajectories of the fixed logged dataset; the (eps1, delta1) analysis "
    "assumes each is a fresh rollout of a uniformly random expert (sampler='expert'), so this guarantee is approximate")


# ------------------------------------------------------------------------------------------------ δ
# The δ a release uses when the caller gives none: a public constant. 1/(10m) would print the exact number of
# experts on the card, and m is private under add/remove one expert (docs/privacy.md); a δ at or above 1/m is still
# refused, to the operator.
PUBLIC_DEFAULT_DELTA = 1e-6


def default_delta(m: int) -> float:
    """The default total δ of an expert-level release on m experts: 1/(10m), strictly below 1/m.

    The paper used δ = 1/m; privsynth requires δ < 1/N for N privacy units (here the m experts), since a δ = 1/N
    guarantee allows publishing one unit's data outright."""
    m = int(m)
    if m < 1:
        raise PrivacyError(f"the number of experts m must be at least 1, got {m}")
    return 1.0 / (10 * m)


def check_expert_delta(delta_total: float, m: int, what: str = "expert-level release") -> float:
    """Refuse a total δ outside (0, 1/m) for m experts (:func:`privsynth.privacy.accounting.check_delta` with N = m),
    with one line saying what to do."""
    try:
        return check_delta(delta_total, int(m))
    except PrivacyError as exc:
        raise PrivacyError(f"{what}: {exc} (the unit is one expert; the paper's delta = 1/m is refused, the default "
                           f"is 1/(10m) = {default_delta(m):.3g})") from None


# ------------------------------------------------------------------------------------------------ constants
@dataclass(frozen=True)
class SVTConstants:
    """Algorithm 2's constants for (ε₁, δ₁, T, L, p_min) plus diagnostics (paper Sec. 5, Thm 5.3 / 5.5)."""

    eps1: float
    delta1: float
    n_rounds: int  # T: trajectories traversed
    max_len: int  # L: longest trajectory (worst case, enters δ')
    p_min: float
    eps_prime: float  # ε'
    delta_prime: float  # δ'
    c_min: float
    theta: float  # c_min / p_min
    thr_shift: float  # (4/ε') ln(1/δ')
    thr_scale: float  # Laplace scale of the threshold noise, 2/ε'
    query_scale: float  # Laplace scale of the query noise, 4/ε'
    eps_round: float  # 2ε' (Thm 5.3)
    delta_round: float  # δ₁ / (2T)
    eps_adv_composition: float  # Dwork–Roth Thm 3.20 bound on the T-fold composition (≤ ε₁ is asserted)

    @property
    def expected_threshold(self) -> float:
        """E[θ̂] = θ + (4/ε')ln(1/δ')."""
        return self.theta + self.thr_shift

    def max_consensus_length(self, m: int, n_actions: int) -> int:
        """Largest k with m·hi^k ≥ E[θ̂] (all experts agree, noise ignored): the longest prefix any count can pass."""
        hi = 1.0 - (n_actions - 1) * self.p_min
        if m * hi < self.expected_threshold:
            return 0
        return int(math.floor(math.log(self.expected_threshold / m) / math.log(hi)))

    def to_dict(self) -> dict[str, Any]:
        d = {k: getattr(self, k) for k in self.__dataclass_fields__}
        d["expected_threshold"] = self.expected_threshold
        return d


def svt_constants(eps1: float, delta1: float, n_rounds: int, max_len: int, p_min: float, *,
                  check_composition: bool = True) -> SVTConstants:
    """Compute Algorithm 2's constants; refuse inputs the analysis does not cover.

    ``check_composition=False`` skips the advanced-composition assertion (only for tests of a single round, whose
    guarantee (2ε', δ₁/(2T)) does not need it)."""
    if not (eps1 > 0 and math.isfinite(eps1)):
        raise PrivacyError(f"eps1 must be positive and finite for the stable release, got {eps1} (use eps1 = 0 to skip it)")
    if not 0 < delta1 < 1:
        raise PrivacyError(f"delta1 must be in (0, 1) when eps1 > 0, got {delta1}")
    if n_rounds < 1 or max_len < 1:
        raise PrivacyError("the number of SVT rounds T and the trajectory length L must be at least 1")
    if not 0 < p_min < 1:
        raise PrivacyError(f"p_min must be in (0, 1), got {p_min}")
    eps_p = eps1 / math.sqrt(32 * n_rounds * math.log(2 / delta1))
    delta_p = delta1 / (2 * n_rounds * max_len)
    c_min = math.exp(eps_p) / math.expm1(eps_p)
    e0 = 2 * eps_p
    eps_adv = e0 * math.sqrt(2 * n_rounds * math.log(2 / delta1)) + n_rounds * e0 * math.expm1(e0)
    if check_composition and eps_adv > eps1 * (1 + 1e-12):
        raise PrivacyError(f"advanced composition gives {eps_adv:.4g} > eps1 = {eps1} for T = {n_rounds}: lower T or eps1")
    return SVTConstants(eps1=float(eps1), delta1=float(delta1), n_rounds=int(n_rounds), max_len=int(max_len),
                        p_min=float(p_min), eps_prime=eps_p, delta_prime=delta_p, c_min=c_min, theta=c_min / p_min,
                        thr_shift=(4 / eps_p) * math.log(1 / delta_p), thr_scale=2 / eps_p, query_scale=4 / eps_p,
                        eps_round=e0, delta_round=delta1 / (2 * n_rounds), eps_adv_composition=eps_adv)


def budget_split(env: str, epsilon: float, delta: float, rule: str = "paper") -> tuple[float, float, float, float]:
    """(ε₁, δ₁, ε₂, δ₂) by the paper's rules (App. B.3).

    ``paper``: Acrobot gives everything to the release (ε₁ = ε, δ₁ = δ); otherwise ¾ε / 9δ/10 to the release and the
    rest to DP-SGD. ``split``: always ¾ / ¼. ``stable``: all to the release. ``dpsgd``: all to DP-SGD.
    """
    if rule == "paper":
        rule = "stable" if env == "acrobot" else "split"
    if rule == "stable":
        return epsilon, delta, 0.0, 0.0
    if rule == "dpsgd":
        return 0.0, 0.0, epsilon, delta
    if rule == "split":
        return 0.75 * epsilon, 0.9 * delta, 0.25 * epsilon, 0.1 * delta
    raise InvalidData(f"unknown budget split '{rule}': choose paper, split, stable or dpsgd")


# ------------------------------------------------------------------------------------------------ count, Alg. 1
class ExpertPolicies(Protocol):
    """Query access to the sensitive experts (Assumption 3.5): log π_i(a_j|s_j) for all i, j as [m, k]."""

    p_min: float

    def log_probs(self, obs: np.ndarray, actions: np.ndarray) -> np.ndarray: ...


def prefix_counts(experts: ExpertPolicies, obs: np.ndarray, actions: np.ndarray) -> np.ndarray:
    """count_{τ_{1:k}}(Π) for k = 1..|τ| in one pass: [|τ|] (float64, via log space)."""
    lp = np.asarray(experts.log_probs(obs, actions), dtype=np.float64)  # [m, k]
    return np.exp(log_count(np.cumsum(lp, axis=1)))


def log_count(cum_logp: np.ndarray) -> np.ndarray:
    """logsumexp over experts (axis 0) of cumulative log-probabilities."""
    mx = cum_logp.max(axis=0)
    return mx + np.log(np.exp(cum_logp - mx).sum(axis=0))


def prefix_query(count: float, noisy_threshold: float, const: SVTConstants, rng: np.random.Generator) -> tuple[bool, float]:
    """Algorithm 1: ⊤ iff count + Lap(4/ε') > θ̂ (fresh noise each call). Returns (answer, noisy count)."""
    noisy = float(count) + float(rng.laplace(0.0, const.query_scale))
    return noisy > noisy_threshold, noisy


# ------------------------------------------------------------------------------------------------ Alg. 2
@dataclass
class DataReleaseConfig:
    """Settings of Algorithm 2 (paper App. B.3: T = 25 for Acrobot/CartPole at ε = 10). ``delta1`` must lie below
    1/m (:func:`data_release` refuses it otherwise); 1/30000 = :func:`default_delta` for the paper's m = 3000."""

    eps1: float = 10.0
    delta1: float = 1.0 / 30000
    n_rounds: int = 25  # T
    sampler: str = "expert"  # "expert": the analysed A₁; "trajectory": the paper's reshuffle (approximate; caveated)
    max_len: int | None = None  # L: public horizon cap; None = the environment's data horizon (public spec)
    noise_seed: int | None = None  # None: draws and noise from OS entropy; an int replays them (NOT DP)


@dataclass
class ReleaseResult:
    """Output of :func:`data_release`.

    ``stable_idx``: transition indices (into the logged data) of the released stable prefixes — the DP release
    D_stable (publishable; it carries no expert ids). ``unstable_idx``: every other transition (D_unst; never released,
    keeps its expert id through the data). ``rounds``: per processed trajectory the episode index, released length k
    and the trace of (count, noisy count) for each tested prefix and the noisy threshold (for tests and diagnostics).
    """

    const: SVTConstants | None
    stable_idx: np.ndarray
    unstable_idx: np.ndarray
    rounds: list[dict[str, Any]] = field(default_factory=list)
    sampler: str = "expert"
    noise: str = "secure"  # the NoiseSource kind of the draws
    private: bool = True  # False: D_stable is raw data (the non-private baseline), nothing here is DP

    @property
    def n_stable(self) -> int:
        return int(len(self.stable_idx))

    def ledger_event(self) -> LedgerEvent | None:
        """The (ε₁, δ₁) approximate-DP event of the release (None if it was skipped)."""
        if self.const is None:
            return None
        c = self.const
        extra = {"caveat": APPROX_SAMPLER_CAVEAT} if self.sampler != "expert" else {}
        return LedgerEvent.approx_dp("expert-svt-release", epsilon=c.eps1, delta=c.delta1, unit="expert",
                                     rounds=c.n_rounds, eps_prime=c.eps_prime, theta=c.theta, max_len=c.max_len,
                                     p_min=c.p_min, sampler=self.sampler, noise=self.noise, **extra)


def public_horizon(data, cfg: "DataReleaseConfig") -> int:
    """L: the user's cap, else the environment's public data horizon (never a statistic of the logged data)."""
    if cfg.max_len is not None:
        if int(cfg.max_len) < 1:
            raise PrivacyError(f"the horizon cap L must be at least 1, got {cfg.max_len}")
        return int(cfg.max_len)
    from privsynth.methods.expert_envs import get_spec

    return int(get_spec(data.env).horizon)


def data_release(data, experts: ExpertPolicies, cfg: DataReleaseConfig, *, keep_trace: bool = True) -> ReleaseResult:
    """Algorithm 2 on expert-tagged data (:class:`~privsynth.methods.expert_envs.ExpertData`). Touches sensitive data;
    the returned :meth:`ReleaseResult.ledger_event` is its (ε₁, δ₁) cost. ``cfg.eps1 = 0`` skips the release.
    ``keep_trace`` keeps the exact counts per round (diagnostics on the sensitive data: never release them).
    Refuses δ₁ ≥ 1/m (m = ``data.n_experts``) before touching the data."""
    n = len(data)
    if cfg.eps1 == 0:
        return ReleaseResult(None, np.zeros(0, np.int64), np.arange(n), [], sampler=cfg.sampler)
    check_expert_delta(cfg.delta1, data.n_experts, "expert-svt release (delta1)")
    if cfg.n_rounds > data.n_episodes:
        raise PrivacyError(f"T = {cfg.n_rounds} exceeds the {data.n_episodes} logged trajectories")
    L = public_horizon(data, cfg)
    const = svt_constants(cfg.eps1, cfg.delta1, cfg.n_rounds, L, experts.p_min)
    source = NoiseSource() if cfg.noise_seed is None else NoiseSource.reproducible(cfg.noise_seed)
    rng = source.numpy_rng()
    episodes = _pick_episodes(data, cfg, rng)
    stable = np.zeros(n, bool)
    rounds = []
    for e in episodes:
        sl = data.episode_slice(int(e))
        sl = slice(sl.start, min(sl.stop, sl.start + L))  # at most L prefixes per round (the analysed mechanism)
        counts = prefix_counts(experts, data.obs[sl], data.actions[sl])
        k, thr, trace = svt_round(counts, const, rng)
        stable[sl.start: sl.start + k] = True  # lines 10–12: the longest stable prefix (whole trajectory if all ⊤)
        rounds.append(dict(episode=int(e), k=k, threshold=thr, trace=trace if keep_trace else None))
    return ReleaseResult(const, np.nonzero(stable)[0], np.nonzero(~stable)[0], rounds, sampler=cfg.sampler,
                         noise=source.kind)


def release_outputs(data, experts: ExpertPolicies, cfg: DataReleaseConfig, *, env: str,
                    epsilon_total: float | None = None, delta_total: float | None = None) -> dict[str, Any]:
    """The releasing path of ``privsynth expert release`` on a dataset: everything it writes, in memory.

    ``{"result": JSON summary, "d_stable": arrays of the released stable prefixes (no expert ids), "ledger": Ledger}``.
    The summary holds the DP outputs (released prefix lengths, number of stable transitions = the size of the
    release), the settings and public facts (m experts, env, T, public L, p_min) and the Algorithm 2 constants;
    never the exact counts, the logged data's size or its longest trajectory."""
    # m is private under add/remove one expert (issue 36): the summary shows a Laplace count m~ (COUNT_SHARE of eps1,
    # privsynth.privacy.count), and the SVT runs at eps1 - eps_count so that the two compose (basic) to eps1. m itself
    # is read only inside the mechanism (the uniform expert draw) and by the delta < 1/m refusal (for the holder).
    ledger = Ledger(unit="expert", accountant="rdp", delta=cfg.delta1 if cfg.delta1 > 0 else 1e-12,
                    treated_as_public=["the horizon cap L (environment spec or user cap)",
                                       "environment dynamics and rewards (not protected, paper Sec. 3.1)"])
    m_noisy = None
    run_cfg = cfg
    if cfg.eps1 > 0:
        eps_count = count_epsilon(cfg.eps1)
        source = NoiseSource() if cfg.noise_seed is None else NoiseSource.reproducible(cfg.noise_seed)
        m_noisy, _ = noisy_unit_count(int(data.n_experts), epsilon=eps_count, unit="expert", source=source)
        # recorded as the (eps_count, 0)-DP mechanism it is: the SVT event is (eps1, delta1)-only, so the ledger
        # composes the two by summing (a Laplace event would need a share of delta1 for its RDP conversion)
        ledger.append(LedgerEvent.approx_dp("number of experts m (Laplace count)", epsilon=eps_count, delta=0.0,
                                            unit="expert", mechanism="laplace", scale=1.0 / eps_count,
                                            sensitivity=1.0, n_units_noisy=m_noisy, noise=source.kind))
        run_cfg = dataclasses.replace(cfg, eps1=cfg.eps1 - eps_count)
    rel = data_release(data, experts, run_cfg, keep_trace=False)
    ev = rel.ledger_event()
    if ev is not None:
        ledger.append(ev)
        if rel.sampler != "expert":
            ledger.notes.append(APPROX_SAMPLER_CAVEAT)
    summary = dict(env=env, experts_noisy=m_noisy, eps1=cfg.eps1, delta1=cfg.delta1, rounds=cfg.n_rounds,
                   sampler=cfg.sampler, stable_transitions=rel.n_stable, prefix_lengths=[r["k"] for r in rel.rounds],
                   constants=rel.const.to_dict() if rel.const else None)
    if epsilon_total is not None:
        summary.update(epsilon_total=epsilon_total, delta_total=delta_total)
    d_stable = data.take(release_order(data, rel))
    d_stable.pop("expert")  # D_stable is the public release; expert ids stay private
    return {"result": summary, "d_stable": d_stable, "ledger": ledger}


def release_order(data, rel: "ReleaseResult") -> np.ndarray:
    """The stable transitions prefix by prefix in the (secret, random) order of the SVT rounds, never in log order:
    the log is stored expert by expert, so log order (or a logged episode index) tells which expert produced a
    released prefix."""
    parts = [np.arange(int(data.ep_start[r["episode"]]), int(data.ep_start[r["episode"]]) + int(r["k"]))
             for r in rel.rounds if int(r["k"]) > 0]
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, np.int64)


def svt_round(counts: np.ndarray, const: SVTConstants, rng: np.random.Generator) -> tuple[int, float, list]:
    """One SVT round of Algorithm 2 (lines 7–13) on a trajectory's prefix counts: draw θ̂ once, test prefixes
    1..|τ| with fresh query noise, stop at the first ⊥. Returns (released length k, θ̂, [(count, noisy count)])."""
    thr = const.theta + const.thr_shift + float(rng.laplace(0.0, const.thr_scale))  # line 7, once per round
    k, trace = 0, []
    for i in range(len(counts)):  # line 8: i = 1..|τ|
        ok, noisy = prefix_query(counts[i], thr, const, rng)  # line 9, fresh query noise
        trace.append((float(counts[i]), noisy))
        if not ok:
            break
        k = i + 1
    return k, thr, trace


def _pick_episodes(data, cfg: DataReleaseConfig, rng: np.random.Generator) -> np.ndarray:
    if cfg.sampler == "trajectory":
        return rng.permutation(data.n_episodes)[: cfg.n_rounds]
    if cfg.sampler == "expert":
        by_expert: dict[int, list[int]] = {}
        for e, who in enumerate(data.ep_expert):
            by_expert.setdefault(int(who), []).append(e)
        for v in by_expert.values():
            rng.shuffle(v)
        out = []
        for _ in range(cfg.n_rounds):
            who = int(rng.integers(data.n_experts))
            if not by_expert.get(who):
                raise PrivacyError(f"expert {who} has no unused trajectory left: lower T (exact sampler needs T ≤ N)")
            out.append(by_expert[who].pop())
        return np.asarray(out)
    raise InvalidData(f"unknown sampler '{cfg.sampler}': choose trajectory or expert")
