"""Cells of a holder's table read one column at a time: episode labels, 0/1 flags, and how a row is named in an
error (pandas' count, plus the file line of a CSV). Shared by the column-layout reader (:mod:`privsynth.data.tabular`)
and the schema reader (:mod:`privsynth.data.schema`), which otherwise import nothing of each other.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from privsynth.errors import InvalidData

__all__ = ["CSV_ATTR", "episode_ids", "flags", "row_name", "show"]

CSV_ATTR = "privsynth_csv"  # DataFrame.attrs key set by read_table on a CSV file (one header line)
_TRUE, _FALSE = frozenset({"true", "1", "1.0"}), frozenset({"false", "0", "0.0"})


def row_name(df: Any, i: int) -> str:
    """Row ``i`` (0-based position) as the user sees it: pandas' count, plus the file line of a CSV file."""
    return f"row {i} (line {i + 2} of the file)" if df.attrs.get(CSV_ATTR) else f"row {i}"


def show(v: Any) -> str:
    """A cell as an error message quotes it: strings in quotes, floats short."""
    if isinstance(v, str):
        return repr(v)
    if isinstance(v, (float, np.floating)):
        return f"{float(v):g}"
    return str(v)


def _flag_value(v: Any) -> bool | None:
    """One flag cell as a bool, or None if it is not a boolean, 0/1 or a true/false/1/0 string."""
    if isinstance(v, (bool, np.bool_)):
        return bool(v)
    if isinstance(v, (int, float, np.integer, np.floating)):
        return bool(v) if v in (0, 1) else None  # NaN is neither
    if isinstance(v, str):
        s = v.strip().lower()
        return True if s in _TRUE else False if s in _FALSE else None
    return None


def flags(df: Any, col: str, n: int) -> np.ndarray:
    """Column ``col`` as booleans (all False when absent); anything but booleans, 0/1 or true/false/1/0 raises."""
    import pandas as pd

    if col not in df.columns:
        return np.zeros(n, dtype=bool)
    values = df[col]
    if isinstance(values, pd.DataFrame):
        raise InvalidData(f"the table has {values.shape[1]} columns named '{col}'")
    if pd.api.types.is_bool_dtype(values.dtype) and not values.isna().any():
        return values.to_numpy(dtype=bool, copy=True)  # writable: flags move between rows below
    if pd.api.types.is_numeric_dtype(values.dtype) and not pd.api.types.is_bool_dtype(values.dtype):
        num = values.to_numpy(dtype=np.float64, na_value=np.nan)
        out, bad = num == 1, ~((num == 0) | (num == 1))
    else:  # strings, mixed objects, nullable booleans
        parsed = [_flag_value(v) for v in values.to_numpy(dtype=object)]
        bad = np.fromiter((p is None for p in parsed), dtype=bool, count=n)
        out = np.fromiter((bool(p) for p in parsed), dtype=bool, count=n)
    if bad.any():
        i = int(np.argmax(bad))
        v = values.iloc[i]
        what = "has a missing value" if pd.isna(v) else f"has {show(v)}"
        raise InvalidData(f"column '{col}' must hold 0/1 or true/false; {row_name(df, i)} {what}")
    return out


def episode_ids(df: Any, col: str) -> np.ndarray:
    """Column ``col``'s labels as integers; missing values and episodes split over the table raise."""
    import pandas as pd

    values = df[col]
    if isinstance(values, pd.DataFrame):
        raise InvalidData(f"the table has {values.shape[1]} columns named '{col}'")
    missing = values.isna().to_numpy()
    if missing.any():
        raise InvalidData(
            f"column '{col}' (episode ids) has missing values, first at {row_name(df, int(np.argmax(missing)))}; every "
            "row needs an episode id"
        )
    try:
        _, ids = np.unique(values.to_numpy(), return_inverse=True)  # any labels -> integers
    except TypeError:  # labels of mixed types (numbers and strings): compare them as text
        _, ids = np.unique(values.astype(str).to_numpy(), return_inverse=True)
    ids = np.asarray(ids, dtype=np.int64).reshape(-1)
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    seen = ids[starts]
    if len(np.unique(seen)) != len(seen):  # an episode resumes after another one
        first = {}
        for s in starts:
            if ids[s] in first:
                raise InvalidData(
                    f"column '{col}': episode {show(values.iloc[s])} starts again at {row_name(df, int(s))} after "
                    "other episodes; the rows of an episode must be contiguous and in time order"
                )
            first[ids[s]] = s
    return ids
