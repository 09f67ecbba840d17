"""The probe's tables: one list of rows written both as a CSV file and as a report.md table
(same rows, same columns, the first column an index to find a row), so that every statement of
a report can be traced to a row."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ..runs import fmt as runs_fmt

__all__ = ["Column", "write_rows", "fmt"]

#: (CSV column name, report header, how the report shows a value)
Column = tuple[str, str, Callable[[Any], str]]


def fmt(x: Any, digits: int = 3) -> str:
    """A value as the report shows it (:func:`attnflow.runs.fmt`): ``-`` for None, ``yes``/``no`` for a
    boolean, ``nan``/``inf`` for a non-finite number, ``digits`` significant digits without an exponent
    switch.

    Example:
        >>> from attnflow.probe._tables import fmt
        >>> fmt(0.123456), fmt(None), fmt(float("nan")), fmt(True), fmt("ok")
        ('0.123', '-', 'nan', 'yes', 'ok')
    """
    return runs_fmt(x, digits, missing="-", booleans=("yes", "no"), scientific=False)


def write_rows(path: Path, rows: list[dict], columns: list[Column]) -> list[str]:
    """Write ``rows`` as the CSV ``path`` (full precision; an empty cell for None) and return
    the same rows as markdown table lines."""
    from ..runs import write_table

    keys = [c[0] for c in columns]
    write_table(path, [{k: ["" if r[k] is None else r[k] for r in rows] for k in keys}], keys)
    lines = ["| " + " | ".join(c[1] for c in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(show(r[k]) for k, _, show in columns) + " |" for r in rows]
    return lines
