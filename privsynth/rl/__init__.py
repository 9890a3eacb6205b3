"""Reinforcement-learning pieces shared by data generation, the methods and the evaluation agents.

No DP here and nothing sensitive: one Soft Actor-Critic (:mod:`privsynth.rl.sac`) and one policy evaluation loop
(:mod:`privsynth.rl.evaluate`). The package imports only :mod:`privsynth.nn`, so it sits left of ``data`` in the data
flow of docs/DESIGN.md ("Data flow") and every package may use it.
"""
from privsynth.rl.evaluate import BatchedEnv, evaluate_policy
from privsynth.rl.sac import SAC, SquashedGaussianActor

__all__ = ["evaluate_policy", "BatchedEnv", "SAC", "SquashedGaussianActor"]
