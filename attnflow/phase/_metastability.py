r"""Metastability in the phase job: the first metastable plateau's lifetime per cell, and its growth with beta.

The plateau rule (what a metastable state, a plateau, its lifetime and its left truncation are) is
:mod:`attnflow.observables`' (:func:`~attnflow.observables.metastable_states`,
:func:`~attnflow.observables.first_plateaus`). For a fixed configuration of well-separated
clusters the time they sit still grows exponentially in beta (Geshkovski, Koubbi, Polyanskiy, Rigollet,
arXiv 2410.06833; Bruno, Pasqualotto, Agazzi, arXiv 2410.23228). Across random clouds the configuration
itself changes with beta (more clusters, closer together, at larger beta), so a lifetime pooled over
configurations need not grow. Where the truncation bound L is comparable to the typical lifetime (small beta,
late gathering) the short-lived states are missing and the recorded lifetimes are too long.

**Summaries.** Per cell, :func:`lifetime_summary` gives the Kaplan-Meier quartiles of the recorded
lifetimes (censored ones enter as lower bounds; like the lifetimes, these describe the states that
qualified, :math:`T \ge L`) and the censored fraction. Across cells, :func:`lifetime_slope` fits the
log-normal accelerated-failure-time model :math:`\log T = a + b\beta + \sigma\varepsilon`,
:math:`\varepsilon \sim N(0, 1)`, by maximum likelihood, right-censored lifetimes entering through their
survival :math:`S(T)` and every term divided by :math:`S(L)` (the left truncation); :math:`e^{b}` is the
factor per unit of beta of the median lifetime. The slope's interval is cluster-robust: the phase job
reuses system s's cloud at every beta, so the lifetimes of one cloud are not independent, and the
interval comes from the sandwich :math:`H^{-1} (\sum_g s_g s_g^T) H^{-1}` with the score sums
:math:`s_g` of each cloud g. The statistics are :mod:`attnflow.stats`' (:func:`~attnflow.stats.kaplan_meier`,
:func:`~attnflow.stats.censored_lognormal_fit`). No fit is made on fewer than :data:`MIN_FIT_CELLS` betas or
:data:`MIN_FIT_CLUSTERS` clouds, nor reported when it says that fewer than :data:`MIN_RETAINED` of the states
reached pass their bounds (not identified).
"""

from __future__ import annotations

import numpy as np

from ..stats import kaplan_meier, survival_quantile
from ..stats._survival import _lognormal_data, _lognormal_intervals, _lognormal_theta, _retained

#: the fewest distinct betas a fit of log T against beta is made on: two give a line through two cell means with
#: nothing left to check it (the fit's three parameters are a, b and the spread); four leave two cells to test
#: the line against
MIN_FIT_CELLS = 4
#: the fewest clouds (clusters of the cluster-robust interval) a fit is made on: the sandwich's middle term is a
#: sum over clouds, and with fewer than ten its t_{G-1} interval is too wide and too unstable to read
MIN_FIT_CLUSTERS = 10
#: the least fraction of all the states reached that the fit may say were recorded (``retained``: the states
#: that lasted past their truncation bound, estimated as :math:`m / \sum_i 1/S(L_i)`): below it the fit explains
#: the recorded lifetimes by a distribution almost all of whose mass lies below the bounds, an extrapolation the
#: data cannot check, and it is reported as not identified (recorded log lifetimes that fall off from their
#: bounds like an exponential, as the first plateaus pooled over cluster counts do, are fitted by a truncated
#: log-normal only as sigma -> infinity)
MIN_RETAINED = 0.05


def lifetime_summary(first: dict) -> dict:
    """A cell's lifetimes (``first``: :func:`first_plateaus` of its systems): Kaplan-Meier quartiles
    (:func:`attnflow.stats.kaplan_meier`).

    Returns ``with_plateau`` (systems with a metastable plateau), ``events`` (of those, ended by a merge),
    ``censored_fraction``, ``pending`` (systems still waiting for one at the end), ``median``, ``q25``,
    ``q75`` (Kaplan-Meier; None when the curve does not come down that far) and ``median_censored``
    (the median is not reached: ``median`` is then the largest lifetime, a lower bound).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import lifetime_summary
        >>> s = lifetime_summary({"lifetime": np.array([1.0, 2.0, 3.0, 5.0, np.nan]),
        ...                       "censored": np.array([False, False, True, True, False]),
        ...                       "pending": np.array([False, False, False, False, True])})
        >>> s["median"], s["q25"], s["q75"], s["median_censored"], s["censored_fraction"], s["pending"]
        (2.0, 1.0, None, False, 0.5, 1)
    """
    life = np.asarray(first["lifetime"], float)
    has = np.isfinite(life)
    pending = int(np.asarray(first.get("pending", np.zeros(life.shape, bool)), bool).sum())
    if not has.any():
        return {"with_plateau": 0, "events": 0, "median": None, "q25": None, "q75": None,
                "censored_fraction": None, "median_censored": None, "pending": pending}
    cen = np.asarray(first["censored"], bool)[has]
    times, S = kaplan_meier(life[has], cen)
    q25, med, q75 = (survival_quantile(times, S, q) for q in (0.25, 0.5, 0.75))
    return {"with_plateau": int(has.sum()), "events": int((~cen).sum()),
            "median": float(life[has].max()) if med is None else med, "q25": q25, "q75": q75,
            "censored_fraction": float(cen.mean()), "median_censored": med is None, "pending": pending}


def lifetime_slope(beta: np.ndarray, lifetime: np.ndarray, censored: np.ndarray, confidence: float = 0.95, *,
                   truncation: np.ndarray | None = None, clusters: np.ndarray | None = None) -> dict:
    r"""Maximum-likelihood fit of :math:`\log T = a + b\beta + \sigma\varepsilon` (module's model), lifetimes
    right-censored and left-truncated (:func:`attnflow.stats.censored_lognormal_fit`, with the phase job's
    conditions for a fit).

    ``beta``, ``lifetime``, ``censored``: one entry per system (lifetimes of censored systems are lower
    bounds; NaN lifetimes are left out). ``truncation``: per system the least lifetime it could have been
    recorded with (:func:`first_plateaus`' ``truncation``; the likelihood of each system is then divided by
    :math:`S(L)`; NaN or <= 0: none). ``clusters``: per system a label of what it shares with others (the
    phase job's cloud index, the same at every beta): the slope's interval is then the cluster-robust
    sandwich :math:`H^{-1} \frac{G}{G-1}\sum_g s_g s_g^T H^{-1}` (H the observed information, :math:`s_g` the
    score summed over cluster g, G clusters) with Student-t quantiles on G - 1 degrees of freedom; without,
    every system is its own cluster. ``wald_lo``, ``wald_hi``: the model-based Wald interval (from H alone,
    right only for independent systems), for comparison.

    Returns the slope b with its interval at ``confidence`` (``slope_lo``, ``slope_hi``), the intercept a
    (:math:`e^{a+b\beta}` is the median lifetime), sigma, the systems, events, clouds (``clusters``),
    truncated systems and distinct betas used (``cells``, ``betas``), and ``retained``: with truncation, the
    fraction of all the states reached that the fit says lasted past their bounds, :math:`m / \sum_i 1/S(L_i)`
    over the m truncated systems. ``not_fitted`` says why there is no fit (``None`` values): fewer than
    :data:`MIN_FIT_CELLS` betas, fewer than :data:`MIN_FIT_CLUSTERS` clusters, fewer than three events or
    events at fewer than two betas, or a fit that is not identified (``retained`` below :data:`MIN_RETAINED`).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import lifetime_slope
        >>> rng = np.random.default_rng(0)
        >>> beta = np.repeat([1.0, 2.0, 3.0, 4.0], 200)
        >>> T = np.exp(0.5 + 0.8 * beta + 0.3 * rng.standard_normal(beta.size))
        >>> fit = lifetime_slope(beta, np.minimum(T, 40.0), T > 40.0)    # censored at 40
        >>> round(fit["slope"], 2), fit["slope_lo"] < 0.8 < fit["slope_hi"], fit["cells"], fit["events"] < 800
        (0.8, True, 4, True)
        >>> keep = T >= 3.0                  # only lifetimes of at least 3 are recorded: left-truncated at 3
        >>> kept = (beta[keep], np.minimum(T, 40.0)[keep], (T > 40.0)[keep])
        >>> fit = lifetime_slope(*kept, truncation=np.full(keep.sum(), 3.0))
        >>> round(fit["slope"], 2), round(lifetime_slope(*kept)["slope"], 2)   # the second ignores the truncation
        (0.8, 0.76)
        >>> lifetime_slope(beta[beta < 3], T[beta < 3], np.zeros(400, bool))["not_fitted"]
        '2 cells < MIN_FIT_CELLS = 4'
    """
    data = _lognormal_data(beta, lifetime, censored, truncation, clusters, who="lifetime_slope")
    x, obs, G, used = data["x"], data["observed"], data["G"], data["x_values"]
    base = {"systems": data["systems"], "events": data["events"], "cells": len(used), "betas": used,
            "clusters": G, "truncated": data["truncated"], "interval": data["interval"]}
    none = {"slope": None, "slope_lo": None, "slope_hi": None, "wald_lo": None, "wald_hi": None,
            "intercept": None, "sigma": None}
    if len(used) < MIN_FIT_CELLS:
        return {**none, **base, "retained": None, "not_fitted": f"{len(used)} cells < MIN_FIT_CELLS = {MIN_FIT_CELLS}"}
    if obs.sum() < 3 or len(np.unique(x[obs])) < 2:
        return {**none, **base, "retained": None,
                "not_fitted": f"{int(obs.sum())} merges at {len(np.unique(x[obs]))} betas (at least 3 merges at 2 "
                              "betas are needed)"}
    if clusters is not None and G < MIN_FIT_CLUSTERS:
        return {**none, **base, "retained": None, "not_fitted": f"{G} clouds < MIN_FIT_CLUSTERS = {MIN_FIT_CLUSTERS}"}
    theta = _lognormal_theta(data)
    retained = _retained(data, theta)
    if retained is not None and retained < MIN_RETAINED:
        return {**none, **base, "retained": retained,
                "not_fitted": f"not identified: the fit would say {retained:.2g} of the states reached last past "
                              f"their truncation (< MIN_RETAINED = {MIN_RETAINED:g}), sigma = "
                              f"{np.exp(theta[2]):.3g}: it extrapolates far below the recorded lifetimes"}
    return {**_lognormal_intervals(data, theta, confidence), **base, "retained": retained, "not_fitted": None}
