r"""Interval estimates: the Student-t interval of a mean, of a difference of two means, and Wilson's interval of
a proportion.

Every level ``confidence`` c is two-sided: the quantiles are those of probability :math:`(1 + c)/2`.
"""

from __future__ import annotations

import math

import numpy as np

from .. import _validate as v


def t_quantile(dof, confidence: float):
    r"""The two-sided Student-t quantile :math:`t_{(1+c)/2,\,\nu}` on ``dof`` :math:`\nu` degrees of freedom
    (an array of them gives an array), the factor of a standard error in every interval of this module.

    Example:
        >>> from attnflow.stats import t_quantile
        >>> round(float(t_quantile(3, 0.95)), 6), round(float(t_quantile(1e9, 0.95)), 6)   # -> the normal 1.959964
        (3.182446, 1.959964)
    """
    from scipy.special import stdtrit  # imported where used: scipy.special takes 0.2 s to import

    return stdtrit(dof, 0.5 + confidence / 2)


def standard_error(values: np.ndarray) -> float:
    r"""The standard error of the mean of ``values`` (all entries): :math:`s/\sqrt m`, s the sample standard
    deviation (ddof 1) of the m values; NaN for fewer than two.

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import standard_error
        >>> standard_error(np.array([1.0, 2.0, 3.0, 4.0])), standard_error(np.array([5.0]))
        (0.6454972243679028, nan)
    """
    values = np.asarray(values)
    return float(values.std(ddof=1) / math.sqrt(values.size)) if values.size > 1 else float("nan")


def mean_interval(values: np.ndarray, confidence: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Mean over axis 0 and its Student-t interval :math:`\bar y \pm t_{(1+c)/2,\,m-1}\, s/\sqrt m` over the m
    rows (s: the sample standard deviation, ddof 1). No row: NaN; one row, or rows that all agree: a zero-width
    interval.

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import mean_interval
        >>> m, lo, hi = mean_interval(np.array([[0.0], [1.0], [2.0], [3.0]]), 0.95)
        >>> float(m[0]), round(float(hi[0] - m[0]), 4)   # t_{0.975, 3} * 1.291 / 2
        (1.5, 2.0543)
    """
    m = values.shape[0]
    if m == 0:
        nan = np.full(values.shape[1:], np.nan)
        return nan, nan, nan
    mean = values.mean(axis=0)
    if m == 1:
        return mean, mean, mean
    half = t_quantile(m - 1, confidence) * values.std(axis=0, ddof=1) / np.sqrt(m)
    return mean, mean - half, mean + half


def difference_interval(ya: np.ndarray, yb: np.ndarray, confidence: float, *, paired: bool = True
                        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    r"""Mean difference of ``ya`` and ``yb`` (m, ...) over axis 0 and its Student-t interval.

    ``paired`` (row s of both measures the same unit): :func:`mean_interval` of the differences
    :math:`y_{a,s} - y_{b,s}`. Unpaired (independent samples of the same size m >= 2): Welch's
    :math:`\bar y_a - \bar y_b \pm t_{(1+c)/2,\,\nu}\sqrt{s_a^2/m + s_b^2/m}` with the Welch-Satterthwaite
    :math:`\nu = (s_a^2/m + s_b^2/m)^2 / \big(((s_a^2/m)^2 + (s_b^2/m)^2)/(m-1)\big)` (at least 1; m - 1 and a
    zero-width interval where both spreads are 0). Fewer than two rows: the paired interval.

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import difference_interval
        >>> a, b = np.array([[1.0], [2.0], [4.0]]), np.array([[0.0], [1.5], [2.0]])
        >>> [round(float(x[0]), 4) for x in difference_interval(a, b, 0.95)]                 # t_{0.975, 2}
        [1.1667, -0.7306, 3.064]
        >>> [round(float(x[0]), 4) for x in difference_interval(a, b, 0.95, paired=False)]   # nu = 3.53
        [1.1667, -1.9595, 4.2928]
    """
    if paired or ya.shape[0] < 2:
        return mean_interval(ya - yb, confidence)
    m = ya.shape[0]
    va, vb = ya.var(axis=0, ddof=1) / m, yb.var(axis=0, ddof=1) / m
    se2 = va + vb
    with np.errstate(invalid="ignore", divide="ignore"):
        nu = np.where(se2 > 0, se2**2 / ((va**2 + vb**2) / (m - 1)), m - 1)
    half = t_quantile(np.maximum(nu, 1.0), confidence) * np.sqrt(se2)
    diff = ya.mean(axis=0) - yb.mean(axis=0)
    return diff, diff - half, diff + half


def wilson_interval(k: int, n: int, confidence: float = 0.95, *, z: float | None = None) -> tuple[float, float]:
    r"""Wilson score interval of a binomial proportion :math:`p = k/n`:

    .. math:: \frac{p + z^2/(2n) \pm z\sqrt{p(1-p)/n + z^2/(4n^2)}}{1 + z^2/n},

    z the normal quantile of :math:`(1 + c)/2` (``statistics.NormalDist``; ``z`` gives it instead, e.g. the
    rounding of another library: the quantile of 0.975 is 1.9599639845400536 here, 1.959963984540054 in
    ``scipy.special.ndtri``); clipped to [0, 1] and made to contain p (exact at k = 0 and k = n, where
    rounding could leave the formula a hair outside). ``n = 0``: (NaN, NaN).

    Example:
        >>> from attnflow.stats import wilson_interval
        >>> [round(v, 4) for v in wilson_interval(280, 2000)]
        [0.1255, 0.1559]
    """
    v.check_number("confidence", confidence, "the level of the interval", low=0, high=1)
    if n == 0:
        return (float("nan"), float("nan"))
    if z is None:
        from statistics import NormalDist

        z = NormalDist().inv_cdf(0.5 + confidence / 2)
    p = k / n
    den = 1 + z * z / n
    mid = (p + z * z / (2 * n)) / den
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / den
    return (max(0.0, min(p, mid - half)), min(1.0, max(p, mid + half)))  # exact at k = 0, n
