"""Your own data in: pandas DataFrames, CSV and parquet files as :class:`~privsynth.data.dataset.OfflineDataset`.

Column layout (every name can be mapped to yours with ``columns={"reward": "r", ...}``):

==========================  ===============================================================================
``obs_0`` ... ``obs_{k-1}``  observation, one column per flat dimension (or ``observation_columns=[...]``)
``act_0`` ... ``act_{m-1}``  action (or ``action_columns=[...]``)
``reward``                  reward
``next_obs_0`` ...          next observation (optional, or ``next_observation_columns=[...]``); without it,
                            rows are the consecutive steps of their episode and each row's next observation is
                            the following row's observation, so the last row of an episode only supplies the
                            final observation (its action and reward are dropped)
``terminal``                the row's transition ends in a terminal state (optional, default False); without
                            next-observation columns it marks the row holding the terminal observation
``truncated``               episode cut by a time limit (optional, default False); without next-observation
                            columns every episode that does not end in a terminal is truncated
``episode_id``              episode of the row (optional; default: a new episode after every terminal or
                            truncated row); rows of one episode are contiguous and in time order
==========================  ===============================================================================

Imported data is marked sensitive unless ``sensitive=False``. With ``env_id``, the widths are checked against the
environment's spaces at import and the action box is taken from the environment (a public fact), so synthetic rows
are later clipped to it. Dict observation spaces need ``obs_keys`` (the keys the columns hold, in order).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.errors import InvalidData

__all__ = ["from_pandas", "read_table", "DEFAULT_COLUMNS"]

DEFAULT_COLUMNS: dict[str, str] = {
    "reward": "reward",
    "terminal": "terminal",
    "truncated": "truncated",
    "episode_id": "episode_id",
}
_PREFIXES = {"obs": "obs_", "act": "act_", "next_obs": "next_obs_"}


def read_table(path: str | Path) -> Any:
    """A DataFrame from a ``.csv`` or ``.parquet`` file (parquet needs pyarrow: ``pip install 'privsynth[parquet]'``)."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise InvalidData(f"no such file: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".csv":
            return pd.read_csv(path)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except ImportError as exc:
        raise InvalidData(f"cannot read {path}: {exc} (pip install pyarrow)") from None
    except (OSError, ValueError) as exc:
        raise InvalidData(f"cannot read {path}: {exc}") from None
    raise InvalidData(f"unknown table format '{suffix}'; use .csv, .parquet or .npz")


def _prefixed(df: Any, prefix: str) -> list[str]:
    cols = [c for c in df.columns if isinstance(c, str) and c.startswith(prefix) and c[len(prefix):].isdigit()]
    return sorted(cols, key=lambda c: int(c[len(prefix):]))


def _matrix(df: Any, cols: Sequence[str], what: str) -> np.ndarray:
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise InvalidData(f"the table lacks the {what} columns {missing}")
    try:
        return df[list(cols)].to_numpy(dtype=np.float32)
    except (TypeError, ValueError) as exc:
        raise InvalidData(f"{what} columns are not numeric: {exc}") from None


def _flags(df: Any, col: str, n: int) -> np.ndarray:
    if col not in df.columns:
        return np.zeros(n, dtype=bool)
    values = df[col]
    if values.isna().any():
        raise InvalidData(f"column '{col}' has missing values")
    return values.to_numpy().astype(bool)


def from_pandas(
    df: Any,
    *,
    name: str = "imported",
    env_id: str | None = None,
    env_kwargs: dict[str, Any] | None = None,
    obs_keys: Sequence[str] | None = None,
    columns: dict[str, str] | None = None,
    observation_columns: Sequence[str] | None = None,
    action_columns: Sequence[str] | None = None,
    next_observation_columns: Sequence[str] | None = None,
    ref_min_score: float | None = None,
    ref_max_score: float | None = None,
    sensitive: bool = True,
) -> OfflineDataset:
    """An :class:`OfflineDataset` from a DataFrame in the column layout of the module docstring."""
    from privsynth.data.minari_io import check_env_spaces, env_spaces

    unknown = set(columns or {}) - set(DEFAULT_COLUMNS)
    if unknown:
        raise InvalidData(f"unknown column roles {sorted(unknown)}; map any of {sorted(DEFAULT_COLUMNS)}")
    names = {**DEFAULT_COLUMNS, **(columns or {})}
    if len(df) == 0:
        raise InvalidData("the table has no rows")
    obs_cols = list(observation_columns or _prefixed(df, _PREFIXES["obs"]))
    act_cols = list(action_columns or _prefixed(df, _PREFIXES["act"]))
    next_cols = list(next_observation_columns or _prefixed(df, _PREFIXES["next_obs"]))
    if not obs_cols:
        raise InvalidData("no observation columns: name them obs_0, obs_1, ... or pass observation_columns")
    if not act_cols:
        raise InvalidData("no action columns: name them act_0, act_1, ... or pass action_columns")
    if names["reward"] not in df.columns:
        raise InvalidData(f"the table lacks the reward column '{names['reward']}'")
    if next_cols and len(next_cols) != len(obs_cols):
        raise InvalidData(f"{len(next_cols)} next-observation columns for {len(obs_cols)} observation columns")
    n = len(df)
    obs = _matrix(df, obs_cols, "observation")
    act = _matrix(df, act_cols, "action")
    rew = _matrix(df, [names["reward"]], "reward")[:, 0]
    term = _flags(df, names["terminal"], n)
    trunc = _flags(df, names["truncated"], n)
    if names["episode_id"] in df.columns:
        ids = df[names["episode_id"]].to_numpy()
        _, ids = np.unique(ids, return_inverse=True)  # any labels -> integers (contiguity is checked below)
    else:
        ends = term | trunc
        ids = np.concatenate([[0], np.cumsum(ends[:-1])])
    ids = np.asarray(ids, dtype=np.int64)
    if next_cols:
        nxt = _matrix(df, next_cols, "next observation")
        keep = np.ones(n, dtype=bool)
    else:  # consecutive steps: row t+1 is the next observation of row t; an episode's last row only closes it
        nxt = np.zeros_like(obs)
        nxt[:-1] = obs[1:]
        keep = np.ones(n, dtype=bool)
        keep[-1] = False
        keep[:-1] = ids[1:] == ids[:-1]
        if not keep.any():
            raise InvalidData("without next-observation columns every episode needs at least two rows")
        last = np.flatnonzero(~keep)
        prev = last - 1
        ok = prev >= 0
        ok[ok] = ids[prev[ok]] == ids[last[ok]]
        term[prev[ok]] |= term[last[ok]]  # the closing row's flags move to the last real transition
        trunc[prev[ok]] |= trunc[last[ok]] | ~term[last[ok]]
    info = DatasetInfo(
        name=name,
        env_id=env_id,
        env_kwargs=dict(env_kwargs or {}),
        obs_keys=list(obs_keys) if obs_keys else None,
        ref_min_score=ref_min_score,
        ref_max_score=ref_max_score,
        sensitive=sensitive,
        extra={"imported_columns": {"observations": obs_cols, "actions": act_cols, "next_observations": next_cols}},
    )
    check_env_spaces(info, obs.shape[1], act.shape[1])
    spaces = env_spaces(info)
    if spaces is not None:  # the action box is a public fact of the environment
        info.action_low = np.asarray(spaces[1].low, dtype=np.float64).reshape(-1).tolist()
        info.action_high = np.asarray(spaces[1].high, dtype=np.float64).reshape(-1).tolist()
    return OfflineDataset(
        observations=obs[keep],
        actions=act[keep],
        rewards=rew[keep],
        next_observations=nxt[keep],
        terminals=term[keep],
        timeouts=trunc[keep],
        episode_ids=ids[keep],
        info=info,
    )
