"""Interval estimates shared by the jobs and the figures (a leaf module: it imports no other part of attnflow
but the argument checks)."""

from __future__ import annotations

import math

from . import _validate as v


def wilson_interval(k: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion k / n.

    Example:
        >>> from attnflow.sweep import wilson_interval
        >>> [round(v, 4) for v in wilson_interval(280, 2000)]
        [0.1255, 0.1559]
    """
    v.check_number("confidence", confidence, "the level of the interval", low=0, high=1)
    if n == 0:
        return (float("nan"), float("nan"))
    from statistics import NormalDist

    z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, min(p, mid - half)), min(1.0, max(p, mid + half)))  # exact at k = 0, n
