"""A suite's tables from its finished records: mean ± std over the cells that differ only in seed, as markdown,
HTML and the raw per-cell CSV (docs/benchmarks.md, "Where things go")."""
from __future__ import annotations

import html
import json
import math
import sys
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from privsynth.errors import InvalidData
from privsynth.evaluation.bench.gap import gap_table, numeric_epsilon
from privsynth.evaluation.bench.plan import records_for
from privsynth.evaluation.bench.records import HOLDER_ONLY
from privsynth.evaluation.bench.suite import Suite

__all__ = ["records_frame", "summary_table", "write_tables", "eps_label", "label", "check_keys", "remove_stale",
           "made_by"]


def eps_label(v: Any) -> Any:
    """ε as tables show it: "no DP" for a non-private cell (null or infinite), "0 (public only)" for a cell that read
    no sensitive record (``finetune: none``), else the number."""
    if v is None or (isinstance(v, float) and math.isinf(v)):
        return "no DP"
    if isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0:
        return "0 (public only)"
    return v


def label(key: str, value: Any) -> str:
    """A legend entry for one param: ``ε=1`` / ``no DP`` / ``key=value``."""
    if key == "epsilon":
        return "no DP" if eps_label(value) == "no DP" else f"ε={value:g}"
    return f"{key}={value}"


def records_frame(records: Sequence[Mapping[str, Any]]):
    """One row per cell: scalar params and scalar results flattened into columns (results win on clashes)."""
    import pandas as pd

    rows = []
    for r in records:
        row = {k: v for k, v in r["params"].items() if not isinstance(v, (dict, list))}
        if "epsilon" in row:
            row["epsilon"] = eps_label(row["epsilon"])
        result = dict(r["result"] or {})
        result = {**(result.pop(HOLDER_ONLY, None) or {}), **result}  # the holder's own figures are columns too
        row.update({k: v for k, v in result.items() if isinstance(v, (int, float, str, bool)) or v is None})
        row["cell"] = r["id"]
        row["seconds"] = r["seconds"]
        rows.append(row)
    return pd.DataFrame(rows)


def markdown(df) -> str:
    """A GitHub markdown table (pandas' to_markdown needs the optional ``tabulate``)."""
    cols = [str(c) for c in df.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for _, row in df.iterrows():
        lines.append("| " + " | ".join(str(v) for v in row.tolist()) + " |")
    return "\n".join(lines) + "\n"


def check_keys(df, what: str, keys: Mapping[str, Sequence[str]]) -> None:
    """Refuse (one line naming ``what``, e.g. ``table 'returns'``, and the key) a ``rows``/``cols``/``values``/``y``
    key that no selected record has: a typo would otherwise pool groups or leave an empty column silently."""
    for role, names in keys.items():
        for k in names:
            if k not in df.columns:
                have = ", ".join(sorted(str(c) for c in df.columns))
                raise InvalidData(f"{what}: {role} key '{k}' is in none of its {len(df)} cells; their keys: {have}")


def summary_table(records: Sequence[Mapping[str, Any]], rows: list[str], values: list[str], cols: list[str] | None = None,
                  digits: int = 3, name: str | None = None):
    """mean ± std (and n) of ``values`` over every cell sharing ``rows`` + ``cols`` (i.e. across seeds). A key of
    ``rows``, ``cols`` or ``values`` that no record has is refused (:func:`check_keys`)."""
    import pandas as pd

    df = records_frame(records)
    if df.empty:
        return pd.DataFrame()
    check_keys(df, f"table '{name}'" if name else "table", {"rows": rows, "cols": cols or [], "values": values})
    keys = list(rows + (cols or []))
    present = list(values)
    keyed = df[keys].astype(object).where(df[keys].notna(), "–").astype(str) if keys else None
    groups = df.groupby([keyed[k] for k in keys], sort=True, dropna=False) if keys else [((), df)]
    out, counts = [], []
    for key, g in groups:
        key = key if isinstance(key, tuple) else (key,)
        row = dict(zip(keys, key))
        for v in present:
            vals = pd.to_numeric(g[v], errors="coerce").dropna()
            counts.append((len(out), v, len(vals)))
            if vals.empty:
                row[v] = "–"
            elif len(vals) == 1:
                row[v] = f"{vals.iloc[0]:.{digits}f}"
            else:
                row[v] = f"{vals.mean():.{digits}f} ± {vals.std(ddof=1):.{digits}f}"
        row["n"] = len(g)
        out.append(row)
    full = max((n for *_, n in counts), default=0)
    for i, v, n in counts:  # a group with fewer seeds than the others says so (a suite still running, a failed cell)
        if 0 < n < full:
            out[i][v] += f" (n={n})"
    table = pd.DataFrame(out)
    if cols and len(present) == 1:
        index = list(rows)
        pivot = dict(columns=list(cols), values=present[0], aggfunc="first")
        wide = (table.pivot_table(index=index, **pivot).reset_index() if index
                else table.pivot_table(**pivot).reset_index(drop=True)).fillna("–")
        wide.columns = [" ".join(str(x) for x in c if str(x)) if isinstance(c, tuple) else str(c) for c in wide.columns]
        # n: cells per row (over its cols); "2–3" when the row's columns differ
        ns = table.groupby(index, sort=True)["n"].agg(["min", "max"]).reset_index() if index else \
            pd.DataFrame([{"min": table["n"].min(), "max": table["n"].max()}])
        wide["n"] = [str(lo) if lo == hi else f"{lo}–{hi}" for lo, hi in zip(ns["min"], ns["max"])]
        table = wide
    return table


def _flat(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in params.items():
        if isinstance(v, Mapping):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = json.dumps(v, sort_keys=True, default=str)
    return out


def pooled_settings(records: Sequence[Mapping[str, Any]], keys: list[str]) -> list[str]:
    """Settings (dotted paths into the params, nested ``config`` included) that differ among cells a table puts in
    one row, other than seeds: a table's mean ± std is meant over cells that differ only in seed."""
    df = records_frame(records)
    if df.empty:
        return []
    present = [k for k in keys if k in df.columns]
    labels = ["|".join(str(v) for v in row) for row in df[present].itertuples(index=False)] if present \
        else ["" for _ in range(len(df))]
    groups: dict[str, list[dict[str, str]]] = {}
    for label, rec in zip(labels, records):
        groups.setdefault(label, []).append(_flat(rec["params"]))
    differ: set[str] = set()
    for flats in groups.values():
        for path in set().union(*flats):
            if "seed" in path.rsplit(".", 1)[-1] or path in keys:
                continue
            if len({f.get(path) for f in flats}) > 1:
                differ.add(path)
    return sorted(differ)


def made_by(suite: Suite) -> str:
    """"suite <name>, made by `privsynth bench PATH`" for the tables' and plots' headers: the suite file from
    ``suite.path`` when the loader records it, else the ``privsynth bench`` command line of this process."""
    path = getattr(suite, "path", None) or getattr(suite, "source", None)
    if path is None:
        argv = [str(a) for a in sys.argv[1:]]
        if argv[:1] == ["bench"]:
            path = next((a for a in argv[1:] if a.endswith((".yaml", ".yml"))), None)
    return f"suite {suite.name}" + (f", made by `privsynth bench {path}`" if path else "")


def remove_stale(name: str, out_dir: Path, suffixes: Sequence[str] = (".md", ".html", ".cells.csv"),
                 log: Callable[[str], None] | None = print, why: str = "selects no current cells",
                 what: str = "table") -> list[Path]:
    """Delete the files of table (or plot) ``name`` under ``out_dir`` when it has nothing current to show, so old
    numbers do not stay behind looking current; logs what it removed. Returns the removed paths."""
    removed = []
    for suffix in suffixes:
        path = Path(out_dir) / f"{name}{suffix}"
        if path.exists():
            path.unlink()
            removed.append(path)
    if removed and log is not None:
        log(f"{what} '{name}' {why}: removed its old {', '.join(p.name for p in removed)}")
    return removed


def write_tables(suite: Suite, log: Callable[[str], None] | None = print) -> list[Path]:
    """Every table of the suite as markdown, HTML and the raw per-cell CSV. A table that selects no current cell
    has its old files removed (and says so); a ``rows``/``cols``/``values`` key that none of its cells has is
    refused after the other tables are written (:class:`InvalidData`, one line per bad table)."""
    out_dir = suite.out / "tables"
    out_dir.mkdir(parents=True, exist_ok=True)
    written, errors = [], []
    origin = made_by(suite)
    for spec in suite.tables:
        name = spec["name"]
        recs = records_for(suite, spec)
        if not recs:
            remove_stale(name, out_dir, log=log)
            continue
        try:
            if spec.get("type") == "gap_closed":  # a transfer suite's gap closed (gap.py, docs/transfer.md)
                table = gap_table(records_frame(recs), spec)
            else:
                table = summary_table(recs, list(spec.get("rows", [])), list(spec["values"]), spec.get("cols"),
                                      int(spec.get("digits", 3)), name=name)
        except InvalidData as exc:
            remove_stale(name, out_dir, log=log, why="is refused")
            errors.append(str(exc))
            continue
        pooled = [] if spec.get("type") == "gap_closed" else \
            pooled_settings(recs, list(spec.get("rows", [])) + list(spec.get("cols") or []))
        if pooled and log is not None:
            log(f"table '{name}': a row pools cells that differ in {', '.join(pooled)} (not only in seeds): add them "
                "to its rows or cols to keep them apart")
        title = spec.get("title", name)
        md = f"## {title}\n\n{origin}\n\n" + (spec.get("caption", "") + "\n\n" if spec.get("caption") else "")
        md += markdown(table)
        (out_dir / f"{name}.md").write_text(md)
        body = table.to_html(index=False)
        (out_dir / f"{name}.html").write_text(
            f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(f'{title} ({origin})')}"
            f"</title></head>\n<body>\n<h2>{html.escape(title)}</h2>\n<p>{html.escape(origin)}</p>\n{body}\n"
            "</body></html>\n")
        cells = records_frame(recs)
        if spec.get("type") == "gap_closed":  # ε as numbers there: 0 = public model alone, empty = no DP / real
            cells = numeric_epsilon(cells)
        cells.to_csv(out_dir / f"{name}.cells.csv", index=False)
        written += [out_dir / f"{name}.md", out_dir / f"{name}.html"]
    if errors:
        raise InvalidData("; ".join(errors))
    return written
