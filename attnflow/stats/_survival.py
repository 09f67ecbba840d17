r"""Lifetimes: the Kaplan-Meier curve of right-censored lifetimes, the maximum-likelihood log-normal
regression of lifetimes that are right-censored, left-truncated and clustered, and the centre of one group of
right-censored log-normal lifetimes (:func:`censored_lognormal_mean`, its interval from the profile likelihood).

**Kaplan-Meier.** With :math:`d_i` events at the distinct event times :math:`t_i` and :math:`n_i` lifetimes
still at risk there (:math:`T \ge t_i`, censored ones included),
:math:`\hat S(t) = \prod_{t_i \le t} (1 - d_i/n_i)`; its q-quantile is the first event time with
:math:`\hat S \le 1 - q`.

**Censored log-normal regression.** :math:`\log T = a + b x + \sigma\varepsilon`,
:math:`\varepsilon \sim N(0, 1)`. With :math:`y = \log T`, :math:`\mu = a + bx`, :math:`z = (y - \mu)/\sigma`,
an observed lifetime contributes :math:`\log\varphi(z) - \log\sigma`, a right-censored one (a lower bound)
its log-survival :math:`\log\Phi(-z)`, and where a lifetime was recorded only because it lasted at least
:math:`L` (left truncation) the term has :math:`\log\Phi(-z_L)`, :math:`z_L = (\log L - \mu)/\sigma`,
subtracted (the likelihood is divided by :math:`S(L)`). The parameters :math:`(a, b, \log\sigma)` maximise
the sum (Newton's method on the exact Hessian). ``retained`` is the fitted fraction of the states that lasted
past their bounds, :math:`m / \sum_i 1/S(L_i)` over the m truncated lifetimes. The slope's interval is
cluster-robust: with H the observed information and :math:`s_g` the score summed over the lifetimes of
cluster g (G clusters), the sandwich :math:`V = H^{-1}\,\frac{G}{G-1}\sum_g s_g s_g^T\,H^{-1}` gives
:math:`\hat b \pm t_{(1+c)/2,\,G-1}\sqrt{V_{bb}}`; without clusters every lifetime is its own. The
model-based Wald interval :math:`\hat b \pm z_{(1+c)/2}\sqrt{(H^{-1})_{bb}}` is returned for comparison.
"""

from __future__ import annotations

import numpy as np

from ..errors import InputError
from ._intervals import t_quantile


def kaplan_meier(lifetime: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""The Kaplan-Meier survival curve of right-censored lifetimes: the event times :math:`t_i` and
    :math:`S(t_i) = \prod_{t_j \le t_i} (1 - d_j / n_j)` just after each (d: events at :math:`t_j`, n: still at
    risk, :math:`T \ge t_j`).

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import kaplan_meier
        >>> times, S = kaplan_meier(np.array([1.0, 2.0, 2.0, 3.0, 4.0]), np.array([False, False, True, False, True]))
        >>> times.tolist(), [round(float(s), 4) for s in S]        # 4/5, * 3/4, * 1/2
        ([1.0, 2.0, 3.0], [0.8, 0.6, 0.3])
    """
    life = np.asarray(lifetime, float)
    cen = np.asarray(censored, bool)
    times = np.unique(life[~cen])
    at_risk = np.array([(life >= x).sum() for x in times])
    events = np.array([((life == x) & ~cen).sum() for x in times])
    return times, np.cumprod(1.0 - events / np.maximum(at_risk, 1))


def survival_quantile(times: np.ndarray, survival: np.ndarray, q: float) -> float | None:
    r"""The q-quantile of a survival curve (:func:`kaplan_meier`): the first time with :math:`S \le 1 - q`
    (to 1e-12); None when S stays above (the quantile is censored).

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import kaplan_meier, survival_quantile
        >>> times, S = kaplan_meier(np.array([1.0, 2.0, 2.0, 3.0, 4.0]), np.array([False, False, True, False, True]))
        >>> survival_quantile(times, S, 0.25), survival_quantile(times, S, 0.5), survival_quantile(times, S, 0.75)
        (2.0, 3.0, None)
    """
    hit = np.flatnonzero(survival <= 1.0 - q + 1e-12)
    return float(times[hit[0]]) if hit.size else None


def _log_tail_terms(z, s, hessian: bool = True):
    r"""Per entry: :math:`\log\Phi(-z)` (the log-survival of :math:`y` at :math:`z = (y - \mu)/\sigma`) and its
    derivatives in :math:`\mu` and :math:`\tau = \log\sigma`, with the inverse Mills ratio
    :math:`\lambda = \varphi(z)/\Phi(-z)`, :math:`\lambda' = \lambda(\lambda - z)`: :math:`\ell_\mu = \lambda/\sigma`,
    :math:`\ell_\tau = \lambda z`, :math:`\ell_{\mu\mu} = -\lambda'/\sigma^2`,
    :math:`\ell_{\mu\tau} = -(\lambda' z + \lambda)/\sigma`, :math:`\ell_{\tau\tau} = -z(\lambda' z + \lambda)`
    (the second derivatives with ``hessian`` only)."""
    from scipy.special import log_ndtr  # imported where used: scipy.special takes 0.2 s to import

    log_tail = log_ndtr(-z)
    mills = np.exp(-0.5 * z**2 - 0.5 * np.log(2 * np.pi) - log_tail)  # phi(z) / Phi(-z)
    if not hessian:
        return log_tail, mills / s, mills * z
    slope = mills * (mills - z)  # lambda'(z)
    return (log_tail, mills / s, mills * z, -slope / s**2, -(slope * z + mills) / s, -z * (slope * z + mills))


def _likelihood_terms(theta, x, y, observed, lower=None, *, hessian: bool = True):
    r"""Per lifetime: the log-likelihood of :math:`y = a + bx + \sigma\varepsilon` and its derivatives in
    :math:`\mu = a + bx` and :math:`\tau = \log\sigma`: ``(ell, ell_mu, ell_tau, ell_mumu, ell_mutau, ell_tautau)``
    (the last three with ``hessian`` only).

    Observed y: :math:`\log\varphi(z) - \tau` (:math:`\ell_\mu = z/\sigma`, :math:`\ell_\tau = z^2 - 1`,
    :math:`\ell_{\mu\mu} = -1/\sigma^2`, :math:`\ell_{\mu\tau} = -2z/\sigma`, :math:`\ell_{\tau\tau} = -2z^2`);
    right-censored y (a lower bound): :math:`\log\Phi(-z)` (:func:`_log_tail_terms`). With a finite ``lower``
    bound l (left truncation: y is seen only when it is at least l) the term has :math:`\log\Phi(-z_l)`,
    :math:`z_l = (l - \mu)/\sigma`, subtracted, derivatives and all; ``-inf`` or NaN: no truncation.
    """
    a, b, log_s = theta
    s = np.exp(log_s)
    z = (y - a - b * x) / s
    obs = np.asarray(observed, bool)
    cen = ~obs
    zo = z[obs]
    terms = [np.empty(z.shape) for _ in range(6 if hessian else 3)]
    parts = [-log_s - 0.5 * zo**2 - 0.5 * np.log(2 * np.pi), zo / s, zo**2 - 1.0]
    if hessian:
        parts += [np.full(zo.shape, -1.0 / s**2), -2.0 * zo / s, -2.0 * zo**2]
    for term, o, c in zip(terms, parts, _log_tail_terms(z[cen], s, hessian)):
        term[obs], term[cen] = o, c
    if lower is not None:
        cut = np.flatnonzero(np.isfinite(np.asarray(lower, float)))
        if cut.size:
            z_l = (np.asarray(lower, float)[cut] - a - b * np.asarray(x)[cut]) / s
            for term, t_l in zip(terms, _log_tail_terms(z_l, s, hessian)):
                term[cut] -= t_l
    return terms


def _censored_normal_nll(theta, x, y, observed, lower=None, *, hessian: bool = False):
    r"""Negative log-likelihood and gradient (and, with ``hessian``, Hessian) of
    :math:`y = a + b x + \sigma\varepsilon` (:math:`\varepsilon \sim N(0, 1)`), y right-censored where not
    ``observed`` and, where ``lower`` is finite, left-truncated at it (:func:`_likelihood_terms`); theta =
    (a, b, log sigma). a and b enter through :math:`\mu = a + bx` (weights 1 and x).
    """
    terms = _likelihood_terms(theta, x, y, observed, lower, hessian=hessian)
    ell, d_mu, d_tau = terms[:3]
    nll = -np.sum(ell)
    gradient = -np.array([d_mu.sum(), (d_mu * x).sum(), d_tau.sum()])
    if not hessian:
        return nll, gradient
    mu_mu, mu_tau, tau_tau = terms[3:]
    H = -np.array([[mu_mu.sum(), (mu_mu * x).sum(), mu_tau.sum()],
                   [(mu_mu * x).sum(), (mu_mu * x * x).sum(), (mu_tau * x).sum()],
                   [mu_tau.sum(), (mu_tau * x).sum(), tau_tau.sum()]])
    return nll, gradient, H


def _newton_minimum(f, theta: np.ndarray, max_iter: int = 100) -> np.ndarray:
    """The minimum of a smooth function of a few parameters, ``f(theta, hessian=...) -> (value, gradient[,
    Hessian])``: Newton steps on the Hessian with its eigenvalues taken in absolute value (a descent direction
    also where it is not positive definite, as far from the optimum), halved until the value decreases; stops
    when the Newton decrement :math:`g^T H^{-1} g`, twice the predicted decrease, falls to 1e-14 of the value
    (a likelihood's rounding) or no halved step decreases the value. The censored log-normal likelihood
    (three parameters) converges in 5-10 steps."""
    value, grad, H = f(theta, hessian=True)
    for _ in range(max_iter):
        w, U = np.linalg.eigh(H)
        w = np.maximum(np.abs(w), 1e-12 * max(np.abs(w).max(), 1e-300))
        step = -U @ ((U.T @ grad) / w)
        if not -(grad @ step) > 1e-14 * max(1.0, abs(value)):
            break
        for _ in range(60):
            candidate = theta + step
            # a step too far overflows or underflows sigma: rejected below
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                new_value, new_grad = f(candidate)
            if np.isfinite(new_value) and np.all(np.isfinite(new_grad)) and new_value <= value:
                break
            step = step / 2
        else:
            break
        theta, value = candidate, new_value
        _, grad, H = f(theta, hessian=True)
    return theta


def _lognormal_data(x, lifetime, censored, truncation=None, clusters=None, *, who: str = "censored_lognormal_fit"
                    ) -> dict:
    """The lifetimes a fit uses, checked: ``x``, ``y`` (log lifetimes), ``observed``, ``lower`` (log truncation,
    -inf for none), ``codes`` (cluster per lifetime, 0..G-1), ``G`` and the counts of the result (``systems``,
    ``events``, ``x_values``: the distinct x, ``truncated``, ``interval``)."""
    x = np.asarray(x, float)
    life = np.asarray(lifetime, float)
    cen = np.asarray(censored, bool)
    size = x.shape
    for name, value in (("lifetime", life), ("censored", cen), ("truncation", truncation), ("clusters", clusters)):
        if value is not None and np.shape(value) != size:
            raise InputError(f"{who}: {name} has shape {np.shape(value)}, one entry per system is expected "
                             f"(the shape {size} of the covariate).")
    ok = np.isfinite(life) & (life > 0) & np.isfinite(x)
    bound = np.full(size, -np.inf) if truncation is None else np.asarray(truncation, float)
    cut = ok & np.isfinite(bound) & (bound > 0)
    if np.any(life[cut] < bound[cut] * (1 - 1e-9)):
        k = int(np.flatnonzero(cut & (life < bound * (1 - 1e-9)))[0])
        raise InputError(f"{who}: system {k} has lifetime {life[k]!r} below its truncation {bound[k]!r}; a "
                         "left-truncated lifetime is at least its bound (pass first_plateaus' own truncation).")
    xs, y, obs = x[ok], np.log(np.where(ok, life, 1.0)[ok]), ~cen[ok]
    lower = np.where(cut, np.log(np.where(cut, bound, 1.0)), -np.inf)[ok]
    codes = (np.arange(xs.size) if clusters is None else
             np.unique(np.asarray(clusters)[ok], return_inverse=True)[1].reshape(-1))
    G = int(codes.max()) + 1 if codes.size else 0
    return {"x": xs, "y": y, "observed": obs, "lower": lower, "codes": codes, "G": G,
            "systems": int(ok.sum()), "events": int(obs.sum()), "x_values": sorted({float(b) for b in xs}),
            "truncated": int(cut.sum()), "interval": "model" if clusters is None else "cluster-robust"}


def _lognormal_theta(data: dict) -> np.ndarray:
    """The maximum-likelihood (a, b, log sigma), started from the least-squares line through the observed
    lifetimes (at least two events at two x)."""
    x, y, obs, lower = data["x"], data["y"], data["observed"], data["lower"]
    start = np.polyfit(x[obs], y[obs], 1)
    spread = np.std(y[obs] - np.polyval(start, x[obs])) + 1e-3

    def nll(th, hessian=False):
        return _censored_normal_nll(th, x, y, obs, lower, hessian=hessian)

    return _newton_minimum(nll, np.array([start[1], start[0], np.log(spread)]))


def _retained(data: dict, theta: np.ndarray) -> float | None:
    """The fitted fraction of the states that last past their bounds, :math:`m / \\sum_i 1/S(L_i)` (None
    without truncation)."""
    from scipy.special import log_ndtr

    lower, x = data["lower"], data["x"]
    if not np.isfinite(lower).any():
        return None
    bounded = np.isfinite(lower)
    z_l = (lower[bounded] - theta[0] - theta[1] * x[bounded]) / np.exp(theta[2])
    with np.errstate(over="ignore"):
        return float(bounded.sum() / np.sum(np.exp(-log_ndtr(-z_l))))


def _lognormal_intervals(data: dict, theta: np.ndarray, confidence: float) -> dict:
    """The fit's result: the slope with its cluster-robust and Wald intervals, intercept, sigma."""
    from scipy.special import ndtri

    x, y, obs, lower, codes, G = (data[k] for k in ("x", "y", "observed", "lower", "codes", "G"))
    H = _censored_normal_nll(theta, x, y, obs, lower, hessian=True)[2]  # the observed information
    H_inv = np.linalg.pinv(H)
    _, d_mu, d_tau = _likelihood_terms(theta, x, y, obs, lower, hessian=False)
    scores = np.stack([np.bincount(codes, weights=w, minlength=G) for w in (d_mu, d_mu * x, d_tau)], axis=1)
    robust = H_inv @ (scores.T @ scores) @ H_inv * (G / max(G - 1, 1))
    wald = ndtri(0.5 + confidence / 2) * np.sqrt(max(H_inv[1, 1], 0.0))
    half = t_quantile(max(G - 1, 1), confidence) * np.sqrt(max(robust[1, 1], 0.0))
    b = float(theta[1])
    return {"slope": b, "slope_lo": b - float(half), "slope_hi": b + float(half), "wald_lo": b - float(wald),
            "wald_hi": b + float(wald), "intercept": float(theta[0]), "sigma": float(np.exp(theta[2]))}


def censored_lognormal_fit(x, lifetime, censored, confidence: float = 0.95, *, truncation=None,
                           clusters=None) -> dict:
    r"""Maximum-likelihood fit of :math:`\log T = a + bx + \sigma\varepsilon` to lifetimes that are
    right-censored, left-truncated and clustered (module docstring: the likelihood and the sandwich interval).

    ``x``, ``lifetime``, ``censored``: one entry per lifetime (censored ones are lower bounds; non-finite or
    non-positive lifetimes and non-finite x are left out). ``truncation``: per lifetime the least value it
    could have been recorded with (NaN or <= 0: none; a lifetime below its bound is refused). ``clusters``: per
    lifetime a label of what it shares with others (the interval is then cluster-robust on G - 1 degrees of
    freedom); without, each lifetime is its own cluster.

    Returns ``slope`` b, ``slope_lo``, ``slope_hi`` (the interval at ``confidence``), ``wald_lo``, ``wald_hi``,
    ``intercept`` a, ``sigma``, ``retained`` (None without truncation) and the counts ``systems``, ``events``,
    ``x_values`` (the distinct x used), ``clusters`` (G), ``truncated``, ``interval`` (``"model"`` or
    ``"cluster-robust"``). The estimates are None with fewer than three events or events at fewer than two x.

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import censored_lognormal_fit
        >>> rng = np.random.default_rng(0)
        >>> x = np.repeat([1.0, 2.0, 3.0, 4.0], 200)
        >>> T = np.exp(0.5 + 0.8 * x + 0.3 * rng.standard_normal(x.size))
        >>> fit = censored_lognormal_fit(x, np.minimum(T, 40.0), T > 40.0)        # censored at 40
        >>> round(fit["slope"], 2), round(fit["sigma"], 2), fit["slope_lo"] < 0.8 < fit["slope_hi"], fit["events"] < 800
        (0.8, 0.3, True, True)
    """
    data = _lognormal_data(x, lifetime, censored, truncation, clusters)
    counts = {k: data[k] for k in ("systems", "events", "x_values", "truncated", "interval")}
    counts["clusters"] = data["G"]
    obs = data["observed"]
    if obs.sum() < 3 or len(np.unique(data["x"][obs])) < 2:
        return {"slope": None, "slope_lo": None, "slope_hi": None, "wald_lo": None, "wald_hi": None,
                "intercept": None, "sigma": None, "retained": None, **counts}
    theta = _lognormal_theta(data)
    return {**_lognormal_intervals(data, theta, confidence), "retained": _retained(data, theta), **counts}


def censored_exponential_fit(x, events, exposure, confidence: float = 0.95) -> dict:
    r"""Maximum-likelihood fit of exponential lifetimes whose mean grows as :math:`\log \bar T = a + bx`, from
    groups of right-censored lifetimes: group r at :math:`x_r` had ``events`` escapes over a total time at risk
    ``exposure`` (the sum of its lifetimes, censored ones included), so its count is Poisson with mean
    :math:`E_r e^{-(a + b x_r)}`. Groups with no escape count: their exposure bounds the mean from below, where a fit
    of the groups' own means would drop them.

    The intercept has a closed form at each b, :math:`e^{a(b)} = \sum_r E_r e^{-b x_r} / \sum_r e_r`, so the profile
    log-likelihood is :math:`\ell(b) = -e\log\big(\sum_r E_r e^{-bx_r}/e\big) - b\sum_r e_r x_r - e` (e the events in
    all), concave in b; b maximises it, and the interval is the profile-likelihood one,
    :math:`2(\ell(\hat b) - \ell(b)) \le \chi^2_{1}(\text{confidence})`.

    Returns ``slope`` b, ``slope_lo``, ``slope_hi``, ``intercept`` a, ``events``, ``groups`` and
    ``x_values``; the estimates are None with fewer than three events or events at fewer than two x (then
    ``slope_lo`` / ``slope_hi`` too; an interval unbounded on one side holds that side as None).

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import censored_exponential_fit
        >>> rng = np.random.default_rng(1)
        >>> x = np.array([0.0, 1.0, 2.0, 3.0])
        >>> T = rng.exponential(np.exp(2.0 + 1.0 * x)[:, None], (4, 400))   # mean e^(2 + x), 400 lifetimes each
        >>> seen = np.minimum(T, 60.0)                                       # censored at 60
        >>> fit = censored_exponential_fit(x, (T < 60).sum(1), seen.sum(1))
        >>> round(fit["slope"], 1), fit["slope_lo"] < 1.0 < fit["slope_hi"], round(fit["intercept"], 1)
        (1.0, True, 2.0)
    """
    from scipy.optimize import brentq
    from scipy.stats import chi2

    x, e, E = (np.asarray(a, np.float64).reshape(-1) for a in (x, events, exposure))
    if not x.size == e.size == E.size:
        raise InputError(f"x, events and exposure must hold one entry per group, got sizes {x.size}, {e.size}, "
                         f"{E.size}.")
    keep = np.isfinite(x) & np.isfinite(e) & np.isfinite(E) & (E > 0)
    if np.any(e[keep] < 0) or np.any(e[keep] != np.round(e[keep])):
        raise InputError("events must be counts (whole numbers >= 0).")
    x, e, E = x[keep], e[keep], E[keep]
    total = float(e.sum())
    out = {"slope": None, "slope_lo": None, "slope_hi": None, "intercept": None, "events": int(total),
           "groups": int(x.size), "x_values": int(np.unique(x[e > 0]).size)}
    if total < 3 or out["x_values"] < 2:
        return out
    shift = x.mean()
    xc = x - shift

    def log_sum(b):  # log sum_r E_r e^{-b x_r}, stably
        z = np.log(E) - b * xc
        top = z.max()
        return top + np.log(np.exp(z - top).sum())

    def profile(b):
        return -total * (log_sum(b) - np.log(total)) - b * float((e * xc).sum()) - total

    def score(b):  # d profile / db: e * (weighted mean of x under E e^{-bx}) - sum e x
        z = np.log(E) - b * xc
        w = np.exp(z - z.max())
        return total * float((w * xc).sum() / w.sum()) - float((e * xc).sum())

    span = 1.0 / max(np.ptp(xc), 1e-300)
    lo, hi = -span, span
    while score(lo) <= 0 and lo > -1e6 * span:  # the score decreases in b: bracket its root
        lo *= 2
    while score(hi) >= 0 and hi < 1e6 * span:
        hi *= 2
    if score(lo) <= 0 or score(hi) >= 0:
        return out  # no finite maximum (e.g. every event at one end)
    b = brentq(score, lo, hi, xtol=1e-14 * span)
    top = profile(b)
    cut = chi2.ppf(confidence, 1) / 2
    drop = lambda c: top - profile(c) - cut

    def side(step):
        edge = b + step
        while drop(edge) < 0 and abs(edge - b) < 1e6 * span:
            edge = b + 2 * (edge - b)
        return brentq(drop, b, edge, xtol=1e-12 * span) if drop(edge) >= 0 else None

    out.update(slope=float(b), slope_lo=side(-span), slope_hi=side(span),
               intercept=float(log_sum(b) - np.log(total) - b * shift))
    return out


def censored_lognormal_mean(lifetime, censored, confidence: float = 0.95) -> dict:
    r"""The centre of right-censored log-normal lifetimes, :math:`\log T = \mu + \sigma\varepsilon`, by maximum
    likelihood (observed lifetimes contribute :math:`\log\varphi(z) - \log\sigma`, censored ones, lower bounds,
    :math:`\log\Phi(-z)`, :math:`z = (\log T - \mu)/\sigma`), with the profile-likelihood interval for
    :math:`\mu` calibrated like Student's t: :math:`\mu` is kept where
    :math:`2(\ell(\hat\mu) - \ell_p(\mu)) \le m \log(1 + t^2_{(1+c)/2,\,m-1}/(m-1))` with m the observed
    lifetimes, which is exactly the t-interval of the mean of :math:`\log T` when none is censored (the profile
    statistic is then :math:`m\log(1 + t^2/(m-1))`), and a small sample's honest width with censoring.

    ``lifetime``, ``censored``: one entry each (non-finite or non-positive lifetimes are left out). Returns
    ``mu``, ``mu_lo``, ``mu_hi`` (an end the profile does not reach within 1000 sigma of the estimate is None),
    ``median`` :math:`e^{\hat\mu}`, ``median_lo``, ``median_hi``, ``sigma``, ``systems`` and ``events``; the
    estimates are None with fewer than two observed lifetimes.

    Example:
        >>> import numpy as np
        >>> from attnflow.stats import censored_lognormal_mean, mean_interval
        >>> T = np.exp(np.array([1.0, 1.4, 0.7, 1.2, 0.9]))
        >>> fit = censored_lognormal_mean(T, np.zeros(5, bool))                    # none censored: Student's t
        >>> mean, lo, hi = mean_interval(np.log(T)[:, None], 0.95)
        >>> bool(np.allclose([fit["mu"], fit["mu_lo"], fit["mu_hi"]], [mean[0], lo[0], hi[0]]))
        True
        >>> censored_lognormal_mean(np.append(T, 20.0), np.append(np.zeros(5, bool), True))["mu"] > fit["mu"]
        True
    """
    from scipy.optimize import brentq, minimize_scalar

    life = np.asarray(lifetime, float).reshape(-1)
    cen = np.asarray(censored, bool).reshape(-1)
    if life.shape != cen.shape:
        raise InputError(f"censored_lognormal_mean: lifetime and censored must hold one entry each, got sizes "
                         f"{life.size} and {cen.size}.")
    ok = np.isfinite(life) & (life > 0)
    y, obs = np.log(life[ok]), ~cen[ok]
    m = int(obs.sum())
    out = {"mu": None, "mu_lo": None, "mu_hi": None, "median": None, "median_lo": None, "median_hi": None,
           "sigma": None, "systems": int(ok.sum()), "events": m}
    if m < 2:
        return out
    zeros = np.zeros_like(y)

    def nll(mu, log_s):
        return _censored_normal_nll(np.array([mu, 0.0, log_s]), zeros, y, obs)[0]

    spread = float(np.std(y[obs])) + 1e-3
    theta = _newton_minimum(lambda th, hessian=False: _two_parameters(th, zeros, y, obs, hessian),
                            np.array([float(y[obs].mean()), np.log(spread)]))
    mu, best = float(theta[0]), nll(*theta)
    width = max(float(np.exp(theta[1])), 1e-12)

    def profile(value):  # the profile nll at mu = value, minimised over log sigma
        return minimize_scalar(lambda ls: nll(value, ls), bracket=(theta[1] - 1.0, theta[1] + 1.0)).fun

    t = t_quantile(m - 1, confidence)
    cut = 0.5 * m * np.log1p(t * t / (m - 1))
    drop = lambda value: profile(value) - best - cut

    def side(sign):
        edge = mu + sign * width
        while drop(edge) < 0 and abs(edge - mu) < 1e3 * width:
            edge = mu + 2 * (edge - mu)
        return float(brentq(drop, mu, edge, xtol=1e-12 * width)) if drop(edge) >= 0 else None

    lo, hi = side(-1.0), side(1.0)
    out.update(mu=mu, mu_lo=lo, mu_hi=hi, median=float(np.exp(mu)), median_lo=None if lo is None else float(np.exp(lo)),
               median_hi=None if hi is None else float(np.exp(hi)), sigma=float(np.exp(theta[1])))
    return out


def _two_parameters(theta, x, y, observed, hessian: bool = False):
    """The censored normal nll in (mu, log sigma) alone (the slope held at 0): value, gradient (, Hessian)."""
    full = np.array([theta[0], 0.0, theta[1]])
    result = _censored_normal_nll(full, x, y, observed, hessian=hessian)
    keep = [0, 2]
    if not hessian:
        return result[0], result[1][keep]
    return result[0], result[1][keep], result[2][np.ix_(keep, keep)]
