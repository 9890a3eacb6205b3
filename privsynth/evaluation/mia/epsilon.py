"""Test a membership audit's scores against the claimed ε: a one-run ε lower bound on members vs non-members.

The bound is the one of the canary audit, :func:`privsynth.privacy.audit.audit_scores` (Steinke, Nasr & Jagielski
2023): an auditor who makes r guesses, each right with probability at most e^ε/(1+e^ε) under (ε, δ)-DP, gets v right;
the largest ε whose p-value for v stays below 1 − confidence is rejected. Their theorem needs each guessed unit's
inclusion to be an **independent fair coin**. The members and non-members of an audit are not that: a random 80/20
split makes every unit a member with probability 0.8, and the split fixes how many are members. So the audit
**pairs** units: each of n random members is paired with a random non-member and the order within the pair is a coin
of the auditor. Whenever the split was random and independent of the records (a seeded random split of one pool, by
fixed fraction or by coin flips), swapping which record of a pair is the member leaves the split's probability
unchanged, so, given the pairs, "the first record is the member" is an independent fair coin per pair: exactly the
theorem's setting, with the pair's two records as the neighbouring pair.

Per pair the score is d = s(first) − s(second); the auditor guesses "first is the member" for the k highest d and
"second is the member" for the k lowest, with k fixed from the number of pairs before any score is seen (default a
tenth of the pairs, i.e. of the smaller set, on each side). Swapping a member for a non-member is one replace-one
step; under add/remove-one DP (the package's cards) it is two steps, so (ε, δ)-DP gives (2ε, (1 + e^ε)δ) per pair and
the bound reported in the card's own terms is the largest ε with p-value(2ε, (1 + e^ε)δ) below 1 − confidence.

Several attacks tested on the same claim are several tests: the caller gives each the confidence
1 − (1 − family confidence)/A (Bonferroni over A attacks), so a VIOLATION holds at the family confidence.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from privsynth.errors import InvalidData

__all__ = ["EpsilonTest", "pair_units", "epsilon_test", "default_guesses", "add_remove_lower_bound", "claim_of",
           "assess_claim", "rejects", "best_possible_bound", "members_needed", "needed_text",
           "relation_of", "ASSUMPTION", "GUESS_FRACTION"]

GUESS_FRACTION = 0.1  # default guesses per side: a tenth of the pairs (= of the smaller of the two sets)

ASSUMPTION = (
    "valid when (1) each unit's membership was decided at random, independently of the records (a seeded random "
    "split of one pool into members and non-members, drawn before training and at the audit's unit, as "
    "`privsynth datasets split` makes), (2) the members are records the release was trained on and the non-members "
    "records that could have been, and (3) the audit's unit is the card's unit. It holds for these attacks and these "
    "members; a bound below the claim does not show that the claim is tight."
)


@dataclass
class EpsilonTest:
    """The claim under test and the design of the guesses (all fixed before any score is seen)."""

    epsilon: float  # the card's claimed ε
    delta: float  # the card's δ
    relation: str = "add/remove"  # the card's neighbouring relation: "add/remove" or "replace-one"
    guesses: int | None = None  # guesses on each side; None = GUESS_FRACTION of the pairs
    confidence: float = 0.95  # per attack (the caller applies Bonferroni over the attacks)
    family_confidence: float = 0.95
    tests: int = 1  # attacks tested on this claim in the whole report
    seed: int = 0  # pairing and order coins (the auditor's design, not privacy noise)


def relation_of(card: dict[str, Any]) -> str:
    """'replace-one' when the card's neighbouring relation replaces a unit, else 'add/remove' (the package's)."""
    rel = str(card.get("neighbouring_relation") or "").lower()
    return "replace-one" if "replac" in rel else "add/remove"


def default_guesses(pairs: int) -> int:
    return int(pairs * GUESS_FRACTION)


def pair_units(n_members: int, n_non_members: int, guesses: int | None, seed: int) -> dict[str, Any]:
    """The pairs (member index, non-member index, first-is-member coin) and k; depends on the counts only."""
    n = min(int(n_members), int(n_non_members))
    k = default_guesses(n) if guesses is None else int(guesses)
    if guesses is not None and (k < 1 or 2 * k > n):
        raise InvalidData(f"--guesses must be between 1 and half the number of member/non-member pairs ({n // 2} "
                          f"here: {n} pairs), got {k}")
    rng = np.random.default_rng([seed, 7_031])
    return {"pairs": n, "k": k, "members": rng.permutation(n_members)[:n],
            "non_members": rng.permutation(n_non_members)[:n], "first_is_member": rng.random(n) < 0.5}


def rejects(m: int, r: int, v: int, epsilon: float, delta: float, confidence: float,
            relation: str = "add/remove") -> bool:
    """Whether ``v`` of ``r`` guesses right on ``m`` pairs reject ``epsilon`` at ``confidence``: the test the bounds
    below bisect on (a bound exceeds ε exactly when ε is rejected, up to the bisection's resolution)."""
    from privsynth.privacy.audit import p_value

    if relation == "replace-one":
        return p_value(m, r, v, epsilon, delta) <= 1.0 - confidence
    return p_value(m, r, v, 2 * epsilon, min(1.0, (1 + math.exp(epsilon)) * delta)) <= 1.0 - confidence


def add_remove_lower_bound(m: int, r: int, v: int, delta: float, confidence: float) -> float:
    """Largest add/remove ε rejected when a pair (two add/remove steps) is (2ε, (1 + e^ε)δ)-DP; 0 if none."""

    def rejected(eps: float) -> bool:
        return rejects(m, r, v, eps, delta, confidence)

    if r == 0 or not rejected(0.0):
        return 0.0
    lo, hi = 0.0, 0.5
    while rejected(hi):
        lo, hi = hi, hi * 2
        if hi > 500:
            return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if rejected(mid) else (lo, mid)
    return lo


def _bound(m: int, r: int, v: int, test: EpsilonTest) -> float:
    from privsynth.privacy.audit import epsilon_lower_bound

    if test.relation == "replace-one":
        return epsilon_lower_bound(m, r, v, test.delta, test.confidence)
    return add_remove_lower_bound(m, r, v, test.delta, test.confidence)


def best_possible_bound(pairs: int, guesses_per_side: int, test: EpsilonTest) -> float:
    """The bound of a design of ``pairs`` pairs and k guesses per side with every guess right: the most it can show."""
    r = 2 * guesses_per_side
    return float(_bound(pairs, r, r, test))


def members_needed(test: EpsilonTest, pairs: int, guesses_per_side: int) -> dict[str, Any]:
    """The fewest members (and as many non-members) whose design, with this design's share of guesses, could refute
    ``test.epsilon`` (best possible bound above it): ``{"units", "guesses_per_side", "more_than"}``, see
    :func:`privsynth.privacy.audit.design_size_needed`."""
    from privsynth.privacy.audit import design_size_needed

    return design_size_needed(
        lambda n, k: rejects(n, 2 * k, 2 * k, test.epsilon, test.delta, test.confidence, test.relation),
        units=pairs, guesses=guesses_per_side)


def needed_text(needed: dict[str, Any], what: str, delta: float) -> str:
    """``"45,000 members"`` or ``"more than 1,000,000 members"`` (with why such designs fall short when δ > 0)."""
    if needed.get("units") is not None:
        return f"{needed['units']:,} {what} ({2 * needed['guesses_per_side']:,} guesses)"
    tail = (f"; at δ = {delta:g} the bound's δ term grows with the number of units, so no size may suffice"
            if delta > 0 else "")
    return f"more than {needed['more_than']:,} {what}{tail}"


def epsilon_test(s_in: np.ndarray, s_out: np.ndarray, design: dict[str, Any], test: EpsilonTest) -> dict[str, Any]:
    """One attack's one-run ε lower bound from its member and non-member scores (JSON-ready)."""
    from privsynth.privacy.audit import audit_scores

    s_in, s_out = np.asarray(s_in, dtype=np.float64), np.asarray(s_out, dtype=np.float64)
    n, k = design["pairs"], design["k"]
    out: dict[str, Any] = {"pairs": n, "guesses_per_side": k, "claimed_epsilon": float(test.epsilon),
                           "delta": float(test.delta), "relation": test.relation,
                           "confidence": test.confidence, "family_confidence": test.family_confidence,
                           "tests": test.tests}
    if k < 1:
        out.update(guesses=0, correct=0, epsilon_lower_bound=None, max_bound=None, exceeds_claim=False,
                   not_available=f"n/a: needs at least {math.ceil(1 / GUESS_FRACTION)} members and as many "
                                 f"non-members ({n} pairs here)")
        return out
    a, b = s_in[design["members"]], s_out[design["non_members"]]
    first = design["first_is_member"]
    d = np.where(first, a - b, b - a)  # score of the first record of the pair minus the second's
    # audit_scores guesses "first is the member" for the k highest d and "second" for the k lowest
    res = audit_scores(d, first, k_pos=k, k_neg=k, delta=test.delta, claimed_epsilon=test.epsilon,
                       confidence=test.confidence)
    bound = res.epsilon_lower_bound if test.relation == "replace-one" else _bound(n, res.guesses, res.correct, test)
    out.update(guesses=res.guesses, correct=res.correct, epsilon_lower_bound=float(bound),
               max_bound=best_possible_bound(n, k, test),
               exceeds_claim=bool(bound > test.epsilon))
    return out


def claim_of(card: dict[str, Any] | None) -> tuple[dict[str, Any] | None, str | None]:
    """``(claim, None)`` with the card's ε, δ, unit and relation, or ``(None, why there is no ε to test)``."""
    if not card:
        return None, "not a DP release (no privacy card): no claimed ε to test"
    eps = card.get("epsilon")
    if card.get("private") is False:
        return None, "not a DP release (its card says private = false): no claimed ε to test"
    if eps is None or not math.isfinite(float(eps)):
        return None, "not a DP release (its card claims no finite ε): no claimed ε to test"
    delta = float(card.get("delta") or 0.0)
    return {"epsilon": float(eps), "delta": delta, "unit": card.get("unit"), "relation": relation_of(card)}, None


def _plural(unit: str | None) -> str:
    return {"transition": "transitions", "trajectory": "trajectories"}.get(unit or "", f"{unit}s")


def assess_claim(card: dict[str, Any] | None, unit: str, split: dict[str, Any] | None,
                 results: dict[str, dict[str, Any]], family_confidence: float = 0.95) -> dict[str, Any]:
    """The report's verdict on the claimed ε from every attack's ``epsilon_test`` (``results``: {access: result}).

    ``status``: ``violation`` (a bound above the claim, the claim and the audit comparable), ``uninformative`` (no
    bound above the claim, but even every guess right could not have shown one: the design cannot test this claim),
    ``consistent`` (the design could have refuted the claim and did not), ``not_applicable`` (units or split do not
    match the card: a note, never a violation), ``not_tested`` or ``not_dp``. ``line`` is the one-line verdict the
    report and the console print. With a tested claim the result carries ``best_possible_bound`` (every guess right)
    and, when uninformative, ``members_needed`` (:func:`members_needed`; None otherwise).
    """
    claim, why = claim_of(card)
    if claim is None:
        return {"status": "not_dp", "line": why, "notes": [], "bounds": []}
    bounds = []
    for access, res in results.items():
        for name, att in (res or {}).get("attacks", {}).items():
            t = att.get("epsilon_test")
            if t:
                bounds.append({"access": access, "attack": name, **{k: t.get(k) for k in (
                    "epsilon_lower_bound", "correct", "guesses", "guesses_per_side", "pairs", "max_bound",
                    "confidence", "not_available")}})
    out: dict[str, Any] = {"claimed_epsilon": claim["epsilon"], "delta": claim["delta"], "relation": claim["relation"],
                           "card_unit": claim["unit"], "audit_unit": unit, "split": split,
                           "family_confidence": family_confidence, "tests": len(bounds), "assumption": ASSUMPTION,
                           "bounds": bounds, "notes": []}
    notes = out["notes"]
    short: list[str] = []
    if claim["unit"] and claim["unit"] != unit:
        short.append(f"the card's guarantee is about {_plural(claim['unit'])}, this audit scores {_plural(unit)}")
        notes.append(f"the card's guarantee is about {_plural(claim['unit'])} (unit = {claim['unit']}); this audit "
                     f"scores {_plural(unit)}, which a {claim['unit']}-level ε does not bound at ε = "
                     f"{claim['epsilon']:g} (group privacy: one {unit} of L {_plural(claim['unit'])} is protected "
                     f"only at about L·ε), so the bound is not compared with the claim; audit with --unit {claim['unit']}")
    by = (split or {}).get("by")
    if not short and unit == "transition" and by == "episode":
        short.append("members and non-members were split by episode, not by transition")
        notes.append("members and non-members were split by episode (" + str(split.get("evidence")) + "): the "
                     "transitions of one episode share their membership, so what the attacks find may be the "
                     "episode, which transition-level DP does not hide; the bound is not compared with the claim. "
                     "Split by transition (privsynth datasets split ID --members M --non-members N --by transition) "
                     "to test a transition-level claim")
    if not short and unit == "trajectory" and by == "transition":
        short.append("members and non-members were split by transition, not by episode")
        notes.append("members and non-members were split by transition (" + str(split.get("evidence")) + "): an "
                     "episode is partly member and partly not, so an episode is not a unit of membership here; the "
                     "bound is not compared with the claim. Split by episode to test a trajectory-level claim")
    applies = not short
    valid = [b for b in bounds if b.get("epsilon_lower_bound") is not None]
    if not bounds:
        out.update(status="not_applicable" if not applies else "not_tested",
                   line="ε not tested: no attack ran")
        return out
    if not valid:
        out.update(status="not_tested", line="ε not tested: " + str(bounds[0].get("not_available")))
        return out
    top = max(valid, key=lambda b: b["epsilon_lower_bound"])
    conf = (f"{family_confidence:.0%} confidence over {len(bounds)} attacks, Bonferroni" if len(bounds) > 1
            else f"{family_confidence:.0%} confidence")
    shown = (f"ε ≥ {top['epsilon_lower_bound']:.3g} ({top['access']} attack {top['attack']}: {top['correct']}/"
             f"{top['guesses']} guesses right on {top['pairs']} member/non-member pairs; {conf})")
    claimed = f"ε = {claim['epsilon']:g} (δ = {claim['delta']:g}, {claim['relation']} one {claim['unit'] or unit})"
    best = max(valid, key=lambda b: b["max_bound"] if b.get("max_bound") is not None else -1.0)
    cap = float(best.get("max_bound") or 0.0)
    out.update(best_possible_bound=cap, members_needed=None)
    if not applies:
        out.update(status="not_applicable",
                   line=f"no verdict on the claimed {claimed}: {short[0]} (see the note); the audit shows {shown}, "
                        "for information only")
    elif top["epsilon_lower_bound"] > claim["epsilon"]:
        out.update(status="violation",
                   line=f"VIOLATION: the audit shows {shown}, above the card's claimed {claimed}")
    elif cap > claim["epsilon"]:
        out.update(status="consistent",
                   line=f"consistent with the claimed {claimed}: the largest bound is {shown}; with every guess "
                        f"right this design could have shown ε ≥ {cap:.3g}")
    else:
        design = EpsilonTest(epsilon=claim["epsilon"], delta=claim["delta"], relation=claim["relation"],
                             confidence=best.get("confidence") or 0.95)
        needed = members_needed(design, best["pairs"], best.get("guesses_per_side") or best["guesses"] // 2)
        hint = f", scored with --max-units {needed['units']}" if needed["units"] is not None else ""
        out.update(members_needed=needed, status="uninformative",
                   line=f"uninformative about the claimed {claimed}: the audit shows {shown}, but with every guess "
                        f"right this design ({best['pairs']} pairs, {best['guesses']} guesses) shows at most "
                        f"ε ≥ {cap:.3g}, so it cannot refute the claim; a test of this claim needs "
                        f"{needed_text(needed, 'members and as many non-members', claim['delta'])}{hint}")
    out["plot_bound"] = [claim["epsilon"], claim["delta"]] if claim["unit"] in (None, unit) else None
    return out
