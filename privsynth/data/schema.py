"""A data holder's schema: column kinds, bounds, categories and names, declared as public metadata (docs/own_data.md).

The schema is never learned from the data: every bound and category a release respects comes from it. It travels
with the dataset (``DatasetInfo.schema``) and with every release made from it.

Inside privsynth a categorical or binary column holds the *index* of its value in ``values`` (binary: 0/1);
:func:`export_frame` writes the declared values back. :class:`RowCodec` is how the transition synthesizer sees a
row: categorical columns one-hot, everything else as is; decoding (argmax, rounding, clipping) is post-processing.

Why this module is long: the schema's validation, the table import in both layouts (with missing values) and the
export back to the holder's columns check one declaration in one place, each error naming the column and row.
"""
from __future__ import annotations

import difflib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from privsynth.errors import InvalidData

__all__ = ["Column", "Schema", "RowCodec", "load_schema", "from_schema_frame", "export_frame", "KINDS"]

KINDS = ("continuous", "integer", "binary", "categorical")
_TOP_KEYS = ("episode_id", "order", "observations", "actions", "reward", "terminal", "next_prefix", "description")
_COLUMN_KEYS = ("name", "kind", "low", "high", "values", "unit", "description")
_REWARD_KEYS = ("name", "low", "high", "values", "unit", "description")
EPISODE_LABELS = "episode_labels"  # DatasetInfo.extra key of an imported table's own episode ids (never released)
_YES, _NO = frozenset({"1", "1.0", "true", "yes", "y"}), frozenset({"0", "0.0", "false", "no", "n"})


def _unknown_key(where: str, key: Any, allowed: Sequence[str]) -> InvalidData:
    close = difflib.get_close_matches(str(key), allowed, n=1, cutoff=0.6)
    hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(allowed)}"
    return InvalidData(f"schema: unknown key '{key}' in {where}; {hint}")


def _number(v: Any, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not np.isfinite(v):
        raise InvalidData(f"schema: {what} must be a finite number, got {v!r}")
    return float(v)


@dataclass(frozen=True)
class Column:
    """One declared column: ``kind`` continuous | integer (``low`` < ``high``) | binary | categorical (``values``)."""

    name: str
    kind: str
    low: float | None = None
    high: float | None = None
    values: tuple[Any, ...] = ()
    unit: str | None = None
    description: str | None = None

    @property
    def discrete(self) -> bool:
        """Held as a value index and one-hot inside the synthesizer."""
        return self.kind in ("binary", "categorical")

    @property
    def levels(self) -> tuple[Any, ...]:
        return (0, 1) if self.kind == "binary" else self.values

    @property
    def width(self) -> int:
        """Columns of this column in the synthesizer's row."""
        return len(self.levels) if self.discrete else 1

    @property
    def code_range(self) -> tuple[float, float]:
        """Bounds of the stored number (a value index for discrete columns)."""
        if self.discrete:
            return 0.0, float(len(self.levels) - 1)
        return float(self.low), float(self.high)  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls, d: Any, where: str) -> "Column":
        if not isinstance(d, dict):
            raise InvalidData(f"schema: each entry of {where} must be a mapping like {{name: x, kind: continuous}}")
        for k in d:
            if k not in _COLUMN_KEYS:
                raise _unknown_key(f"{where} column '{d.get('name', '?')}'", k, _COLUMN_KEYS)
        name = d.get("name")
        if not isinstance(name, str) or not name.strip():
            raise InvalidData(f"schema: a column of {where} has no name")
        kind = d.get("kind", "continuous")
        if kind not in KINDS:
            close = difflib.get_close_matches(str(kind), KINDS, n=1, cutoff=0.5)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            raise InvalidData(f"schema: column '{name}' has unknown kind '{kind}'{hint}; kinds: {', '.join(KINDS)}")
        low = high = None
        values: tuple[Any, ...] = ()
        if kind in ("continuous", "integer"):
            if "values" in d:
                raise InvalidData(f"schema: column '{name}' is {kind}: it takes low and high, not values")
            if "low" not in d or "high" not in d:
                raise InvalidData(f"schema: {kind} column '{name}' needs low and high (public bounds)")
            low, high = _number(d["low"], f"'{name}' low"), _number(d["high"], f"'{name}' high")
            if not low < high:
                raise InvalidData(f"schema: column '{name}' has low {low:g} >= high {high:g}")
        elif kind == "binary":
            if "values" in d or "low" in d or "high" in d:
                raise InvalidData(f"schema: binary column '{name}' takes no values or bounds (it holds 0/1)")
        else:
            raw = d.get("values")
            if "low" in d or "high" in d:
                raise InvalidData(f"schema: categorical column '{name}' takes values, not low and high")
            if not isinstance(raw, list) or len(raw) < 2:
                raise InvalidData(f"schema: categorical column '{name}' needs a list of at least 2 values")
            if any(isinstance(v, (dict, list)) or v is None for v in raw):
                raise InvalidData(f"schema: categorical column '{name}' values must be numbers or strings")
            if len({_key(v) for v in raw}) != len(raw):
                raise InvalidData(f"schema: categorical column '{name}' lists a value twice")
            values = tuple(raw)
        return cls(name=name, kind=kind, low=low, high=high, values=values, unit=d.get("unit"),
                   description=d.get("description"))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind in ("continuous", "integer"):
            out.update(low=self.low, high=self.high)
        if self.kind == "categorical":
            out["values"] = list(self.values)
        for k in ("unit", "description"):
            if getattr(self, k) is not None:
                out[k] = getattr(self, k)
        return out


def _key(v: Any) -> str:
    """A value's identity: numbers by value (3 == 3.0 == '3'), text stripped."""
    if isinstance(v, (bool, np.bool_)):
        return str(int(v))
    if isinstance(v, (int, float, np.integer, np.floating)):
        return f"{float(v):g}"
    s = str(v).strip()
    try:
        return f"{float(s):g}"
    except ValueError:
        return s


@dataclass(frozen=True)
class Schema:
    """The holder's declaration (see the module docstring and docs/own_data.md for the file format)."""

    episode_id: str
    observations: tuple[Column, ...]
    actions: tuple[Column, ...]
    reward: Column
    order: str | None = None
    terminal: str | None = None
    next_prefix: str = "next_"
    description: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: Any) -> "Schema":
        """Validate a parsed schema file; every problem is one :class:`InvalidData` line naming the field."""
        if not isinstance(d, dict):
            raise InvalidData("schema: the file must hold a mapping (episode_id, observations, actions, reward, ...)")
        for k in d:
            if k not in _TOP_KEYS:
                raise _unknown_key("the schema", k, _TOP_KEYS)
        for k in ("episode_id", "observations", "actions", "reward"):
            if k not in d:
                raise InvalidData(f"schema: '{k}' is required")
        for k in ("episode_id", "order", "terminal", "next_prefix"):
            if k in d and d[k] is not None and not (isinstance(d[k], str) and d[k].strip()):
                raise InvalidData(f"schema: '{k}' must be a column name")
        cols = {}
        for part in ("observations", "actions"):
            if not isinstance(d[part], list) or not d[part]:
                raise InvalidData(f"schema: '{part}' must be a non-empty list of columns")
            cols[part] = tuple(Column.from_dict(c, part) for c in d[part])
        r = d["reward"]
        if isinstance(r, str):
            raise InvalidData(f"schema: reward needs public bounds: reward: {{name: {r}, low: ..., high: ...}}")
        if not isinstance(r, dict):
            raise InvalidData("schema: reward must be a mapping {name, low, high}")
        for k in r:
            if k not in _REWARD_KEYS:
                raise _unknown_key("reward", k, _REWARD_KEYS)
        if "values" in r and not (isinstance(r["values"], list)
                                  and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in r["values"])):
            raise InvalidData("schema: reward values must be a list of numbers")
        reward = Column.from_dict({"kind": "categorical" if "values" in r else "continuous", **r}, "reward")
        schema = cls(episode_id=d["episode_id"], observations=cols["observations"], actions=cols["actions"],
                     reward=reward, order=d.get("order"), terminal=d.get("terminal"),
                     next_prefix=d.get("next_prefix") or "next_", description=d.get("description"))
        names = schema.column_names()
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise InvalidData(f"schema: column '{dup[0]}' is declared twice")
        return schema

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"episode_id": self.episode_id}
        if self.order:
            out["order"] = self.order
        out["observations"] = [c.to_dict() for c in self.observations]
        out["actions"] = [c.to_dict() for c in self.actions]
        out["reward"] = {k: v for k, v in self.reward.to_dict().items() if k != "kind"}
        if self.terminal:
            out["terminal"] = self.terminal
        if self.next_prefix != "next_":
            out["next_prefix"] = self.next_prefix
        if self.description:
            out["description"] = self.description
        return out

    def column_names(self) -> list[str]:
        named = [self.episode_id, self.order, self.terminal]
        return [n for n in named if n] + [c.name for c in (*self.observations, *self.actions, self.reward)]

    def action_bounds(self) -> tuple[list[float], list[float]]:
        """The action box in stored numbers (value indices for discrete actions): public, from the schema."""
        lo, hi = zip(*(c.code_range for c in self.actions))
        return list(lo), list(hi)


def load_schema(path: str | Path) -> Schema:
    """A :class:`Schema` from a ``.yaml`` / ``.yml`` or ``.json`` file."""
    path = Path(path)
    if not path.is_file():
        raise InvalidData(f"no such schema file: {path}")
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise InvalidData(f"schema {path} is not valid JSON: {exc.msg} at line {exc.lineno}") from None
    else:
        try:
            import yaml
        except ImportError:
            raise InvalidData(f"reading {path} needs pyyaml (pip install pyyaml), or write the schema as JSON") from None
        try:
            data = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            at = f" at line {mark.line + 1}" if mark is not None else ""
            raise InvalidData(f"schema {path} is not valid YAML{at}: {getattr(exc, 'problem', exc)}") from None
    return Schema.from_dict(data)


def as_schema(schema: Schema | dict | str | Path) -> Schema:
    """A :class:`Schema` from itself, its dict form or a file path."""
    if isinstance(schema, Schema):
        return schema
    if isinstance(schema, dict):
        return Schema.from_dict(schema)
    return load_schema(schema)


# ------------------------------------------------------------------------------------------------ import
def _where(df: Any, i: int) -> str:
    """Row ``i`` (position) as the user counts it: the frame's own index, plus the file line of a CSV file."""
    label = df.index[i]
    if df.attrs.get("privsynth_csv") and isinstance(label, (int, np.integer)):
        return f"row {label} (line {int(label) + 2} of the file)"
    return f"row {label}"


def _show(v: Any) -> str:
    return repr(v) if isinstance(v, str) else f"{float(v):g}" if isinstance(v, (float, np.floating)) else str(v)


def _codes(df: Any, col: Column) -> np.ndarray:
    """Column ``col`` of ``df`` as stored numbers (value indices for discrete columns); NaN where missing. A value
    outside the declaration is one error naming column, row and what was declared."""
    import pandas as pd

    s = df[col.name]
    n = len(s)
    if col.discrete:
        lookup = {_key(v): i for i, v in enumerate(col.levels)}
        if col.kind == "binary":
            lookup.update({k: 1 for k in _YES} | {k: 0 for k in _NO})
        out = np.full(n, np.nan)
        raw = s.to_numpy(dtype=object)
        for i, v in enumerate(raw):
            if v is None or (not isinstance(v, str) and pd.isna(v)):
                continue
            k = _key(v).lower() if col.kind == "binary" else _key(v)
            if k not in lookup:
                shown = "0/1 (or true/false, yes/no)" if col.kind == "binary" else "[" + ", ".join(map(str, col.values)) + "]"
                raise InvalidData(f"column '{col.name}' has {_show(v)} at {_where(df, i)}, not one of its declared "
                                  f"values {shown}")
            out[i] = lookup[k]
        return out
    num = pd.to_numeric(s, errors="coerce").to_numpy(dtype=np.float64)
    bad = np.isnan(num) & s.notna().to_numpy()
    if bad.any():
        i = int(np.argmax(bad))
        raise InvalidData(f"column '{col.name}' has {_show(s.iloc[i])} at {_where(df, i)}, not a number")
    ok = np.isnan(num)
    out_of = ~ok & ((num < col.low) | (num > col.high))
    if out_of.any():
        i = int(np.argmax(out_of))
        raise InvalidData(f"column '{col.name}' has {num[i]:g} at {_where(df, i)}, outside its declared bounds "
                          f"[{col.low:g}, {col.high:g}]")
    if col.kind == "integer":
        frac = ~ok & (num != np.round(num))
        if frac.any():
            i = int(np.argmax(frac))
            raise InvalidData(f"column '{col.name}' is declared integer but has {num[i]:g} at {_where(df, i)}")
    return num


def _fill(df: Any, x: np.ndarray, cols: Sequence[Column], starts: np.ndarray, impute: str | None,
          fillable: bool) -> np.ndarray:
    """``x`` [N, k] with its missing cells refused or, with ``impute="ffill"``, filled inside each episode (the
    episode's previous value; its next one before the first value): a per-record operation, no cohort statistic."""
    miss = np.isnan(x)
    if not miss.any():
        return x
    if impute is None or not fillable:
        r, c = (int(v[0]) for v in np.nonzero(miss))
        how = "; fill it before import or pass --impute ffill (impute='ffill')" if fillable else \
              "; rewards and actions are never imputed"
        raise InvalidData(f"column '{cols[c].name}' has a missing value at {_where(df, r)}{how}")
    ends = np.concatenate([starts[1:], [len(x)]])
    out = x.copy()
    for s, e in zip(starts, ends):
        block = out[s:e]
        for j in range(block.shape[1]):
            v = block[:, j]
            have = np.flatnonzero(~np.isnan(v))
            if have.size == 0:
                raise InvalidData(f"column '{cols[j].name}' has no value at all in the episode starting at "
                                  f"{_where(df, int(s))}; ffill has nothing to carry")
            idx = np.maximum.accumulate(np.where(np.isnan(v), 0, np.arange(len(v))))
            idx[: have[0]] = have[0]  # before the first value: the episode's next value
            block[:, j] = v[idx]
    return out


def from_schema_frame(df: Any, schema: Schema | dict | str | Path, *, name: str = "imported",
                      impute: str | None = None, sensitive: bool = True) -> Any:
    """An :class:`~privsynth.data.dataset.OfflineDataset` from ``df`` read as ``schema`` declares.

    Layouts: with ``next_<name>`` columns for every observation (``next_prefix``), each row is a transition;
    without them, one row per step: a row's next state is the episode's next row, and the last row is a terminal
    transition that keeps its reward (next state = its own state; with a ``terminal`` column holding 0 there, it is
    truncated instead). ``impute``: None (missing values are refused) or ``"ffill"`` (observations only)."""
    import pandas as pd

    from privsynth.data.dataset import DatasetInfo, OfflineDataset
    from privsynth.data.table_cells import episode_ids as _episode_ids
    from privsynth.data.table_cells import flags as _flags

    schema = as_schema(schema)
    if impute not in (None, "ffill"):
        raise InvalidData(f"unknown --impute '{impute}'; the only per-record imputation is ffill")
    if len(df) == 0:
        raise InvalidData("the table has no rows")
    need = [c for c in schema.column_names()]
    for c in need:
        if c not in df.columns:
            close = difflib.get_close_matches(c, [str(x) for x in df.columns], n=1, cutoff=0.6)
            hint = f"; closest column '{close[0]}'" if close else ""
            raise InvalidData(f"the table has no column '{c}' declared in the schema{hint}")
    nxt_names = [schema.next_prefix + c.name for c in schema.observations]
    present = [n for n in nxt_names if n in df.columns]
    if present and len(present) != len(nxt_names):
        lack = next(n for n in nxt_names if n not in df.columns)
        raise InvalidData(f"the table has next-state columns ({present[0]}, ...) but lacks '{lack}': give every "
                          "observation's next column, or none (one row per step)")
    transitions = bool(present)
    if schema.order:
        order = pd.to_numeric(df[schema.order], errors="coerce")
        if order.isna().any():
            i = int(np.argmax(order.isna().to_numpy()))
            raise InvalidData(f"column '{schema.order}' (order) has {_show(df[schema.order].iloc[i])} at "
                              f"{_where(df, i)}, not a number")
        first = df.groupby(df[schema.episode_id].astype(str), sort=False).ngroup()
        df = df.assign(_ps_first=first.to_numpy(), _ps_order=order.to_numpy())
        df = df.sort_values(["_ps_first", "_ps_order"], kind="stable")
        dup = (df["_ps_first"].diff() == 0) & (df["_ps_order"].diff() == 0)
        if dup.any():
            i = int(np.argmax(dup.to_numpy()))
            raise InvalidData(f"column '{schema.order}' repeats {_show(df[schema.order].iloc[i])} at "
                              f"{_where(df, i)} within episode {_show(df[schema.episode_id].iloc[i])}")
    ids = _episode_ids(df, schema.episode_id)
    labels = _episode_labels(df[schema.episode_id])
    n = len(df)
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    lasts = np.concatenate([starts[1:], [n]]) - 1
    obs = np.stack([_codes(df, c) for c in schema.observations], axis=1)
    obs = _fill(df, obs, schema.observations, starts, impute, True)
    act = _fill(df, np.stack([_codes(df, c) for c in schema.actions], axis=1), schema.actions, starts, None, False)
    rew = _fill(df, _codes(df, schema.reward)[:, None], (schema.reward,), starts, None, False)[:, 0]
    if schema.reward.discrete:  # a reward is stored as its value (agents read it), not as an index
        rew = np.asarray(schema.reward.values, dtype=np.float64)[rew.astype(int)]
    is_last = np.zeros(n, dtype=bool)
    is_last[lasts] = True
    if schema.terminal:
        term = _flags(df.reset_index(drop=True), schema.terminal, n)
        early = term & ~is_last
        if early.any():
            i = int(np.argmax(early))
            raise InvalidData(f"column '{schema.terminal}' is set at {_where(df, i)}, before the last row of episode "
                              f"{_show(df[schema.episode_id].iloc[i])}: check the episode ids and the row order")
    else:
        term = is_last.copy()
    trunc = is_last & ~term
    if transitions:
        ren = {schema.next_prefix + c.name: c.name for c in schema.observations}
        nf = df[list(ren)].rename(columns=ren)
        nxt = np.stack([_codes(nf, c) for c in schema.observations], axis=1)
        nxt = _fill(df, nxt, schema.observations, starts, impute, True)
    else:
        nxt = np.empty_like(obs)
        nxt[:-1] = obs[1:]
        nxt[lasts] = obs[lasts]  # after the last step: absorbing (its own state)
    lo, hi = schema.action_bounds()
    info = DatasetInfo(name=name, sensitive=sensitive, action_low=lo, action_high=hi, schema=schema.to_dict(),
                       extra={"imported_layout": "transitions" if transitions else "steps",
                              "imputed": impute or "none", EPISODE_LABELS: labels})
    return OfflineDataset(observations=obs.astype(np.float32), actions=act.astype(np.float32),
                          rewards=rew.astype(np.float32), next_observations=nxt.astype(np.float32),
                          terminals=term, timeouts=trunc, episode_ids=ids, info=info)


def _episode_labels(values: Any) -> list[Any]:
    """The holder's episode ids, indexed by the integer ids :func:`~privsynth.data.tabular._episode_ids` gives
    (sorted labels), as JSON values: kept in the imported (sensitive) dataset's metadata so export writes them back."""
    raw = values.to_numpy()
    try:
        labels = np.unique(raw)
    except TypeError:  # mixed types: compared as text, as _episode_ids does
        labels = np.unique(raw.astype(str))
    return [v.item() if hasattr(v, "item") else v for v in labels]


# ------------------------------------------------------------------------------------------------ export
def _values(col: Column, x: np.ndarray) -> Any:
    if col.discrete:
        idx = np.clip(np.rint(x), 0, len(col.levels) - 1).astype(int)
        return np.asarray(col.levels, dtype=object)[idx]
    if col.kind == "integer":
        return np.rint(x).astype(np.int64)
    return np.asarray(x, dtype=np.float32)  # written with 7 significant digits (float32's precision)


def export_frame(ds: Any, *, step_column: str = "step", with_next: bool = False) -> Any:
    """``ds`` as a DataFrame in the per-step layout, one row per transition: the episode column (the holder's own
    ids for an imported table, kept in its metadata; a release, which has none, numbers its episodes), a step column,
    the observation, action and reward columns (the schema's names and values; ``obs_i`` / ``act_i`` without a
    schema) and the terminal flag; ``with_next`` adds the next-state columns."""
    import pandas as pd

    schema = Schema.from_dict(ds.info.schema) if ds.info.schema else None
    if schema is not None:
        obs_cols, act_cols, rew_col = list(schema.observations), list(schema.actions), schema.reward
        ep_name, step_name = schema.episode_id, schema.order or step_column
        term_name, prefix = schema.terminal or "terminal", schema.next_prefix
    else:
        obs_cols = [Column(f"obs_{i}", "continuous") for i in range(ds.obs_dim)]
        act_cols = [Column(f"act_{i}", "continuous") for i in range(ds.act_dim)]
        rew_col = Column("reward", "continuous")
        ep_name, step_name, term_name, prefix = "episode_id", step_column, "terminal", "next_"
    _, ids = np.unique(ds.episode_ids, return_inverse=True)
    starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
    steps = np.arange(len(ids)) - np.repeat(starts, np.diff(np.concatenate([starts, [len(ids)]])))
    episodes: Any = ids.reshape(-1)
    labels = ds.info.extra.get(EPISODE_LABELS) if schema is not None else None
    if labels and 0 <= int(np.min(ds.episode_ids)) and int(np.max(ds.episode_ids)) < len(labels):
        episodes = np.asarray(labels, dtype=object)[np.asarray(ds.episode_ids, dtype=np.int64)]  # the holder's ids
    data: dict[str, Any] = {ep_name: episodes, step_name: steps}
    for j, c in enumerate(obs_cols):
        data[c.name] = _values(c, ds.observations[:, j])
    for j, c in enumerate(act_cols):
        data[c.name] = _values(c, ds.actions[:, j])
    data[rew_col.name] = np.asarray(ds.rewards, dtype=np.float32)
    data[term_name] = ds.terminals.astype(int)
    if with_next:
        for j, c in enumerate(obs_cols):
            data[prefix + c.name] = _values(c, ds.next_observations[:, j])
    return pd.DataFrame(data)


# ------------------------------------------------------------------------------------------ the codec
class RowCodec:
    """A transition row (state | action | reward | next state | terminal, stored numbers) in the synthesizer's
    encoding: discrete columns one-hot, the rest as is. Bounds come from the schema only (public)."""

    def __init__(self, schema: Schema | dict) -> None:
        self.schema = as_schema(schema)
        self.obs, self.act = list(self.schema.observations), list(self.schema.actions)
        self.parts = [*self.obs, *self.act, self.schema.reward, *self.obs]  # the terminal flag follows
        self.reward_at = len(self.obs) + len(self.act)
        self.reward_values = np.asarray(self.schema.reward.values, dtype=np.float32) if self.schema.reward.discrete \
            else None

    @property
    def raw_width(self) -> int:
        return len(self.parts) + 1

    @property
    def width(self) -> int:
        """Encoded columns, terminal flag included."""
        return sum(c.width for c in self.parts) + 1

    def encode(self, rows: np.ndarray) -> np.ndarray:
        rows = np.asarray(rows, dtype=np.float32)
        out = np.zeros((rows.shape[0], self.width), dtype=np.float32)
        k = 0
        for j, c in enumerate(self.parts):
            if c.discrete:
                if j == self.reward_at and self.reward_values is not None:  # stored as its value
                    idx = np.abs(rows[:, j:j + 1] - self.reward_values[None, :]).argmin(axis=1)
                else:
                    idx = np.clip(np.rint(rows[:, j]), 0, c.width - 1).astype(int)
                out[np.arange(len(rows)), k + idx] = 1.0
            else:
                out[:, k] = rows[:, j]
            k += c.width
        out[:, k] = rows[:, -1]
        return out

    def decode(self, enc: np.ndarray) -> np.ndarray:
        """Post-processing of DP outputs: argmax for discrete columns, whole numbers for integers, every value
        clipped to its declared bounds."""
        enc = np.asarray(enc, dtype=np.float32)
        out = np.zeros((enc.shape[0], self.raw_width), dtype=np.float32)
        k = 0
        for j, c in enumerate(self.parts):
            if c.discrete:
                out[:, j] = enc[:, k:k + c.width].argmax(axis=1)
                if j == self.reward_at and self.reward_values is not None:
                    out[:, j] = self.reward_values[out[:, j].astype(int)]
            else:
                v = np.clip(enc[:, k], c.low, c.high)
                out[:, j] = np.clip(np.rint(v), np.ceil(c.low), np.floor(c.high)) if c.kind == "integer" else v
            k += c.width
        out[:, -1] = enc[:, k]
        return out

    def bounds(self) -> tuple[np.ndarray, np.ndarray]:
        """Per encoded column: [low, high] (one-hot and the terminal flag: [0, 1])."""
        lo: list[float] = []
        hi: list[float] = []
        for c in self.parts:
            if c.discrete:
                lo += [0.0] * c.width
                hi += [1.0] * c.width
            else:
                lo.append(float(c.low))
                hi.append(float(c.high))
        return np.array(lo + [0.0]), np.array(hi + [1.0])

    def discrete_columns(self) -> list[int]:
        """Encoded columns that are not numbers on a scale: the one-hot columns and the terminal flag."""
        cols: list[int] = []
        k = 0
        for c in self.parts:
            if c.discrete:
                cols += list(range(k, k + c.width))
            k += c.width
        return cols + [k]

    def next_state_start(self) -> int:
        """First encoded column of the next state (its block mirrors the state's, which starts at column 0)."""
        return sum(c.width for c in self.parts[:len(self.obs) + len(self.act) + 1])

    def normalizer(self, source: str = "schema bounds") -> Any:
        """A fixed-bounds normaliser from the schema (public metadata: no privacy cost)."""
        from privsynth.data.normalize import Normalizer

        return Normalizer.from_bounds(*self.bounds(), source=source)


def schema_codec(info: Any) -> RowCodec | None:
    """The codec of ``info``'s schema, or None without one."""
    schema = getattr(info, "schema", None)
    return RowCodec(schema) if schema else None

