"""Evaluation: downstream agents, fidelity, membership inference, reports (the last stage of the data flow).

This package imports nothing heavy at import time; use the subpackages, e.g.
``from privsynth.evaluation.agents import train_agent``.
"""
