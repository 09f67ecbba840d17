"""What the circle's and the sphere's units of the mean-field study share: the units' names, the time unit, and
the reading of a cluster count over time."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["time_scale"]


def time_scale(beta: float, normalisation: str, d: int = 2) -> float:
    r"""The unit of time of the convergence study: 1 for softmax, :math:`1/I_0(\beta)` for the mean
    normalisation, whose velocity :math:`\frac1\beta\partial_\theta(K*\rho)` is :math:`K*\rho \approx I_0(\beta)`
    times the softmax one :math:`\frac1\beta\partial_\theta\log(K*\rho)` near the uniform measure (so both
    normalisations are compared at the same stage of their evolution); on :math:`S^2` (``d = 3``) the mean
    of the kernel over the uniform measure is :math:`\sinh(\beta)/\beta` instead of :math:`I_0(\beta)`.

    Example:
        >>> from attnflow.meanfield import time_scale
        >>> time_scale(3.0, "softmax"), round(time_scale(3.0, "mean"), 4), round(time_scale(3.0, "mean", 3), 4)
        (1.0, 0.2049, 0.2995)
    """
    if normalisation == "softmax":
        return 1.0
    if d == 3:
        return float(beta / math.sinh(beta))
    from scipy.special import i0

    return float(1.0 / i0(beta))



def _conv_name(norm: str, n: int | None = None, s: int | None = None) -> str:
    return f"{norm}-convergence-pde" if n is None else f"{norm}-convergence-n{n}-s{s}"


def _growth_name(norm: str, b: int, s: int, part: str) -> str:
    return f"{norm}-growth-b{b}-s{s}-{part}"


def _transition_name(norm: str, b: int) -> str:
    return f"{norm}-transition-b{b}"


def _first_merge(ts: np.ndarray, gaps: np.ndarray) -> tuple[int | None, float, float, bool]:
    """(clusters formed, their formation time, lifetime, censored) from the gap counts of a near-uniform
    start (:func:`~attnflow.meanfield.circle_gaps`; 0 while the cloud still covers the circle): the clusters
    have formed at the first save with at least one gap from which the count holds for a tenth of the
    remaining horizon; the lifetime runs from then to the first save with fewer clusters (censored at the
    horizon). None when no clusters form before the horizon."""
    for i in np.nonzero(gaps >= 1)[0]:
        hold = 0.1 * (ts[-1] - ts[i])
        later = np.nonzero(gaps[i:] != gaps[i])[0]
        if later.size and ts[i + later[0]] - ts[i] < hold:
            continue
        drop = np.nonzero(gaps[i:] < gaps[i])[0]
        if drop.size:
            return int(gaps[i]), float(ts[i]), float(ts[i + drop[0]] - ts[i]), False
        return int(gaps[i]), float(ts[i]), float(ts[-1] - ts[i]), True
    return None, math.nan, math.nan, True


def _num(x) -> float | None:
    x = float(x)
    return x if math.isfinite(x) else None
