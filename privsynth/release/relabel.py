"""A release's actions relabelled by a DP behaviour policy, then re-simulated (issue 37, docs/transfer.md round 5).

:func:`resolve_policy_share` decides, from public facts only, how much of ε the policy gets: by default (``"auto"``)
:data:`POLICY_SHARE` for a transition release whose post-processing re-simulates each row from (s, a) (the locomotion
default, and PointMaze learnt from scratch), nothing elsewhere; the DP fine-tune of the synthesizer gets the rest.
After sampling, :func:`fit_relabeller` fits the policy (:mod:`privsynth.synth.dp_policy`: a plain fit on the release's
own rows, then DP-SGD on the sensitive (s, a) pairs at the share's ε with the fine-tune's DP count) and appends its
event to the synthesizer's ledger, which the release guard composes against the budget. The :class:`Relabeller` it
returns maps every drawn batch (also the top-up draws) to new actions; the simulator repair that follows recomputes
s′, reward and flags from them, so each row stays one step of the environment."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError
from privsynth.synth.dp_policy import DPPolicyConfig, PolicyNet, fit_dp, fit_plain, relabel_actions

__all__ = ["POLICY_SHARE", "resolve_policy_share", "fit_relabeller", "Relabeller"]

# The share of ε that ``"auto"`` gives the policy where rows are re-simulated, chosen on the public transfer proxies
# (docs/transfer.md, fifth round: paired on the same fine-tuned models, mean change in gap closed +0.07 over six cells)
POLICY_SHARE = 0.1


def resolve_policy_share(request: Any, *, steps: Any, unit: str, n: int | None,
                         repaired_by_default: bool = True) -> float:
    """The share of ε the behaviour policy gets: ``"auto"`` → :data:`POLICY_SHARE` where the release's rows are
    re-simulated (``resimulate`` among the post-processing ``steps``) at the transition unit, else 0; a number is
    checked (it needs the same re-simulation: new actions with the sampled s′ would break every row)."""
    from privsynth.release.postprocess import step_options

    simulated = bool(steps) and step_options(steps).get("resimulate", False)
    if request == "auto" or request is None:
        # measured where the release has a default simulator repair (``repaired_by_default``: MuJoCo locomotion, and
        # PointMaze learnt from scratch: docs/transfer.md, fifth to seventh rounds)
        return POLICY_SHARE if simulated and repaired_by_default and unit == "transition" and n != 0 else 0.0
    share = float(request)
    if share == 0.0:
        return 0.0
    if not 0.0 < share < 1.0:
        raise PrivacyError(f"the policy's share of epsilon must lie in [0, 1), got {share:g}")
    if unit != "transition":
        raise InvalidData("the action relabel protects transitions: it is for unit 'transition' releases")
    if not simulated:
        raise InvalidData("relabelling actions needs the simulator repair: add 'resimulate' (and 'reward') to the "
                          "post-processing, or set the policy share to 0")
    return share


@dataclass
class Relabeller:
    """The fitted DP policy π̃ and the release's own policy π̂; calling it relabels a drawn batch (post-processing)."""

    policy: PolicyNet
    reference: PolicyNet
    mode: str
    record: dict[str, Any]
    ledger: Any  # the synthesizer's ledger, with the policy's event: a drawn batch's card is refreshed from it

    def __call__(self, rows: OfflineDataset) -> OfflineDataset:
        out = relabel_actions(rows, self.policy, mode=self.mode, reference=self.reference)
        info = out.info
        card = None if info.privacy_card is None else {**info.privacy_card, **self.ledger.card(),
                                                       "ledger": self.ledger.to_dict(), "policy_relabel": self.record}
        return dataclasses.replace(out, info=dataclasses.replace(
            info, privacy_card=card, extra={**info.extra, "policy_relabel": self.record}))


def fit_relabeller(synth: Any, sensitive: OfflineDataset, rows: OfflineDataset, *, epsilon: float, delta: float,
                   budget: float | None = None, cfg: DPPolicyConfig | None = None,
                   progress: bool = False) -> Relabeller:
    """Fit π̂ on ``rows`` (a DP output), DP fine-tune it on ``sensitive`` into π̃, and append the DP-SGD event to
    ``synth``'s ledger (after its fine-tune: the same DP count Ñ sizes the batch and the steps).

    σ: calibrated to ``epsilon`` on its own; with ``budget`` (the release's ε), the smallest σ (within 1%) whose event,
    composed with the ledger, stays within ``budget``: composition spends less than the sum of its parts, and the
    policy gets what the fine-tune's share left unspent."""
    cfg = cfg or DPPolicyConfig()
    cfg.validate()
    ledger = synth.ledger
    if ledger is None:
        raise PrivacyError("the action relabel comes after a DP fine-tune: the synthesizer has no ledger")
    finetune = [h for h in synth.history if h.get("phase") == "finetune" and h.get("private")]
    if not finetune or not finetune[-1].get("units_noisy"):
        raise PrivacyError("the action relabel needs the DP count of the fine-tune it follows")
    n_noisy = int(finetune[-1]["units_noisy"])
    cfg = dataclasses.replace(cfg, batch_size=min(cfg.batch_size, n_noisy))
    reference = fit_plain(rows, cfg, seed=int(synth.config.seed))
    sigma = None if budget is None else _sigma_within(ledger, budget, epsilon=epsilon, delta=delta, cfg=cfg,
                                                      n_noisy=n_noisy, accountant=ledger.accountant)
    policy, res = fit_dp(sensitive, reference, cfg, epsilon=epsilon, delta=delta, n_units_noisy=n_noisy,
                         noise_seed=synth.config.noise_seed, noise_multiplier=sigma, accountant=ledger.accountant,
                         progress=progress)
    ledger.append(res.event)
    record = {"mode": cfg.mode, "epsilon": res.epsilon, "noise_multiplier": res.noise_multiplier, "steps": res.steps,
              "batch_size": cfg.batch_size, "epochs": cfg.epochs, "costs_privacy": True,
              "note": "actions from a DP behaviour-cloning policy (DP-SGD, on the ledger); s', reward and flags then "
                      "re-simulated; privsynth.release.relabel"}
    return Relabeller(policy=policy, reference=reference, mode=cfg.mode, record=record, ledger=ledger)


def _sigma_within(ledger: Any, budget: float, *, epsilon: float, delta: float, cfg: DPPolicyConfig, n_noisy: int,
                  accountant: str) -> float:
    """The policy run's σ: the smallest (:func:`~privsynth.privacy.accounting.smallest_sigma`, from the σ calibrated
    to ``epsilon`` alone) whose event, composed with ``ledger``, stays within ``budget`` (public quantities only: Ñ,
    the schedule, the ledger)."""
    from privsynth.privacy import accounting as acc
    from privsynth.privacy.dpsgd import dp_schedule
    from privsynth.privacy.events import LedgerEvent
    from privsynth.privacy.ledger import Ledger

    q, steps = dp_schedule(cfg.batch_size, n_noisy, cfg.epochs)  # as dp_train will run it

    def total(sigma: float) -> float:
        trial = Ledger.from_dict(ledger.to_dict())
        trial.append(LedgerEvent.dpsgd("trial", noise_multiplier=sigma, sample_rate=q, steps=steps,
                                       max_grad_norm=cfg.max_grad_norm, unit="transition", noise="secure"))
        return trial.epsilon(delta)

    alone = acc.calibrate_noise_multiplier(epsilon, delta, q, steps, accountant)
    return acc.smallest_sigma(total, budget, start=alone, rtol=1e-2, what=f"the budget {budget:g} with the ledger")
