"""Downstream offline-RL agents (IQL, TD3+BC, EDAC with CORL's hyperparameters) and real-environment scoring.

Why our own compact implementations rather than d3rlpy or CORL's files: d3rlpy 2.8 measured about 100 IQL updates/s
here against about 170 for plain torch (``scripts/bench_agents.py`` times ours), CORL's single files copy their replay
buffer and read the real dataset's statistics, and neither lets the normaliser come from the training data while the
environment comes from the real data. Our learners share one replay buffer over the dataset's own arrays, run their
twin/ensemble critics as one batched matrix multiply, and fuse IQL's three updates into one backward pass.
Users who prefer d3rlpy can convert any dataset with :func:`privsynth.evaluation.agents.d3rlpy_export.to_d3rlpy`.

Example::

    from privsynth.evaluation.agents import train_agent, run_seeds
    run = train_agent(synthetic, real.info, "iql", seed=0, num_updates=30_000, eval_every=2_000, eval_episodes=20)
    print(run.final_score, run.best_score, run.updates_per_s)
"""
from privsynth.evaluation.agents.common import (
    Batch,
    EvalResult,
    Evaluator,
    Policy,
    ReplayBuffer,
    fit_state_normalizer,
    normalized_score,
)
from privsynth.evaluation.agents.edac import EDAC, EDACConfig
from privsynth.evaluation.agents.iql import IQL, IQLConfig
from privsynth.evaluation.agents.td3bc import TD3BC, TD3BCConfig
from privsynth.evaluation.agents.train import (
    AGENTS,
    AgentJob,
    AgentRun,
    SeedSummary,
    make_agent,
    run_seeds,
    train_agent,
    train_batched,
)

__all__ = [
    "AGENTS", "AgentJob", "AgentRun", "Batch", "EDAC", "EDACConfig", "EvalResult", "Evaluator", "IQL", "IQLConfig",
    "Policy", "ReplayBuffer", "SeedSummary", "TD3BC", "TD3BCConfig", "fit_state_normalizer", "make_agent",
    "normalized_score",
    "run_seeds", "train_agent", "train_batched",
]
