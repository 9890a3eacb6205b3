"""Read and write :class:`~privsynth.data.dataset.OfflineDataset` as local Minari datasets, without jax.

Storage is Minari's own local store (``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``, found through
``minari.storage.get_dataset_path``), so everything written here loads with plain ``minari.load_dataset(id)``.
Writing builds ``EpisodeBuffer`` objects directly and calls ``minari.create_dataset_from_buffers`` (the
``DataCollector`` route needs jax; see the feasibility notes, section 3). Data format: hdf5.

Ids: Minari ids look like ``namespace/name-vN``. An id without a namespace gets :data:`DEFAULT_NAMESPACE`
(``privsynth/``) when written; an id without a version suffix means ``-v0`` when written and the highest local version
when read. When reading, an id without a namespace is first looked up as given (a dataset made by other Minari tools)
and then under ``privsynth/``.

Layout (how the round trip stays exact). Observations are stored flat (a float32 ``Box``; ``DatasetInfo.obs_keys``
says which dict keys were concatenated). Every step carries ``infos/episode_id`` (int64). Two schemes, recorded in
the metadata:

* ``episodic``: one Minari episode per dataset episode, used when every episode is a chain
  (``next_observations[t] == observations[t+1]`` inside each episode), there are at most
  :data:`MAX_EPISODIC_EPISODES` episodes and they average at least :data:`MIN_MEAN_EPISODE_LENGTH` steps.
  Minari's ``observations`` hold the T observations plus the last next
  observation (T+1 rows), as Minari expects.
* ``packed``: everything else: independent transitions (synthetic data whose next observations do not chain) or many
  episodes (Minari's hdf5 writer spends milliseconds per episode: 12,000 episodes of a 1M-step dataset took 73 s to
  write and 23 s to read, against about 1 s each packed). Transitions are stored in long pseudo-episodes of up to
  :data:`PACK_STEPS` steps; the true episode ids go in ``infos/episode_id`` and, for a pseudo-episode that is not a
  chain, the true next observations in ``infos/next_observations``. ``truncations``/``terminations`` still mark the
  real episode ends. Minari users see long pseudo-episodes; :func:`load_dataset` restores the original transitions
  and episodes exactly. ``write_dataset(..., scheme="episodic")`` forces one Minari episode per episode for chained
  data (slow for many episodes, but native for other Minari consumers).

``terminals`` and ``timeouts`` map to Minari's ``terminations`` and ``truncations``. The full
:class:`~privsynth.data.dataset.DatasetInfo` (reference scores, environment, sensitive flag, privacy card, extras)
is stored as a JSON object under the key ``"privsynth"`` of the dataset's ``metadata.json`` (Minari keeps unknown
metadata keys); the reference scores are also passed to Minari as ``ref_min_score``/``ref_max_score`` when the
environment is registered with gymnasium.

Atomic writes: the dataset is first created under a hidden temporary directory beside its final place (Minari's
listing ignores hidden directories), then moved into place with ``os.rename``. On any error the temporary directory
is removed; with ``overwrite=True`` the old dataset is renamed aside first and restored if the move fails.
:func:`write_dataset_dir` writes the directory of an id at any path, for release code that does its own atomic
placement (the privacy layer's ``guarded_write``).
"""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import re
import shutil
import uuid
import warnings
from pathlib import Path
from typing import Any, Iterator, Sequence

import gymnasium as gym
import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import DatasetNotFound, InvalidData, PrivsynthError

__all__ = [
    "DEFAULT_NAMESPACE",
    "PACK_STEPS",
    "resolve_id",
    "write_dataset",
    "load_dataset",
    "list_datasets",
    "dataset_exists",
    "delete_dataset",
    "describe",
    "write_dataset_dir",
    "target_path",
    "dataset_path",
    "load_public_and_sensitive",
]

DEFAULT_NAMESPACE = "privsynth"
PACK_STEPS = 100_000  # transitions per pseudo-episode in the packed scheme
MAX_EPISODIC_EPISODES = 2_000  # Minari's hdf5 writer costs ~3-6 ms per episode; beyond this, pack
MIN_MEAN_EPISODE_LENGTH = 4.0  # shorter episodes (e.g. independent transitions, one per "episode") are packed
FORMAT_VERSION = 1
_METADATA_KEY = "privsynth"
_TMP_PREFIX = ".privsynth-tmp-"

_ID_RE = re.compile(r"^(?:(?P<ns>[-\w][-\w/]*[-\w])/)?(?P<name>[-\w]+?)(?:-v(?P<version>\d+))?$")


def _root() -> Path:
    from minari.storage import get_dataset_path

    return Path(get_dataset_path())


def _parse(dataset_id: str) -> tuple[str | None, str, int | None]:
    if not isinstance(dataset_id, str) or not dataset_id.strip():
        raise InvalidData("a dataset id is required (e.g. privsynth/pointmaze-umaze-v0)")
    m = _ID_RE.fullmatch(dataset_id.strip())
    if not m:
        raise InvalidData(
            f"malformed dataset id '{dataset_id}'; ids look like namespace/name-v0 (letters, digits, '-', '_')"
        )
    version = m.group("version")
    return m.group("ns"), m.group("name"), None if version is None else int(version)


def _fmt(ns: str | None, name: str, version: int) -> str:
    return f"{ns + '/' if ns else ''}{name}-v{version}"


def _exists(full_id: str) -> bool:
    return (_root() / full_id / "data" / "metadata.json").is_file()


def _local_versions(ns: str | None, name: str) -> list[int]:
    parent = _root() / ns if ns else _root()
    if not parent.is_dir():
        return []
    out = []
    for child in parent.iterdir():
        m = re.fullmatch(re.escape(name) + r"-v(\d+)", child.name)
        if m and (child / "data" / "metadata.json").is_file():
            out.append(int(m.group(1)))
    return sorted(out)


def resolve_id(dataset_id: str, *, for_write: bool = False) -> str:
    """The full Minari id (``namespace/name-vN``) that ``dataset_id`` names (see module docstring).

    For reading, raises :class:`DatasetNotFound` when no local dataset matches.
    """
    ns, name, version = _parse(dataset_id)
    if for_write:
        return _fmt(ns or DEFAULT_NAMESPACE, name, 0 if version is None else version)
    namespaces = [ns] if ns else [None, DEFAULT_NAMESPACE]
    for candidate_ns in namespaces:
        if version is not None:
            if _exists(_fmt(candidate_ns, name, version)):
                return _fmt(candidate_ns, name, version)
        else:
            versions = _local_versions(candidate_ns, name)
            if versions:
                return _fmt(candidate_ns, name, versions[-1])
    raise DatasetNotFound(f"no local dataset '{dataset_id}' in {_root()} (see `privsynth datasets list`)")


def dataset_path(dataset_id: str) -> Path:
    """Directory of an existing local dataset."""
    return _root() / resolve_id(dataset_id)


def dataset_exists(dataset_id: str) -> bool:
    """True if a local dataset answers to ``dataset_id``."""
    try:
        resolve_id(dataset_id)
    except DatasetNotFound:
        return False
    return True


def list_datasets(prefix: str | None = None) -> list[str]:
    """Full ids of all local Minari datasets (optionally those starting with ``prefix``), sorted."""
    import minari

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids = sorted(minari.list_local_datasets())
    return [i for i in ids if prefix is None or i.startswith(prefix)]


def delete_dataset(dataset_id: str) -> str:
    """Delete a local dataset; returns its full id. Raises :class:`DatasetNotFound` when absent."""
    full = resolve_id(dataset_id)
    shutil.rmtree(_root() / full)
    return full


def describe(dataset_id: str) -> dict[str, Any]:
    """Cheap facts about a local dataset from its ``metadata.json`` alone (no arrays are read)."""
    from minari.dataset.minari_storage import MinariStorage

    full = resolve_id(dataset_id)
    try:
        meta = MinariStorage.read_raw_metadata(_root() / full / "data")
    except ValueError as exc:
        raise InvalidData(f"cannot read dataset '{full}': {exc}") from None
    ours = meta.get(_METADATA_KEY) if isinstance(meta.get(_METADATA_KEY), dict) else None
    info = (ours or {}).get("info") or {}
    card = info.get("privacy_card") or None
    return {
        "id": full,
        "name": info.get("name", full),
        "env_id": info.get("env_id"),
        "episodes": (ours or {}).get("n_episodes", meta.get("total_episodes")),
        "transitions": (ours or {}).get("n_transitions", meta.get("total_steps")),
        "scheme": (ours or {}).get("scheme", "minari"),
        "sensitive": bool(info.get("sensitive", False)),
        "epsilon": card.get("epsilon") if isinstance(card, dict) else None,
        "written_by": "privsynth" if ours else "minari",
        "path": str(_root() / full),
    }


# --------------------------------------------------------------------------------------------------- writing
def _jsonable(obj: Any) -> Any:
    """Round-trip through JSON with numpy scalars/arrays converted, so the stored info equals what loads back."""

    def default(o: Any) -> Any:
        if isinstance(o, np.generic):
            return o.item()
        if isinstance(o, np.ndarray):
            return o.tolist()
        if isinstance(o, (set, tuple)):
            return list(o)
        if isinstance(o, Path):
            return str(o)
        raise TypeError(f"value of type {type(o).__name__} cannot be stored in dataset metadata")

    try:
        return json.loads(json.dumps(obj, default=default, allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise InvalidData(f"dataset info is not JSON-serialisable: {exc}") from None


def _is_chained(ds: OfflineDataset) -> bool:
    same = ds.episode_ids[1:] == ds.episode_ids[:-1]
    if not same.any():
        return True
    return bool(np.array_equal(ds.next_observations[:-1][same], ds.observations[1:][same]))


def choose_scheme(ds: OfflineDataset) -> str:
    """``episodic`` or ``packed`` (see module docstring)."""
    n_eps = ds.n_episodes
    if n_eps <= MAX_EPISODIC_EPISODES and ds.n_transitions >= MIN_MEAN_EPISODE_LENGTH * n_eps and _is_chained(ds):
        return "episodic"
    return "packed"


def _buffers(ds: OfflineDataset, scheme: str) -> Iterator[Any]:
    from minari.data_collector.episode_buffer import EpisodeBuffer

    if scheme == "episodic":
        starts = np.concatenate([[0], np.flatnonzero(ds.episode_ids[1:] != ds.episode_ids[:-1]) + 1])
        ends = np.concatenate([starts[1:], [ds.n_transitions]])
    else:
        starts = np.arange(0, ds.n_transitions, PACK_STEPS)
        ends = np.minimum(starts + PACK_STEPS, ds.n_transitions)
    for s, e in zip(starts, ends):
        infos: dict[str, np.ndarray] = {"episode_id": ds.episode_ids[s:e].copy()}
        if scheme == "packed" and not np.array_equal(ds.next_observations[s : e - 1], ds.observations[s + 1 : e]):
            infos["next_observations"] = ds.next_observations[s:e].copy()
        yield EpisodeBuffer(
            observations=np.concatenate([ds.observations[s:e], ds.next_observations[e - 1 : e]]),
            actions=ds.actions[s:e].copy(),
            rewards=ds.rewards[s:e].copy(),
            terminations=ds.terminals[s:e].copy(),
            truncations=ds.timeouts[s:e].copy(),
            infos=infos,
        )


def _env_spec(info: DatasetInfo) -> Any:
    """A gymnasium EnvSpec for the dataset's env (with its kwargs), or None if the id is not registered."""
    if not info.env_id:
        return None
    from privsynth.data.envs import register_robotics_envs

    register_robotics_envs()
    try:
        spec = gym.spec(info.env_id)
    except gym.error.Error:
        return None
    kwargs = dict(info.env_kwargs)
    max_steps = kwargs.pop("max_episode_steps", spec.max_episode_steps)
    return dataclasses.replace(spec, kwargs={**spec.kwargs, **kwargs}, max_episode_steps=max_steps)


@contextlib.contextmanager
def _minari_root(path: Path) -> Iterator[None]:
    """Point Minari at another datasets root for the duration of the block."""
    old = os.environ.get("MINARI_DATASETS_PATH")
    os.environ["MINARI_DATASETS_PATH"] = str(path)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = old


def _action_space(ds: OfflineDataset) -> gym.spaces.Box:
    info = ds.info
    if info.action_low is not None and info.action_high is not None:
        low = np.asarray(info.action_low, dtype=np.float32).reshape(-1)
        high = np.asarray(info.action_high, dtype=np.float32).reshape(-1)
        if low.shape == high.shape == (ds.act_dim,):
            return gym.spaces.Box(low, high, dtype=np.float32)
    return gym.spaces.Box(-np.inf, np.inf, shape=(ds.act_dim,), dtype=np.float32)


def _ensure_namespaces(full: str, template_root: Path | None = None) -> None:
    """Create the namespace directories of ``full`` in the Minari root, with Minari's namespace metadata file."""
    root = _root()
    parts = full.split("/")[:-1]
    for depth in range(1, len(parts) + 1):
        rel = Path(*parts[:depth])
        (root / rel).mkdir(exist_ok=True)
        dst = root / rel / "namespace_metadata.json"
        src = template_root / rel / "namespace_metadata.json" if template_root is not None else None
        if not dst.exists():
            if src is not None and src.is_file():
                shutil.copyfile(src, dst)
            else:
                dst.write_text("{}")


def write_dataset_dir(
    ds: OfflineDataset, dataset_id: str, path: str | os.PathLike, *, scheme: str | None = None
) -> Path:
    """Create the Minari directory of dataset ``dataset_id`` at ``path`` (which must not exist yet).

    For release code that places the directory itself, e.g. ``privsynth.privacy.guarded_write(final, lambda tmp:
    write_dataset_dir(ds, id, tmp), ...)`` with ``final = minari_io.target_path(id)``: the metadata names
    ``dataset_id``, so once renamed to :func:`target_path` it loads under that id. Nothing is left at ``path`` on
    error. Returns ``path``.
    """
    import minari

    full = resolve_id(dataset_id, for_write=True)
    path = Path(path)
    if path.exists():
        raise PrivsynthError(f"cannot write dataset '{full}' to {path}: the path exists")
    ds.validate()
    info_dict = _jsonable(ds.info.to_dict())
    if scheme is None:
        scheme = choose_scheme(ds)
    elif scheme not in ("episodic", "packed"):
        raise InvalidData(f"unknown storage scheme '{scheme}'; use 'episodic' or 'packed'")
    elif scheme == "episodic" and not _is_chained(ds):
        raise InvalidData("the episodic scheme needs chained episodes (next_observations[t] == observations[t+1])")
    spec = _env_spec(ds.info)
    lo, hi = ds.info.ref_min_score, ds.info.ref_max_score
    scores = {"ref_min_score": float(lo), "ref_max_score": float(hi)} if lo is not None and hi is not None else {}
    description = f"privsynth dataset '{ds.info.name}' ({'sensitive' if ds.info.sensitive else 'not sensitive'}"
    description += ", DP release with privacy card)" if ds.info.privacy_card else ")"
    meta = {
        "format_version": FORMAT_VERSION,
        "scheme": scheme,
        "n_transitions": ds.n_transitions,
        "n_episodes": ds.n_episodes,
        "obs_dim": ds.obs_dim,
        "act_dim": ds.act_dim,
        "info": info_dict,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_root = path.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
    try:
        tmp_root.mkdir()
        with _minari_root(tmp_root), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            created = minari.create_dataset_from_buffers(
                dataset_id=full,
                buffer=list(_buffers(ds, scheme)),
                env=spec,
                eval_env=spec,
                observation_space=gym.spaces.Box(-np.inf, np.inf, shape=(ds.obs_dim,), dtype=np.float32),
                action_space=_action_space(ds),
                algorithm_name=str(ds.info.extra.get("algorithm", "privsynth")),
                description=description,
                data_format="hdf5",
                **scores,
            )
            created.storage.update_metadata({_METADATA_KEY: meta})
        _ensure_namespaces(full, tmp_root)
        os.rename(tmp_root / full, path)
    finally:
        shutil.rmtree(tmp_root, ignore_errors=True)
    return path


def target_path(dataset_id: str) -> Path:
    """Where :func:`write_dataset` puts ``dataset_id`` in the Minari root (whether or not it exists)."""
    return _root() / resolve_id(dataset_id, for_write=True)


def write_dataset(
    ds: OfflineDataset, dataset_id: str, *, overwrite: bool = False, scheme: str | None = None
) -> Path:
    """Write ``ds`` as the local Minari dataset ``dataset_id`` (atomic; see module docstring). Returns its directory.

    ``scheme`` is ``None`` (choose automatically), ``"episodic"`` or ``"packed"``. Raises :class:`PrivsynthError` if
    the id exists and ``overwrite`` is False, :class:`InvalidData` for bad data.
    """
    full = resolve_id(dataset_id, for_write=True)
    final = _root() / full

    def refuse() -> None:
        if final.exists() and not overwrite:
            raise PrivsynthError(f"dataset '{full}' already exists; pass --overwrite (overwrite=True) to replace it")

    refuse()
    staged = final.parent / f"{_TMP_PREFIX}new-{uuid.uuid4().hex}"
    trash: Path | None = None
    try:
        write_dataset_dir(ds, full, staged, scheme=scheme)
        refuse()
        if final.exists():
            trash = final.parent / f"{_TMP_PREFIX}old-{uuid.uuid4().hex}"
            os.rename(final, trash)
        try:
            os.rename(staged, final)
        except BaseException:
            if trash is not None:
                os.rename(trash, final)
                trash = None
            raise
    finally:
        shutil.rmtree(staged, ignore_errors=True)
        if trash is not None:
            shutil.rmtree(trash, ignore_errors=True)
    return final


# --------------------------------------------------------------------------------------------------- reading
def _flatten_foreign_obs(obs: Any) -> tuple[np.ndarray, list[str] | None]:
    if isinstance(obs, dict):
        from privsynth.data.envs import POINTMAZE_OBS_KEYS

        keys = list(POINTMAZE_OBS_KEYS) if set(POINTMAZE_OBS_KEYS) <= set(obs) else sorted(obs)
        arrs = [np.asarray(obs[k], dtype=np.float32).reshape(len(obs[k]), -1) for k in keys]
        return np.concatenate(arrs, axis=1), keys
    arr = np.asarray(obs, dtype=np.float32)
    return arr.reshape(arr.shape[0], -1), None


def _foreign_info(full: str, metadata: dict[str, Any], obs_keys: list[str] | None) -> DatasetInfo:
    env_id, env_kwargs = None, {}
    spec_json = metadata.get("eval_env_spec") or metadata.get("env_spec")
    if isinstance(spec_json, str):
        try:
            spec = json.loads(spec_json)
            env_id = spec.get("id")
            env_kwargs = dict(spec.get("kwargs") or {})
            if spec.get("max_episode_steps"):
                env_kwargs["max_episode_steps"] = spec["max_episode_steps"]
        except (ValueError, AttributeError):
            pass
    return DatasetInfo(
        name=full,
        env_id=env_id,
        env_kwargs=env_kwargs,
        obs_keys=obs_keys,
        ref_min_score=metadata.get("ref_min_score"),
        ref_max_score=metadata.get("ref_max_score"),
        extra={"minari_id": full, "algorithm": metadata.get("algorithm_name")},
    )


def load_dataset(dataset_id: str) -> OfflineDataset:
    """Load a local Minari dataset as an :class:`OfflineDataset` (exact inverse of :func:`write_dataset`).

    Datasets written by other Minari tools load too: their episodes are chains, dict observations are flattened
    (PointMaze keys in :data:`privsynth.data.envs.POINTMAZE_OBS_KEYS` order, other dicts by sorted key).
    """
    import minari

    full = resolve_id(dataset_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            mds = minari.load_dataset(full)
        except Exception as exc:  # a damaged or foreign-format directory
            raise InvalidData(f"cannot read dataset '{full}': {exc}") from None
        metadata = mds.storage.metadata
    ours = metadata.get(_METADATA_KEY)
    obs_parts, next_parts, act, rew, term, trunc, ids = [], [], [], [], [], [], []
    obs_keys: list[str] | None = None
    for k, ep in enumerate(mds.iterate_episodes()):
        obs, obs_keys = _flatten_foreign_obs(ep.observations)
        infos = ep.infos or {}
        t = len(ep.rewards)
        if t == 0:
            raise InvalidData(f"dataset '{full}' has an empty episode (episode {k})")
        obs_parts.append(obs[:t])
        if "next_observations" in infos:
            next_parts.append(np.asarray(infos["next_observations"], dtype=np.float32).reshape(t, -1))
        else:
            next_parts.append(obs[1 : t + 1])
        act.append(np.asarray(ep.actions, dtype=np.float32).reshape(t, -1))
        rew.append(np.asarray(ep.rewards, dtype=np.float32))
        term.append(np.asarray(ep.terminations, dtype=bool))
        trunc.append(np.asarray(ep.truncations, dtype=bool))
        ids.append(np.asarray(infos["episode_id"], dtype=np.int64) if "episode_id" in infos else np.full(t, k))
    if not obs_parts:
        raise InvalidData(f"dataset '{full}' has no episodes")
    if isinstance(ours, dict) and "info" in ours:
        info = DatasetInfo.from_dict(ours["info"])
    else:
        info = _foreign_info(full, metadata, obs_keys)
    return OfflineDataset(
        observations=np.concatenate(obs_parts),
        actions=np.concatenate(act),
        rewards=np.concatenate(rew),
        next_observations=np.concatenate(next_parts),
        terminals=np.concatenate(term),
        timeouts=np.concatenate(trunc),
        episode_ids=np.concatenate(ids),
        info=info,
    )


def load_public_and_sensitive(
    public_ids: Sequence[str] | str | None, sensitive_id: str
) -> tuple[OfflineDataset | None, OfflineDataset]:
    """Load public data (concatenated; None if no ids) and the sensitive dataset, marked ``sensitive=True``.

    Raises :class:`SpaceMismatch` when their observation/action widths differ, :class:`DatasetNotFound` for
    unknown ids, and :class:`InvalidData` when a public id is also the sensitive one.
    """
    if isinstance(public_ids, str):
        public_ids = [public_ids]
    public_ids = list(public_ids or [])
    sensitive = load_dataset(sensitive_id).mark_sensitive(True)
    sensitive_full = resolve_id(sensitive_id)
    publics = []
    for pid in public_ids:
        if resolve_id(pid) == sensitive_full:
            raise InvalidData(f"dataset '{sensitive_full}' cannot be both public and sensitive")
        pub = load_dataset(pid)
        if pub.info.sensitive:
            raise InvalidData(f"dataset '{resolve_id(pid)}' is marked sensitive and cannot be used as public data")
        pub.check_compatible(sensitive)
        publics.append(pub)
    if not publics:
        return None, sensitive
    public = publics[0] if len(publics) == 1 else OfflineDataset.concatenate(publics)
    return public, sensitive
