"""Your own data in: pandas DataFrames, CSV and parquet files as :class:`~privsynth.data.dataset.OfflineDataset`.

Column layout (every name can be mapped to yours with ``columns={"reward": "r", ...}``):

==========================  ===============================================================================
``obs_0`` ... ``obs_{k-1}``  observation, one column per flat dimension (or ``observation_columns=[...]``)
``act_0`` ... ``act_{m-1}``  action (or ``action_columns=[...]``)
``reward``                  reward
``next_obs_0`` ...          next observation (optional, or ``next_observation_columns=[...]``); without it,
                            rows are the consecutive steps of their episode and each row's next observation is
                            the following row's observation, so the last row of an episode only supplies the
                            final observation (its action and reward are dropped; their count is in
                            ``info.extra["dropped_final_rows"]``) and every episode needs at least two rows
``terminal``                the row's transition ends in a terminal state (optional, default False); without
                            next-observation columns it marks the row holding the terminal observation (or the
                            row before it); with an ``episode_id`` column a flag on any earlier row is an error
``truncated``               episode cut by a time limit (optional, default False); without next-observation
                            columns every episode that does not end in a terminal is truncated
``episode_id``              episode of the row (optional; default: a new episode after every terminal or
                            truncated row); rows of one episode are contiguous and in time order
==========================  ===============================================================================

``terminal`` and ``truncated`` hold booleans, the numbers 0/1, or the strings true/false/1/0 (any case, surrounding
spaces ignored); anything else, or a missing value, is an error naming the column and the first bad row. Rows are
counted from 0 after the header, as pandas counts them; for a CSV file the error also gives the file line.

A role mapped by name (``columns``, ``observation_columns``, ...) to a column the table lacks is an error naming the
role, the column and the closest column names; only roles nobody mapped fall back silently to their defaults.

Imported data is marked sensitive unless ``sensitive=False``. With ``env_id`` (which must be registered with
gymnasium), the widths are checked against the environment's spaces at import, every action must lie in the
environment's action space, and the action box is taken from the environment (a public fact), so synthetic rows are
later clipped to it. Observations are not checked against the observation space (continuous ones are often
unbounded). Dict observation spaces need ``obs_keys`` (the keys the columns hold, in order).

Why this module is long: every check of a user's table (column mapping, flag values, episode layout, actions against
the environment) lives beside the layout it checks, each error naming the user's own column and row.
"""
from __future__ import annotations

import difflib
import zipfile
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privsynth.data.dataset import DatasetInfo, OfflineDataset
from privsynth.data.table_cells import CSV_ATTR as _CSV_ATTR
from privsynth.data.table_cells import episode_ids as _episode_ids
from privsynth.data.table_cells import flags as _flags
from privsynth.data.table_cells import row_name as _row
from privsynth.data.table_cells import show as _show
from privsynth.errors import InvalidData, SpaceMismatch

__all__ = ["from_pandas", "read_table", "read_npz", "DEFAULT_COLUMNS"]

DEFAULT_COLUMNS: dict[str, str] = {
    "reward": "reward",
    "terminal": "terminal",
    "truncated": "truncated",
    "episode_id": "episode_id",
}
_PREFIXES = {"obs": "obs_", "act": "act_", "next_obs": "next_obs_"}


def read_npz(path: str | Path) -> dict[str, np.ndarray]:
    """The arrays of a ``.npz`` file, never unpickling anything (``allow_pickle=False``): a file that is not a zip
    archive is refused as such, rather than with numpy's advice to load it with ``allow_pickle=True``."""
    from privsynth.data.safe_files import load_npz

    path = Path(path)
    if not path.is_file():
        raise InvalidData(f"no such file: {path}")
    return load_npz(path)  # declared sizes checked against the archive before anything is allocated


def read_table(path: str | Path) -> Any:
    """A DataFrame from a ``.csv`` or ``.parquet`` file (parquet needs pyarrow: ``pip install 'privsynth[parquet]'``).
    A ``.npz`` file holds D4RL-style arrays, not a table: it is refused (after checking it is a zip archive at all);
    read it with :func:`read_npz` or ``privsynth datasets import``."""
    import pandas as pd

    path = Path(path)
    if not path.is_file():
        raise InvalidData(f"no such file: {path}")
    suffix = path.suffix.lower()
    if suffix == ".npz":
        if not zipfile.is_zipfile(path):
            raise InvalidData(f"cannot read {path} as .npz: not a valid .npz (zip) archive")
        raise InvalidData(f"{path} holds D4RL-style arrays, not a table: import it with privsynth datasets import "
                          "(Python: privsynth.data.tabular.read_npz)")
    try:
        if suffix == ".csv":
            df = pd.read_csv(path)
            df.attrs[_CSV_ATTR] = True  # errors then also give the file line of a row
            return df
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(path)
    except ImportError as exc:
        raise InvalidData(f"cannot read {path}: {exc} (pip install pyarrow)") from None
    except (OSError, ValueError) as exc:
        raise InvalidData(f"cannot read {path}: {exc}") from None
    raise InvalidData(f"unknown table format '{suffix}'; use .csv or .parquet (or a D4RL-style .npz)")


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


def _check_actions(df: Any, act: np.ndarray, cols: Sequence[str], rows: np.ndarray, space: Any, env: str) -> None:
    """Refuse stored actions (``act[rows]``) outside the environment's action space, naming column, row and space."""
    import gymnasium as gym

    if isinstance(space, gym.spaces.Discrete):
        lo, hi = np.array([space.start], np.float64), np.array([space.start + space.n - 1], np.float64)
        integral = True
        box = f"{env}'s actions {space} (integers {space.start} to {space.start + space.n - 1})"
    elif isinstance(space, gym.spaces.Box):
        lo = np.asarray(space.low, dtype=space.dtype).reshape(-1).astype(np.float64)
        hi = np.asarray(space.high, dtype=space.dtype).reshape(-1).astype(np.float64)
        integral = np.issubdtype(space.dtype, np.integer)
        box = None
    else:
        return
    a = act[rows].astype(np.float64)
    bad = (a < lo) | (a > hi)
    if integral:
        bad |= a != np.round(a)
    if not bad.any():
        return
    r, c = (int(x[0]) for x in np.nonzero(bad))
    if box is None:
        box = f"{env}'s action box [{lo[c]:g}, {hi[c]:g}]"
    raise InvalidData(
        f"column '{cols[c]}' has {a[r, c]:g} at {_row(df, int(rows[r]))}, outside {box}; the actions must lie in "
        "the environment's action space"
    )


def _one_column(header: str) -> None:
    """Raise for a table read as one column: most often a file separated by something other than commas."""
    shown = header if len(header) <= 80 else header[:77] + "..."
    seps = [sep for sep in (";", "\t", "|") if sep in header]
    guess = (
        f": the file looks {seps[0]!r}-separated; CSV files are read comma-separated, so convert it first "
        f"(pandas: pd.read_csv(FILE, sep={seps[0]!r}).to_csv(NEW_FILE, index=False))"
        if seps else "; it needs observation, action and reward columns (see docs/datasets.md)"
    )
    raise InvalidData(f"the table has a single column, {shown!r}{guess}")


def _missing_prefixed(df: Any, cols: Sequence[str], role: str, space: Any, env: str,
                      keys: Sequence[str] | None = None) -> None:
    """With the default ``obs_i``/``act_i`` columns: name the ones the environment's space needs but the table
    lacks (``keys``: the stored keys of a Dict observation space)."""
    import gymnasium as gym

    def width(sp: Any) -> int:
        return int(np.prod(sp.shape)) if sp.shape else 1

    if isinstance(space, gym.spaces.Dict):
        if not keys or any(k not in space.spaces for k in keys):
            return  # check_env_spaces names the problem
        want = sum(width(space.spaces[k]) for k in keys)
    elif isinstance(space, gym.spaces.Discrete):
        want = 1
    elif isinstance(space, gym.spaces.Box):
        want = width(space)
    else:
        return
    prefix, what = _PREFIXES[role], "action" if role == "act" else "observation"
    missing = [f"{prefix}{i}" for i in range(want) if f"{prefix}{i}" not in df.columns]
    if not missing:
        return
    lacks = ", ".join(missing) if len(missing) <= 6 else f"{', '.join(missing[:3])}, ..., {missing[-1]}"
    lacks = f"the table lacks the {what} column{'s' if len(missing) > 1 else ''} {lacks}"
    if len(cols) != want:
        raise SpaceMismatch(
            f"the data has {len(cols)} {what} dim{'' if len(cols) == 1 else 's'} but {env} has {want}: {lacks}"
        )
    raise SpaceMismatch(f"{lacks} ({env} has {want} {what} dims, {prefix}0 ... {prefix}{want - 1}; the table has "
                        f"{', '.join(cols)})")


def _closest(df: Any, col: str) -> str:
    """The table's column names closest to ``col`` (difflib), or its first columns when none is close."""
    names = [str(c) for c in df.columns]
    close = difflib.get_close_matches(str(col), names, n=3, cutoff=0.6)
    if close:
        return "closest column" + ("s " if len(close) > 1 else " ") + ", ".join(repr(c) for c in close)
    shown = ", ".join(repr(c) for c in names[:8]) + (", ..." if len(names) > 8 else "")
    return f"the table's columns are {shown}"


def _check_named(df: Any, columns: dict[str, str] | None,
                 lists: Sequence[tuple[str, str, Sequence[str] | None]]) -> None:
    """Refuse a role mapped by name to a column the table lacks (a typo would otherwise fall back to a default)."""
    present = set(df.columns)
    for role, col in (columns or {}).items():
        if col not in present:
            raise InvalidData(
                f"the table has no column '{col}' for the {role} role (--map {role}={col}, "
                f"columns={{'{role}': '{col}'}} in Python); {_closest(df, col)}"
            )
    for what, option, cols in lists:
        missing = [c for c in (cols or ()) if c not in present]
        if missing:
            more = f" (and {len(missing) - 1} more missing)" if len(missing) > 1 else ""
            raise InvalidData(
                f"the table has no column '{missing[0]}' for the {what} ({option}){more}; {_closest(df, missing[0])}"
            )


def _episode_label(df: Any, id_col: str | None, ids: np.ndarray, row: int) -> str:
    if id_col is not None:
        return f"episode {_show(df[id_col].iloc[row])}"
    return f"episode {int(ids[row])} (counted from 0; a new episode starts after each terminal or truncated row)"


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
    schema: Any = None,
    impute: str | None = None,
) -> OfflineDataset:
    """An :class:`OfflineDataset` from a DataFrame in the column layout of the module docstring, or, with ``schema``
    (a :class:`~privsynth.data.schema.Schema`, its dict or a YAML/JSON file), in the holder's own columns
    (:func:`privsynth.data.schema.from_schema_frame`; ``impute="ffill"`` fills missing observations per episode)."""
    if schema is not None:
        given = [k for k, v in (("env_id", env_id), ("columns", columns), ("observation_columns", observation_columns),
                                ("action_columns", action_columns),
                                ("next_observation_columns", next_observation_columns), ("obs_keys", obs_keys)) if v]
        if given:
            raise InvalidData(f"{', '.join(given)} name(s) columns or an environment; with a schema the schema "
                              "declares them")
        from privsynth.data.schema import from_schema_frame

        ds = from_schema_frame(df, schema, name=name, impute=impute, sensitive=sensitive)
        ds.info.ref_min_score, ds.info.ref_max_score = ref_min_score, ref_max_score
        return ds
    if impute is not None:
        raise InvalidData("impute needs a schema (it fills observation columns the schema declares)")
    import gymnasium as gym

    from privsynth.data.minari_io import check_env_spaces, env_spaces
    from privsynth.data.minari_spaces import check_env_id

    check_env_id(env_id)  # a mistyped id fails before any data is read
    unknown = set(columns or {}) - set(DEFAULT_COLUMNS)
    if unknown:
        raise InvalidData(f"unknown column roles {sorted(unknown)}; map any of {sorted(DEFAULT_COLUMNS)}")
    names = {**DEFAULT_COLUMNS, **(columns or {})}
    if len(df) == 0:
        raise InvalidData("the table has no rows")
    if len(df.columns) == 1:
        _one_column(str(df.columns[0]))
    _check_named(df, columns, [
        ("observations", "--obs-cols, observation_columns in Python", observation_columns),
        ("actions", "--act-cols, action_columns in Python", action_columns),
        ("next observations", "--next-obs-cols, next_observation_columns in Python", next_observation_columns),
    ])
    obs_cols = list(observation_columns or _prefixed(df, _PREFIXES["obs"]))
    act_cols = list(action_columns or _prefixed(df, _PREFIXES["act"]))
    next_cols = list(next_observation_columns or _prefixed(df, _PREFIXES["next_obs"]))
    if not obs_cols:
        raise InvalidData(
            "no observation columns: name them obs_0, obs_1, ... or pass --obs-cols a,b,c (observation_columns "
            "in Python)"
        )
    if not act_cols:
        raise InvalidData(
            "no action columns: name them act_0, act_1, ... or pass --act-cols a,b (action_columns in Python)"
        )
    if names["reward"] not in df.columns:
        raise InvalidData(
            f"the table lacks the reward column '{names['reward']}' (another name: --map reward=COLUMN, "
            "columns={'reward': COLUMN} in Python)"
        )
    if next_cols and len(next_cols) != len(obs_cols):
        raise InvalidData(f"{len(next_cols)} next-observation columns for {len(obs_cols)} observation columns")
    n = len(df)
    obs = _matrix(df, obs_cols, "observation")
    act = _matrix(df, act_cols, "action")
    rew = _matrix(df, [names["reward"]], "reward")[:, 0]
    term = _flags(df, names["terminal"], n)
    trunc = _flags(df, names["truncated"], n)
    id_col = names["episode_id"] if names["episode_id"] in df.columns else None
    if id_col is not None:
        ids = _episode_ids(df, id_col)
    else:
        ends = term | trunc
        ids = np.concatenate([[0], np.cumsum(ends[:-1])])
    ids = np.asarray(ids, dtype=np.int64)
    dropped = 0
    if next_cols:
        nxt = _matrix(df, next_cols, "next observation")
        keep = np.ones(n, dtype=bool)
    else:  # consecutive steps: row t+1 is the next observation of row t; an episode's last row only closes it
        starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
        lasts = np.concatenate([starts[1:], [n]]) - 1
        short = np.flatnonzero(lasts == starts)
        if short.size:
            i = int(starts[short[0]])
            others = f" ({short.size} episodes have a single row)" if short.size > 1 else ""
            raise InvalidData(
                f"{_episode_label(df, id_col, ids, i)} has a single row, {_row(df, i)}{others}; without "
                "next-observation columns a row's next observation is the following row's observation and an "
                "episode's last row only supplies its final observation, so every episode needs at least two rows "
                "(or add next_obs_* columns)"
            )
        if id_col is not None:  # a flag before an episode's last two rows: the rows are not in the documented layout
            last_of_row = np.repeat(lasts, lasts - starts + 1)
            early = (term | trunc) & (last_of_row - np.arange(n) >= 2)
            if early.any():
                i = int(np.argmax(early))
                flag = names["terminal"] if term[i] else names["truncated"]
                raise InvalidData(
                    f"column '{flag}' is set at {_row(df, i)}, {int(last_of_row[i] - i)} rows before the last row of "
                    f"{_episode_label(df, id_col, ids, i)} ({_row(df, int(last_of_row[i]))}); without "
                    "next-observation columns a terminal or truncated flag belongs on an episode's last row (its "
                    "final observation) or the row before it: check the episode ids and the row order, or add "
                    "next_obs_* columns"
                )
        nxt = np.zeros_like(obs)
        nxt[:-1] = obs[1:]
        keep = np.ones(n, dtype=bool)
        keep[lasts] = False
        dropped = int(lasts.size)
        prev = lasts - 1
        term[prev] |= term[lasts]  # the closing row's flags move to the last real transition
        trunc[prev] |= trunc[lasts] | ~term[prev]  # an episode that does not end in a terminal state is truncated
    info = DatasetInfo(
        name=name,
        env_id=env_id,
        env_kwargs=dict(env_kwargs or {}),
        obs_keys=list(obs_keys) if obs_keys else None,
        ref_min_score=ref_min_score,
        ref_max_score=ref_max_score,
        sensitive=sensitive,
        extra={"imported_columns": {"observations": obs_cols, "actions": act_cols, "next_observations": next_cols},
               "dropped_final_rows": dropped},
    )
    spaces = env_spaces(info)
    if spaces is not None and observation_columns is None:
        _missing_prefixed(df, obs_cols, "obs", spaces[0], env_id or "", obs_keys)
    if spaces is not None and action_columns is None:
        _missing_prefixed(df, act_cols, "act", spaces[1], env_id or "")
    check_env_spaces(info, obs.shape[1], act.shape[1])
    if spaces is not None:  # the action box is a public fact of the environment
        act_space = spaces[1]
        _check_actions(df, act, act_cols, np.flatnonzero(keep), act_space, env_id or "")
        if isinstance(act_space, gym.spaces.Discrete):  # indices start ... start + n - 1
            info.action_low = [float(act_space.start)]
            info.action_high = [float(act_space.start + act_space.n - 1)]
        else:
            info.action_low = np.asarray(act_space.low, dtype=np.float64).reshape(-1).tolist()
            info.action_high = np.asarray(act_space.high, dtype=np.float64).reshape(-1).tolist()
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
