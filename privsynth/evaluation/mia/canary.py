"""Canary audit of the real release pipeline: an empirical ε lower bound for what ``privsynth synthesize`` publishes.

Protocol (one run, Steinke, Nasr & Jagielski 2023; the bound is :func:`privsynth.privacy.audit.audit_scores`):

1. Craft m canary units out of distribution (:func:`make_canaries`): each is a transition (or a short trajectory of
   ``canary_length`` transitions around one point) whose continuous columns sit ``radius`` public standard
   deviations (root mean square per column) from the public mean, in a random direction, so canaries are rare states
   far from the data and from each other. Only public statistics are used to craft them.
2. Flip a fair coin per canary; insert the "heads" ones into the sensitive data as extra episodes.
3. Run the real pipeline, :func:`privsynth.release.synthesize` (pre-trained public model -> DP fine-tune -> sample
   from the EMA weights -> release guard), at the claimed ε.
4. Score every canary from the **released rows** (calibrated DCR, the data-only attack of a published release) and,
   when the weights are attacked too, with the reference-calibrated loss attack on the released EMA weights.
5. Guess "in" for the k highest scores and "out" for the k lowest (k fixed in advance), count correct guesses, and
   turn them into the largest ε rejected at the given confidence, printed beside the card's ε.

"Noise off" runs the same config as the no-privacy ablation (``private=False``: plain fine-tuning, no clipping, no
noise); the pipeline then refuses to release it as DP, so its rows are audited without the guard and compared with
the ε the same config claims with noise on. A sound pipeline keeps the noise-on bound below its claim; the noise-off
bound shows the audit is strong enough to see a leak. The one-run bound is capped near log(2k / log(1/(1−conf)))
even for a perfect attack (reported as ``max_bound``), so claims much above that cannot be refuted by this audit at this m.

The coins and canary directions are the auditor's experimental design and come from ``seed``; the mechanism's
privacy noise is untouched (it comes from the DP engine).
"""
from __future__ import annotations

import copy
import dataclasses
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privsynth.data.units import DATA_UNITS, check_unit
from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData
from privsynth.evaluation.mia.epsilon import needed_text

__all__ = ["CanaryAuditConfig", "make_canaries", "insert_canaries", "score_canaries_from_release",
           "run_canary_audit", "assess_power", "canaries_needed"]


@dataclass
class CanaryAuditConfig:
    """One canary audit: the canaries, the claim, the pipeline's scale. Defaults: the demo scale, minutes on CPU."""

    canaries: int = 500  # m; each is included with probability 1/2
    unit: str = "trajectory"  # privacy unit of the release (and of a canary): one user = one trajectory
    canary_length: int = 16  # transitions per canary (1 with unit "transition")
    radius: float = 3.0  # canary offset from the public mean: root-mean-square per column, in public std units
    jitter: float = 0.05  # per-row spread of a trajectory canary around its point (public std units)
    epsilon: float = 1.0  # the claim audited
    delta: float = 1e-5
    samples: int = 20_000  # synthetic transitions released per run
    finetune_epochs: float | None = 50.0  # None = the preset's
    finetune_batch_size: int | None = 256  # transitions per step (unit transition, and the noise-off ablation)
    guesses: int | None = None  # k on each side; None = m // 10
    confidence: float = 0.95
    preset: str = "demo"  # synthesizer preset (privsynth.synth.config)
    noise: Sequence[str] = ("on", "off")
    white_box: bool = True  # also score canaries with the loss attack on the released weights
    seed: int = 0  # canary design and inclusion coins (not privacy noise)


def _discrete_columns(rows: np.ndarray, max_values: int = 10) -> np.ndarray:
    return np.array([np.unique(rows[:, j]).size <= max_values for j in range(rows.shape[1])])


def make_canaries(public: OfflineDataset | Sequence[OfflineDataset], cfg: CanaryAuditConfig,
                  rng: np.random.Generator) -> OfflineDataset:
    """``cfg.canaries`` out-of-distribution canary episodes, crafted from public statistics only."""
    pubs = [public] if isinstance(public, OfflineDataset) else list(public)
    if not pubs:
        raise InvalidData("canaries are crafted from public data: pass at least one public dataset")
    rows = np.concatenate([p.transition_matrix() for p in pubs]).astype(np.float64)
    o, a = pubs[0].obs_dim, pubs[0].act_dim
    m, length = cfg.canaries, cfg.canary_length
    if m < 2 or length < 1:
        raise InvalidData(f"need at least 2 canaries of at least 1 transition, got {m} x {length}")
    mu, sd = rows.mean(0), np.maximum(rows.std(0), 1e-6)
    discrete = _discrete_columns(rows)
    act = np.zeros(rows.shape[1], dtype=bool)
    act[o : o + a] = True
    free = ~discrete & ~act  # states, reward, next states: pushed out to the sphere
    u = rng.normal(size=(m, int(free.sum())))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    centres = np.tile(mu, (m, 1))
    centres[:, free] = mu[free] + cfg.radius * np.sqrt(free.sum()) * u * sd[free]  # rms of a column: radius std
    lo, hi = rows[:, act].min(0), rows[:, act].max(0)
    centres[:, act] = rng.uniform(lo, hi, size=(m, a))  # valid actions, random
    for j in np.flatnonzero(discrete & ~act):
        centres[:, j] = rng.choice(np.unique(rows[:, j]), size=m)
    out = np.repeat(centres, length, axis=0)
    if length > 1:
        noise = rng.normal(size=(m * length, rows.shape[1])) * cfg.jitter * sd
        noise[:, discrete | act] = 0.0
        out += noise
    term_col = rows.shape[1] - 1
    out[:, term_col] = 0.0  # canaries never terminate: they end by a timeout
    timeouts = np.zeros(m * length, dtype=bool)
    timeouts[length - 1 :: length] = True
    info = dataclasses.replace(pubs[0].info, name="canaries", sensitive=True, privacy_card=None)
    return OfflineDataset.from_transition_matrix(out.astype(np.float32), o, a,
                                                 episode_ids=np.repeat(np.arange(m), length), timeouts=timeouts,
                                                 info=info)


def insert_canaries(sensitive: OfflineDataset, canaries: OfflineDataset, included: np.ndarray) -> OfflineDataset:
    """The sensitive data plus the included canaries as extra episodes (same name, still marked sensitive)."""
    pos = np.flatnonzero(np.asarray(included, dtype=bool))
    if pos.size == 0:
        return sensitive
    chosen = canaries.select_episodes(pos)
    return OfflineDataset.concatenate([sensitive, chosen], info=sensitive.info).mark_sensitive(True)


def score_canaries_from_release(release: OfflineDataset | np.ndarray, canaries: OfflineDataset,
                                public: Sequence[OfflineDataset] | None) -> np.ndarray:
    """Per-canary scores from the released rows only: calibrated DCR (plain DCR without public data), episode mean."""
    from privsynth.evaluation.mia.data_attacks import make_data_attack

    reference = OfflineDataset.concatenate(list(public)) if public else None
    attack = make_data_attack("dcr_ref" if reference is not None else "dcr", "trajectory")
    return attack.fit(release, reference).score(canaries)


def _claimed(result: Any, cfg: CanaryAuditConfig) -> float:
    return float(result.epsilon) if result.epsilon is not None else float(cfg.epsilon)


def run_canary_audit(
    sensitive: OfflineDataset,
    public: Sequence[OfflineDataset],
    cfg: CanaryAuditConfig,
    *,
    pretrained: str | Path | None = None,
    reference_model: str | Path | None = None,
    workdir: str | Path | None = None,
    config: Any | None = None,
    progress: bool = False,
    log=print,
) -> dict[str, Any]:
    """Insert canaries, run :func:`privsynth.release.synthesize` once per noise setting, and bound ε from the guesses.

    The public model is pre-trained once (or ``pretrained`` is loaded) and every run fine-tunes a fresh copy of it,
    so noise on and noise off differ only in the DP fine-tuning. ``config`` (a ``TransitionSynthConfig``) replaces
    the preset. Returns a JSON-ready dict with one entry per run.
    """
    from privsynth.evaluation.mia.adapters import as_adapter
    from privsynth.evaluation.mia.attacks import LossAttack, ReferenceAttack
    from privsynth.privacy.audit import audit_scores, epsilon_lower_bound
    from privsynth.release import synthesize
    from privsynth.synth import TransitionSynthesizer
    from privsynth.synth.config import cpu_config, demo_config
    from privsynth.synth.pretrained import resolve_pretrained

    check_unit(cfg.unit, DATA_UNITS)
    if cfg.unit == "transition" and cfg.canary_length != 1:
        raise InvalidData("a transition-level release protects one transition: use --canary-length 1 "
                          "(or --unit trajectory for whole-trajectory canaries)")
    bad = [n for n in cfg.noise if n not in ("on", "off")]
    if bad:
        raise InvalidData(f"noise setting must be 'on' or 'off', got {bad}")
    rng = np.random.default_rng(cfg.seed)
    canaries = make_canaries(public if public else _public_of(pretrained), cfg, rng)
    included = rng.random(cfg.canaries) < 0.5
    k = cfg.guesses if cfg.guesses is not None else cfg.canaries // 10
    if 2 * k > cfg.canaries or k < 1:
        raise InvalidData(f"guesses per side must be in [1, m/2], got {k} for m = {cfg.canaries}")
    data = insert_canaries(sensitive.mark_sensitive(True), canaries, included)
    wd = Path(workdir) if workdir else Path(tempfile.mkdtemp(prefix="privsynth-canary-"))
    wd.mkdir(parents=True, exist_ok=True)
    base = copy.deepcopy(config) if config is not None else (demo_config if cfg.preset == "demo" else cpu_config)()
    base.seed = cfg.seed
    if cfg.finetune_epochs is not None:
        base.finetune.epochs = float(cfg.finetune_epochs)
    if cfg.finetune_batch_size is not None:
        base.finetune.batch_size = int(cfg.finetune_batch_size)
    # every score source is one test of the same claim and any of them refuting it is a violation (exit status 1):
    # Bonferroni over the sources, so a violation holds at cfg.confidence whichever source shows it
    sources = 2 if cfg.white_box else 1
    per_source = 1.0 - (1.0 - cfg.confidence) / sources
    seconds: dict[str, float] = {}
    t0 = time.perf_counter()
    if pretrained is not None:
        pre_path = resolve_pretrained(pretrained)
    else:
        pre_path = wd / "public-pretrained.pt"
        if not pre_path.exists():
            log(f"pre-training the public model on {sum(p.n_transitions for p in public)} public transitions")
            TransitionSynthesizer(base).pretrain(list(public), progress=progress).save(pre_path)
    seconds["pretrain"] = round(time.perf_counter() - t0, 2)
    ref_adapter = as_adapter(TransitionSynthesizer.load(reference_model or pre_path)) if cfg.white_box else None

    runs = []
    for noise in cfg.noise:
        t0 = time.perf_counter()
        conf = dataclasses.replace(base, private=(noise == "on"))
        log(f"running the release pipeline with noise {noise}: {data.n_transitions} sensitive transitions "
            f"({int(included.sum())} of {cfg.canaries} canaries inserted), claimed eps = {cfg.epsilon:g}")
        result = synthesize(data, epsilon=cfg.epsilon, delta=cfg.delta, public=list(public) or None, unit=cfg.unit,
                            n=cfg.samples, config=conf, pretrained=pre_path, progress=progress)
        claimed = _claimed(result, cfg)
        scores = {"release": score_canaries_from_release(result.dataset, canaries, public)}
        if cfg.white_box:
            attack = ReferenceAttack(LossAttack(sigma=0.1, repeats=16), ref_adapter)
            adapter = as_adapter(result.synthesizer, "trajectory")
            adapter.reduce = "mean"
            scores["weights"] = attack.score(adapter, canaries, seed=cfg.seed)
        audits = {src: audit_scores(s, included, k_pos=k, k_neg=k, delta=cfg.delta, claimed_epsilon=claimed,
                                    confidence=per_source).to_dict() for src, s in scores.items()}
        card = result.dataset.info.privacy_card or {}
        runs.append({
            "label": f"noise {noise}",
            "noise": noise,
            "claimed_epsilon_source": "privacy card" if result.epsilon is not None else
            "the epsilon the same config claims with noise on (the no-privacy ablation has no card epsilon)",
            "card": {k_: card.get(k_) for k_ in ("epsilon", "delta", "unit", "accountant", "private",
                                                 "noise_multiplier", "sample_rate", "steps")},
            "audits": audits,
            "seconds": round(time.perf_counter() - t0, 2),
            "pipeline_seconds": {k_: round(v, 2) for k_, v in result.seconds.items()},
        })
        log(f"  {runs[-1]['label']}: " + ", ".join(
            f"{src}: {a['correct']}/{a['guesses']} correct, eps >= {a['epsilon_lower_bound']:.2f} (claim {claimed:.2f})"
            for src, a in audits.items()))
    return assess_power({
        "canaries": cfg.canaries,
        "included": int(included.sum()),
        "guesses_per_side": k,
        "confidence": per_source,  # per score source (Bonferroni over the sources)
        "family_confidence": cfg.confidence,
        "tests": sources,
        # the largest bound this design can show: every guess right (one-run audits are capped near log(2k / 3))
        "max_bound": epsilon_lower_bound(cfg.canaries, 2 * k, 2 * k, cfg.delta, per_source),
        "config": {**dataclasses.asdict(cfg), "noise": list(cfg.noise)},
        "description": f"{cfg.canaries} {cfg.unit} canaries of {cfg.canary_length} transition(s) at {cfg.radius:g} "
                       f"public std from the public mean in random directions, each inserted with probability 1/2 "
                       f"into {sensitive.info.name} ({sensitive.n_transitions} transitions); {k} guesses per side "
                       "fixed in advance; scores: calibrated DCR of the canary to the released rows ('release') "
                       "and public-reference-calibrated loss on the released EMA weights ('weights').",
        "pretrain_seconds": seconds["pretrain"],
        "runs": runs,
    })


def assess_power(result: dict[str, Any]) -> dict[str, Any]:
    """Give every run's audit a ``verdict`` and the result a ``power`` entry per score source (in place).

    A noise-on audit that refutes its claim is a violation whatever else happened. One that does not is only evidence
    when the audit could have seen a leak: the noise-off control (the same pipeline without clipping or noise) must be
    refuted by the same canaries and scores, and the design must be able to show more than the claim at all
    (``max_bound``). Otherwise the result is uninformative, or of unknown power without a control. The result's
    ``status`` is the noise-on runs' worst verdict (``violation``, ``uninformative``, ``consistent (power unknown)``,
    ``consistent``; ``not_tested`` without a noise-on run), ``best_possible_bound`` the design's ``max_bound`` and
    ``canaries_needed``, when the design is capped below the claim, the fewest canaries that could refute it
    (:func:`canaries_needed`).
    """
    runs = result.get("runs", [])
    off = next((r for r in runs if r.get("noise") == "off"), None)
    max_bound = result.get("max_bound")
    power: dict[str, dict[str, Any]] = {}
    result["best_possible_bound"] = max_bound
    result["canaries_needed"] = None
    for run in runs:
        for src, a in run.get("audits", {}).items():
            if run.get("noise") == "off":
                a["verdict"] = "control not detected" if a["consistent"] else "control detected"
                continue
            claimed = a["claimed_epsilon"]
            ctrl = off["audits"].get(src) if off else None
            if max_bound is not None and max_bound <= claimed:
                if result.get("canaries") and result.get("guesses_per_side"):
                    result["canaries_needed"] = canaries_needed(result, claimed)
                    more = "a test of it needs " + needed_text(result["canaries_needed"], "canaries",
                                                                _delta_of(result, a))
                else:
                    more = "more canaries needed"
                informative, reason = False, (
                    f"this design shows at most ε ≥ {max_bound:.2f} even with every guess right, not more than the "
                    f"claimed ε = {claimed:.2f}: it cannot refute the claim ({more})")
            elif ctrl is None:
                informative, reason = None, ("no noise-off control was run (--noise both runs one): whether these "
                                             "canaries and scores can see a leak at all is unknown")
            elif ctrl["consistent"]:
                informative, reason = False, (
                    f"the noise-off control was not detected ({ctrl['correct']}/{ctrl['guesses']} guesses right, "
                    f"ε ≥ {ctrl['epsilon_lower_bound']:.2f}, not above {ctrl['claimed_epsilon']:.2f}): the audit "
                    "had no power, so its noise-on result is uninformative")
            else:
                informative, reason = True, (
                    f"the noise-off control was detected ({ctrl['correct']}/{ctrl['guesses']} right, ε ≥ "
                    f"{ctrl['epsilon_lower_bound']:.2f} > {ctrl['claimed_epsilon']:.2f}): the audit could see a leak")
            if not a["consistent"]:
                a["verdict"] = "violation"
            elif informative is False:
                a["verdict"] = "uninformative"
            elif informative is None:
                a["verdict"] = "consistent (power unknown)"
            else:
                a["verdict"] = "consistent"
            power[src] = {"informative": informative, "reason": reason}
    result["power"] = power
    verdicts = [a.get("verdict") for r in runs if r.get("noise") == "on" for a in r.get("audits", {}).values()]
    result["status"] = next((v for v in ("violation", "uninformative", "consistent (power unknown)", "consistent")
                             if v in verdicts), "not_tested")
    return result


def _delta_of(result: dict[str, Any], audit: dict[str, Any]) -> float:
    return float(audit.get("delta", (result.get("config") or {}).get("delta", 0.0)) or 0.0)


def canaries_needed(result: dict[str, Any], claimed: float) -> dict[str, Any]:
    """The fewest canaries whose design (this one's share of guesses, every guess right, the same confidence and δ)
    refutes ``claimed``: ``{"units", "guesses_per_side", "more_than"}``."""
    from privsynth.privacy.audit import design_size_needed, p_value

    runs = result.get("runs") or [{}]
    delta = _delta_of(result, next(iter(runs[0].get("audits", {}).values()), {}))
    alpha = 1.0 - float(result.get("confidence", 0.95))
    return design_size_needed(lambda m, k: p_value(m, 2 * k, 2 * k, claimed, delta) <= alpha,
                              units=int(result["canaries"]), guesses=int(result["guesses_per_side"]))


def _public_of(pretrained) -> list[OfflineDataset]:
    raise InvalidData("canaries are crafted from public data: pass --public datasets (also with --pretrained)")
