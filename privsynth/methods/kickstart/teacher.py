"""The private teacher: answers student queries with the Dirichlet mechanism and keeps its own query ledger
(Gohari et al. 2021, "Privacy-Preserving Kickstarting Deep Reinforcement Learning with Privacy-Aware Learners",
Sec. 4 Remark and Sec. 5).

Budget rule [PAPER]: basic sequential composition over answered queries; the concentration k is multiplied by the
vanishing coefficient ``c`` at the start of every roll-out trajectory (``k_j = k0·c^j``); once an answer would push
the spent (ε, δ) over the budget, the teacher goes silent for good. Silence is ``None`` (no penalty for that step),
never a Dirichlet sample at tiny k, which is a teacher action sample and leaks (as k → 0,
Dir(kπ) tends to a one-hot vector drawn from π).

The :class:`QueryLedger` is a :class:`~privsynth.privacy.ledger.Ledger` whose privacy unit is one *query
observation* under L2 b-adjacency. It is a different guarantee from a dataset ledger (one transition / trajectory
of the teacher's training data) and the two are never summed: a dataset ledger refuses its events (their unit
differs) and this ledger refuses dataset events.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from privsynth.errors import BudgetExceeded, PrivacyError
from privsynth.privacy.ledger import Ledger, LedgerEvent
from privsynth.privacy import accounting as acc
from privsynth.privacy.noise import NoiseSource, as_noise_source

from privsynth.methods.kickstart.dirichlet import DirichletMechanism, QueryCost

__all__ = ["QUERY_UNIT", "QueryLedger", "TeacherConfig", "PrivateTeacher", "teacher_outputs"]

QUERY_UNIT = "teacher_query"


@dataclass
class QueryLedger(Ledger):
    """Per-query ledger of a private teacher: events are runs of answers at one k, composed by summing.

    ``eps_budget``/``delta_budget``: the teacher's total budget (None: unlimited, recorded but not enforced).
    ``dataset_card``: the privacy card of the teacher's training data when it is a DP release (the answers are then
    post-processing of that release and cost it nothing; the card is shown next to, never added to, this ledger).
    """

    unit: str = QUERY_UNIT
    accountant: str = "pld"  # unused: every event is (ε, δ)-only and composed by basic composition
    delta: float = 0.5  # unused for this ledger: δ is whatever the answers spent (see totals())
    neighbouring: str | None = None
    b: float = 0.0
    eps_budget: float | None = None
    delta_budget: float | None = None
    dataset_card: dict[str, Any] | None = None
    treated_as_public: list[str] = field(
        default_factory=lambda: ["the concentration k of every answer (the student needs it for its radius)",
                                 "the Lipschitz bound L of the teacher", "which steps were answered"]
    )

    def __post_init__(self) -> None:
        if self.unit != QUERY_UNIT:
            raise PrivacyError(f"a query ledger's unit is '{QUERY_UNIT}', got '{self.unit}'")
        acc.check_accountant(self.accountant)
        if self.neighbouring is None:
            self.neighbouring = (
                f"one student query observation X vs X' with ||X - X'||_2 <= b = {self.b:g} (input-metric DP of a "
                "single answer; NOT dataset-level DP on the teacher's training records)"
            )
        if self.eps_budget is not None and not self.eps_budget >= 0:
            raise PrivacyError("the teacher's epsilon budget must be non-negative")
        if self.delta_budget is not None and not 0 <= self.delta_budget < 1:
            raise PrivacyError("the teacher's delta budget must lie in [0, 1)")

    def append(self, event: LedgerEvent) -> "QueryLedger":
        if not isinstance(event, LedgerEvent):
            raise TypeError("QueryLedger.append expects a LedgerEvent")
        if event.mechanism != "approx_dp" or event.params.get("unit") != QUERY_UNIT:
            raise PrivacyError(f"event '{event.name}' is not a teacher-query event; keep dataset events in their own ledger")
        self.events.append(event)
        return self

    def totals(self) -> tuple[float, float]:
        """(Σ ε, Σ δ) over every answered query (basic composition, [PAPER] remark in Sec. 4)."""
        eps = sum(float(ev.epsilon) * int(ev.params["count"]) for ev in self.events)
        delta = sum(float(ev.delta) * int(ev.params["count"]) for ev in self.events)
        return eps, delta

    @property
    def n_queries(self) -> int:
        return sum(int(ev.params["count"]) for ev in self.events)

    def compose(self, delta: float | None = None, accountant: str | None = None) -> tuple[float, str]:
        eps, dlt = self.totals()
        rule = f"basic composition of {self.n_queries} answered queries (total delta {dlt:.3g}"
        rule += "; >= 1, so the guarantee is vacuous)" if dlt >= 1 else ")"
        return eps, rule

    def card(self) -> dict[str, Any]:
        eps, dlt = self.totals()
        card = super().card()
        card.update(epsilon=eps, delta=dlt, queries=self.n_queries, eps_budget=self.eps_budget,
                    delta_budget=self.delta_budget, protects=self.neighbouring)
        if self.dataset_card is not None:
            card["teacher_training_data"] = {
                "card": self.dataset_card,
                "relation": "teacher answers are post-processing of this release: they cost it no extra epsilon; "
                "its epsilon and this ledger's epsilon protect different things and are not added",
            }
        return card


@dataclass
class TeacherConfig:
    """Teacher-side knobs (paper Sec. 5 values where given, [GUESS] elsewhere)."""

    k0: float = 5.0  # initial Dirichlet concentration [PAPER]
    c: float = 0.9  # vanishing coefficient, k <- c·k per trajectory [PAPER: 0.1 ... 0.9]
    decay_every: str = "episode"  # 'episode' (default reading of "roll-out trajectory") or 'epoch' [GUESS]
    first_uses_k0: bool = True  # the first trajectory is answered at k0 [GUESS]
    k_min: float = 0.0  # go silent once k < k_min ('silent' variant; 0 = keep sampling as k decays)
    eps_budget: float | None = None  # total ε of the query ledger; None = not enforced (still recorded)
    delta_budget: float | None = None  # total δ of the query ledger
    private: bool = True  # False: exact π_T(s) (non-private kickstarting, paper Exp. 2); no ledger charges


class PrivateTeacher:
    """Answers ``query(obs)`` with ``Dir_k(restrict(π_T(obs)))`` or ``None`` when silent (paper Sec. 4 Remark).

    ``policy`` maps a float32 observation batch [B, d] to logits [B, m] (a torch module or any callable).
    ``noise``: where the Dirichlet samples come from: OS entropy by default; ``NoiseSource.reproducible(seed)``
    replays them for tests and marks every ledger event not DP. There is no seed: the teacher has no non-private
    randomness, and a seed someone can read must never determine its answers (docs/DESIGN.md invariant 6).
    """

    def __init__(
        self,
        policy: Callable[[torch.Tensor], torch.Tensor],
        mechanism: DirichletMechanism | None,
        config: TeacherConfig | None = None,
        *,
        noise: NoiseSource | None = None,
        dataset_card: dict[str, Any] | None = None,
    ) -> None:
        self.policy = policy
        self.cfg = config or TeacherConfig()
        if self.cfg.private and mechanism is None:
            raise PrivacyError("a private teacher needs a DirichletMechanism")
        self.mech = mechanism
        self.source = as_noise_source(noise)
        self.rng = self.source.numpy_rng()  # the privacy-noise RNG, separate from policy sampling
        self.ledger = QueryLedger(
            b=mechanism.b if mechanism is not None else 0.0,
            eps_budget=self.cfg.eps_budget,
            delta_budget=self.cfg.delta_budget,
            dataset_card=dataset_card,
        )
        if mechanism is not None:
            self.ledger.notes.append(
                f"Dirichlet mechanism: m={mechanism.m}, eta={mechanism.eta}, L={mechanism.L:.4g}, b={mechanism.b:g}, "
                f"per-query delta={mechanism.delta_per_query:g}, bound={mechanism.bound}; k0={self.cfg.k0}, "
                f"c={self.cfg.c} per {self.cfg.decay_every}"
            )
        if not self.cfg.private:
            self.ledger.notes.append("NOT DP: the teacher answers with its exact policy (epsilon = infinity)")
        self.k = float(self.cfg.k0)
        self.silent = False
        self.exhausted = False
        self._trajectories = 0
        self._eps = 0.0
        self._delta = 0.0
        self._open: LedgerEvent | None = None
        self.answered = 0
        self.asked = 0

    # ------------------------------------------------------------------------------------------------ schedule
    def on_trajectory_start(self) -> None:
        """``k <- c·k`` at the start of each roll-out trajectory (the first one keeps k0 unless configured)."""
        if self._trajectories > 0 or not self.cfg.first_uses_k0:
            self.k *= self.cfg.c
        self._trajectories += 1
        if self.cfg.private and self.k < self.cfg.k_min:
            self.silent = True

    def on_episode_start(self) -> None:
        if self.cfg.decay_every == "episode":
            self.on_trajectory_start()

    def on_epoch_start(self) -> None:
        if self.cfg.decay_every == "epoch":
            self.on_trajectory_start()

    # ----------------------------------------------------------------------------------------------- answering
    @torch.no_grad()
    def exact(self, obs: np.ndarray) -> np.ndarray:
        """The teacher's own softmax policy π_T(obs) (never leaves the teacher in private mode)."""
        x = torch.as_tensor(np.asarray(obs, dtype=np.float32)).reshape(1, -1)
        return torch.softmax(self.policy(x), dim=-1)[0].double().numpy()

    def _charge(self, cost: QueryCost) -> bool:
        """Charge one answer if the budget allows; False (and silent for good) otherwise."""
        eb, db = self.cfg.eps_budget, self.cfg.delta_budget
        if (eb is not None and self._eps + cost.epsilon > eb) or (db is not None and self._delta + cost.delta > db):
            self.exhausted = self.silent = True
            return False
        if self._open is None or self._open.params["k"] != cost.k:
            self._open = LedgerEvent.approx_dp(
                f"teacher answers at k={cost.k:.4g}", epsilon=cost.epsilon, delta=cost.delta, unit=QUERY_UNIT,
                k=cost.k, log_tau=cost.log_tau, count=0, noise=self.source.kind,
            )
            self.ledger.append(self._open)
        self._open.params["count"] += 1
        self._eps += cost.epsilon
        self._delta += cost.delta
        return True

    def query(self, obs: np.ndarray) -> np.ndarray | None:
        """One student query: a noisy action distribution, or None when the teacher is silent."""
        self.asked += 1
        if not self.cfg.private:
            self.answered += 1
            return self.exact(obs)
        if self.silent:
            return None
        assert self.mech is not None
        if not self._charge(self.mech.cost(self.k)):
            return None
        self.answered += 1
        return self.mech.release(self.exact(obs), self.k, self.rng)

    @property
    def spent(self) -> tuple[float, float]:
        return self._eps, self._delta

    @property
    def epsilon(self) -> float:
        """ε spent on answered queries; ∞ for the non-private (exact) teacher."""
        return self._eps if self.cfg.private else float("inf")

    def require_budget_left(self) -> None:
        if self.exhausted:
            raise BudgetExceeded("the teacher's query budget is spent")


def teacher_outputs(policy: Callable[[torch.Tensor], torch.Tensor], mechanism: DirichletMechanism | None,
                    config: TeacherConfig, queries: Any, *, episode_starts: Any = (0,),
                    noise: NoiseSource | None = None) -> dict[str, Any]:
    """The releasing path of the private teacher on a sequence of student query observations (its sensitive input):
    ``{"answers": list of noisy distributions or None, "card": the query ledger's card, "ledger": QueryLedger}``.
    The answers are the DP outputs; the card holds the k schedule, which steps were answered and the mechanism's
    public constants (m, η, L of the teacher's weights, b), never the queries. ``episode_starts``: the query indices
    at which a new roll-out begins (k decays there)."""
    teacher = PrivateTeacher(policy, mechanism, config, noise=noise)
    starts = set(int(i) for i in episode_starts)
    answers = []
    for i, obs in enumerate(queries):
        if i in starts:
            teacher.on_episode_start()
        answers.append(teacher.query(np.asarray(obs)))
    return {"answers": answers, "card": teacher.ledger.card(), "ledger": teacher.ledger}
