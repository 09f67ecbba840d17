r"""Metastability of the cluster count: when a cloud is in a metastable state, its plateaus, and the steps of
the energy staircase (host-side, numpy; one definition for every job).

Tokens on the sphere first gather into a few clusters, which then sit still before two of them merge,
while the interaction energy climbs a staircase (Geshkovski, Koubbi, Polyanskiy, Rigollet, arXiv 2410.06833;
Bruno, Pasqualotto, Agazzi, arXiv 2410.23228).

**Metastable state** (:func:`metastable_states`). On one system's cluster counts :math:`c_k = c(t_k)` at the
checkpoints, a checkpoint is in a metastable state when the cloud has *gathered* into clusters and not yet into
one: :math:`c \le c_{\rm ref}/2` and :math:`c \ge 2`. The reference :math:`c_{\rm ref}` is the count at the first
checkpoint (before gathering, n random tokens count almost n "clusters" only because they have not moved yet),
or a given number such as the number of tokens n. With ``running_min`` (the default, the rule of the plateaus
below) the cloud has gathered from the first checkpoint with :math:`c \le c_{\rm ref}/2` on, and from there
the rule reads the running minimum :math:`\tilde c_k = \min_{j \le k} c_j`: merges are irreversible, so a count
above an earlier one is the threshold flickering (a cluster whose tokens sit near the threshold), not a split.
Without, every checkpoint is read on its own count: :math:`2 \le c_k \le c_{\rm ref}/2`.

**Plateaus** (:func:`plateaus`, :func:`first_plateaus`). In the metastable states (running minimum):

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
tolerance is the cluster threshold of whoever counted them). The times are those of the checkpoints: a
lifetime is resolved to the spacing of the checkpoints around its two ends.

**Prepared starts.** A cloud that starts as clusters (given positions and masses, or drawn tightly around k
centres: the setting of the staircase papers) has gathered at its first checkpoint: with ``prepared=True``
the rule reads the running minimum from :math:`t_0` on, so the first state (k clusters from :math:`t_0`) and
every later one are timed, and the hold test :math:`t_b - t_a \ge r\,(t_a - t_0)` measures the time since the
start. :func:`plateau_table` lists every plateau of every system (not only the first), and
:func:`plateau_geometry` the clusters' positions, masses and smallest gap at each plateau's start.

**Left truncation.** A run counts as a plateau only when :math:`T \ge L = \max(\text{min\_duration},
r\,t_a)` (``truncation`` in :func:`first_plateaus`): the lifetimes the rule returns are those of the
states that lasted at least L, a sample of :math:`T \mid T \ge L`.

**Energy staircase.** :func:`energy_plateaus` finds the flat steps of :math:`E_\beta(t)` on log t:
runs over which the energy stays within a relative ``rel_tol`` of its value at the run's start and
which pass the same hold test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

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


def gathered(counts: np.ndarray, reference: float | None = None) -> int:
    """The first checkpoint at which the count is at most half the reference (the initial count by default;
    ``len(counts)`` if never).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import gathered
        >>> gathered(np.array([20, 19, 12, 10, 4, 4])), gathered(np.array([20, 19, 12, 10, 4, 4]), reference=32)
        (3, 2)
    """
    c = np.asarray(counts)
    hits = np.flatnonzero(c <= (c[0] if reference is None else reference) / 2)
    return int(hits[0]) if hits.size else len(c)


def _settle(c: np.ndarray, reference, prepared: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """On counts (S, K) (int64): the checkpoint at which each system has gathered (K: never; 0 for a prepared
    start), whether each checkpoint is at or after it, and the running minimum count from there (the int64
    maximum before)."""
    S, K = c.shape
    if prepared:
        g = np.zeros(S, dtype=np.int64)
    else:
        hit = c <= (c[:, :1] if reference is None else np.reshape(np.asarray(reference, float), (-1, 1))) / 2
        g = np.where(hit.any(axis=1), hit.argmax(axis=1), K)
    after = np.arange(K)[None, :] >= g[:, None]
    settled = np.minimum.accumulate(np.where(after, c, np.iinfo(np.int64).max), axis=1)
    return g, after, settled


def metastable_states(counts: np.ndarray, *, reference=None, running_min: bool = True,
                      prepared: bool = False) -> np.ndarray:
    r"""Whether each checkpoint of a series of cluster counts (K,) or of S of them (S, K) is in a metastable state
    (module docstring): gathered, :math:`c \le c_{\rm ref}/2`, and not one cluster, :math:`c \ge 2`.

    ``reference``: :math:`c_{\rm ref}`, a number or one per system (default: each system's count at its first
    checkpoint). ``running_min``: gathered from the first checkpoint that is, and the count read as its running
    minimum (the rule of :func:`plateaus`); False: each checkpoint on its own count,
    :math:`2 \le c_k \le c_{\rm ref}/2`. ``prepared``: the cloud starts as clusters, gathered from the first
    checkpoint on (with ``running_min``; the reference is then not used).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import metastable_states
        >>> c = np.array([16, 12, 6, 9, 4, 2, 1, 2])        # 9: a flicker; 2 after 1: the threshold flickering
        >>> metastable_states(c).astype(int).tolist()
        [0, 0, 1, 1, 1, 1, 0, 0]
        >>> metastable_states(c, reference=16, running_min=False).astype(int).tolist()
        [0, 0, 1, 0, 1, 1, 0, 1]
    """
    c = np.asarray(counts)
    one = c.ndim == 1
    c = np.atleast_2d(c)
    if running_min:
        _, after, settled = _settle(c.astype(np.int64), reference, prepared)
        out = after & (settled >= 2)
    else:
        ref = c[:, :1] if reference is None else np.reshape(np.asarray(reference, float), (-1, 1))
        out = (c >= 2) & (c <= ref / 2)
    return out[0] if one else out


def _count_runs(t: np.ndarray, counts: np.ndarray, min_duration: float, hold_ratio: float,
                prepared: bool = False) -> dict:
    """The module's rule on counts (S, K), vectorised over the systems: per system and checkpoint, whether a run
    of the running-minimum count starts there (``start``), that count (``settled``), the run's end time and
    whether it is censored, and whether it is a metastable plateau (``plateau``: a run of metastable states,
    :func:`metastable_states`, that holds); ``gathered`` per system."""
    t = np.asarray(t, float)
    c = np.atleast_2d(np.asarray(counts)).astype(np.int64)
    S, K = c.shape
    g, after, settled = _settle(c, None, prepared)
    k = np.arange(K)
    big = np.iinfo(np.int64).max
    previous = np.concatenate([np.full((S, 1), big), settled[:, :-1]], axis=1)
    start = after & (settled != previous)
    # the next run's first checkpoint after each checkpoint (K: none, the run is censored at the last one)
    first_at_or_after = np.minimum.accumulate(np.where(start, k[None, :], K)[:, ::-1], axis=1)[:, ::-1]
    following = np.concatenate([first_at_or_after[:, 1:], np.full((S, 1), K)], axis=1)
    censored = following == K
    end = np.where(censored, t[-1], t[np.minimum(following, K - 1)])
    age = t - t[0] if prepared else t  # the time since the start the hold test compares with
    long = end - t[None, :] >= np.maximum(min_duration, hold_ratio * age[None, :])
    metastable = after & (settled >= 2)
    return {"start": start, "settled": settled, "end": end, "censored": censored, "gathered": g,
            "plateau": start & metastable & long, "age": age}


def plateaus(t: np.ndarray, counts: np.ndarray, min_duration: float = 0.0, *,
             hold_ratio: float = HOLD_RATIO, prepared: bool = False) -> list[Plateau]:
    r"""The metastable plateaus of one series of cluster counts (the module's rule: runs of the running
    minimum count :math:`c \ge 2` after gathering with :math:`t_b - t_a \ge \max(\text{min\_duration}, r\,t_a)`;
    ``prepared``: a start already made of clusters, timed from the first checkpoint, module docstring).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import plateaus
        >>> t = np.arange(1.0, 41.0)
        >>> counts = np.r_[[9] * 2, [6] * 2, [3] * 16, [4] * 1, [3] * 9, [2] * 10]  # 4: a flicker
        >>> [(p.count, p.start, p.end, p.censored) for p in plateaus(t, counts)]
        [(3, 5.0, 31.0, False)]
        >>> t = np.arange(0.0, 1000.0, 10.0)                 # 4 prepared clusters; merges at t = 50 and 400
        >>> counts = np.r_[[4] * 5, [3] * 35, [2] * 60]
        >>> [(p.count, p.start) for p in plateaus(t, counts)], [(p.count, p.start) for p in plateaus(t, counts, prepared=True)]
        ([(2, 400.0)], [(4, 0.0), (3, 50.0), (2, 400.0)])
    """
    t = np.asarray(t, float)
    r = _count_runs(t, np.asarray(counts)[None], min_duration, hold_ratio, prepared)
    return [Plateau(int(r["settled"][0, k]), float(t[k]), float(r["end"][0, k]), bool(r["censored"][0, k]))
            for k in np.flatnonzero(r["plateau"][0])]


def merges(counts: np.ndarray) -> int:
    """Merges after the cloud has gathered: decreases of the running minimum count.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import merges
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
        >>> from attnflow.observables import energy_plateaus
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
                   rel_tol: float = ENERGY_REL_TOL, prepared: bool = False) -> dict:
    r"""Per system (rows of ``counts``, (S, K)): the first metastable plateau (module's rule) and the rest.

    Returns arrays of length S: ``count``, ``start``, ``lifetime`` (NaN / -1 without a plateau),
    ``truncation`` (the least lifetime the rule lets a plateau starting there have,
    :math:`\max(\text{min\_duration}, r\,t_a)`: the lifetimes are left-truncated there; NaN without a plateau),
    ``censored``, ``pending`` (no plateau yet, still >= 2 clusters on a run too young to qualify),
    ``plateaus`` (metastable plateaus) and ``merges`` (from the first plateau's start on: the merges of the
    metastable stage, not those of the fast clustering; 0 without a plateau); with ``energy`` (S, K), also
    ``energy_plateaus`` (the staircase's steps per system, :func:`energy_plateaus`). ``prepared``: starts
    already made of clusters, timed from the first checkpoint (module docstring; ``truncation`` is then
    :math:`\max(\text{min\_duration}, r\,(t_a - t_0))`).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import first_plateaus
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
    r = _count_runs(t, counts, min_duration, hold_ratio, prepared)
    has = r["plateau"].any(axis=1)
    k = np.where(has, r["plateau"].argmax(axis=1), 0)
    rows = np.arange(S)
    later = r["start"] & (np.arange(K)[None, :] > k[:, None])
    last = np.where(r["gathered"] < K, r["settled"][:, -1], counts[:, -1])
    out = {"count": np.where(has, r["settled"][rows, k], -1).astype(int),
           "start": np.where(has, t[k], np.nan),
           "lifetime": np.where(has, np.round(r["end"][rows, k] - t[k], 10), np.nan),  # 50.2 - 7.8 is 42.4
           "truncation": np.where(has, np.maximum(min_duration, hold_ratio * r["age"][k]), np.nan),
           "censored": has & r["censored"][rows, k], "pending": ~has & (last >= 2),
           "plateaus": r["plateau"].sum(axis=1).astype(int), "merges": np.where(has, later.sum(axis=1), 0).astype(int)}
    if energy is not None:
        e = _energy_runs(t, energy, rel_tol, hold_ratio)
        out["energy_plateaus"] = np.bincount(e["system"][e["plateau"]], minlength=S).astype(int)
    return out


def plateau_table(t: np.ndarray, counts: np.ndarray, min_duration: float = 0.0, *,
                  hold_ratio: float = HOLD_RATIO, prepared: bool = False) -> dict:
    r"""Every metastable plateau of every system (rows of ``counts``, (S, K)), not only the first: arrays of
    equal length, one entry per plateau in the order (system, start): ``system``, ``index`` (0 for a system's
    first plateau, 1 for its second, ...), ``count``, ``start``, ``end``, ``lifetime`` (``end - start``, a lower
    bound when ``censored``), ``censored``, ``start_checkpoint`` (the checkpoint of ``start``, to look up the
    cloud there, :func:`plateau_geometry`) and ``truncation`` (the least lifetime the rule lets that plateau have).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import plateau_table
        >>> t = np.arange(0.0, 1000.0, 10.0)
        >>> counts = np.stack([np.r_[[4] * 5, [3] * 35, [2] * 60], np.r_[[3] * 20, [2] * 80]])
        >>> p = plateau_table(t, counts, prepared=True)
        >>> p["system"].tolist(), p["count"].tolist(), p["start"].tolist(), p["censored"].tolist()
        ([0, 0, 0, 1, 1], [4, 3, 2, 3, 2], [0.0, 50.0, 400.0, 0.0, 200.0], [False, False, True, False, True])
    """
    t = np.asarray(t, float)
    counts = np.atleast_2d(np.asarray(counts))
    r = _count_runs(t, counts, min_duration, hold_ratio, prepared)
    system, k = np.nonzero(r["plateau"])  # row-major: by system, then by start
    first_of_system = np.r_[0, np.flatnonzero(np.diff(system)) + 1] if system.size else np.zeros(0, int)
    index = np.arange(system.size) - np.repeat(first_of_system, np.diff(np.r_[first_of_system, system.size]))
    end = r["end"][system, k]
    return {"system": system.astype(int), "index": index.astype(int), "count": r["settled"][system, k].astype(int),
            "start": t[k], "end": end, "lifetime": np.round(end - t[k], 10), "censored": r["censored"][system, k],
            "start_checkpoint": k.astype(int),
            "truncation": np.maximum(min_duration, hold_ratio * r["age"][k])}


#: :func:`cluster_geometry` builds the n x n graph up to this many tokens (8 bytes x n^2 = 128 MiB)
DENSE_GEOMETRY_TOKENS = 4096


def cluster_geometry(x, threshold: float | None = None) -> dict:
    r"""The clusters of one cloud of tokens on :math:`S^{d-1}` (rows of ``x``, (n, d)) and their geometry, host-side
    in float64: the clusters are the connected components of :math:`\langle x_i, x_j\rangle \ge \theta`
    (:func:`clusters_above`'s rule, so the counts agree; threshold :math:`\theta` default 0.999), and per cluster

    * ``positions`` (count, d): its mean direction :math:`\bar u / |\bar u|` (:math:`u_i = x_i / |x_i|`),
    * ``masses``: the fraction of the tokens in it,
    * ``smallest_gap``: the smallest angle between two positions (NaN with fewer than two clusters),
    * ``spread``: the largest angle from a token to its cluster's position;

    with ``count`` and ``labels`` (n,) (0 .. count - 1, clusters in the order of their first token). Up to
    :data:`DENSE_GEOMETRY_TOKENS` tokens the graph is built n x n; beyond, tokens of unit norm (to 1e-9, where the
    inner products are the directions' own) go through :func:`sphere_clusters`, the same
    components without an n x n graph, and others are refused with that advice. Non-finite tokens are refused.

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import cluster_geometry
        >>> x = np.array([[1.0, 0.0], [1.0, 0.001], [0.0, 1.0], [0.0, 1.0], [0.0, 1.0]])
        >>> g = cluster_geometry(x)
        >>> g["count"], g["masses"].tolist(), round(float(g["smallest_gap"]), 4)
        (2, [0.4, 0.6], 1.5703)
    """
    import jax

    from ..errors import InputError
    from ._clusters import connected_components
    from ._pairs import DEFAULT_THRESHOLD, similar_pairs
    from ._sphere_clusters import cluster_summary, numbered_by_first_token, sphere_clusters

    threshold = DEFAULT_THRESHOLD if threshold is None else float(threshold)
    pts = np.asarray(x, np.float64)
    if pts.ndim != 2 or pts.shape[0] == 0:
        raise InputError(f"x must be a cloud of tokens (n, d) with n >= 1, got shape {pts.shape}.")
    if not np.all(np.isfinite(pts)):
        raise InputError("x must be finite: a non-finite token has no cluster.")
    if pts.shape[0] > DENSE_GEOMETRY_TOKENS:
        if not (np.allclose(np.linalg.norm(pts, axis=1), 1.0, rtol=0, atol=1e-9) and -1 < threshold < 1):
            raise InputError(f"{pts.shape[0]} tokens need an n x n graph unless they have unit norm: normalise "
                             "them (and give a threshold in (-1, 1)), or use attnflow.observables.sphere_clusters.")
        found = sphere_clusters(pts, float(np.arccos(threshold)))
        return {k: found[k] for k in ("count", "labels", "positions", "masses", "smallest_gap", "spread")}
    with jax.enable_x64(True):
        raw = np.asarray(connected_components(similar_pairs(pts, threshold)))
    labels = numbered_by_first_token(raw)
    return cluster_summary(pts / np.linalg.norm(pts, axis=1, keepdims=True), labels, int(labels.max()) + 1)


def plateau_geometry(states, table: dict, threshold: float | None = None) -> list[dict]:
    r"""The cluster geometry (:func:`cluster_geometry`) at the start of every plateau of ``table``
    (:func:`plateau_table`): ``states`` holds the clouds at the checkpoints, (S, K, n, d) for S systems or (K, n, d)
    for one; entry i of the result is the geometry of system ``table["system"][i]`` at checkpoint
    ``table["start_checkpoint"][i]``, with the plateau's ``count`` and ``start`` beside it (``count`` and the
    geometry's own count agree when the counts came from the same threshold).

    Example:
        >>> import numpy as np
        >>> from attnflow.observables import plateau_geometry, plateau_table
        >>> e = lambda a: [np.cos(a), np.sin(a)]
        >>> clouds = np.array([[e(0), e(0), e(2)], [e(0), e(0), e(2)], [e(1), e(1), e(1)]])  # (K, n, d)
        >>> table = plateau_table(np.array([0.0, 1.0, 5.0]), [[2, 2, 1]], prepared=True)
        >>> [(g["count"], g["masses"].round(3).tolist(), round(g["smallest_gap"], 3)) for g in plateau_geometry(clouds, table)]
        [(2, [0.667, 0.333], 2.0)]
    """
    s = np.asarray(states, np.float64)
    if s.ndim == 3:
        s = s[None]
    out = []
    for system, k, count, start in zip(table["system"], table["start_checkpoint"], table["count"], table["start"]):
        g = cluster_geometry(s[int(system), int(k)], threshold)
        out.append({**g, "system": int(system), "plateau_count": int(count), "start": float(start)})
    return out
