"""DP offline-RL methods of the reference papers (learners that consume the shared dataset model).

* :mod:`privsynth.methods.dp_apvi`: DP-APVI / APVI (tabular pessimistic value iteration on privatised counts) and the
  noisy-count synthetic-data release.
* :mod:`privsynth.methods.dp_vapvi`: DP-VAPVI / VAPVI / PEVI (linear MDPs).
* :mod:`privsynth.methods.dp_apvi_release`: the count release written as a Minari dataset with a privacy card.
* :mod:`privsynth.methods.tabular_mdp`, :mod:`privsynth.methods.linear_mdp`: the environments used as data sources.
* :mod:`privsynth.methods.zcdp`: thin names over the zCDP functions of :mod:`privsynth.privacy.accounting` and
  :class:`~privsynth.methods.zcdp.ZcdpLedger`, the package ledger with zCDP totals.
* :mod:`privsynth.methods.apvi_experiments`: the gap-vs-K experiments behind ``privsynth methods dp-vapvi|dp-apvi``.
"""

from privsynth.methods.registry import make, names  # noqa: E402  (the method registry: docs/methods.md)
