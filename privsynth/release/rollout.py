"""Short simulator rollouts from a release's rows, so that next states are other rows' states (issue 37, sixth round).

A re-simulated transition row (s, a, s′) is one exact environment step from a synthetic state, but its s′ is, in
general, no row's s: on the Walker2d proxy a release's next states lie a median 1.8 (normalised units) from the
nearest state of the release, where the real data's lie on another row's state, so an offline agent that
bootstraps V(s′) reads its value where it was never fitted. On PointMaze learnt from scratch, rollouts of 100 steps
raised IQL from 0.39-0.42 to 0.66-0.72 of real on two releases (docs/transfer.md, seventh round); on the locomotion
transfer proxies, chains of 5 steps did not help (sixth round); chains of 100, on six releases per body (eighth
round), raised IQL (Walker2d 0.28 -> 0.54 of the gap, Hopper 0.34 -> 0.42) and halved TD3+BC on Hopper
(0.85 -> 0.43); at eps = 1 (ninth round, three releases per body) they raised the mean of the three rows from
0.31 to 0.40. So rollouts are the default for PointMaze learnt from scratch
(:data:`privsynth.release.postprocess.SCRATCH_MAZE_DEFAULT`) and for locomotion at eps <= 1
(:data:`privsynth.release.postprocess.LOW_EPSILON`), and an option on locomotion above it (``--postprocess
...,rollout``), worth asking for when the data's users train in-sample learners such as IQL. The step also gives a
transition release real episodes (each s′ the next row's s), which some users' tools expect, and a release written
as those episodes is about a quarter of the size on disk of one episode per row (eighth round).

:func:`chain_rollouts` turns the rows into short episodes of the public simulator: the first ⌈n/H⌉ rows (or more,
where chains end early; rows that are whole episodes already, as a trajectory release's, in a seeded random order)
each start a chain; a chain's first step is the row itself, and each next action is the release's own policy at the
new state plus a residual drawn from the release's own residuals,
ã = π̂(s) + (a_j − π̂(s_j)) for a random row j, clipped to the action box; the simulator gives s′, reward and
termination; a chain ends after ``horizon`` steps (a truncation) or where the environment terminates. The output has
as many rows as the input, in chain order, each a step of the environment, and each s′ but a chain's last is the
next row's s.

**Costs no privacy.** π̂ is fitted without privacy on the rows themselves
(:func:`privsynth.synth.dp_policy.fit_plain`, which refuses sensitive data), the residuals are the rows', the
simulator is public, and the randomness (which residual) is ordinary seeded randomness, not a privacy mechanism: the
output is a function of the DP output and public facts only (post-processing, Dwork & Roth 2014 Prop. 2.1). Unlike
the other repair steps it is not row-wise: a chain's later rows depend on its first row and on the policy fitted on
all rows.

Our own code: the simulator is stepped from a set state (MuJoCo ``set_state``), which no library wraps for offline
data; gymnasium's vector environments reset and step whole episodes instead.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from privsynth.data.dataset import OfflineDataset
from privsynth.errors import InvalidData, PrivacyError

__all__ = ["CHAIN_HORIZON", "chain_rollouts"]

# Steps per chain, chosen on the PointMaze proxy learnt from scratch (docs/transfer.md, seventh round: 5, 20 and 100
# measured, 100 best); on locomotion 5 (sixth round) and 100 (seventh and eighth rounds), an option there
CHAIN_HORIZON = 100


def chain_rollouts(rows: OfflineDataset, *, horizon: int = CHAIN_HORIZON, seed: int = 0) -> tuple[OfflineDataset,
                                                                                                    dict[str, Any]]:
    """The rows as chains of up to ``horizon`` simulator steps (module docstring); returns (dataset, stats).

    ``rows`` must already be simulator steps (post-processed with ``resimulate``) of a MuJoCo locomotion environment
    whose observation fixes the state, or of PointMaze (the goal a chain starts with is kept along it). ``seed``
    drives which residual each new action takes (not DP noise)."""
    from privsynth.data.env_adapters import adapter_for
    from privsynth.synth.dp_policy import DPPolicyConfig, fit_plain

    if rows.info.sensitive:
        raise PrivacyError(f"refusing to chain sensitive dataset '{rows.info.name}': chains are post-processing of "
                           "a DP output")
    if horizon < 1:
        raise InvalidData(f"the chain horizon must be at least 1, got {horizon}")
    n = rows.n_transitions
    if n == 0:
        raise InvalidData("no rows to chain")
    t0 = time.perf_counter()
    adapter = adapter_for(rows.info, rows.observations)
    try:
        step = _stepper(adapter, rows.info.env_id)
        policy = fit_plain(rows, DPPolicyConfig(), seed=seed)
        residuals = rows.actions.astype(np.float64) - policy.act(rows.observations.astype(np.float32))
        low, high = policy.low.numpy().astype(np.float64), policy.high.numpy().astype(np.float64)
        rng = np.random.default_rng(seed)
        order = _start_order(rows, rng)
        pieces, made, start = [], 0, 0
        while made < n:
            k = min(-(-(n - made) // horizon), n - start)  # enough chains if none ends early
            part = _chains(step, policy, residuals, low, high, rng, rows, order[start:start + k], horizon)
            pieces.append(part)
            made += len(part["obs"])
            start += k
    finally:
        adapter.close()
    offsets = np.cumsum([0] + [p["chains"] for p in pieces[:-1]])
    out = {key: np.concatenate([p[key] for p in pieces])[:n] for key in ("obs", "act", "next", "rew", "terminal",
                                                                         "timeout")}
    out["episode"] = np.concatenate([p["episode"] + off for p, off in zip(pieces, offsets)])[:n]
    timeouts = out["timeout"].copy()
    if not out["terminal"][-1]:
        timeouts[-1] = True  # the last chain cut short ends in a truncation
    chains = len(np.unique(out["episode"]))
    stats = {"horizon": int(horizon), "chains": chains, "rows": int(n), "mean_chain_length": float(n / chains),
             "terminal_rate": float(np.mean(out["terminal"])), "seed": int(seed),
             "policy": "fitted without privacy on the release's own rows (post-processing)",
             "seconds": time.perf_counter() - t0, "costs_privacy": False}
    info = rows.info
    post = {**info.extra.get("postprocess", {}), "rollout": stats}
    card = None if info.privacy_card is None else {**info.privacy_card, "postprocess": post}
    info = dataclasses.replace(info, privacy_card=card, extra={**info.extra, "postprocess": post})
    dtype = rows.observations.dtype
    return OfflineDataset(
        observations=out["obs"].astype(dtype), actions=out["act"].astype(rows.actions.dtype),
        rewards=out["rew"].astype(rows.rewards.dtype), next_observations=out["next"].astype(dtype),
        terminals=out["terminal"].astype(rows.terminals.dtype), timeouts=timeouts.astype(rows.timeouts.dtype),
        episode_ids=out["episode"].astype(rows.episode_ids.dtype), info=info), stats


def _start_order(rows: OfflineDataset, rng: np.random.Generator) -> np.ndarray:
    """The order in which rows start chains. Rows released one per episode are independent draws of the model and
    keep their order; rows that already form episodes (a trajectory release: PrivORL-j's stitched trajectories) are
    taken in a seeded random order, so that the chains start all over the release rather than in its first
    episodes only."""
    n = rows.n_transitions
    if len(np.unique(rows.episode_ids)) == n:
        return np.arange(n)
    return rng.permutation(n)


def _stepper(adapter: Any, env_id: str | None) -> "Step":
    """One environment step from a set state: (s, a) → (s′, reward, terminated), for the simulators the repair
    supports (MuJoCo locomotion: the whole observation; PointMaze: x, y, vx, vy, the goal columns carried over)."""
    from privsynth.data.env_adapters import MujocoLocomotionAdapter, PointMazeAdapter

    if isinstance(adapter, MujocoLocomotionAdapter):
        return adapter.step_from
    if isinstance(adapter, PointMazeAdapter) and adapter.goal is not None:
        def step(s: np.ndarray, a: np.ndarray) -> tuple[np.ndarray, float, bool]:
            s2 = np.array(s, dtype=np.float64)
            s2[adapter.state_dims] = adapter.simulate(s, a)
            done = adapter.terminal(s[None], a[None], s2[None])
            return s2, float(adapter.reward(s[None], a[None], s2[None])[0]), bool(done is not None and done[0])

        return step
    raise InvalidData(f"chains step a MuJoCo locomotion or PointMaze simulator from a set state; '{env_id}' is "
                      "neither")


Step = Callable[[np.ndarray, np.ndarray], tuple[np.ndarray, float, bool]]


def _chains(step: Step, policy: Any, residuals: np.ndarray, low: np.ndarray, high: np.ndarray,
            rng: np.random.Generator, rows: OfflineDataset, starts: np.ndarray, horizon: int) -> dict[str, Any]:
    """Chains from the rows ``starts``, stepped in lockstep; columns in chain order (chain, then step)."""
    k = len(starts)
    width = rows.observations.shape[1]
    obs = np.full((k, horizon, width), np.nan)
    act = np.zeros((k, horizon, rows.actions.shape[1]))
    nxt = np.zeros_like(obs)
    rew = np.zeros((k, horizon))
    term = np.zeros((k, horizon), dtype=bool)
    valid = np.zeros((k, horizon), dtype=bool)
    obs[:, 0] = rows.observations[starts]
    act[:, 0] = rows.actions[starts]
    nxt[:, 0] = rows.next_observations[starts]
    rew[:, 0] = rows.rewards[starts]
    term[:, 0] = rows.terminals[starts].astype(bool)
    valid[:, 0] = True
    alive = ~term[:, 0]
    for h in range(1, horizon):
        idx = np.flatnonzero(alive)
        if len(idx) == 0:
            break
        s = nxt[idx, h - 1]
        a = policy.act(s.astype(np.float32)).astype(np.float64) + residuals[rng.integers(0, len(residuals), len(idx))]
        a = np.clip(a, low, high)
        for j, i in enumerate(idx):
            s2, r, done = step(s[j], a[j])
            obs[i, h], act[i, h], nxt[i, h], rew[i, h], term[i, h] = s[j], a[j], s2, r, done
        valid[idx, h] = True
        alive[idx] = ~term[idx, h]
    last = valid.sum(axis=1) - 1  # each chain's last step
    timeout = np.zeros((k, horizon), dtype=bool)
    timeout[np.arange(k), last] = ~term[np.arange(k), last]
    episode = np.broadcast_to(np.arange(k)[:, None], (k, horizon))
    m = valid.reshape(-1)
    return {"obs": obs.reshape(k * horizon, -1)[m], "act": act.reshape(k * horizon, -1)[m],
            "next": nxt.reshape(k * horizon, -1)[m], "rew": rew.reshape(-1)[m], "terminal": term.reshape(-1)[m],
            "timeout": timeout.reshape(-1)[m], "episode": episode.reshape(-1)[m], "chains": k}
