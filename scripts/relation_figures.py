"""Issue 36's figures: what the cards claimed under add/remove with N public, what that was under the only relation
that fixes N (replace-one), and what a release spends now that N is private (a Laplace count charged to the ledger).

    python scripts/relation_figures.py

All numbers from dp-accounting (PLD, discretisation 1e-4); nothing is trained.
"""
from __future__ import annotations

import dp_accounting as dpa
from dp_accounting.pld import pld_privacy_accountant as pld

from privsynth.privacy import accounting as acc
from privsynth.privacy.count import count_epsilon

NR = dpa.NeighboringRelation


def _pld(events, delta, relation=NR.ADD_OR_REMOVE_ONE) -> float:
    a = pld.PLDAccountant(relation, value_discretization_interval=1e-4)
    for ev in events:
        a.compose(ev)
    return a.get_epsilon(delta)


def normaliser(epsilon: float, delta: float) -> None:
    # before: two releases (S1, S2) of add/remove sensitivity 1 each with multiplier z, divided by the exact N
    z_old = acc.calibrate_gaussian_multiplier(epsilon, delta, 2, "pld")
    claimed = _pld([dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z_old), 2)], delta)
    replace = _pld([dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z_old / 2), 2)], delta)  # replace-one: 2x sensitivity
    # now: three releases (count S0, S1, S2), add/remove, N private
    z_new = acc.calibrate_gaussian_multiplier(epsilon, delta, 3, "pld")
    now = _pld([dpa.SelfComposedDpEvent(dpa.GaussianDpEvent(z_new), 3)], delta)
    print(f"DP normaliser at eps {epsilon:g}, delta {delta:g}: card said {claimed:.2f} (add/remove, exact N public); "
          f"under replace-one (N fixed) it was {replace:.2f}; now {now:.2f} add/remove with N private "
          f"(noise multiplier {z_old:.3f} -> {z_new:.3f})")


def dpsgd(epsilon: float, delta: float, batch: int, n: int, epochs: float) -> None:
    q = batch / n
    steps = max(1, round(epochs / q))
    sigma_old = acc.calibrate_noise_multiplier(epsilon, delta, q, steps, "pld")
    run = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma_old)), steps)
    claimed, replace = _pld([run], delta), _pld([run], delta, NR.REPLACE_ONE)
    scale = 1.0 / count_epsilon(epsilon)
    sigma_new = acc.calibrate_noise_multiplier(epsilon, delta, q, steps, "pld", count_scale=scale)
    run_new = dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(sigma_new)), steps)
    now = _pld([dpa.LaplaceDpEvent(scale), run_new], delta)
    print(f"DP-SGD q = {batch}/{n}, T = {steps}, delta {delta:g}, target {epsilon:g} (pld): card said {claimed:.2f}; "
          f"under replace-one {replace:.2f}; now {now:.2f} with the Laplace count (sigma {sigma_old:.3f} -> "
          f"{sigma_new:.3f}, count error ~{scale:.0f} units)")


if __name__ == "__main__":
    normaliser(1.0, 1e-3)
    normaliser(0.5, 1e-5)
    dpsgd(4.0, 1e-5, 16, 360, 1.0)
    dpsgd(4.0, 1e-7, 2048, 1_000_000, 30.0)
