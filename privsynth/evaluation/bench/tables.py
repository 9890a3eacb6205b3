"""A suite's tables from its finished records: mean ± std over the cells that differ only in seed, as markdown,
HTML and the raw per-cell CSV (docs/benchmarks.md, "Where things go")."""
from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from privsynth.evaluation.bench.plan import selections
from privsynth.evaluation.bench.suite import Suite

__all__ = ["records_frame", "summary_table", "write_tables", "eps_label", "label"]


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
        row.update({k: v for k, v in (r["result"] or {}).items() if isinstance(v, (int, float, str, bool)) or v is None})
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


def summary_table(records: Sequence[Mapping[str, Any]], rows: list[str], values: list[str], cols: list[str] | None = None,
                  digits: int = 3):
    """mean ± std (and n) of ``values`` over every cell sharing ``rows`` + ``cols`` (i.e. across seeds)."""
    import pandas as pd

    df = records_frame(records)
    if df.empty:
        return pd.DataFrame()
    keys = [k for k in rows + (cols or []) if k in df.columns]
    present = [v for v in values if v in df.columns]
    if not present:
        return pd.DataFrame()
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
        table = table.pivot_table(index=[k for k in rows if k in keys], columns=[c for c in cols if c in keys],
                                  values=present[0], aggfunc="first").reset_index().fillna("–")
        table.columns = [" ".join(str(x) for x in c if str(x)) if isinstance(c, tuple) else str(c) for c in table.columns]
    return table


def write_tables(suite: Suite) -> list[Path]:
    """Every table of the suite as markdown, HTML and the raw per-cell CSV."""
    out_dir = suite.out / "tables"
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for spec, recs in selections(suite, suite.tables):
        table = summary_table(recs, list(spec.get("rows", [])), list(spec["values"]), spec.get("cols"),
                              int(spec.get("digits", 3)))
        name = spec["name"]
        md = f"## {spec.get('title', name)}\n\n" + (spec.get("caption", "") + "\n\n" if spec.get("caption") else "")
        md += markdown(table)
        (out_dir / f"{name}.md").write_text(md)
        table.to_html(out_dir / f"{name}.html", index=False)
        records_frame(recs).to_csv(out_dir / f"{name}.cells.csv", index=False)
        written += [out_dir / f"{name}.md", out_dir / f"{name}.html"]
    return written
