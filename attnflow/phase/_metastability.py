r"""Metastability: the first metastable plateau of the cluster count, its lifetime, and its growth with beta.

Tokens on the sphere first gather into a few clusters, which then sit still for a time that grows
exponentially in beta before two of them merge, while the interaction energy climbs a staircase
(Geshkovski, Koubbi, Polyanskiy, Rigollet, arXiv 2410.06833; Bruno, Pasqualotto, Agazzi,
arXiv 2410.23228).

**Detection rule.** On one system's cluster counts :math:`c_k = c(t_k)` at the checkpoints:

* the cloud has *gathered* from the first checkpoint with :math:`c \le c(0)/2` (before that, n
  random tokens count almost n "clusters" only because they have not moved yet);
* from there on the rule reads the running minimum :math:`\tilde c_k = \min_{j \le k} c_j`: merges
  are irreversible, so a count above an earlier one is the threshold flickering (a cluster whose
  tokens sit near the threshold), not a split;
* a *run* is a maximal stretch of checkpoints with the same :math:`\tilde c \ge 2`, from its first
  checkpoint :math:`t_a` to the first checkpoint with a smaller count :math:`t_b` (a *merge*), or to
  the last checkpoint (then *censored*: the run outlives the horizon);
* a run is a **metastable plateau** when it lasts long compared with the time the cloud took to
  reach it, :math:`t_b - t_a \ge r\, t_a` (``hold_ratio`` r, default 1: at least a doubling of t,
  :math:`\log_2(t_b/t_a) \ge 1` on log time), and at least ``min_duration``. The short runs of the
  fast clustering (time scale :math:`\lesssim t_a`) fail the test; a metastable state, whose
  lifetime grows like :math:`e^{c\beta}`, passes it;
* the **first metastable plateau** is the earliest; its **lifetime** is :math:`t_b - t_a`, from its
  first checkpoint to the first merge, right-censored when no merge happens before the last
  checkpoint. A system with no plateau ends as one cluster without a metastable state (``none``), or
  is still on a run too young to qualify at the end (``pending``: its first metastable state, if
  any, is not reached inside the run); both are counted, not dropped.

The rule's tolerances are r and ``min_duration`` (the counts are exact integers; their own
tolerance is the phase config's ``threshold``). The times are those of the checkpoints: a lifetime
is resolved to the spacing of the checkpoints around its two ends.

**Energy staircase.** :func:`energy_plateaus` finds the flat steps of :math:`E_\beta(t)` on log t:
runs over which the energy stays within a relative ``rel_tol`` of its value at the run's start and
which pass the same hold test.

**Censoring-aware summaries.** Per cell, :func:`lifetime_summary` gives the Kaplan-Meier quartiles of
the lifetimes (censored ones enter as lower bounds) and the censored fraction. Across cells,
:func:`lifetime_slope` fits the log-normal accelerated-failure-time model
:math:`\log T = a + b\beta + \sigma\varepsilon`, :math:`\varepsilon \sim N(0, 1)`, by maximum
likelihood with censored lifetimes entering through their survival probability, and gives the
Wald interval of the slope b (:math:`e^{b}` is the factor per unit of beta of the median lifetime).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special as _special

#: default hold ratio r: a metastable plateau lasts at least r times the time at which it started
HOLD_RATIO = 1.0
#: default relative tolerance of an energy plateau (a merge of two of c <= 10 equal clusters raises
#: E_beta by >= 1/(c-1) > 10%; a plateau's own contraction past the threshold 0.999 by <= e^{0.001 beta} - 1)
ENERGY_REL_TOL = 0.02


class _Interval:
    """The duration of a run from ``start`` to ``end`` (a lower bound when ``censored``)."""

    @property
    def duration(self) -> float:
        """``end - start``."""
        return self.end - self.start


@dataclass(frozen=True)
class Plateau(_Interval):
    """A metastable plateau: ``count`` clusters from ``start`` to ``end`` (times; ``censored``: still on
    it at the last checkpoint, ``end`` is then that checkpoint and the duration a lower bound)."""

    count: int
    start: float
    end: float
    censored: bool


@dataclass(frozen=True)
class EnergyPlateau(_Interval):
    """A flat step of the energy staircase: mean ``energy`` from ``start`` to ``end`` (``censored`` as for
    :class:`Plateau`)."""

    energy: float
    start: float
    end: float
    censored: bool


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


def _count_runs(t: np.ndarray, counts: np.ndarray, min_duration: float, hold_ratio: float) -> dict:
    """The module's rule on counts (S, K), vectorised over the systems: per system and checkpoint, whether a run
    of the running-minimum count starts there (``start``), that count (``settled``), the run's end time and
    whether it is censored, and whether it is a metastable plateau (``plateau``); ``gathered`` per system."""
    t = np.asarray(t, float)
    c = np.atleast_2d(np.asarray(counts)).astype(np.int64)
    S, K = c.shape
    hit = c <= c[:, :1] / 2
    g = np.where(hit.any(axis=1), hit.argmax(axis=1), K)
    k = np.arange(K)
    after = k[None, :] >= g[:, None]
    big = np.iinfo(np.int64).max
    settled = np.minimum.accumulate(np.where(after, c, big), axis=1)
    previous = np.concatenate([np.full((S, 1), big), settled[:, :-1]], axis=1)
    start = after & (settled != previous)
    # the next run's first checkpoint after each checkpoint (K: none, the run is censored at the last one)
    first_at_or_after = np.minimum.accumulate(np.where(start, k[None, :], K)[:, ::-1], axis=1)[:, ::-1]
    following = np.concatenate([first_at_or_after[:, 1:], np.full((S, 1), K)], axis=1)
    censored = following == K
    end = np.where(censored, t[-1], t[np.minimum(following, K - 1)])
    long = end - t[None, :] >= np.maximum(min_duration, hold_ratio * t[None, :])
    return {"start": start, "settled": settled, "end": end, "censored": censored, "gathered": g,
            "plateau": start & (settled >= 2) & long}


def plateaus(t: np.ndarray, counts: np.ndarray, min_duration: float = 0.0, *,
             hold_ratio: float = HOLD_RATIO) -> list[Plateau]:
    r"""The metastable plateaus of one series of cluster counts (the module's rule: runs of the running
    minimum count :math:`c \ge 2` after gathering with :math:`t_b - t_a \ge \max(\text{min\_duration}, r\,t_a)`).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import plateaus
        >>> t = np.arange(1.0, 41.0)
        >>> counts = np.r_[[9] * 2, [6] * 2, [3] * 16, [4] * 1, [3] * 9, [2] * 10]  # 4: a flicker
        >>> [(p.count, p.start, p.end, p.censored) for p in plateaus(t, counts)]
        [(3, 5.0, 31.0, False)]
    """
    t = np.asarray(t, float)
    r = _count_runs(t, np.asarray(counts)[None], min_duration, hold_ratio)
    return [Plateau(int(r["settled"][0, k]), float(t[k]), float(r["end"][0, k]), bool(r["censored"][0, k]))
            for k in np.flatnonzero(r["plateau"][0])]


def merges(counts: np.ndarray) -> int:
    """Merges after the cloud has gathered: decreases of the running minimum count.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import merges
        >>> merges(np.array([8, 4, 3, 4, 3, 2, 2, 1]))   # 4 -> 3 -> 2 -> 1; the 4 after the 3 is a flicker
        3
    """
    starts = int(_count_runs(np.arange(len(counts), dtype=float), np.asarray(counts)[None], 0.0, 0.0)["start"].sum())
    return max(starts - 1, 0)


def _energy_runs(t: np.ndarray, energy: np.ndarray, rel_tol: float, hold_ratio: float) -> dict:
    """Every run of the energy rule on energies (S, K), vectorised over the systems: ``system``, ``first`` and
    ``stop`` checkpoints (``stop`` = K: censored at the last), ``end`` time and whether it is a step
    (``plateau``). Non-finite energies are skipped (the run goes on over them)."""
    t = np.asarray(t, float)
    E = np.atleast_2d(np.asarray(energy, float))
    S, K = E.shape
    anchor, first = np.full(S, np.nan), np.full(S, -1)
    systems, firsts, stops = [], [], []
    for k in np.flatnonzero(t > 0):
        e = E[:, k]
        leave = np.isfinite(e) & (~np.isfinite(anchor) | (np.abs(e - anchor) > rel_tol * np.abs(anchor)))
        close = np.flatnonzero(leave & (first >= 0))
        systems.append(close)
        firsts.append(first[close])
        stops.append(np.full(close.size, k))
        anchor[leave], first[leave] = e[leave], k
    still = np.flatnonzero(first >= 0)
    system = np.concatenate(systems + [still])
    start = np.concatenate(firsts + [first[still]]).astype(int)
    stop = np.concatenate(stops + [np.full(still.size, K)]).astype(int)
    end = np.where(stop == K, t[-1], t[np.minimum(stop, K - 1)])
    order = np.lexsort((start, system))
    out = {"system": system, "first": start, "stop": stop, "end": end}
    out = {key: value[order] for key, value in out.items()}
    out["plateau"] = out["end"] - t[out["first"]] >= hold_ratio * t[out["first"]]
    return out


def energy_plateaus(t: np.ndarray, energy: np.ndarray, rel_tol: float = ENERGY_REL_TOL, *,
                    hold_ratio: float = HOLD_RATIO) -> list[EnergyPlateau]:
    r"""The flat steps of one energy series :math:`E(t_k)` (checkpoints with t > 0, the staircase on log t).

    From a checkpoint a, a run extends over the checkpoints b with :math:`|E_b - E_a| \le` ``rel_tol``
    :math:`|E_a|`; it ends at the first checkpoint outside (or is censored at the last one) and is a step
    of the staircase when it lasts :math:`t_{\rm end} - t_a \ge r\, t_a`. The next run starts where it ended.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import energy_plateaus
        >>> t = np.geomspace(0.1, 1000.0, 41)
        >>> E = 1.0 + 1.0 * (t > 2) + 2.0 * (t > 50)               # two steps up: 1, 2, 4
        >>> [(p.energy, round(p.start, 3), round(p.end, 1)) for p in energy_plateaus(t, E)]
        [(1.0, 0.1, 2.5), (2.0, 2.512, 50.1), (4.0, 50.119, 1000.0)]
    """
    t = np.asarray(t, float)
    E = np.asarray(energy, float)
    r = _energy_runs(t, E[None], rel_tol, hold_ratio)
    return [EnergyPlateau(float(np.nanmean(E[a:b])), float(t[a]), float(end), bool(b == len(t)))
            for a, b, end in zip(r["first"][r["plateau"]], r["stop"][r["plateau"]], r["end"][r["plateau"]])]


def first_plateaus(t: np.ndarray, counts: np.ndarray, min_duration: float = 0.0, *,
                   hold_ratio: float = HOLD_RATIO, energy: np.ndarray | None = None,
                   rel_tol: float = ENERGY_REL_TOL) -> dict:
    """Per system (rows of ``counts``, (S, K)): the first metastable plateau (module's rule) and the rest.

    Returns arrays of length S: ``count``, ``start``, ``lifetime`` (NaN / -1 without a plateau),
    ``censored``, ``pending`` (no plateau yet, still >= 2 clusters on a run too young to qualify),
    ``plateaus`` (metastable plateaus) and ``merges`` (from the first plateau's start on: the merges of the
    metastable stage, not those of the fast clustering; 0 without a plateau); with ``energy`` (S, K), also
    ``energy_plateaus`` (the staircase's steps per system, :func:`energy_plateaus`).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import first_plateaus
        >>> t = np.arange(1.0, 9.0)
        >>> r = first_plateaus(t, np.array([[6, 3, 3, 3, 3, 1, 1, 1], [8, 8, 4, 4, 4, 4, 4, 4],
        ...                                 [8, 8, 8, 8, 8, 4, 4, 4]]))  # the last: 4 clusters from t = 6 only
        >>> r["lifetime"].tolist(), r["censored"].tolist(), r["pending"].tolist(), r["merges"].tolist()
        ([4.0, 5.0, nan], [False, True, False], [False, False, True], [1, 0, 0])
    """
    t = np.asarray(t, float)
    counts = np.atleast_2d(np.asarray(counts))
    S, K = counts.shape
    r = _count_runs(t, counts, min_duration, hold_ratio)
    has = r["plateau"].any(axis=1)
    k = np.where(has, r["plateau"].argmax(axis=1), 0)
    rows = np.arange(S)
    later = r["start"] & (np.arange(K)[None, :] > k[:, None])
    last = np.where(r["gathered"] < K, r["settled"][:, -1], counts[:, -1])
    out = {"count": np.where(has, r["settled"][rows, k], -1).astype(int),
           "start": np.where(has, t[k], np.nan),
           "lifetime": np.where(has, np.round(r["end"][rows, k] - t[k], 10), np.nan),  # 50.2 - 7.8 is 42.4
           "censored": has & r["censored"][rows, k], "pending": ~has & (last >= 2),
           "plateaus": r["plateau"].sum(axis=1).astype(int), "merges": np.where(has, later.sum(axis=1), 0).astype(int)}
    if energy is not None:
        e = _energy_runs(t, energy, rel_tol, hold_ratio)
        out["energy_plateaus"] = np.bincount(e["system"][e["plateau"]], minlength=S).astype(int)
    return out


def kaplan_meier(lifetime: np.ndarray, censored: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    r"""The Kaplan-Meier survival curve of right-censored lifetimes: the event times and
    :math:`S(t) = \prod_{t_i \le t} (1 - d_i / n_i)` just after each (d: events at :math:`t_i`, n: still at risk).

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import kaplan_meier
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


def _km_quantile(times: np.ndarray, survival: np.ndarray, q: float) -> float | None:
    """The first event time with S <= 1 - q (None when S stays above: the quantile is censored)."""
    hit = np.flatnonzero(survival <= 1.0 - q + 1e-12)
    return float(times[hit[0]]) if hit.size else None


def lifetime_summary(first: dict) -> dict:
    """A cell's lifetimes (``first``: :func:`first_plateaus` of its systems): Kaplan-Meier quartiles.

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
    q25, med, q75 = (_km_quantile(times, S, q) for q in (0.25, 0.5, 0.75))
    return {"with_plateau": int(has.sum()), "events": int((~cen).sum()),
            "median": float(life[has].max()) if med is None else med, "q25": q25, "q75": q75,
            "censored_fraction": float(cen.mean()), "median_censored": med is None, "pending": pending}


def _censored_normal_nll(theta, x, y, observed, *, hessian: bool = False):
    r"""Negative log-likelihood and gradient (and, with ``hessian``, Hessian) of
    :math:`y = a + b x + \sigma\varepsilon` (:math:`\varepsilon \sim N(0, 1)`), y right-censored where not
    ``observed``; theta = (a, b, log sigma).

    With :math:`z = (y - a - bx)/\sigma` and the inverse Mills ratio :math:`\lambda = \varphi(z)/\Phi(-z)`
    (:math:`\lambda' = \lambda(\lambda - z)`), one term's log-likelihood and its derivatives in
    :math:`\mu = a + bx` and :math:`\tau = \log\sigma` are: observed,
    :math:`\ell_\mu = z/\sigma`, :math:`\ell_\tau = z^2 - 1`, :math:`\ell_{\mu\mu} = -1/\sigma^2`,
    :math:`\ell_{\mu\tau} = -2z/\sigma`, :math:`\ell_{\tau\tau} = -2z^2`; censored,
    :math:`\ell_\mu = \lambda/\sigma`, :math:`\ell_\tau = \lambda z`,
    :math:`\ell_{\mu\mu} = -\lambda'/\sigma^2`, :math:`\ell_{\mu\tau} = -(\lambda' z + \lambda)/\sigma`,
    :math:`\ell_{\tau\tau} = -z(\lambda' z + \lambda)`; a and b enter through :math:`\mu` (weights 1, x).
    """
    a, b, log_s = theta
    s = np.exp(log_s)
    z = (y - a - b * x) / s
    log_tail = _special.log_ndtr(-z)
    nll = -np.sum(np.where(observed, -log_s - 0.5 * z**2 - 0.5 * np.log(2 * np.pi), log_tail))
    mills = np.exp(-0.5 * z**2 - 0.5 * np.log(2 * np.pi) - log_tail)  # phi(z) / Phi(-z)
    d_mu = np.where(observed, z, mills) / s  # d loglik / d mu
    d_log_s = np.where(observed, z**2 - 1.0, mills * z)
    gradient = -np.array([d_mu.sum(), (d_mu * x).sum(), d_log_s.sum()])
    if not hessian:
        return nll, gradient
    slope = mills * (mills - z)  # lambda'(z)
    mu_mu = np.where(observed, -1.0, -slope) / s**2
    mu_tau = np.where(observed, -2.0 * z, -(slope * z + mills)) / s
    tau_tau = np.where(observed, -2.0 * z**2, -z * (slope * z + mills))
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


def lifetime_slope(beta: np.ndarray, lifetime: np.ndarray, censored: np.ndarray, confidence: float = 0.95) -> dict:
    r"""Censored maximum-likelihood fit of :math:`\log T = a + b\beta + \sigma\varepsilon` (module's model).

    ``beta``, ``lifetime``, ``censored``: one entry per system (lifetimes of censored systems are lower
    bounds; NaN lifetimes are left out). Returns the slope b with its Wald interval at ``confidence``
    (from the observed information), the intercept a (:math:`e^{a+b\beta}` is the median lifetime), sigma,
    the systems, events and distinct betas used (``cells``, ``betas``); ``None`` values when fewer than
    three events or events at fewer than two betas.

    Example:
        >>> import numpy as np
        >>> from attnflow.phase import lifetime_slope
        >>> rng = np.random.default_rng(0)
        >>> beta = np.repeat([1.0, 2.0, 3.0, 4.0], 200)
        >>> T = np.exp(0.5 + 0.8 * beta + 0.3 * rng.standard_normal(beta.size))
        >>> fit = lifetime_slope(beta, np.minimum(T, 40.0), T > 40.0)    # censored at 40
        >>> round(fit["slope"], 2), fit["slope_lo"] < 0.8 < fit["slope_hi"], fit["cells"], fit["events"] < 800
        (0.8, True, 4, True)
    """
    beta = np.asarray(beta, float)
    life = np.asarray(lifetime, float)
    cen = np.asarray(censored, bool)
    ok = np.isfinite(life) & (life > 0) & np.isfinite(beta)
    x, y, obs = beta[ok], np.log(np.where(ok, life, 1.0)[ok]), ~cen[ok]
    used = sorted({float(b) for b in x})
    base = {"systems": int(ok.sum()), "events": int(obs.sum()), "cells": len(used), "betas": used}
    if obs.sum() < 3 or len(np.unique(x[obs])) < 2:
        return {"slope": None, "slope_lo": None, "slope_hi": None, "intercept": None, "sigma": None, **base}
    start = np.polyfit(x[obs], y[obs], 1)
    spread = np.std(y[obs] - np.polyval(start, x[obs])) + 1e-3
    def nll(th, hessian=False):
        return _censored_normal_nll(th, x, y, obs, hessian=hessian)

    theta = _newton_minimum(nll, np.array([start[1], start[0], np.log(spread)]))
    H = nll(theta, hessian=True)[2]  # the observed information
    cov = np.linalg.pinv(H)
    half = _special.ndtri(0.5 + confidence / 2) * np.sqrt(max(cov[1, 1], 0.0))
    return {"slope": float(theta[1]), "slope_lo": float(theta[1] - half), "slope_hi": float(theta[1] + half),
            "intercept": float(theta[0]), "sigma": float(np.exp(theta[2])), **base}
