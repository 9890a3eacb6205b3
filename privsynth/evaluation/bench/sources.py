"""A suite's datasets: the registered sources (random, pointmaze, locomotion, locomotion_projected, minari),
splits of another dataset, and the ``.npz`` cache under ``<results>/<suite>/data`` they are prepared into once,
before the stages run."""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.split import split_transitions  # re-exported: suites split with it
from privsynth.errors import InvalidData
from privsynth.evaluation.bench.dataset_cache import (  # re-exported: cells and the runner read the cache through here
    dataset_path,
    load_dataset_file,
    load_dataset_info,
    resolved_spec,
    save_dataset,
)
from privsynth.evaluation.bench.registry import dataset_source, dataset_sources, register_dataset_source
from privsynth.evaluation.bench.suite import Suite

__all__ = ["source_keys", "save_dataset", "load_dataset_file", "load_dataset_info", "dataset_path", "resolved_spec", "split_transitions",
           "prepare_datasets"]



# ---------------------------------------------------------------------------------------------------- sources
@register_dataset_source("random")
def random_dataset(episodes: int = 4, length: int = 10, obs_dim: int = 2, act_dim: int = 1, seed: int = 0,
                   name: str = "random", **_) -> OfflineDataset:
    """Gaussian episodes, for runner tests and dry runs."""
    rng = np.random.default_rng(seed)
    n = episodes * length
    obs = rng.normal(size=(n, obs_dim)).astype(np.float32)
    timeouts = np.zeros(n, dtype=bool)
    timeouts[length - 1 :: length] = True
    return OfflineDataset(
        observations=obs, actions=rng.uniform(-1, 1, (n, act_dim)).astype(np.float32), rewards=rng.normal(size=n),
        next_observations=obs + 0.1, terminals=np.zeros(n, dtype=bool), timeouts=timeouts,
        episode_ids=np.repeat(np.arange(episodes), length), info=DatasetInfo(name=name, ref_min_score=0.0, ref_max_score=1.0),
    )


@register_dataset_source("pointmaze")
def pointmaze_dataset(**spec) -> OfflineDataset:
    """``privsynth.data.pointmaze.generate_pointmaze`` with the spec's PointMazeConfig fields (maze, steps, seed, ...)."""
    from privsynth.data.pointmaze import PointMazeConfig, generate_pointmaze  # data helper

    # A suite's data are public by construction (their seeds are in the YAML), and each committed suite normalises
    # every row with its datasets' references as they were computed: from the data seed. Pinning ref_seed keeps
    # those results reproducible; it also means normalised scores compare within a suite, not across suites of
    # other draws (docs/benchmarks.md). Outside suites, references come from the public REFERENCE_SEED.
    spec = {**spec, "ref_seed": spec.get("ref_seed", spec.get("seed", 0))}
    return generate_pointmaze(PointMazeConfig(**spec), progress=False)


@register_dataset_source("locomotion")
def locomotion_dataset(**spec) -> OfflineDataset:
    """``privsynth.data.locomotion.generate_locomotion`` from a shipped SAC policy (env, kind, steps, seed, ...)."""
    from privsynth.data.locomotion.generate import LocomotionConfig, generate_locomotion  # data helper

    return generate_locomotion(LocomotionConfig(**spec), progress=False)


# One body's rows in the observation / action layout of a body that is a part of it (same joints, same order of
# roles). Walker2d-v5 observes qpos[1:] = (z, pitch, thigh, leg, foot, thigh_l, leg_l, foot_l) | qvel = (vx, vz,
# pitch rate, thigh, leg, foot, thigh_l, leg_l, foot_l) and acts on (thigh, leg, foot, thigh_l, leg_l, foot_l);
# Hopper-v5 is its right leg: (z, pitch, thigh, leg, foot) | (vx, vz, pitch rate, thigh, leg, foot), (thigh, leg,
# foot). Rewards and ends of episodes stay the source body's (the same forward + healthy - control form).
PROJECTIONS: dict[tuple[str, str], dict[str, Any]] = {
    ("walker2d", "hopper"): {"env_id": "Hopper-v5", "obs": (0, 1, 2, 3, 4, 8, 9, 10, 11, 12, 13), "act": (0, 1, 2)},
}


def project_dataset(ds: OfflineDataset, source_env: str, onto: str) -> OfflineDataset:
    """``ds`` (rows of ``source_env``) in the layout of ``onto`` (:data:`PROJECTIONS`); its info names both bodies."""
    key = (str(source_env).lower(), str(onto).lower())
    if key not in PROJECTIONS:
        known = ", ".join(f"{a} onto {b}" for a, b in PROJECTIONS)
        raise InvalidData(f"no projection of {key[0]} onto {key[1]}; known: {known}")
    proj = PROJECTIONS[key]
    obs, act = list(proj["obs"]), list(proj["act"])
    if ds.observations.shape[1] <= max(obs) or ds.actions.shape[1] <= max(act):
        raise InvalidData(f"dataset '{ds.info.name}' has {ds.observations.shape[1]} / {ds.actions.shape[1]} "
                          f"observation / action dims, too few for the {key[0]} layout")
    info = DatasetInfo.from_dict(ds.info.to_dict())
    info.extra = {**info.extra, "projected_from": ds.info.env_id, "projection": {"obs": obs, "act": act}}
    info.env_id = proj["env_id"]
    info.action_low = None if ds.info.action_low is None else [ds.info.action_low[i] for i in act]
    info.action_high = None if ds.info.action_high is None else [ds.info.action_high[i] for i in act]
    return OfflineDataset(observations=ds.observations[:, obs], actions=ds.actions[:, act], rewards=ds.rewards,
                          next_observations=ds.next_observations[:, obs], terminals=ds.terminals,
                          timeouts=ds.timeouts, episode_ids=ds.episode_ids, info=info)


@register_dataset_source("locomotion_projected")
def projected_locomotion_dataset(onto: str, **spec) -> OfflineDataset:
    """A ``locomotion`` dataset of one body projected onto another's layout (``onto``, :data:`PROJECTIONS`), e.g.
    Walker2d's right leg as Hopper data: ``{source: locomotion_projected, env: walker2d, onto: hopper, ...}``."""
    return project_dataset(locomotion_dataset(**spec), spec.get("env", ""), onto)


@register_dataset_source("minari")
def minari_dataset(dataset_id: str, **_) -> OfflineDataset:
    """A Minari dataset by id, from the local store."""
    from privsynth.data import minari_io  # data helper

    return minari_io.load_dataset(dataset_id)


_COMMON_KEYS = {"source", "sensitive", "name"}


def source_keys(source: str) -> set[str] | None:
    """The spec keys the built-in source ``source`` accepts (``source`` and ``sensitive`` included), for checking a
    suite before it runs; None when unknown (a source registered elsewhere takes what it takes)."""
    import dataclasses
    import inspect

    if source == "pointmaze":
        from privsynth.data.pointmaze import PointMazeConfig  # data helper

        return _COMMON_KEYS | {f.name for f in dataclasses.fields(PointMazeConfig)}
    if source in ("locomotion", "locomotion_projected"):
        from privsynth.data.locomotion.generate import LocomotionConfig  # data helper

        extra = {"onto"} if source == "locomotion_projected" else set()
        return _COMMON_KEYS | extra | {f.name for f in dataclasses.fields(LocomotionConfig)}
    fn = {"random": random_dataset, "minari": minari_dataset}.get(source)
    if fn is None:
        return None
    return _COMMON_KEYS | {p for p, v in inspect.signature(fn).parameters.items() if v.kind is v.POSITIONAL_OR_KEYWORD}


# ---------------------------------------------------------------------------------------------------- preparing
def _split(name: str, spec: dict[str, Any], whole: OfflineDataset) -> OfflineDataset:
    fraction, seed = float(spec.get("fraction", 0.8)), int(spec.get("seed", 0))
    by = spec.get("by", "episode")
    if by == "episode":
        first, second = whole.split_episodes(fraction, seed=seed)
    elif by == "transition":
        first, second = split_transitions(whole, fraction, seed)
    else:
        raise InvalidData(f"dataset '{name}': split 'by' must be 'episode' or 'transition', got '{by}'")
    return first if spec.get("part", "first") == "first" else second


def prepare_datasets(suite: Suite, source_of: Callable[[str], Any] | None = None) -> None:
    """Generate, load or split every declared dataset once, in the main process, caching them as ``.npz``.

    ``source_of(name)`` looks a source up (default: the registry as it is now). Sources registered by cell modules
    (``method_example``) exist only once those are imported: the runner passes
    :func:`privsynth.evaluation.bench.kinds.resolve_source`, which imports them first."""
    source_of = source_of or dataset_source
    done: set[str] = set()

    def build(name: str, chain: tuple[str, ...] = ()) -> None:
        if name in done:
            return
        if name not in suite.datasets:
            raise InvalidData(f"dataset '{name}' is not declared in suite '{suite.name}'")
        if name in chain:
            raise InvalidData(f"datasets {' -> '.join(chain + (name,))} form a cycle")
        path = dataset_path(suite.out, name, suite.datasets)
        if not path.exists():
            spec = dict(suite.datasets[name])
            sensitive = spec.pop("sensitive", None)
            if "split_of" in spec:
                parent = spec.pop("split_of")
                build(parent, chain + (name,))
                ds = _split(name, spec, load_dataset_file(dataset_path(suite.out, parent, suite.datasets)))
            else:
                source = source_of(spec.pop("source", None) or "")
                if source is None:
                    raise InvalidData(f"dataset '{name}' has unknown source '{suite.datasets[name].get('source')}': "
                                      f"use one of {dataset_sources()} or split_of")
                try:
                    ds = source(**spec)
                except TypeError as exc:
                    raise InvalidData(f"dataset '{name}' (source '{suite.datasets[name].get('source')}'): {exc}") from exc
            if sensitive is not None:
                ds.info.sensitive = bool(sensitive)
            ds.info.name = name
            save_dataset(ds, path)
        done.add(name)

    for name in suite.datasets:
        build(name)
