"""Curiosity module: random network distillation (RND) novelty of synthetic rows (PrivORL section V, appendix C, F-B).

A fixed, randomly initialised *target* network (deeper: in→128→64→32) and a trained *predictor* (in→64→32); the
curiosity score of a row is the predictor's squared error against the target (paper eq. 4). Unlike the PrivORL code,
scoring never trains the predictor: :meth:`RND.score` is pure, :meth:`RND.fit` is the separate training step.

:class:`CuriosityMixer` implements the batch replacement of section V-B: a pool of synthetic rows is drawn from the
current model, scored, and its top-``rate`` fraction kept; every training batch then has exactly
``round(rate · B)`` of its rows replaced by rows drawn from that top set.

:func:`finetune_curiosity_for` resolves the ``finetune_curiosity = "auto"`` setting (FineCur, curiosity during the
DP fine-tune) from public facts: the sensitive data's environment (its simulator kind) and the release's budget.
"""
from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from privsynth.nn import mlp
from privsynth.synth.config import LOW_EPSILON, CuriosityConfig

__all__ = ["RND", "CuriosityMixer", "n_replaced", "finetune_curiosity_for", "FINECUR_LOW_EPSILON"]

# "auto" FineCur is off at a release budget of this or less: the same bound at which locomotion releases are also
# rolled out (one constant, privsynth.synth.config.LOW_EPSILON)
FINECUR_LOW_EPSILON = LOW_EPSILON


def finetune_curiosity_for(setting: bool | str, info: Any, epsilon: float | None = None) -> bool:
    """Whether the DP fine-tune mixes curiosity rows in (FineCur): ``True`` / ``False`` as set; ``"auto"`` (the
    ``cpu`` preset) on for a MuJoCo locomotion environment whose state the observation fixes, unless the release's
    ``epsilon`` is at most :data:`FINECUR_LOW_EPSILON`; off for any other environment (PointMaze, data without an
    environment). Reads the environment's id and simulator and the budget only (public facts).

    Why (issue 37, docs/transfer.md): on the Hopper transfer proxy at ε = 10 FineCur closed 0.50 of the
    public-to-real gap against 0.33 without it (tenth round); on PointMaze umaze its rows left the maze (positions
    5-12x beyond the real range) and a default release's fidelity fell below the issue's floor (marginal 0.88
    against 0.91; eleventh round); at ε = 1, over three releases per row, it closed less than the fine-tune without
    it (twelfth round)."""
    if setting != "auto":
        return bool(setting)
    if epsilon is not None and epsilon <= FINECUR_LOW_EPSILON:
        return False
    from privsynth.data.env_adapters import simulator_kind_or_none

    return simulator_kind_or_none(info) == "mujoco"  # an environment this machine cannot make: no simulator


class RND(nn.Module):
    """Random network distillation: fixed target f, trained predictor f̂; score = mean_j (f̂(x) − f(x))_j²."""

    def __init__(self, data_dim: int, cfg: CuriosityConfig, seed: int = 0) -> None:
        super().__init__()
        gen_state = torch.random.get_rng_state()
        torch.manual_seed(seed)
        self.target = mlp(data_dim, cfg.target_hidden, cfg.out_dim)
        for m in self.target:
            if isinstance(m, nn.Linear):  # PrivORL rnd.py: N(0, 0.1) weights, zero bias
                nn.init.normal_(m.weight, std=0.1)
                nn.init.zeros_(m.bias)
        self.target.requires_grad_(False)
        self.predictor = mlp(data_dim, cfg.predictor_hidden, cfg.out_dim)
        torch.random.set_rng_state(gen_state)
        self.opt = torch.optim.Adam(self.predictor.parameters(), lr=cfg.lr)

    @torch.no_grad()
    def score(self, x: torch.Tensor) -> torch.Tensor:
        """Curiosity score per row [N] (no training)."""
        return (self.predictor(x) - self.target(x)).pow(2).mean(-1)

    def fit(self, x: torch.Tensor, steps: int = 1) -> float:
        """Train the predictor towards the target on ``x`` (rows seen become less novel). Returns the last loss."""
        loss = torch.tensor(0.0)
        for _ in range(steps):
            loss = (self.predictor(x) - self.target(x)).pow(2).mean()
            self.opt.zero_grad(set_to_none=True)
            loss.backward()
            self.opt.step()
        return float(loss.detach())


def n_replaced(batch_size: int, rate: float) -> int:
    """Rows of a batch of ``batch_size`` replaced at curiosity rate ``rate``: round(rate · B), capped at B."""
    return min(batch_size, max(0, int(round(rate * batch_size))))


class CuriosityMixer:
    """Keeps the top-novelty synthetic rows and mixes them into training batches (PrivORL section V-B)."""

    def __init__(self, rnd: RND, cfg: CuriosityConfig, generator: torch.Generator | None = None) -> None:
        self.rnd = rnd
        self.cfg = cfg
        self.generator = generator
        self.top: torch.Tensor | None = None  # [k, D] highest-scored rows of the last pool
        self.top_scores: torch.Tensor | None = None
        self.refreshes = 0

    def refresh(self, draw: Callable[[int], torch.Tensor]) -> torch.Tensor:
        """Draw a pool with ``draw(n)`` (normalised rows from the current model), score it, keep the top fraction.

        The predictor is trained on the pool *after* scoring, so the next pool rewards rows unlike these.
        NaN/inf rows of the pool are discarded before scoring. Returns the kept rows.
        """
        pool = draw(self.cfg.pool_size)
        pool = pool[torch.isfinite(pool).all(-1)]
        if pool.shape[0] == 0:
            self.top, self.top_scores = None, None
            return pool.new_zeros(0, pool.shape[-1])
        scores = self.rnd.score(pool)
        k = max(1, n_replaced(pool.shape[0], self.cfg.rate))
        order = torch.argsort(scores, descending=True)[:k]
        self.top, self.top_scores = pool[order].detach(), scores[order]
        self.rnd.fit(pool, self.cfg.train_steps)
        self.refreshes += 1
        return self.top

    def mix(self, batch: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Replace exactly ``round(rate · B)`` random rows of ``batch`` [B, D] with rows of the top set.

        Returns the new batch and the boolean mask [B] of replaced positions. Without a top set the batch is unchanged.
        """
        b = batch.shape[0]
        mask = torch.zeros(b, dtype=torch.bool)
        if self.top is None or self.top.shape[0] == 0:
            return batch, mask
        k = n_replaced(b, self.cfg.rate)
        if k == 0:
            return batch, mask
        pos = torch.randperm(b, generator=self.generator)[:k]
        if self.top.shape[0] >= k:
            src = torch.randperm(self.top.shape[0], generator=self.generator)[:k]
        else:
            src = torch.randint(self.top.shape[0], (k,), generator=self.generator)
        out = batch.clone()
        out[pos] = self.top[src].to(out)
        mask[pos] = True
        return out, mask
