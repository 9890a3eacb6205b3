"""RL-aware post-processing of a synthetic release: make its rows obey the public environment (issue 20, item 3).

A DP release may break the physics it claims to come from: next states that do not follow from (state, action),
rewards that do not match the task's reward function, balls inside walls, actions outside the action box. Where the
environment is public and simulable, those parts can be repaired from the environment alone:

* ``clip_actions``: actions clipped to the environment's action box (before anything is simulated);
* ``resimulate``: the simulated part of s′ recomputed by one environment step from (s, a) (PointMaze: x, y, vx, vy,
  the goal columns kept as sampled; MuJoCo locomotion: the whole observation);
* ``reward``: reward and terminal flag recomputed by the environment's reward function (PointMaze: sparse
  1[‖s′_xy − s′_goal‖ ≤ 0.45] or dense exp(−‖s′_xy − s′_goal‖), whichever the environment id says; locomotion: the
  reward and termination of the simulated step);
* ``relabel_terminals``: the terminal flag recomputed from the row's own s′ by the environment's termination rule
  (MuJoCo locomotion: s′ is not ``is_healthy``; PointMaze: the goal reached, unless the task is continuing). Unlike
  ``reward`` on locomotion it takes no step, so it keeps a sampled s′ and its flag consistent (issue 37: a DP
  release's flags were nearly unrelated to its next states);
* ``drop_terminated_starts``: rows whose s is a state the environment would already have ended the episode in
  dropped (MuJoCo locomotion: s not ``is_healthy``; real data never continues from one);
* ``drop_in_walls``: rows whose s or s′ lies inside a wall or off the map dropped (PointMaze);
* ``drop_goals_in_walls``: rows whose desired goal lies inside a wall or off the map dropped (PointMaze draws its
  goals in free cells only; utility study round 10, docs/synthesizers.md);
* ``rollout``: the repaired rows turned into short simulator rollouts (after ``resimulate``), so
  that each next state but a chain's last is another row's state (:mod:`privsynth.release.rollout`; issue 37, sixth
  round). Not row-wise, and it draws (non-private) randomness; still a function of the DP output and the public
  environment.

A step that drops rows leaves fewer than were sampled; :func:`topped_up` samples more from the same (DP) model until
the requested number of rows is kept (also free: more draws from a released model are post-processing too).

**Costs no privacy.** The output is a function of the DP output's rows and the public environment spec only
(:data:`privsynth.release.support.ENV_FACT_FIELDS`); it reads no sensitive data and draws no randomness (``rollout``
draws seeded, non-private randomness: which residual a new action takes), so by the post-processing theorem of
differential privacy (Dwork & Roth 2014, Prop. 2.1) it is exactly as private as its input. Every step but ``rollout``
is row-wise: each output row depends on its own input row alone. Datasets marked sensitive are refused.

Environments: gymnasium-robotics PointMaze (sparse and dense) and gymnasium MuJoCo locomotion (observation =
qpos[k:] | qvel), through the adapters of :mod:`privsynth.evaluation.rl_checks`; anything else raises.
"""
from __future__ import annotations

import dataclasses
import time
from typing import Any, Callable

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset, environment_facts
from privsynth.data.env_adapters import MujocoLocomotionAdapter, PointMazeAdapter, adapter_for
from privsynth.errors import InvalidData, PrivacyError, PrivsynthError
from privsynth.release.rollout import chain_rollouts
from privsynth.synth.config import LOW_EPSILON

__all__ = ["postprocess", "step_options", "check_supported", "topped_up", "draw_seed", "default_steps", "STEPS",
           "fit_columns_for",
           "SUPPORTED", "LOCOMOTION_DEFAULT", "SCRATCH_MAZE_DEFAULT", "LOW_EPSILON"]

SUPPORTED = "PointMaze (gymnasium-robotics, sparse or dense reward) and MuJoCo locomotion (gymnasium, qpos[k:] | qvel)"
_CHANGED = 1e-6  # a recomputed value differing by more than this counts as changed
# the steps by the names users give them (CLI ``--postprocess reward,clip``, bench ``postprocess: [reward, clip]``)
STEPS = {"clip": "clip_actions", "reward": "reward", "resimulate": "resimulate", "walls": "drop_in_walls",
         "goals": "drop_goals_in_walls", "terminal": "relabel_terminals", "healthy": "drop_terminated_starts",
         "rollout": "rollout"}


# What a transition release gets when no post-processing is asked for ("auto"), chosen on the public transfer proxies
# (issue 37, docs/transfer.md "Fourth round": paired on the same DP releases, the simulator repair raised the share of
# the public-to-real gap closed); a rule on a public fact only: the environment's simulator. Rollouts after it
# ("Eighth round", six releases per body) raised IQL (Walker2d 0.28 -> 0.54, Hopper 0.34 -> 0.42) and halved Hopper
# TD3+BC (0.85 -> 0.43): 0.46 against 0.49 on the mean of the three rows, so they stay an option (",rollout").
LOCOMOTION_DEFAULT = "clip,resimulate,reward,terminal,healthy"
# What a PointMaze release learnt from scratch (no public data and nothing pre-trained: public facts) gets: every
# repair of rows, then rollouts of the release's own policy (issue 37, docs/transfer.md "Seventh round": on the UMaze
# proxy without public data rollouts of 100 steps raised IQL from 0.39-0.42 to 0.66-0.72 of real on the rule's two
# releases, and a release made by this default scored 0.81). A release with public data keeps its rows as sampled
# (UMaze with public data cannot choose).
SCRATCH_MAZE_DEFAULT = "clip,resimulate,reward,walls,goals,terminal,rollout"
# At a budget of LOW_EPSILON or less (epsilon is public), a locomotion release is also rolled out by default
# (LOCOMOTION_DEFAULT + ",rollout"; docs/transfer.md, "Ninth round", by a rule written before its releases were
# made): on three fresh eps = 1 releases the mean of the three rows (Hopper IQL, Hopper TD3+BC, Walker2d IQL) was
# 0.39 with rollouts against 0.35 with the repair alone, and over every eps = 1 release measured both ways 0.40
# against 0.31 (Hopper TD3+BC loses 0.08 there, both IQL rows gain). LOW_EPSILON lives in privsynth.synth.config,
# shared with the FineCur default.


def default_steps(info: DatasetInfo, *, from_scratch: bool = False, epsilon: float | None = None) -> str | None:
    """The steps of ``postprocess="auto"`` for a release in ``info``'s environment: :data:`LOCOMOTION_DEFAULT` for a
    MuJoCo locomotion environment whose state the observation fixes (with ``rollout`` when the release's ``epsilon``
    is at most :data:`LOW_EPSILON`), :data:`SCRATCH_MAZE_DEFAULT` for PointMaze when the model learns
    ``from_scratch`` (no public data, nothing pre-trained), None (no post-processing) for any other, including data
    without an environment. Reads the environment's id and simulator and the budget only (public facts)."""
    from privsynth.data.env_adapters import simulator_kind_of

    kind = simulator_kind_of(info)
    if kind == "mujoco":
        low = epsilon is not None and epsilon <= LOW_EPSILON
        return LOCOMOTION_DEFAULT + ",rollout" if low else LOCOMOTION_DEFAULT
    return SCRATCH_MAZE_DEFAULT if kind == "pointmaze" and from_scratch else None


def step_options(steps: Any) -> dict[str, bool]:
    """Keyword arguments of :func:`postprocess` for a choice of steps: ``True`` or ``"all"`` for every step, a
    comma-separated string or a list of names from :data:`STEPS` for those only (the utility study measured them
    apart: docs/synthesizers.md, round 7)."""
    if steps is True or steps == "all":  # every repair; ``rollout`` (not a repair of rows) only by its name
        return {kw: kw != "rollout" for kw in STEPS.values()}
    names = [n.strip() for n in steps.split(",")] if isinstance(steps, str) else list(steps)
    unknown = sorted(set(names) - set(STEPS))
    if unknown or not names:
        raise InvalidData(f"unknown post-processing steps {unknown or names}: choose from {', '.join(STEPS)} (or all)")
    return {kw: name in names for name, kw in STEPS.items()}


def fit_columns_for(setting: str, info: DatasetInfo, *, steps: Any, epsilon: float, unit: str) -> str:
    """``dp.fit_columns`` of a PrivORL-n release (:class:`~privsynth.synth.config.DPConfig`): a set value as it is;
    ``"auto"``: ``"state_action"`` for a transition-unit release without a schema in a MuJoCo locomotion environment
    whose post-processing ``steps`` recompute next state, reward and flag from (s, a) (``resimulate``, ``reward``,
    ``terminal``), at a budget above :data:`LOW_EPSILON`; ``"all"`` otherwise. Reads the environment, its schema,
    the steps, the budget and the unit only (public facts).

    Why (issue 37, docs/transfer.md, fourteenth round): on the transfer proxies at ε = 10, two releases per row, the
    loss over the state and action columns closed 0.63 of the public-to-real gap on the mean of the three rows
    (Hopper IQL, Hopper TD3+BC, Walker2d IQL) against 0.55 over every column; the repair throws the other columns'
    fit away, yet they took their share of each record's clipped gradient. At ε = 1 (rolled out) it closed 0.36, as
    every column does, so the bound keeps every column there."""
    if setting != "auto":
        return setting
    if unit != "transition" or epsilon <= LOW_EPSILON or not steps or info.schema:  # a schema: one-hot columns
        return "all"
    options = step_options(steps)
    if not all(options[STEPS[name]] for name in ("resimulate", "reward", "terminal")):
        return "all"
    from privsynth.data.env_adapters import simulator_kind_or_none

    return "state_action" if simulator_kind_or_none(info) == "mujoco" else "all"


def check_supported(info: DatasetInfo, steps: Any) -> None:
    """Refuse a post-processing request the release's environment cannot serve, from the environment's public facts
    alone: called before any training, so that an unsupported ``--postprocess`` never spends the budget on a fine-tune
    whose output would then be refused. ``goals`` (goals inside walls) is a PointMaze step, ``healthy`` (rows starting
    in a terminated state) a MuJoCo locomotion one."""
    options = step_options(steps)  # unknown step names fail here too
    if not info.env_id:
        raise PrivsynthError(f"dataset '{info.name}' records no environment; post-processing supports {SUPPORTED}")
    from privsynth.data.env_adapters import simulator_kind_of

    kind = simulator_kind_of(info)
    if kind is None:
        raise PrivsynthError(f"no post-processing for environment '{info.env_id}': supported are {SUPPORTED}")
    named = steps is not True and steps != "all"
    if named and options["drop_goals_in_walls"] and kind != "pointmaze":
        raise InvalidData(f"the post-processing step 'goals' drops goals inside maze walls: PointMaze only, not "
                          f"'{info.env_id}'")
    if named and options["drop_terminated_starts"] and kind != "mujoco":
        raise InvalidData(f"the post-processing step 'healthy' drops rows starting in a state the environment ends "
                          f"episodes in: MuJoCo locomotion only, not '{info.env_id}'")
    if options["rollout"] and not options["resimulate"]:
        raise InvalidData("the post-processing step 'rollout' continues re-simulated rows: add 'resimulate'")


def postprocess(
    dataset: OfflineDataset,
    *,
    resimulate: bool = True,
    reward: bool = True,
    drop_in_walls: bool = True,
    clip_actions: bool = True,
    drop_goals_in_walls: bool = True,
    relabel_terminals: bool = True,
    drop_terminated_starts: bool = True,
    rollout: bool = False,
    environment: DatasetInfo | None = None,
) -> tuple[OfflineDataset, dict[str, Any]]:
    """Repair a synthetic (DP) dataset with its public environment; returns (new dataset, stats). See module docstring.

    ``environment``: a :class:`DatasetInfo` whose environment facts (``ENV_FACT_FIELDS`` only) replace the dataset's
    (e.g. the evaluation environment of a benchmark); default: the dataset's own. The stats (rows in / kept, fraction
    of actions clipped, of rewards and terminals changed, mean and max change of s′) are also recorded in the output's
    ``info.extra["postprocess"]`` and, when it has one, its privacy card (``privacy_card["postprocess"]``).
    ``rollout`` (off unless named: ``True``/``"all"`` leave it out) needs ``resimulate`` and turns the kept rows into
    rollouts (:func:`privsynth.release.rollout.chain_rollouts`).
    """
    if rollout and not resimulate:
        raise InvalidData("the post-processing step 'rollout' continues re-simulated rows: add 'resimulate'")
    if dataset.info.sensitive:
        raise PrivacyError(f"refusing to post-process sensitive dataset '{dataset.info.name}': post-processing is for "
                           "DP outputs (synthetic releases), and it would publish a function of the sensitive rows")
    t0, c0 = time.perf_counter(), time.process_time()
    info = dataset.info
    if environment is not None:
        info = dataclasses.replace(info, **environment_facts(environment))
    if not info.env_id:
        raise PrivsynthError(f"dataset '{info.name}' records no environment; post-processing supports {SUPPORTED}")
    # GridAdapter/Mujoco coverage bins need reference states: the synthetic ones (never sensitive data)
    adapter = adapter_for(info, dataset.observations)
    try:
        if not isinstance(adapter, (PointMazeAdapter, MujocoLocomotionAdapter)):
            raise PrivsynthError(f"no post-processing for environment '{info.env_id}': supported are {SUPPORTED}")
        obs = dataset.observations.astype(np.float64)
        act = dataset.actions.astype(np.float64)
        nxt = dataset.next_observations.astype(np.float64)
        rew = dataset.rewards.astype(np.float64)
        term = dataset.terminals.copy()
        stats: dict[str, Any] = {"adapter": adapter.name, "env_id": info.env_id, "rows_in": len(obs),
                                 "steps": {"clip_actions": clip_actions, "resimulate": resimulate, "reward": reward,
                                           "drop_in_walls": drop_in_walls,
                                           "drop_goals_in_walls": drop_goals_in_walls,
                                           "relabel_terminals": relabel_terminals,
                                           "drop_terminated_starts": drop_terminated_starts, "rollout": rollout}}
        if isinstance(adapter, PointMazeAdapter):
            stats["reward_type"] = adapter.reward_type
        if clip_actions:
            space = adapter.env.action_space
            clipped = np.clip(act, space.low, space.high)
            stats["actions_clipped"] = float(np.mean(np.any(clipped != act, axis=1)))
            act = clipped
        if resimulate or reward:
            nxt, rew, term = _recompute(adapter, obs, act, nxt, rew, term, resimulate=resimulate, reward=reward)
        if relabel_terminals:  # after any re-simulation: the flag follows the row's final s'
            t_hat = _terminal_at(adapter, obs, act, nxt)
            if t_hat is not None:
                term = t_hat
        recorded = dataset.next_observations.astype(np.float64)
        moved = np.linalg.norm(nxt - recorded, axis=1)
        stats.update({"next_state_mean_change": float(moved.mean()), "next_state_max_change": float(moved.max()),
                      "reward_changed": float(np.mean(np.abs(rew - dataset.rewards) > _CHANGED)),
                      "reward_mean_abs_change": float(np.mean(np.abs(rew - dataset.rewards))),
                      "terminal_changed": float(np.mean(term != dataset.terminals))})
        keep = np.ones(len(obs), dtype=bool)
        if drop_in_walls:
            walls = adapter.in_wall(obs)
            if walls is not None:
                keep = ~(walls | adapter.in_wall(nxt))
        stats["rows_dropped_in_walls"] = int((~keep).sum())
        if drop_terminated_starts and isinstance(adapter, MujocoLocomotionAdapter):
            ended = adapter.terminated_at(obs)
            if ended is not None:
                stats["rows_dropped_terminated_start"] = int((keep & ended).sum())  # not counted as dropped above
                keep &= ~ended
        if drop_goals_in_walls:
            goals = adapter.goal_in_wall(obs)
            if goals is not None:
                goals = goals | adapter.goal_in_wall(nxt)
                stats["rows_dropped_goal_in_wall"] = int((keep & goals).sum())  # not counted as dropped above
                keep &= ~goals
        stats["rows_kept"] = int(keep.sum())
    finally:
        adapter.close()
    if not keep.any():
        raise InvalidData(f"post-processing dropped every row of '{info.name}': all states lie inside walls or are "
                          "states the environment ends episodes in")
    stats["seconds"] = time.perf_counter() - t0
    stats["cpu_seconds"] = time.process_time() - c0
    out = _with_rows(dataset, info, keep, act, rew, nxt, term, stats)
    if rollout:
        out, stats["rollout"] = chain_rollouts(out)
    return out, stats


def _recompute(
    adapter: Any, obs: np.ndarray, act: np.ndarray, nxt: np.ndarray, rew: np.ndarray, term: np.ndarray,
    *, resimulate: bool, reward: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """s′ (simulated dims), reward and terminal flag from the environment, one row at a time."""
    nxt, rew, term = nxt.copy(), rew.copy(), term.copy()
    if isinstance(adapter, MujocoLocomotionAdapter):  # reward and termination belong to the simulated step
        steps = [adapter.step_from(o, a) for o, a in zip(obs, act)]
        if resimulate:
            nxt[:, adapter.state_dims] = np.array([s[0] for s in steps])[:, adapter.state_dims]
        if reward:
            rew = np.array([s[1] for s in steps])
            term = np.array([s[2] for s in steps], dtype=bool)
        return nxt, rew, term
    if resimulate:
        nxt[:, adapter.state_dims] = np.array([adapter.simulate(o, a) for o, a in zip(obs, act)])
    if reward:
        rew = np.asarray(adapter.reward(obs, act, nxt), dtype=np.float64)
        t_hat = adapter.terminal(obs, act, nxt)
        if t_hat is not None:
            term = np.asarray(t_hat, dtype=bool)
    return nxt, rew, term


def _terminal_at(adapter: Any, obs: np.ndarray, act: np.ndarray, nxt: np.ndarray) -> np.ndarray | None:
    """The environment's terminal flag of each row from its own s′ (no step); None when the environment has no rule."""
    if isinstance(adapter, MujocoLocomotionAdapter):
        return adapter.terminated_at(nxt)
    t_hat = adapter.terminal(obs, act, nxt)
    return None if t_hat is None else np.asarray(t_hat, dtype=bool)


def _with_rows(
    dataset: OfflineDataset, info: DatasetInfo, keep: np.ndarray, act: np.ndarray, rew: np.ndarray, nxt: np.ndarray,
    term: np.ndarray, stats: dict[str, Any],
) -> OfflineDataset:
    """The kept rows with their new columns; the stats recorded in ``info.extra`` and the privacy card."""
    record = {**stats, "costs_privacy": False,
              "note": "a function of the DP output and the public environment only (DP post-processing, "
                      "Dwork & Roth 2014 Prop. 2.1); privsynth.release.postprocess"}
    card = None if info.privacy_card is None else {**info.privacy_card, "postprocess": record}
    new_info = dataclasses.replace(info, privacy_card=card, extra={**info.extra, "postprocess": record})
    return OfflineDataset(
        observations=dataset.observations[keep], actions=act[keep], rewards=rew[keep],
        next_observations=nxt[keep], terminals=term[keep], timeouts=_cut_timeouts(dataset, keep, term)[keep],
        episode_ids=dataset.episode_ids[keep], info=new_info,
    )


def _cut_timeouts(dataset: OfflineDataset, keep: np.ndarray, term: np.ndarray) -> np.ndarray:
    """Timeout flags with a truncation wherever a dropped row cut an episode: a kept, non-terminal row whose successor
    in the same episode was dropped now ends its piece, so Minari / d3rlpy readers see every episode end flagged."""
    timeouts = dataset.timeouts.copy()
    ep = dataset.episode_ids
    cut = keep[:-1] & ~keep[1:] & (ep[:-1] == ep[1:]) & ~term[:-1].astype(bool)
    timeouts[:-1] |= cut
    return timeouts


def topped_up(
    first: OfflineDataset, draw: Callable[[int, int], OfflineDataset], n: int, *, max_draws: float = 20.0,
    **options: Any,
) -> tuple[OfflineDataset, dict[str, Any]]:
    """``n`` post-processed rows: ``first`` post-processed, then more draws until ``n`` rows are kept.

    ``draw(k, i)`` returns about ``k`` new rows from the same released model (``i`` = 1, 2, ...: the draw's index, for
    its sampling seed); ``options`` are :func:`postprocess`'s keywords. The rows kept come in sampling order, and the
    result holds exactly the first ``n`` of them. Raises when more than ``max_draws * n`` rows were sampled, so a model
    whose rows the environment all rejects fails with a message instead of sampling forever. Stats: the row counts
    (``rows_in``, ``rows_dropped_*``) summed over all draws, ``rows_kept`` = ``n``, ``draws``, ``keep_rate``; the
    other stats are those of ``first``'s post-processing."""
    if n <= 0:
        raise InvalidData(f"topped_up needs a positive number of rows, got {n}")
    rollout = options.pop("rollout", False)  # once, over the n rows kept (not per draw)
    if rollout and not options.get("resimulate", True):
        raise InvalidData("the post-processing step 'rollout' continues re-simulated rows: add 'resimulate'")
    parts, stats = [], None
    kept = seen = 0
    i = 0
    chunk = first
    while True:
        try:
            out, st = postprocess(chunk, **options)
            got = out.n_transitions
        except InvalidData:  # every row of this draw dropped
            out, st, got = None, None, 0
        seen += chunk.n_transitions
        if st is not None:
            if stats is None:
                stats = dict(st)
            else:  # row counts add up over the draws; the other stats stay those of the first draw
                for key in _COUNTS:
                    stats[key] = stats.get(key, 0) + st.get(key, 0)
        else:
            stats = stats or {}
            stats["draws_without_a_kept_row"] = stats.get("draws_without_a_kept_row", 0) + 1
        if got:
            parts.append(out)
            kept += got
        if kept >= n:
            break
        if seen >= max_draws * n:
            raise InvalidData(f"post-processing kept {kept} of {seen} sampled rows; stopped before {n} "
                              f"(more than {max_draws:g}x the rows asked for were drawn): the model's rows do not fit "
                              "this environment")
        i += 1
        rate = max(kept / seen, 1.0 / max_draws)
        chunk = draw(int(np.ceil(min((n - kept) / rate * 1.1, max_draws * n - seen))) + 1, i)
    data = parts[0] if len(parts) == 1 else OfflineDataset.concatenate(parts, info=parts[0].info)
    data = data.first_rows(n)
    stats = {**(stats or {}), "rows_in": seen, "rows_kept": n, "draws": i + 1, "keep_rate": kept / seen,
             "topped_up_to": n}
    if rollout:
        data, stats["rollout"] = chain_rollouts(data)
    record = {**data.info.extra.get("postprocess", {}), **stats}
    stats["steps"] = record["steps"] = {**record.get("steps", {}), "rollout": bool(rollout)}
    card = None if data.info.privacy_card is None else {**data.info.privacy_card, "postprocess": record}
    info = dataclasses.replace(data.info, privacy_card=card, extra={**data.info.extra, "postprocess": record})
    return dataclasses.replace(data, info=info), stats


_COUNTS = ("rows_dropped_in_walls", "rows_dropped_goal_in_wall")


def draw_seed(base: int | None, i: int) -> int:
    """The sampling seed of a top-up's ``i``-th extra draw (``i`` = 1, 2, ...): ``base`` (the sample's own seed),
    moved far from it so the draws do not repeat the first sample's rows. Sampling seeds drive the sampler only,
    never DP noise."""
    return int(base or 0) + 100_003 * i
