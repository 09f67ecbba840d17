"""One number formatter for the reports (report.md tables and sentences)."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

__all__ = ["fmt"]


def fmt(x: Any, digits: int = 3, *, missing: str = "None", booleans: tuple[str, str] = ("True", "False"),
        scientific: bool = True, spec: str | None = None) -> str:
    """A value as a report shows it.

    A number is rounded to ``digits`` significant digits (``spec``, a format specification such as
    ``".2g"``, instead); with ``scientific`` one outside [1e-3, 1e4) is written as ``1.23e+05``. A
    non-finite number is ``nan``, ``inf`` or ``-inf`` (``missing`` when ``spec`` is given: a value that
    could not be measured); None is ``missing``; a boolean one of ``booleans``; an integer its digits; a
    dict ``k = v, ...`` and a sequence ``[v, ...]`` with each value formatted alike; anything else ``str``.

    Example:
        >>> from attnflow.runs import fmt
        >>> fmt(0.123456), fmt(123456.0), fmt(True), fmt([1, 2.5]), fmt({"beta": 4.0})
        ('0.123', '1.23e+05', 'True', '[1, 2.5]', 'beta = 4')
        >>> fmt(None, missing="-"), fmt(False, booleans=("yes", "no")), fmt(float("nan"), spec=".2g", missing="n/a")
        ('-', 'no', 'n/a')
    """
    if x is None:
        return missing
    if isinstance(x, (bool, np.bool_)):
        return booleans[0] if x else booleans[1]
    if spec is not None:
        if isinstance(x, (float, np.floating)) and not math.isfinite(x):
            return missing
        return format(x, spec)
    if isinstance(x, (int, np.integer)):
        return str(int(x))
    if isinstance(x, (float, np.floating)):
        x = float(x)
        if not math.isfinite(x):
            return str(x)
        if not scientific or x == 0 or 1e-3 <= abs(x) < 1e4:
            return f"{x:.{digits}g}"
        return f"{x:.{max(1, digits - 1)}e}"
    options = {"missing": missing, "booleans": booleans, "scientific": scientific}
    if isinstance(x, dict):
        return ", ".join(f"{k} = {fmt(v, digits, **options)}" for k, v in x.items())
    if isinstance(x, (list, tuple, np.ndarray)):
        return "[" + ", ".join(fmt(v, digits, **options) for v in list(x)) + "]"
    return str(x)
