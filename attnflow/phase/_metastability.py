r"""Metastability: plateaus of the cluster count in time, their lifetimes, and how they grow with beta.

Tokens on the sphere first gather into a few clusters, which then sit still for a time that grows
exponentially in beta before two of them merge (the interaction energy climbs a staircase).

**Detection rule.** On a system's series of cluster counts :math:`c(t_k)` at the checkpoints, the
cloud has *gathered* from the first checkpoint at which :math:`c \le c(0)/2` (before that, a cloud of
n random tokens still counts almost n "clusters" only because its tokens have not moved yet: no
metastable state). After that, a *plateau* is a maximal run of consecutive checkpoints with the
same count :math:`c \ge 2` that lasts at least ``min_duration`` (in units of t: from its first
checkpoint to the first checkpoint with another count, or to the last checkpoint). A *merge* is a
decrease of the count between consecutive checkpoints after the cloud has gathered. The *first
plateau* is the earliest plateau; its *lifetime* is its duration, and it is *censored* when it
lasts to the end of the run (the lifetime is then a lower bound). The counts are exact integers,
so the rule has no tolerance on the count itself; its one tolerance is ``min_duration``, which
separates plateaus from the counts a cloud passes through while its clusters form (default:
1 / 20 of the run).

**Growth with beta.** Per cell the median first-plateau lifetime over the systems that have one;
:func:`lifetime_slope` fits :math:`\log T = a + b\,\beta` by least squares over the cells whose
median is not censored, with the Student-t interval of the slope b.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import stats as _stats


@dataclass(frozen=True)
class Plateau:
    """A run of constant cluster count: ``count`` clusters from ``start`` to ``end`` (times)."""

    count: int
    start: float
    end: float
    censored: bool

    @property
    def duration(self) -> float:
        """``end - start``."""
        return self.end - self.start


def plateaus(t: np.ndarray, counts: np.ndarray, min_duration: float) -> list[Plateau]:
    """The plateaus of one series of cluster counts (see the module's detection rule).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import plateaus
        >>> t = np.arange(10.0)
        >>> counts = np.array([9, 9, 2, 2, 2, 2, 1, 1, 1, 1])   # gathered at t = 2
        >>> [(p.count, p.start, p.end, p.censored) for p in plateaus(t, counts, 2.0)]
        [(2, 2.0, 6.0, False)]
    """
    t = np.asarray(t, float)
    counts = np.asarray(counts)
    out = []
    i, K = gathered(counts), len(counts)
    while i < K:
        j = i
        while j + 1 < K and counts[j + 1] == counts[i]:
            j += 1
        censored = j == K - 1
        end = t[j] if censored else t[j + 1]
        if counts[i] >= 2 and end - t[i] >= min_duration:
            out.append(Plateau(int(counts[i]), float(t[i]), float(end), bool(censored)))
        i = j + 1
    return out


def gathered(counts: np.ndarray) -> int:
    """The first checkpoint at which the count is at most half the initial one (``len(counts)`` if never).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import gathered
        >>> gathered(np.array([20, 19, 12, 10, 4, 4]))
        3
    """
    c = np.asarray(counts)
    hits = np.flatnonzero(c <= c[0] / 2)
    return int(hits[0]) if hits.size else len(c)


def merges(counts: np.ndarray) -> int:
    """Decreases of the cluster count between consecutive checkpoints after the cloud has gathered.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import merges
        >>> merges(np.array([8, 4, 3, 3, 2, 2, 1]))
        3
    """
    c = np.asarray(counts)[gathered(counts):]
    return int(np.sum(c[1:] < c[:-1]))


def default_min_duration(t1: float) -> float:
    """The default ``min_duration`` of a run up to ``t1``: ``t1 / 20``."""
    return t1 / 20.0


def first_plateaus(t: np.ndarray, counts: np.ndarray, min_duration: float) -> dict:
    """Per system (rows of ``counts``, (S, K)): the first plateau's count, start, lifetime, whether it is
    censored, and the number of plateaus and merges (NaN / -1 where a system has no plateau).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import first_plateaus
        >>> t = np.arange(6.0)
        >>> r = first_plateaus(t, np.array([[6, 3, 3, 3, 1, 1], [8, 8, 4, 4, 4, 4]]), 2.0)
        >>> r["lifetime"].tolist(), r["censored"].tolist(), r["merges"].tolist()
        ([3.0, 3.0], [False, True], [1, 0])
    """
    counts = np.asarray(counts)
    S = counts.shape[0]
    out = {"count": np.full(S, -1), "start": np.full(S, np.nan), "lifetime": np.full(S, np.nan),
           "censored": np.zeros(S, bool), "plateaus": np.zeros(S, int), "merges": np.zeros(S, int)}
    for s in range(S):
        ps = plateaus(t, counts[s], min_duration)
        out["plateaus"][s] = len(ps)
        out["merges"][s] = merges(counts[s])
        if ps:
            p = ps[0]
            out["count"][s], out["start"][s], out["lifetime"][s], out["censored"][s] = (
                p.count, p.start, p.duration, p.censored)
    return out


def lifetime_summary(first: dict) -> dict:
    """Distribution of the first plateau's lifetime over a cell's systems (quartiles over those with a
    plateau; ``censored_fraction``: of those, the fraction still on it at the end).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import lifetime_summary
        >>> s = lifetime_summary({"lifetime": np.array([1.0, 2.0, 3.0, np.nan]),
        ...                       "censored": np.array([False, False, True, False])})
        >>> s["median"], s["with_plateau"], round(s["censored_fraction"], 3)
        (2.0, 3, 0.333)
    """
    life = np.asarray(first["lifetime"], float)
    has = np.isfinite(life)
    if not has.any():
        return {"with_plateau": 0, "median": None, "q25": None, "q75": None, "censored_fraction": None,
                "median_censored": None}
    q25, med, q75 = np.quantile(life[has], [0.25, 0.5, 0.75])
    censored = np.asarray(first["censored"])[has]
    # the median is a lower bound when at least half of the lifetimes are
    return {"with_plateau": int(has.sum()), "median": float(med), "q25": float(q25), "q75": float(q75),
            "censored_fraction": float(censored.mean()), "median_censored": bool(censored.mean() >= 0.5)}


def lifetime_slope(beta: np.ndarray, median: np.ndarray, censored: np.ndarray, confidence: float = 0.95) -> dict:
    r"""Least-squares fit of :math:`\log T = a + b\beta` over the cells with an uncensored median lifetime.

    Returns the slope b with its Student-t interval, the intercept a, and the cells used; ``None``
    values when fewer than three cells qualify.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import lifetime_slope
        >>> beta = np.array([1.0, 2.0, 3.0, 4.0])
        >>> fit = lifetime_slope(beta, np.exp(0.5 + 0.8 * beta), np.zeros(4, bool))
        >>> round(fit["slope"], 6), round(fit["intercept"], 6), fit["cells"]
        (0.8, 0.5, 4)
    """
    beta, median = np.asarray(beta, float), np.asarray(median, float)
    ok = np.isfinite(median) & (median > 0) & ~np.asarray(censored, bool)
    if ok.sum() < 3:
        return {"slope": None, "slope_lo": None, "slope_hi": None, "intercept": None, "cells": int(ok.sum())}
    fit = _stats.linregress(beta[ok], np.log(median[ok]))
    half = _stats.t.ppf(0.5 + confidence / 2, ok.sum() - 2) * fit.stderr
    return {"slope": float(fit.slope), "slope_lo": float(fit.slope - half), "slope_hi": float(fit.slope + half),
            "intercept": float(fit.intercept), "cells": int(ok.sum())}
