"""Tidy tables (one row per system, cell, ...): CSV and Parquet, written atomically, and read back.

A table is a list of *parts* (dicts of equal-length columns, e.g. one per chunk) and a column order;
:func:`write_table` writes its CSV (each cell by :func:`csv_cell`), :func:`write_tables` the formats a
run asks for (``run.table_formats``), :func:`read_csv` reads a CSV back as columns. A list of rows (dicts)
is written by :func:`write_rows` (:func:`csv_text`: the csv module's own cells)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import numpy as np

from ..errors import InputError
from ._atomic import atomic_path, atomic_write_text

__all__ = ["TABLE_FORMATS", "csv_cell", "write_table", "check_table_formats", "write_tables", "concat", "read_csv",
           "csv_text", "write_rows"]


def concat(parts: list[dict]) -> dict:
    """Columns of all parts, concatenated in order.

    Example:
        >>> import numpy as np
        >>> from attnflow.runs import concat
        >>> concat([{"a": np.arange(2)}, {"a": np.arange(1)}])["a"].tolist()
        [0, 1, 0]
    """
    if not parts:
        return {}
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def csv_cell(v) -> str:
    """A value as a CSV cell: ``true``/``false``, a float as ``repr`` (every digit: read back to the bit),
    ``nan``/``inf``/``-inf``, an integer as its digits, anything else as ``str``.

    Example:
        >>> import numpy as np
        >>> from attnflow.runs import csv_cell
        >>> csv_cell(np.float32(0.1)), csv_cell(np.bool_(True)), csv_cell(float("-inf")), csv_cell(np.int64(3))
        ('0.10000000149011612', 'true', '-inf', '3')
    """
    if isinstance(v, (bool, np.bool_)):
        return "true" if v else "false"
    if isinstance(v, (float, np.floating)):
        return repr(float(v)) if np.isfinite(v) else ("nan" if np.isnan(v) else ("inf" if v > 0 else "-inf"))
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    return str(v)


_BOOL_CELLS = {True: "true", False: "false"}


def _column_cells(column) -> list[str]:
    """:func:`csv_cell` of every value of a column, a NumPy column of booleans, integers or floats formatted as a
    whole (``repr`` of a Python float is already ``nan``/``inf``/``-inf`` where the value is not finite)."""
    if isinstance(column, np.ndarray) and column.ndim == 1:
        kind = column.dtype.kind
        if kind == "b":
            return [_BOOL_CELLS[b] for b in column.tolist()]
        if kind == "f" and column.dtype.itemsize <= 8:
            return list(map(repr, column.tolist()))
        if kind in "iu":
            return list(map(str, column.tolist()))
    return [csv_cell(v) for v in column]


def write_table(path: Path, parts: list[dict], columns: list[str]) -> int:
    """Write the tidy CSV of ``parts`` (``columns`` in this order, cells by :func:`csv_cell`) atomically;
    returns the number of rows.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import write_table
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> write_table(path, [{"d": [2, 3], "ok": [True, False]}], ["d", "ok"])
        2
        >>> print(path.read_text(), end="")
        d,ok
        2,true
        3,false
    """
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(columns)
    rows = 0
    for part in parts:
        n = len(part[columns[0]])
        w.writerows(zip(*(_column_cells(part[c]) for c in columns)) if columns else ())
        rows += n
    atomic_write_text(path, buf.getvalue())
    return rows


TABLE_FORMATS = ("csv", "parquet")


def check_table_formats(formats: list[str]) -> list[str]:
    """Validate ``run.table_formats`` (before any work); Parquet needs pyarrow.

    Example:
        >>> from attnflow.runs import check_table_formats
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
    columns; Parquet keeps the dtypes: bool, int64, float64, string), each atomically.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import write_tables
        >>> out = pathlib.Path(tempfile.mkdtemp())
        >>> [p.name for p in write_tables(out, [{"d": [2]}], ["d"], ["csv"])]
        ['table.csv']
    """
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
        with atomic_path(out / f"{name}.parquet") as tmp:
            pq.write_table(table, tmp)
        written.append(out / f"{name}.parquet")
    return written


def read_csv(path: str | Path) -> dict[str, list[str]]:
    """The columns of a CSV file (a header row, then rows), as lists of the cells' text.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import read_csv, write_table
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "t.csv"
        >>> _ = write_table(path, [{"d": [2, 3]}], ["d"])
        >>> read_csv(path)
        {'d': ['2', '3']}
    """
    try:
        with open(path, newline="", encoding="utf-8") as fh:
            rows = list(csv.reader(fh))
    except OSError as err:
        raise InputError(f"the table {path} cannot be read ({err.strerror or err}); give an existing CSV "
                         "file.") from None
    if not rows:
        raise InputError(f"the table {path} is empty; give a CSV file with a header row.")
    header, body = rows[0], rows[1:]
    return {name: [r[i] if i < len(r) else "" for r in body] for i, name in enumerate(header)}


def csv_text(rows: list[dict], columns: list[str] | None = None, *, lineterminator: str = "\n",
             extra: str = "raise") -> str:
    """``rows`` (dicts) as CSV text with the header ``columns`` (default: the first row's keys), each cell as the
    csv module writes it (None empty, ``True``, a float's ``repr``); a key missing from a row is an empty cell,
    a key not in ``columns`` is refused (``extra="raise"``) or left out (``extra="ignore"``).

    Example:
        >>> from attnflow.runs import csv_text
        >>> csv_text([{"case": "a", "passed": True, "margin": None}])
        'case,passed,margin\\na,True,\\n'
    """
    header = list(columns) if columns is not None else (list(rows[0]) if rows else [])
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=header, extrasaction=extra, lineterminator=lineterminator)
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def write_rows(path: str | Path, rows: list[dict], columns: list[str] | None = None, *, lineterminator: str = "\n",
               extra: str = "raise") -> int:
    """Write :func:`csv_text` of ``rows`` atomically as ``path``; returns the number of rows.

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.runs import write_rows
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "rows.csv"
        >>> write_rows(path, [{"k": 1, "rate": 0.5}, {"k": 2}])
        2
        >>> print(path.read_text(), end="")
        k,rate
        1,0.5
        2,
    """
    atomic_write_text(path, csv_text(rows, columns, lineterminator=lineterminator, extra=extra))
    return len(rows)
