r"""The least-squares slope of a line with its Student-t interval (one intercept, or one per group).

For points :math:`(x_i, y_i)` the slope is

.. math:: \hat b = \frac{\sum_i \tilde x_i \tilde y_i}{\sum_i \tilde x_i^2}, \qquad
          \tilde x_i = x_i - \bar x_{g(i)},\ \tilde y_i = y_i - \bar y_{g(i)},

with the means :math:`\bar x_g, \bar y_g` over the points of i's group g (one group without ``groups``: the
ordinary fit :math:`y = a + bx`; with groups, the fixed-effects fit :math:`y = a_g + bx`, a common slope and
an intercept per group). Its standard error is
:math:`\mathrm{se} = \sqrt{\sum_i r_i^2 / (\nu\, \sum_i \tilde x_i^2)}`, :math:`r_i = \tilde y_i - \hat b\tilde x_i`,
on :math:`\nu = N - G - 1` degrees of freedom (N points, G groups), and the interval is
:math:`\hat b \pm t_{(1+c)/2,\,\nu}\,\mathrm{se}`.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._intervals import t_quantile


def fit_slope(x, y, confidence: float = 0.95, *, groups=None) -> dict:
    r"""Least-squares slope of y against x with its Student-t interval (module docstring: the formulas).

    ``x``, ``y``: one value each per point (finite; select the points before). ``groups``: per point a label;
    the fit then has one intercept per group and a common slope, and a group with a single point, which says
    nothing about the slope, is left out. Returns ``slope``, ``lo``, ``hi``, ``stderr`` (NaN for the last three
    with :math:`\nu \le 0`, for all four when x does not vary), ``intercept`` (:math:`\bar y - \hat b\bar x`;
    None with groups), ``points`` (N, those used), ``groups`` (G) and ``dof`` (:math:`\nu`).

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import fit_slope
        >>> x = np.array([0.0, 1.0, 2.0, 3.0])
        >>> fit = fit_slope(x, 1.0 + 2.0 * x + np.array([0.1, -0.1, -0.1, 0.1]))
        >>> round(fit["slope"], 6), round(fit["intercept"], 6), round(fit["hi"] - fit["slope"], 4), fit["dof"]
        (2.0, 1.0, 0.2721, 2)
        >>> both = fit_slope(np.r_[x, x], np.r_[2.0 * x, 5.0 + 2.0 * x], groups=np.repeat([0, 1], 4))
        >>> round(both["slope"], 6), both["hi"] - both["lo"], both["points"], both["dof"]   # two intercepts: exact
        (2.0, 0.0, 8, 5)
    """
    x = np.asarray(x, float).reshape(-1)
    y = np.asarray(y, float).reshape(-1)
    if x.shape != y.shape:
        raise InputError(f"x and y must have one value per point, got {x.size} and {y.size} values.")
    if groups is None:
        xc, yc, G = x - x.mean(), y - y.mean(), 1
    else:
        codes = np.asarray(groups).reshape(-1)
        if codes.shape != x.shape:
            raise InputError(f"groups must have one label per point ({x.size}), got {codes.size}.")
        xc, yc, keep = np.empty(x.shape), np.empty(y.shape), np.zeros(x.shape, bool)
        G = 0
        for g in np.unique(codes):
            sel = codes == g
            if sel.sum() < 2:
                continue
            xc[sel], yc[sel], keep[sel] = x[sel] - x[sel].mean(), y[sel] - y[sel].mean(), True
            G += 1
        xc, yc = xc[keep], yc[keep]
    sxx = xc @ xc
    dof = xc.size - G - 1
    out = {"slope": float("nan"), "lo": float("nan"), "hi": float("nan"), "stderr": float("nan"),
           "intercept": None, "points": int(xc.size), "groups": G, "dof": int(dof)}
    if not sxx > 0:
        return out
    slope = float(xc @ yc / sxx)
    out["slope"] = slope
    if groups is None:
        out["intercept"] = float(y.mean() - slope * x.mean())
    if dof > 0:
        residual = yc - slope * xc
        stderr = float(np.sqrt(residual @ residual / dof / sxx))
        half = float(t_quantile(dof, confidence)) * stderr
        out.update(lo=slope - half, hi=slope + half, stderr=stderr)
    return out
