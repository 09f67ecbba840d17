r"""Metastability: the first metastable plateau of the cluster count, its lifetime, and its growth with beta.

Tokens on the sphere first gather into a few clusters, which then sit still before two of them merge,
while the interaction energy climbs a staircase; for a fixed configuration of well-separated clusters
the time they sit still grows exponentially in beta (Geshkovski, Koubbi, Polyanskiy, Rigollet,
arXiv 2410.06833; Bruno, Pasqualotto, Agazzi, arXiv 2410.23228). Across random clouds the configuration
itself changes with beta (more clusters, closer together, at larger beta), so a lifetime pooled over
configurations need not grow.

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
  fast clustering (time scale :math:`\lesssim t_a`) fail the test; a metastable state passes it;
* the **first metastable plateau** is the earliest; its **lifetime** is :math:`T = t_b - t_a`, from its
  first checkpoint to the first merge, right-censored when no merge happens before the last
  checkpoint. A system with no plateau ends as one cluster without a metastable state (``none``), or
  is still on a run too young to qualify at the end (``pending``: its first metastable state, if
  any, is not reached inside the run); both are counted, not dropped.

The rule's tolerances are r and ``min_duration`` (the counts are exact integers; their own
tolerance is the phase config's ``threshold``). The times are those of the checkpoints: a lifetime
is resolved to the spacing of the checkpoints around its two ends.

**Left truncation.** A run counts as a plateau only when :math:`T \ge L = \max(\text{min\_duration},
r\,t_a)` (``truncation`` in :func:`first_plateaus`): the lifetimes the rule returns are those of the
states that lasted at least L, a sample of :math:`T \mid T \ge L`. Where L is comparable to the typical
lifetime (small beta, late gathering) the short-lived states are missing and the recorded lifetimes are
too long.

**Energy staircase.** :func:`energy_plateaus` finds the flat steps of :math:`E_\beta(t)` on log t:
runs over which the energy stays within a relative ``rel_tol`` of its value at the run's start and
which pass the same hold test.

**Summaries.** Per cell, :func:`lifetime_summary` gives the Kaplan-Meier quartiles of the recorded
lifetimes (censored ones enter as lower bounds; like the lifetimes, these describe the states that
qualified, :math:`T \ge L`) and the censored fraction. Across cells, :func:`lifetime_slope` fits the
log-normal accelerated-failure-time model :math:`\log T = a + b\beta + \sigma\varepsilon`,
:math:`\varepsilon \sim N(0, 1)`, by maximum likelihood, right-censored lifetimes entering through their
survival :math:`S(T)` and every term divided by :math:`S(L)` (the left truncation); :math:`e^{b}` is the
factor per unit of beta of the median lifetime. The slope's interval is cluster-robust: the phase job
reuses system s's cloud at every beta, so the lifetimes of one cloud are not independent, and the
interval comes from the sandwich :math:`H^{-1} (\sum_g s_g s_g^T) H^{-1}` with the score sums
:math:`s_g` of each cloud g. No fit is made on fewer than :data:`MIN_FIT_CELLS` betas or
:data:`MIN_FIT_CLUSTERS` clouds, nor reported when it says that fewer than :data:`MIN_RETAINED` of the states
reached pass their bounds (not identified).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import special as _special

from ..errors import InputError

#: default hold ratio r: a metastable plateau lasts at least r times the time at which it started
HOLD_RATIO = 1.0
#: default relative tolerance of an energy plateau (a merge of two of c <= 10 equal clusters raises
#: E_beta by >= 1/(c-1) > 10%; a plateau's own contraction past the threshold 0.999 by <= e^{0.001 beta} - 1)
ENERGY_REL_TOL = 0.02
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
    r"""Per system (rows of ``counts``, (S, K)): the first metastable plateau (module's rule) and the rest.

    Returns arrays of length S: ``count``, ``start``, ``lifetime`` (NaN / -1 without a plateau),
    ``truncation`` (the least lifetime the rule lets a plateau starting there have,
    :math:`\max(\text{min\_duration}, r\,t_a)`: the lifetimes are left-truncated there; NaN without a plateau),
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
        >>> r["truncation"].tolist()        # a plateau from t_a must last r t_a (r = 1) to count
        [2.0, 3.0, nan]
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
           "truncation": np.where(has, np.maximum(min_duration, hold_ratio * t[k]), np.nan),
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


def _log_tail_terms(z, s, hessian: bool = True):
    r"""Per entry: :math:`\log\Phi(-z)` (the log-survival of :math:`y` at :math:`z = (y - \mu)/\sigma`) and its
    derivatives in :math:`\mu` and :math:`\tau = \log\sigma`, with the inverse Mills ratio
    :math:`\lambda = \varphi(z)/\Phi(-z)`, :math:`\lambda' = \lambda(\lambda - z)`: :math:`\ell_\mu = \lambda/\sigma`,
    :math:`\ell_\tau = \lambda z`, :math:`\ell_{\mu\mu} = -\lambda'/\sigma^2`,
    :math:`\ell_{\mu\tau} = -(\lambda' z + \lambda)/\sigma`, :math:`\ell_{\tau\tau} = -z(\lambda' z + \lambda)`
    (the second derivatives with ``hessian`` only)."""
    log_tail = _special.log_ndtr(-z)
    mills = np.exp(-0.5 * z**2 - 0.5 * np.log(2 * np.pi) - log_tail)  # phi(z) / Phi(-z)
    if not hessian:
        return log_tail, mills / s, mills * z
    slope = mills * (mills - z)  # lambda'(z)
    return (log_tail, mills / s, mills * z, -slope / s**2, -(slope * z + mills) / s, -z * (slope * z + mills))


def _likelihood_terms(theta, x, y, observed, lower=None, *, hessian: bool = True):
    r"""Per system: the log-likelihood of :math:`y = a + bx + \sigma\varepsilon` and its derivatives in
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


def lifetime_slope(beta: np.ndarray, lifetime: np.ndarray, censored: np.ndarray, confidence: float = 0.95, *,
                   truncation: np.ndarray | None = None, clusters: np.ndarray | None = None) -> dict:
    r"""Maximum-likelihood fit of :math:`\log T = a + b\beta + \sigma\varepsilon` (module's model), lifetimes
    right-censored and left-truncated.

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
    beta = np.asarray(beta, float)
    life = np.asarray(lifetime, float)
    cen = np.asarray(censored, bool)
    size = beta.shape
    for name, value in (("lifetime", life), ("censored", cen), ("truncation", truncation), ("clusters", clusters)):
        if value is not None and np.shape(value) != size:
            raise InputError(f"lifetime_slope: {name} has shape {np.shape(value)}, one entry per system is expected "
                             f"(the shape {size} of beta).")
    ok = np.isfinite(life) & (life > 0) & np.isfinite(beta)
    bound = np.full(size, -np.inf) if truncation is None else np.asarray(truncation, float)
    cut = ok & np.isfinite(bound) & (bound > 0)
    if np.any(life[cut] < bound[cut] * (1 - 1e-9)):
        k = int(np.flatnonzero(cut & (life < bound * (1 - 1e-9)))[0])
        raise InputError(f"lifetime_slope: system {k} has lifetime {life[k]!r} below its truncation {bound[k]!r}; a "
                         "left-truncated lifetime is at least its bound (pass first_plateaus' own truncation).")
    x, y, obs = beta[ok], np.log(np.where(ok, life, 1.0)[ok]), ~cen[ok]
    lower = np.where(cut, np.log(np.where(cut, bound, 1.0)), -np.inf)[ok]
    codes = (np.arange(x.size) if clusters is None else
             np.unique(np.asarray(clusters)[ok], return_inverse=True)[1].reshape(-1))
    G = int(codes.max()) + 1 if codes.size else 0
    used = sorted({float(b) for b in x})
    base = {"systems": int(ok.sum()), "events": int(obs.sum()), "cells": len(used), "betas": used,
            "clusters": G, "truncated": int(cut.sum()),
            "interval": "model" if clusters is None else "cluster-robust"}
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
    start = np.polyfit(x[obs], y[obs], 1)
    spread = np.std(y[obs] - np.polyval(start, x[obs])) + 1e-3

    def nll(th, hessian=False):
        return _censored_normal_nll(th, x, y, obs, lower, hessian=hessian)

    theta = _newton_minimum(nll, np.array([start[1], start[0], np.log(spread)]))
    retained = None
    if np.isfinite(lower).any():  # the fitted fraction of the states that pass their bound
        bounded = np.isfinite(lower)
        z_l = (lower[bounded] - theta[0] - theta[1] * x[bounded]) / np.exp(theta[2])
        with np.errstate(over="ignore"):
            retained = float(bounded.sum() / np.sum(np.exp(-_special.log_ndtr(-z_l))))
        if retained < MIN_RETAINED:
            return {**none, **base, "retained": retained,
                    "not_fitted": f"not identified: the fit would say {retained:.2g} of the states reached last past "
                                  f"their truncation (< MIN_RETAINED = {MIN_RETAINED:g}), sigma = "
                                  f"{np.exp(theta[2]):.3g}: it extrapolates far below the recorded lifetimes"}
    H = nll(theta, hessian=True)[2]  # the observed information
    H_inv = np.linalg.pinv(H)
    _, d_mu, d_tau = _likelihood_terms(theta, x, y, obs, lower, hessian=False)
    scores = np.stack([np.bincount(codes, weights=w, minlength=G) for w in (d_mu, d_mu * x, d_tau)], axis=1)
    robust = H_inv @ (scores.T @ scores) @ H_inv * (G / max(G - 1, 1))
    wald = _special.ndtri(0.5 + confidence / 2) * np.sqrt(max(H_inv[1, 1], 0.0))
    half = _special.stdtrit(max(G - 1, 1), 0.5 + confidence / 2) * np.sqrt(max(robust[1, 1], 0.0))
    b = float(theta[1])
    return {"slope": b, "slope_lo": b - float(half), "slope_hi": b + float(half), "wald_lo": b - float(wald),
            "wald_hi": b + float(wald), "intercept": float(theta[0]), "sigma": float(np.exp(theta[2])), **base,
            "retained": retained, "not_fitted": None}
