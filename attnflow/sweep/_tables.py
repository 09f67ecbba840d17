"""A sweep's tidy table (one row per system): CSV and Parquet."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from .. import runio
from ..errors import InputError

from ._chunks import concat

__all__ = ["TABLE_FORMATS", "write_table", "check_table_formats", "write_tables"]


def _fmt(v) -> str:
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if np.isfinite(v) else ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


def write_table(path: Path, parts: list[dict], columns: list[str]) -> int:
    """Write the tidy CSV (one row per system) atomically; returns the number of rows."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    rows = 0
    for part in parts:
        n = len(part[columns[0]])
        for i in range(n):
            w.writerow([_fmt(part[c][i]) for c in columns])
        rows += n
    runio.atomic_write_text(path, buf.getvalue())
    return rows


TABLE_FORMATS = ("csv", "parquet")


def check_table_formats(formats: list[str]) -> list[str]:
    """Validate ``run.table_formats`` (before any work); Parquet needs pyarrow.

    Example:
        >>> from attnflow.sweep._runner import check_table_formats
        >>> check_table_formats(["csv"])
        ['csv']
    """
    bad = [f for f in formats if f not in TABLE_FORMATS]
    if bad or not formats:
        raise InputError(f"run.table_formats must be a non-empty list of {TABLE_FORMATS}, got {formats}.")
    if "parquet" in formats:
        try:
            import pyarrow  # noqa: F401
        except ImportError as e:
            raise InputError("run.table_formats asks for 'parquet', but pyarrow is not installed: "
                             "pip install 'attnflow[parquet]', or use table_formats = [\"csv\"].") from e
    return list(formats)


def write_tables(out: Path, parts: list[dict], columns: list[str], formats: list[str], name: str = "table") -> list[Path]:
    """Write the tidy table as ``out/<name>.csv`` and/or ``out/<name>.parquet`` (same rows and
    columns; Parquet keeps the dtypes: bool, int64, float64, string), each atomically."""
    written = []
    if "csv" in formats:
        write_table(out / f"{name}.csv", parts, columns)
        written.append(out / f"{name}.csv")
    if "parquet" in formats:
        import pyarrow as pa
        import pyarrow.parquet as pq

        cols = concat(parts)
        table = pa.table({c: pa.array(np.asarray(cols[c]).tolist() if np.asarray(cols[c]).dtype.kind == "U"
                                      else np.asarray(cols[c])) for c in columns})
        with runio.atomic_path(out / f"{name}.parquet") as tmp:
            pq.write_table(table, tmp)
        written.append(out / f"{name}.parquet")
    return written
