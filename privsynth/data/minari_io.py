"""Read and write :class:`~privsynth.data.dataset.OfflineDataset` as local Minari datasets, without jax.

Storage is Minari's own local store (``$MINARI_DATASETS_PATH`` or ``~/.minari/datasets``, found through
``minari.storage.get_dataset_path``), so everything written here loads with plain ``minari.load_dataset(id)``.
Writing: Minari's own ``create_dataset_from_buffers`` makes the metadata (environment spec, spaces, reference
scores), then the episodes are written into its ``main_data.hdf5`` in Minari's exact group layout in one pass by
:mod:`privsynth.data.minari_hdf5` (Minari's writer costs milliseconds per episode and grows quadratically with their
number); the environment's spaces come from :mod:`privsynth.data.minari_spaces`. Data format: hdf5.

Why this module is long: it is the whole id scheme, atomic placement, metadata and reader of one storage format
(ids, listing, describe, write, load, public/sensitive loading share the id resolution and metadata layout); the
HDF5 episode writer and the space handling live in the two modules above.

Ids: Minari ids look like ``namespace/name-vN``. An id without a namespace gets :data:`DEFAULT_NAMESPACE`
(``privsynth/``) when written; an id without a version suffix means ``-v0`` when written and the highest local version
when read. When reading, an id without a namespace is first looked up as given (a dataset made by other Minari tools)
and then under ``privsynth/``.

Layout ("standard", format 2): what any Minari consumer reads right (docs/DESIGN.md invariant 8).

* Minari episodes are the maximal chained runs of a dataset episode (:func:`minari_episode_bounds`): an episode of a
  real rollout stays one Minari episode; independent synthetic transitions become one Minari episode each, with
  observations ``[s, s']``. ``observations[t+1]`` is always the true next observation.
* Every Minari episode ends in a termination (the transition's terminal) or else a truncation.
* Observations keep the environment's observation space: flat columns are un-flattened into the environment's Dict
  (``DatasetInfo.obs_keys`` names the stored keys in column order; keys the environment derives from others, such as
  PointMaze's ``achieved_goal``, are rebuilt) and cast to its dtypes; the action space is the environment's.
  Without a registered environment, both are flat float32 ``Box`` spaces.
* Steps carry ``infos/episode_id`` (int64), the dataset's own episode id, unless it equals the Minari episode index
  everywhere (one transition per episode, or episodes that were not split).
* Beside ``main_data.hdf5``, ``privsynth_arrays.npz`` holds the same flat arrays, so :func:`load_dataset` reads a
  100,000-episode release in a second (Minari ignores the file).
* The privacy card is stored once, at the top-level key ``privacy_card`` of ``metadata.json``, and summarised in
  the dataset's ``description`` (what ``minari show`` prints).

Format 1 datasets (``episodic``/``packed`` schemes with ``infos/next_observations``) are still read.

``terminals`` map to Minari's ``terminations``. The rest of :class:`~privsynth.data.dataset.DatasetInfo`
(reference scores, environment, sensitive flag, extras) is stored as a JSON object under the key ``"privsynth"`` of the dataset's ``metadata.json`` (Minari keeps unknown
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

from privsynth.data.dataset import ARRAY_FIELDS, DatasetInfo, OfflineDataset
from privsynth.data.minari_hdf5 import minari_episode_bounds, write_standard_hdf5
from privsynth.data.minari_spaces import action_space, check_env_spaces, env_spaces, jsonable, obs_writer
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
    "check_env_spaces",
    "env_spaces",
    "minari_episode_bounds",
    "card_summary",
    "read_card",
    "read_card_at",
    "read_info",
    "CARD_KEY",
]

DEFAULT_NAMESPACE = "privsynth"
PACK_STEPS = 100_000  # transitions per pseudo-episode of the old packed scheme (still read, no longer written)
FORMAT_VERSION = 2
CARD_KEY = "privacy_card"  # top-level key of metadata.json holding the one privacy card of a release
SIDECAR_FILE = "privsynth_arrays.npz"  # flat copy of the arrays beside main_data.hdf5, for fast privsynth reads
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
    """Full ids of all local Minari datasets (optionally those starting with ``prefix``), sorted. A store folder that
    does not exist holds none (and is not created, as Minari's own listing would)."""
    import minari

    configured = os.environ.get("MINARI_DATASETS_PATH")
    if configured and not Path(configured).exists():
        return []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids = sorted(minari.list_local_datasets())
    return [i for i in ids if prefix is None or i.startswith(prefix)]


def delete_dataset(dataset_id: str) -> str:
    """Delete a local dataset; returns its full id. Raises :class:`DatasetNotFound` when absent."""
    full = resolve_id(dataset_id)
    shutil.rmtree(_root() / full)
    return full


def _read_meta(data_dir: Path, label: str) -> dict[str, Any]:
    """``metadata.json`` of the dataset in ``data_dir``, checked as data made by others: a mapping whose privsynth
    part (if any) names its arrays file by a plain file name in ``data_dir`` and holds a well-typed info, counts that
    are whole numbers, and a privacy card that is a mapping. One-line :class:`InvalidData` otherwise."""
    from minari.dataset.minari_storage import MinariStorage

    try:
        meta = MinariStorage.read_raw_metadata(data_dir)
    except (ValueError, OSError) as exc:
        raise InvalidData(f"cannot read {label}: {exc}") from None
    if not isinstance(meta, dict):
        raise InvalidData(f"cannot read {label}: metadata.json must hold a mapping, not {type(meta).__name__}")
    for key in ("total_episodes", "total_steps"):
        if meta.get(key) is not None and not _whole(meta[key]):
            raise InvalidData(f"cannot read {label}: metadata '{key}' must be a whole number, got {meta[key]!r:.60}")
    if meta.get(CARD_KEY) is not None and not isinstance(meta[CARD_KEY], dict):
        raise InvalidData(f"cannot read {label}: its privacy card must be a mapping")
    ours = meta.get(_METADATA_KEY)
    if isinstance(ours, dict):
        arrays = ours.get("arrays")
        if arrays is not None and not (isinstance(arrays, str) and arrays not in ("", ".", "..")
                                       and "/" not in arrays and "\\" not in arrays):
            raise InvalidData(f"cannot read {label}: its metadata names the arrays file {arrays!r:.80}; expected a "
                              f"file name inside its data folder (e.g. {SIDECAR_FILE})")
        for key in ("n_transitions", "n_episodes", "minari_episodes", "obs_dim", "act_dim"):
            if ours.get(key) is not None and not _whole(ours[key]):
                raise InvalidData(f"cannot read {label}: metadata '{_METADATA_KEY}.{key}' must be a whole number")
        if "info" in ours:
            try:
                DatasetInfo.from_dict(ours["info"])
            except InvalidData as exc:
                raise InvalidData(f"cannot read {label}: {exc}") from None
    return meta


def _whole(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0


def describe(dataset_id: str) -> dict[str, Any]:
    """Cheap facts about a local dataset from its ``metadata.json`` alone (no arrays are read)."""
    full = resolve_id(dataset_id)
    meta = _read_meta(_root() / full / "data", f"dataset '{full}'")
    ours = meta.get(_METADATA_KEY) if isinstance(meta.get(_METADATA_KEY), dict) else None
    info = (ours or {}).get("info") or {}
    card = _card_of(meta)
    eps = card.get("epsilon") if isinstance(card, dict) else None
    return {
        "id": full,
        "name": info.get("name", full),
        "env_id": info.get("env_id"),
        "episodes": meta.get("total_episodes"),  # Minari's count: what every Minari consumer iterates
        "source_episodes": (ours or {}).get("n_episodes", meta.get("total_episodes")),
        "transitions": (ours or {}).get("n_transitions", meta.get("total_steps")),
        "scheme": str((ours or {}).get("scheme", "minari")),
        "sensitive": bool(info.get("sensitive", False)),
        "epsilon": eps if isinstance(eps, (int, float)) and not isinstance(eps, bool) else None,
        "written_by": "privsynth" if ours else "minari",
        "path": str(_root() / full),
    }


def _card_of(meta: dict[str, Any]) -> dict[str, Any] | None:
    """The privacy card in a metadata dict: the top-level key, or where format 1 kept it."""
    card = meta.get(CARD_KEY)
    if isinstance(card, dict):
        return card
    ours = meta.get(_METADATA_KEY)
    old = ((ours or {}).get("info") or {}).get("privacy_card") if isinstance(ours, dict) else None
    return old if isinstance(old, dict) else None


def read_info(dataset_id: str) -> DatasetInfo:
    """The :class:`DatasetInfo` of a local dataset from ``metadata.json`` alone (no rows are read)."""
    full = resolve_id(dataset_id)
    meta = _read_meta(_root() / full / "data", f"dataset '{full}'")
    ours = meta.get(_METADATA_KEY)
    if isinstance(ours, dict) and "info" in ours:
        return _our_info(meta)
    return _foreign_info(full, meta, None)


def read_card(dataset_id: str) -> dict[str, Any] | None:
    """The privacy card of a local dataset (None if it has none), read from ``metadata.json`` alone."""
    return read_card_at(_root() / resolve_id(dataset_id))


def read_card_at(dataset_dir: str | Path) -> dict[str, Any] | None:
    """The privacy card of the Minari dataset stored in ``dataset_dir`` (the folder holding ``data/``), from its
    ``metadata.json`` alone; None if it has none."""
    meta = _read_meta(Path(dataset_dir) / "data", f"the dataset in {dataset_dir}")
    return _card_of(meta)


# --------------------------------------------------------------------------------------------------- writing
def _is_chained(ds: OfflineDataset) -> bool:
    same = ds.episode_ids[1:] == ds.episode_ids[:-1]
    if not same.any():
        return True
    return bool(np.array_equal(ds.next_observations[:-1][same], ds.observations[1:][same]))


def choose_scheme(ds: OfflineDataset) -> str:
    """The storage scheme :func:`write_dataset` uses by default: always ``standard`` (see module docstring)."""
    return "standard"


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


def card_summary(card: dict[str, Any] | None) -> str:
    """One human-readable paragraph of a privacy card (for the Minari description and ``datasets show``)."""
    if not card:
        return "No privacy card: this dataset is not a DP release."
    if not card.get("private", True):
        return "Privacy card: NOT differentially private (no-privacy ablation)."
    eps, delta = card.get("epsilon"), card.get("delta")  # a card read from a file may hold anything: shown as is
    eps_s = f"{eps:.4g}" if _real(eps) else "?" if eps is None else repr(eps)[:40]
    delta_s = f"{delta:g}" if _real(delta) else "?" if delta is None else repr(delta)[:40]
    text = (
        f"Differential privacy: ({eps_s}, {delta_s})-DP; privacy unit: {card.get('unit', '?')}"
        f" (neighbouring datasets: {card.get('neighbouring_relation', '?')}); accountant: {card.get('accountant', '?')}"
    )
    extras = [f"{k.replace('_', ' ')} {card[k]:.4g}" for k in ("noise_multiplier", "max_grad_norm", "sample_rate")
              if _real(card.get(k))]
    if _real(card.get("steps")) and isinstance(card["steps"], int):
        extras.append(f"steps {card['steps']}")
    if extras:
        text += "; DP-SGD " + ", ".join(extras)
    public = card.get("public_data")
    if isinstance(public, list):
        text += f"; public data used: {', '.join(map(str, public)) or 'none'}"
    return text + f". Full card: metadata['{CARD_KEY}'] (`privsynth privacy card DATASET_ID`)."


def _real(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _algorithm(info: DatasetInfo) -> str:
    """Minari's ``algorithm_name``: the behaviour policy of real data, the synthesizer of a release."""
    if info.extra.get("algorithm"):
        return str(info.extra["algorithm"])
    if info.extra.get("synthesizer"):
        suffix = " (DP synthetic)" if info.privacy_card else ""
        return f"privsynth {info.extra['synthesizer']}{suffix}"
    return "privsynth"


def _description(ds: OfflineDataset, n_minari_episodes: int) -> str:
    info = ds.info
    env = info.env_id or "an unregistered environment"
    if info.privacy_card:
        head = f"privsynth synthetic dataset '{info.name}' for {env}. {card_summary(info.privacy_card)}"
    else:
        head = f"privsynth dataset '{info.name}' for {env} ({'sensitive' if info.sensitive else 'not sensitive'})."
    single = n_minari_episodes == ds.n_transitions and ds.n_transitions > 1
    layout = (
        " Layout: one Minari episode per transition (observations [s, s'], terminated or truncated)."
        if single
        else f" Layout: {n_minari_episodes} standard Minari episodes, each ending in a termination or a truncation."
    )
    if (info.extra.get("layout") or {}).get("layout") == "chained":
        layout += (" The episodes chain independent synthetic transitions: each state after an episode's first is the"
                   " previous transition's next state (snap distances: metadata['privsynth'], extra.layout).")
    return head + layout


def write_dataset_dir(
    ds: OfflineDataset, dataset_id: str, path: str | os.PathLike, *, scheme: str | None = None
) -> Path:
    """Create the Minari directory of dataset ``dataset_id`` at ``path`` (which must not exist yet).

    For release code that places the directory itself, e.g. ``privsynth.privacy.guarded_write(final, lambda tmp:
    write_dataset_dir(ds, id, tmp), ...)`` with ``final = minari_io.target_path(id)``: the metadata names
    ``dataset_id``, so once renamed to :func:`target_path` it loads under that id. Nothing is left at ``path`` on
    error. ``scheme`` may only be ``None`` or ``"standard"`` (older schemes are read, no longer written). Returns
    ``path``.
    """
    import minari
    from minari.dataset.minari_storage import MinariStorage

    full = resolve_id(dataset_id, for_write=True)
    path = Path(path)
    if path.exists():
        raise PrivsynthError(f"cannot write dataset '{full}' to {path}: the path exists")
    if scheme not in (None, "standard", "episodic"):
        raise InvalidData(f"unknown storage scheme '{scheme}'; datasets are written in the 'standard' layout")
    ds.validate()
    check_env_spaces(ds.info, ds.obs_dim, ds.act_dim)
    info_dict = jsonable(ds.info.to_dict())
    card = info_dict.pop("privacy_card", None)
    spec = _env_spec(ds.info)
    obs_space, obs_fn = obs_writer(ds.info, ds.obs_dim)
    act_space = action_space(ds)
    lo, hi = ds.info.ref_min_score, ds.info.ref_max_score
    scores = {"ref_min_score": float(lo), "ref_max_score": float(hi)} if lo is not None and hi is not None else {}
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp_root = path.parent / f"{_TMP_PREFIX}{uuid.uuid4().hex}"
    try:
        tmp_root.mkdir()
        with _minari_root(tmp_root), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            created = minari.create_dataset_from_buffers(
                dataset_id=full,
                buffer=[],
                env=spec,
                eval_env=spec,
                observation_space=obs_space,
                action_space=act_space,
                algorithm_name=_algorithm(ds.info),
                description="(written by privsynth)",
                data_format="hdf5",
                **scores,
            )
            data_dir = Path(created.storage.data_path)
            n_eps, n_steps = write_standard_hdf5(data_dir / "main_data.hdf5", ds, obs_fn, act_space)
            np.savez(data_dir / SIDECAR_FILE, **{k: getattr(ds, k) for k in ARRAY_FIELDS})
            meta = {
                "format_version": FORMAT_VERSION,
                "scheme": "standard",
                "n_transitions": ds.n_transitions,
                "n_episodes": ds.n_episodes,
                "minari_episodes": n_eps,
                "obs_dim": ds.obs_dim,
                "act_dim": ds.act_dim,
                "arrays": SIDECAR_FILE,
                "info": info_dict,
            }
            update: dict[str, Any] = {
                "total_episodes": int(n_eps),
                "total_steps": int(n_steps),
                "description": _description(ds, n_eps),
                _METADATA_KEY: meta,
            }
            if card is not None:
                update[CARD_KEY] = card
            created.storage.update_metadata(update)
            created.storage.update_metadata({"dataset_size": MinariStorage.get_size(created.storage)})
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
def _flatten_obs(obs: Any, keys: Sequence[str] | None) -> tuple[np.ndarray, list[str] | None]:
    """Flat float32 [T+1, D] rows of Minari observations; Dict observations in ``keys`` order (see load_dataset)."""
    if isinstance(obs, dict):
        from privsynth.data.envs import POINTMAZE_OBS_KEYS

        if keys is None:
            keys = list(POINTMAZE_OBS_KEYS) if set(POINTMAZE_OBS_KEYS) <= set(obs) else sorted(obs)
        arrs = [np.asarray(obs[k], dtype=np.float32).reshape(len(obs[k]), -1) for k in keys]
        return np.concatenate(arrs, axis=1), list(keys)
    arr = np.asarray(obs, dtype=np.float32)
    return arr.reshape(arr.shape[0], -1), None


def _foreign_info(full: str, metadata: dict[str, Any], obs_keys: list[str] | None) -> DatasetInfo:
    env_id, env_kwargs = None, {}
    spec_json = metadata.get("eval_env_spec") or metadata.get("env_spec")
    if isinstance(spec_json, str):  # written by other tools: fields of the wrong type are dropped, not trusted
        try:
            spec = json.loads(spec_json)
            env_id = spec.get("id") if isinstance(spec.get("id"), str) else None
            kwargs = spec.get("kwargs") or {}
            env_kwargs = dict(kwargs) if isinstance(kwargs, dict) and all(isinstance(k, str) for k in kwargs) else {}
            if _real(spec.get("max_episode_steps")) and spec["max_episode_steps"]:
                env_kwargs["max_episode_steps"] = spec["max_episode_steps"]
        except (ValueError, AttributeError):
            pass
    lo, hi = metadata.get("ref_min_score"), metadata.get("ref_max_score")
    return DatasetInfo(
        name=full,
        env_id=env_id,
        env_kwargs=env_kwargs,
        obs_keys=obs_keys,
        ref_min_score=lo if _real(lo) else None,
        ref_max_score=hi if _real(hi) else None,
        extra={"minari_id": full, "algorithm": metadata.get("algorithm_name")},
    )


def _our_info(meta: dict[str, Any]) -> DatasetInfo:
    info = DatasetInfo.from_dict(meta[_METADATA_KEY]["info"])
    card = _card_of(meta)
    return dataclasses.replace(info, privacy_card=card) if card is not None else info


def load_dataset(dataset_id: str) -> OfflineDataset:
    """Load a local Minari dataset as an :class:`OfflineDataset` (exact inverse of :func:`write_dataset`).

    privsynth datasets read their flat arrays file (``privsynth_arrays.npz``) when present. Datasets written by other
    Minari tools load too: their episodes are chains, dict observations are flattened (PointMaze keys in
    :data:`privsynth.data.envs.POINTMAZE_OBS_KEYS` order, other dicts by sorted key).
    """
    full = resolve_id(dataset_id)
    data_dir = _root() / full / "data"
    raw = _read_meta(data_dir, f"dataset '{full}'")  # a store may hold folders made by anyone: read as data
    ours = raw.get(_METADATA_KEY) if isinstance(raw.get(_METADATA_KEY), dict) else None
    if ours is not None and ours.get("arrays") and (data_dir / ours["arrays"]).is_file():
        from privsynth.data.safe_files import load_npz

        if (data_dir / ours["arrays"]).resolve().parent != data_dir.resolve():
            raise InvalidData(f"cannot read dataset '{full}': its arrays file {ours['arrays']} links outside its "
                              "data folder")
        arrays = load_npz(data_dir / ours["arrays"], ARRAY_FIELDS, what=f"dataset '{full}' ({ours['arrays']})")
        return OfflineDataset(**arrays, info=_our_info(raw))
    try:
        return _load_episodes(full, data_dir, ours)
    except PrivsynthError:
        raise
    except Exception as exc:  # noqa: BLE001 - h5py, Minari and numpy raise many types for a damaged file
        first = (str(exc).splitlines() or [""])[0][:200]
        raise InvalidData(f"cannot read dataset '{full}': damaged or not a Minari dataset ({type(exc).__name__}: "
                          f"{first})") from None


def _load_episodes(full: str, data_dir: Path, ours: dict[str, Any] | None) -> OfflineDataset:
    """The dataset of Minari's episodes (datasets without privsynth's arrays file, and format 1)."""
    import minari

    from privsynth.data.safe_files import check_hdf5_sizes

    if (data_dir / "main_data.hdf5").is_file():  # h5py allocates what an array declares before reading it
        check_hdf5_sizes(data_dir / "main_data.hdf5", what=f"dataset '{full}'")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mds = minari.load_dataset(full)  # errors of a damaged or foreign-format directory: see load_dataset
        metadata = mds.storage.metadata
    keys = ((ours or {}).get("info") or {}).get("obs_keys")
    obs_parts, next_parts, act, rew, term, trunc, ids = [], [], [], [], [], [], []
    obs_keys: list[str] | None = None
    for k, ep in enumerate(mds.iterate_episodes()):
        obs, obs_keys = _flatten_obs(ep.observations, keys)
        infos = ep.infos or {}
        t = len(ep.rewards)
        if t == 0:
            raise InvalidData(f"dataset '{full}' has an empty episode (episode {k})")
        obs_parts.append(obs[:t])
        if "next_observations" in infos:  # format 1, packed scheme
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
    info = _our_info(metadata) if ours is not None and "info" in ours else _foreign_info(full, metadata, obs_keys)
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
    unknown ids, and :class:`InvalidData` when a public id is also the sensitive one or shares any transition with it.
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
        pub.check_public_for(sensitive)
        publics.append(pub)
    if not publics:
        return None, sensitive
    public = publics[0] if len(publics) == 1 else OfflineDataset.concatenate(publics)
    return public, sensitive
