"""The dataset model: transitions with episode ids, and their views.

One :class:`OfflineDataset` holds flat per-transition arrays (observations, actions, rewards, next observations,
terminals, timeouts, episode ids) plus :class:`DatasetInfo` (environment, reference scores, whether the data is
sensitive, privacy card). Views:

* :meth:`OfflineDataset.transition_matrix`: one row per transition in the fixed order
  ``state | action | reward | next state | terminal`` (the PrivORL-n data vector, paper section V).
* :meth:`OfflineDataset.episodes`: per-episode slices.
* :meth:`OfflineDataset.fragments`: fragments of horizon H with their linking transition (the transition just before
  the fragment's first one, zeros for an episode's first fragment) and a padding mask (PrivORL-j, section VI).

Episodes are contiguous runs of equal ``episode_ids``; every constructor validates this at the door.
Nothing in this module knows about differential privacy; the ``sensitive`` flag only marks data that the
normalisers in :mod:`privsynth.data.normalize` refuse to fit on.

Why this module is long: the dataset model and its views (transition matrix, episodes, fragments, pandas
import) are one type whose invariants (aligned arrays, episode ids, the sensitive flag) are checked in one place.
"""
from __future__ import annotations

import copy
import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any, Iterator

import numpy as np

from privsynth.errors import InvalidData, SpaceMismatch

__all__ = ["ENV_FACT_FIELDS", "ARRAY_FIELDS", "DatasetInfo", "OfflineDataset", "Episode", "Fragments", "environment_facts", "transition_dim"]


def transition_dim(obs_dim: int, act_dim: int) -> int:
    """Width of a transition row: state | action | reward | next state | terminal."""
    return 2 * obs_dim + act_dim + 2


@dataclass
class DatasetInfo:
    """What a dataset is, besides its arrays. Serialised into Minari metadata by :mod:`privsynth.data.minari_io`."""

    name: str = "unnamed"
    env_id: str | None = None  # gymnasium id that recreates the environment, e.g. "PointMaze_UMaze-v3"
    env_kwargs: dict[str, Any] = field(default_factory=dict)
    obs_keys: list[str] | None = None  # dict-observation keys flattened in this order; None for Box observations
    action_low: list[float] | None = None
    action_high: list[float] | None = None
    ref_min_score: float | None = None  # return of a random policy (D4RL convention)
    ref_max_score: float | None = None  # return of the noiseless expert controller
    sensitive: bool = False  # normalisers refuse to fit on sensitive data
    privacy_card: dict[str, Any] | None = None  # filled by privsynth.privacy on release
    # the holder's declared schema (privsynth.data.schema; public metadata, never learned from the data)
    schema: dict[str, Any] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "DatasetInfo":
        """Inverse of :meth:`to_dict`; unknown keys are ignored. ``d`` is read from files (dataset metadata,
        checkpoints), so a field of the wrong type is :class:`InvalidData` naming it, never a later traceback."""
        if not isinstance(d, dict):
            raise InvalidData(f"dataset info must be a mapping, not {type(d).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        values = {k: v for k, v in d.items() if k in known}
        for key, value in values.items():
            if not _INFO_CHECKS.get(key, lambda _: True)(value):  # a field added later: not checked yet
                raise InvalidData(f"dataset info field '{key}' has a value of the wrong type: {_short(value)}")
        return cls(**values)


def _number(v: Any) -> bool:
    return isinstance(v, numbers.Real) and not isinstance(v, (bool, np.bool_))


def _numbers(v: Any) -> bool:
    return v is None or (isinstance(v, (list, tuple)) and all(_number(x) for x in v))


def _short(v: Any) -> str:
    text = repr(v)
    return text if len(text) <= 80 else text[:77] + "..."


# what each DatasetInfo field may hold when read back from JSON (DatasetInfo.from_dict)
_INFO_CHECKS: dict[str, Any] = {
    "name": lambda v: isinstance(v, str),
    "env_id": lambda v: v is None or isinstance(v, str),
    "env_kwargs": lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
    "obs_keys": lambda v: v is None or (isinstance(v, (list, tuple)) and all(isinstance(k, str) for k in v)),
    "action_low": _numbers,
    "action_high": _numbers,
    "ref_min_score": lambda v: v is None or _number(v),
    "ref_max_score": lambda v: v is None or _number(v),
    "sensitive": lambda v: isinstance(v, (bool, np.bool_)),
    "privacy_card": lambda v: v is None or isinstance(v, dict),
    "extra": lambda v: isinstance(v, dict),
    "schema": lambda v: v is None or isinstance(v, dict),
}


# What a release takes from the sensitive dataset's DatasetInfo: public facts of its environment (the id and kwargs
# that rebuild it, which Dict keys the columns hold, the action box, D4RL reference returns of a random and an expert
# policy on it). None is a statistic of the sensitive rows (docs/DESIGN.md invariants 1, 7, 8).
# the per-row arrays of an OfflineDataset, in field order
ARRAY_FIELDS = ("observations", "actions", "rewards", "next_observations", "terminals", "timeouts", "episode_ids")
ENV_FACT_FIELDS = ("env_id", "env_kwargs", "obs_keys", "action_low", "action_high", "ref_min_score", "ref_max_score",
                   "schema")


def environment_facts(info: DatasetInfo) -> dict[str, Any]:
    """The :data:`ENV_FACT_FIELDS` of ``info`` (copied)."""
    return {k: copy.deepcopy(getattr(info, k)) for k in ENV_FACT_FIELDS}


@dataclass(frozen=True)
class Episode:
    """A view of one episode (arrays are slices of the parent dataset)."""

    episode_id: int
    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray

    def __len__(self) -> int:
        return len(self.rewards)

    @property
    def ret(self) -> float:
        """Undiscounted return."""
        return float(self.rewards.sum())


@dataclass(frozen=True)
class Fragments:
    """Fragments of horizon H (PrivORL section VI).

    ``data[f, t]`` is the transition row ``t`` of fragment ``f`` (zeros where ``mask`` is False, i.e. padding past the
    episode's end); ``link[f]`` is the transition row just before the fragment (zeros for an episode's first
    fragment); ``episode_index[f]`` is the position of its episode in :meth:`OfflineDataset.episode_id_list`, so that
    all fragments of one trajectory can be grouped (the trajectory privacy unit).
    """

    data: np.ndarray  # [F, H, D] float32
    link: np.ndarray  # [F, D] float32
    mask: np.ndarray  # [F, H] bool
    episode_index: np.ndarray  # [F] int64
    start: np.ndarray  # [F] int64, offset of the fragment's first transition within its episode

    def __len__(self) -> int:
        return self.data.shape[0]


def _as_2d(a: Any, name: str, n: int | None = None) -> np.ndarray:
    a = np.asarray(a, dtype=np.float32)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise InvalidData(f"{name} must be a 2-D array (transitions x dims), got shape {a.shape}")
    if n is not None and a.shape[0] != n:
        raise InvalidData(f"{name} has {a.shape[0]} rows but the dataset has {n} transitions")
    return a


@dataclass
class OfflineDataset:
    """An offline-RL dataset as flat transition arrays with an episode id per transition.

    Arrays: ``observations`` and ``next_observations`` [N, obs_dim] float32, ``actions`` [N, act_dim] float32,
    ``rewards`` [N] float32, ``terminals`` and ``timeouts`` [N] bool, ``episode_ids`` [N] int64 (contiguous runs).
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    next_observations: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    episode_ids: np.ndarray
    info: DatasetInfo = field(default_factory=DatasetInfo)

    def __post_init__(self) -> None:
        for name in ARRAY_FIELDS:  # strings, bytes, records, dates, complex or objects are not transitions
            kind = np.asarray(getattr(self, name)).dtype.kind
            if kind not in "biuf":
                raise InvalidData(f"{name} must hold numbers, got an array of dtype "
                                  f"{np.asarray(getattr(self, name)).dtype}")
        ids = np.asarray(self.episode_ids)
        if ids.dtype.kind == "f" and not (np.isfinite(ids).all() and (ids == np.round(ids)).all()):
            raise InvalidData("episode_ids must be whole numbers (no NaN, inf or fractions)")
        self.observations = _as_2d(self.observations, "observations")
        n = self.observations.shape[0]
        self.actions = _as_2d(self.actions, "actions", n)
        self.next_observations = _as_2d(self.next_observations, "next_observations", n)
        self.rewards = np.asarray(self.rewards, dtype=np.float32).reshape(-1)
        self.terminals = np.asarray(self.terminals).astype(bool).reshape(-1)
        self.timeouts = np.asarray(self.timeouts).astype(bool).reshape(-1)
        self.episode_ids = np.asarray(self.episode_ids).astype(np.int64).reshape(-1)
        for name in ("rewards", "terminals", "timeouts", "episode_ids"):
            if getattr(self, name).shape[0] != n:
                raise InvalidData(f"{name} has {getattr(self, name).shape[0]} entries but the dataset has {n} transitions")
        if self.next_observations.shape[1] != self.observations.shape[1]:
            raise InvalidData("next_observations and observations have different widths")
        self.validate()

    # ------------------------------------------------------------------ checks
    def validate(self) -> "OfflineDataset":
        """Raise :class:`InvalidData` on NaN/inf values, an empty dataset or non-contiguous episodes."""
        if self.n_transitions == 0:
            raise InvalidData(f"dataset '{self.info.name}' is empty (no transitions)")
        for name in ("observations", "actions", "rewards", "next_observations"):
            arr = getattr(self, name)
            bad = ~np.isfinite(arr)
            if bad.any():
                rows = np.nonzero(bad.reshape(arr.shape[0], -1).any(axis=1))[0]
                raise InvalidData(
                    f"dataset '{self.info.name}' has {len(rows)} rows with NaN or inf in {name} (first at row {rows[0]})"
                )
        ids = self.episode_ids
        changes = np.flatnonzero(ids[1:] != ids[:-1]) + 1
        starts = np.concatenate([[0], changes])
        if len(np.unique(ids[starts])) != len(starts):
            raise InvalidData(f"dataset '{self.info.name}' has an episode whose transitions are not contiguous")
        return self

    def check_compatible(self, other: "OfflineDataset") -> None:
        """Raise :class:`SpaceMismatch` unless both datasets have the same observation and action widths."""
        if (self.obs_dim, self.act_dim) != (other.obs_dim, other.act_dim):
            raise SpaceMismatch(
                f"datasets '{self.info.name}' and '{other.info.name}' have mismatched spaces: "
                f"obs/action dims {self.obs_dim}/{self.act_dim} vs {other.obs_dim}/{other.act_dim}"
            )

    def check_public_for(self, sensitive: "OfflineDataset") -> None:
        """Refuse this dataset as public data for ``sensitive``: marked sensitive, other spaces, or sharing any
        transition with it (pre-training and normalisers read public data unaccounted). The refusal goes to the data
        holder, before anything is trained (docs/privacy.md)."""
        if self.info.sensitive:
            raise InvalidData(f"dataset '{self.info.name}' is marked sensitive and cannot be used as public data")
        self.check_compatible(sensitive)
        shared = self.shared_transitions(sensitive)
        if shared:
            raise InvalidData(
                f"public dataset '{self.info.name}' shares {shared} transitions with the sensitive dataset "
                f"'{sensitive.info.name}'; public data must not contain sensitive records"
            )

    def shared_transitions(self, other: "OfflineDataset") -> int:
        """How many of this dataset's transitions (exact rows s, a, r, s', terminal) also occur in ``other``."""
        if self.transition_dim != other.transition_dim:
            return 0

        def keys(ds: "OfflineDataset") -> np.ndarray:
            m = np.ascontiguousarray(ds.transition_matrix())
            return m.view(np.dtype((np.void, m.dtype.itemsize * m.shape[1]))).ravel()

        return int(np.isin(keys(self), keys(other)).sum())

    # -------------------------------------------------------------- properties
    @property
    def n_transitions(self) -> int:
        return int(self.observations.shape[0])

    def __len__(self) -> int:
        return self.n_transitions

    @property
    def obs_dim(self) -> int:
        return int(self.observations.shape[1])

    @property
    def act_dim(self) -> int:
        return int(self.actions.shape[1])

    @property
    def transition_dim(self) -> int:
        return transition_dim(self.obs_dim, self.act_dim)

    def _episode_bounds(self) -> tuple[np.ndarray, np.ndarray]:
        ids = self.episode_ids
        starts = np.concatenate([[0], np.flatnonzero(ids[1:] != ids[:-1]) + 1])
        ends = np.concatenate([starts[1:], [len(ids)]])
        return starts, ends

    @property
    def n_episodes(self) -> int:
        return len(self._episode_bounds()[0])

    def episode_id_list(self) -> np.ndarray:
        """Episode ids in order of appearance."""
        return self.episode_ids[self._episode_bounds()[0]]

    def episode_lengths(self) -> np.ndarray:
        starts, ends = self._episode_bounds()
        return ends - starts

    def episode_index(self) -> np.ndarray:
        """Per transition, the position (0..n_episodes-1) of its episode."""
        starts, ends = self._episode_bounds()
        return np.repeat(np.arange(len(starts)), ends - starts)

    # ------------------------------------------------------------------- views
    def transition_matrix(self) -> np.ndarray:
        """[N, 2*obs+act+2] float32 rows: state | action | reward | next state | terminal."""
        return np.concatenate(
            [
                self.observations,
                self.actions,
                self.rewards[:, None],
                self.next_observations,
                self.terminals[:, None].astype(np.float32),
            ],
            axis=1,
        ).astype(np.float32, copy=False)

    @classmethod
    def from_transition_matrix(
        cls,
        matrix: np.ndarray,
        obs_dim: int,
        act_dim: int,
        *,
        episode_ids: np.ndarray | None = None,
        timeouts: np.ndarray | None = None,
        info: DatasetInfo | None = None,
        terminal_threshold: float = 0.5,
    ) -> "OfflineDataset":
        """Inverse of :meth:`transition_matrix`. The terminal column is thresholded at ``terminal_threshold``.

        Without ``episode_ids`` every transition is its own episode (independent synthetic transitions).
        """
        matrix = np.asarray(matrix, dtype=np.float32)
        d = transition_dim(obs_dim, act_dim)
        if matrix.ndim != 2 or matrix.shape[1] != d:
            raise SpaceMismatch(
                f"transition matrix has shape {matrix.shape}, expected (N, {d}) for obs_dim={obs_dim}, act_dim={act_dim}"
            )
        n = matrix.shape[0]
        o, a = obs_dim, act_dim
        terminals = matrix[:, -1] > terminal_threshold
        if episode_ids is None:
            episode_ids = np.arange(n)
        if timeouts is None:
            timeouts = np.zeros(n, dtype=bool)
        return cls(
            observations=matrix[:, :o],
            actions=matrix[:, o : o + a],
            rewards=matrix[:, o + a],
            next_observations=matrix[:, o + a + 1 : o + a + 1 + o],
            terminals=terminals,
            timeouts=timeouts,
            episode_ids=episode_ids,
            info=info or DatasetInfo(),
        )

    def episodes(self) -> Iterator[Episode]:
        """Iterate over episodes in order (views, no copies)."""
        starts, ends = self._episode_bounds()
        for s, e in zip(starts, ends):
            yield Episode(
                episode_id=int(self.episode_ids[s]),
                observations=self.observations[s:e],
                actions=self.actions[s:e],
                rewards=self.rewards[s:e],
                next_observations=self.next_observations[s:e],
                terminals=self.terminals[s:e],
                timeouts=self.timeouts[s:e],
            )

    def fragments(self, horizon: int, stride: int | None = None) -> Fragments:
        """Cut every episode into fragments of ``horizon`` transitions, each with its linking transition.

        ``stride`` defaults to ``horizon`` (non-overlapping). The last fragment of an episode is padded with zeros
        (``mask`` False) when the episode length is not a multiple of the stride. The linking transition of a fragment
        starting at offset k>0 is the transition at offset k-1; for k=0 it is all zeros.
        """
        if horizon < 1:
            raise InvalidData(f"fragment horizon must be at least 1, got {horizon}")
        stride = horizon if stride is None else stride
        if stride < 1:
            raise InvalidData(f"fragment stride must be at least 1, got {stride}")
        rows = self.transition_matrix()
        d = rows.shape[1]
        starts, ends = self._episode_bounds()
        frag_ep, frag_start = [], []
        for i, (s, e) in enumerate(zip(starts, ends)):
            length = e - s
            offsets = list(range(0, max(length - horizon, 0) + 1, stride))
            if offsets[-1] + horizon < length:  # tail not covered: add one more (padded) fragment
                offsets.append(offsets[-1] + stride)
            frag_ep.extend([i] * len(offsets))
            frag_start.extend(offsets)
        frag_ep_a = np.asarray(frag_ep, dtype=np.int64)
        frag_start_a = np.asarray(frag_start, dtype=np.int64)
        f = len(frag_ep_a)
        data = np.zeros((f, horizon, d), dtype=np.float32)
        mask = np.zeros((f, horizon), dtype=bool)
        link = np.zeros((f, d), dtype=np.float32)
        for j in range(f):
            s, e = starts[frag_ep_a[j]], ends[frag_ep_a[j]]
            a = s + frag_start_a[j]
            b = min(a + horizon, e)
            data[j, : b - a] = rows[a:b]
            mask[j, : b - a] = True
            if frag_start_a[j] > 0:
                link[j] = rows[a - 1]
        return Fragments(data=data, link=link, mask=mask, episode_index=frag_ep_a, start=frag_start_a)

    # ----------------------------------------------------------- construction
    def select_episodes(self, positions: np.ndarray | list[int], *, name: str | None = None) -> "OfflineDataset":
        """A new dataset holding the episodes at the given positions (0..n_episodes-1), in the given order."""
        starts, ends = self._episode_bounds()
        positions = np.asarray(positions, dtype=np.int64)
        if positions.size == 0:
            raise InvalidData("cannot select zero episodes")
        idx = np.concatenate([np.arange(starts[p], ends[p]) for p in positions])
        info = dataclasses.replace(self.info, name=name or self.info.name)
        return self._take(idx, info)

    def first_rows(self, n: int) -> "OfflineDataset":
        """The first ``n`` rows (all of them if there are fewer); an episode cut short ends in a truncation."""
        if self.n_transitions <= n:
            return self
        out = self._take(np.arange(n), self.info)
        if not out.terminals[-1]:
            timeouts = out.timeouts.copy()
            timeouts[-1] = True
            out = dataclasses.replace(out, timeouts=timeouts)
        return out

    def _take(self, idx: np.ndarray, info: DatasetInfo) -> "OfflineDataset":
        return OfflineDataset(
            observations=self.observations[idx],
            actions=self.actions[idx],
            rewards=self.rewards[idx],
            next_observations=self.next_observations[idx],
            terminals=self.terminals[idx],
            timeouts=self.timeouts[idx],
            episode_ids=self.episode_ids[idx],
            info=info,
        )

    def split_episodes(self, fraction: float, seed: int = 0) -> tuple["OfflineDataset", "OfflineDataset"]:
        """Split by episode into (members, non-members): ``fraction`` of the episodes go to members.

        Seeded and deterministic; no episode is shared between the two parts. Both parts keep the ``sensitive`` flag.
        """
        n = self.n_episodes
        if not 0.0 < fraction < 1.0:
            raise InvalidData(f"split fraction must be in (0, 1), got {fraction}")
        if n < 2:
            raise InvalidData(f"dataset '{self.info.name}' has {n} episode(s); a split needs at least 2")
        perm = np.random.default_rng(seed).permutation(n)
        k = min(max(int(round(fraction * n)), 1), n - 1)
        members = np.sort(perm[:k])
        non_members = np.sort(perm[k:])
        return (
            self.select_episodes(members, name=f"{self.info.name}[members]"),
            self.select_episodes(non_members, name=f"{self.info.name}[non-members]"),
        )

    @classmethod
    def concatenate(cls, datasets: list["OfflineDataset"], *, info: DatasetInfo | None = None) -> "OfflineDataset":
        """Concatenate datasets with equal spaces; episode ids are renumbered so they stay distinct. The result is
        sensitive when any part is (also under a given ``info``): the flag is what keeps sensitive rows out of
        public-only fits (normalisers, pre-training), so concatenating must never clear it."""
        if not datasets:
            raise InvalidData("nothing to concatenate")
        for other in datasets[1:]:
            datasets[0].check_compatible(other)
        ids, offset = [], 0
        for ds in datasets:
            ids.append(ds.episode_index() + offset)
            offset += ds.n_episodes
        cat = lambda name: np.concatenate([getattr(d, name) for d in datasets])  # noqa: E731
        info = info or dataclasses.replace(datasets[0].info, name="+".join(d.info.name for d in datasets))
        if any(d.info.sensitive for d in datasets) and not info.sensitive:
            info = dataclasses.replace(info, sensitive=True)
        return cls(
            observations=cat("observations"),
            actions=cat("actions"),
            rewards=cat("rewards"),
            next_observations=cat("next_observations"),
            terminals=cat("terminals"),
            timeouts=cat("timeouts"),
            episode_ids=np.concatenate(ids),
            info=info,
        )

    def mark_sensitive(self, sensitive: bool = True) -> "OfflineDataset":
        """Return the same data with the ``sensitive`` flag set (arrays shared, info copied)."""
        return dataclasses.replace(self, info=dataclasses.replace(self.info, sensitive=sensitive))

    def summary(self) -> dict[str, Any]:
        """Episodes, steps, dims, reward statistics and reference scores, for ``privsynth datasets show``."""
        lengths = self.episode_lengths()
        returns = np.add.reduceat(self.rewards, np.concatenate([[0], np.cumsum(lengths)[:-1]]))
        return {
            "name": self.info.name,
            "env_id": self.info.env_id,
            "episodes": self.n_episodes,
            "transitions": self.n_transitions,
            "obs_dim": self.obs_dim,
            "act_dim": self.act_dim,
            "episode_length_mean": float(lengths.mean()),
            "episode_return_mean": float(returns.mean()),
            "terminal_rate": float(self.terminals.mean()),
            "ref_min_score": self.info.ref_min_score,
            "ref_max_score": self.info.ref_max_score,
            "sensitive": self.info.sensitive,
            "has_privacy_card": self.info.privacy_card is not None,
        }

    def normalized_score(self, ret: float | np.ndarray) -> float | np.ndarray:
        """D4RL score 100·(R − random)/(expert − random) from this dataset's reference scores."""
        lo, hi = self.info.ref_min_score, self.info.ref_max_score
        if lo is None or hi is None:
            raise InvalidData(f"dataset '{self.info.name}' has no reference scores; cannot normalise a return")
        return 100.0 * (np.asarray(ret) - lo) / (hi - lo)
