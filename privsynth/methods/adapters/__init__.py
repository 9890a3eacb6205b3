"""Adapters that put each DP offline-RL method behind :mod:`privsynth.methods.protocol` (one module per method).

Each wraps the method's existing entry point, does the data conversion (tabular / linear-feature / expert-tagged
views) from public facts only, and returns a :class:`~privsynth.methods.protocol.MethodResult` with the ledger the
method's own accounting produced. The registry (:mod:`privsynth.methods.registry`) imports them on first use.
"""
