r"""The report's shared checks: the geometry prediction against the observed one, and the
Thm 3.1 (polytope) and Thm 4.2 (hyperplanes) checks with Remark 3.3's timing, each adding rows to a
:class:`~attnflow.report.CaseResult`. Every tolerance is a fixed fraction of the *initial*
configuration's size (docs/report.md)."""

from __future__ import annotations

import numpy as np

from ..observables import (
    classify_geometry,
    classify_tokens,
    extreme_monotonicity,
    hull_nesting,
    levels_clustered,
    polytope_set_residual,
)
from ..observables import clustered as clustered_jnp
from ..spectral import predict_geometry
from ._base import CaseResult, Context, Run, fmt

__all__ = ["NESTING_TOL", "MOST_TOKENS", "initial_diameter", "geometry_hyp", "geometry_check", "token_entrance_times",
           "entrance_time", "remark33_check", "cluster_limits", "polytope_checks", "anorm_rate_check", "hyperplane_checks"]

NESTING_TOL = 1e-6  # relative hull / extreme-value violations allowed (solver rtol 1e-9 in float64)


def initial_diameter(y) -> np.ndarray:
    """Per member, the diameter of the initial cloud y[:, 0] (B, T, n, f) -> (B,)."""
    y0 = np.asarray(y)[:, 0]
    return np.max(np.linalg.norm(y0[:, :, None] - y0[:, None], axis=-1), axis=(1, 2))


def geometry_hyp(res: CaseResult, Q, K, V) -> None:
    p = predict_geometry(Q, K, V)
    res.settings["predicted_geometry"] = {"geometry": p.geometry, "theorem": p.theorem, "reason": p.reason,
                                          "status": p.status, "qk_reading": p.qk_reading}


def geometry_check(res: CaseResult, ctx: Context, run: Run, Q, K, V, *, y=None) -> None:
    """classify_geometry on every final configuration against predict_geometry's label
    (tolerance: rel_tol x the initial max|z_i|)."""
    pred = predict_geometry(Q, K, V).geometry
    zs = run.z if y is None else y
    obs = [classify_geometry(zb[-1], V, Q, K, x=xb[-1], scale=np.max(np.linalg.norm(zb[0], axis=-1)),
                             rel_tol=float(ctx.settings.rel_tol)) for zb, xb in zip(zs, run.x)]
    ok = [o.supports(pred) for o in obs]
    res.check("observed geometry (classify_geometry)", f"supports predict_geometry's '{pred}'",
              f"labels {[o.label for o in obs]}; clusters {[o.num_clusters for o in obs]}, "
              f"levels {[o.num_levels for o in obs]}", all(ok), sum(ok) / len(ok) - 1 if not all(ok) else 1.0,
              note="margin: 1 when every run supports the prediction, else (fraction supporting) - 1")


# ----------------------------------------------------------------------------- shared checks


#: Remark 3.3 says "most tokens": the graded time is the one by which this fraction of them are in
MOST_TOKENS = 0.75


def token_entrance_times(ts, dist, tol) -> np.ndarray:
    """Per member and token: the first save time from which on ``dist`` (B, T, n) stays <= tol
    (inf when the last save is still outside), (B, n)."""
    inside = np.asarray(dist) <= tol  # (B, T, n)
    T = inside.shape[1]
    # index of the last save outside, + 1 (0 when always inside)
    last_out = np.where(~inside, np.arange(T)[None, :, None], -1).max(axis=1) + 1
    padded = np.append(np.asarray(ts, np.float64), np.inf)
    return padded[last_out]


def entrance_time(ts, dist, tol, fraction: float = 1.0) -> np.ndarray:
    """Per member: the first save time from which on at least ``fraction`` of the tokens keep
    ``dist`` (B, T, n) <= tol (inf when the last save does not get there), (B,).

    Example:
        >>> import numpy as np
        >>> from attnflow.report._checks import entrance_time
        >>> dist = np.array([[[2, 2, 2, 2], [0, 2, 2, 2], [0, 0, 0, 2], [0, 0, 0, 0]]], float)  # (1, T=4, n=4)
        >>> entrance_time(np.arange(4.0), dist, 1.0).tolist(), entrance_time(np.arange(4.0), dist, 1.0, 0.75).tolist()
        ([3.0], [2.0])
    """
    per_token = np.sort(token_entrance_times(ts, dist, tol), axis=1)
    k = max(1, int(np.ceil(fraction * per_token.shape[1] - 1e-9)))
    return per_token[:, k - 1]


def remark33_check(res: CaseResult, ts, dist, tol_text: str, *, unit: str, what: str, rate: float,
                   rel: float) -> None:
    """Remark 3.3: the time most tokens (:data:`MOST_TOKENS`) have entered, and stay in, the stated
    neighbourhood of the limit set, against the time the theorem's mechanism needs: tokens move
    towards their leaders at rate ``rate`` (distance ~ e^{-rate t}), so reaching ``rel`` of the
    initial size takes ln(1/rel)/rate once P has saturated (doubly exponentially fast, O(1) time);
    pass when that time is at most twice ln(1/rel)/rate. The time every token is in is reported
    beside it, not graded: a token near a tie between two leaders saturates late (the remark
    speaks of most tokens)."""
    t_most = entrance_time(ts, dist, 1.0, MOST_TOKENS)
    t_all = entrance_time(ts, dist, 1.0)
    limit = 2 * np.log(1 / rel) / rate
    graded = limit < float(ts[-1])
    res.check("Remark 3.3: clustered early", f"{MOST_TOKENS:.0%} of the tokens enter and stay within {tol_text} of "
              f"{what} by {unit} <= 2 ln(1/{rel:g}) / {rate:.3g} = {fmt(limit)}",
              f"{unit} {MOST_TOKENS:.0%} entered per run {fmt(t_most)}; all entered {fmt(t_all)}"
              + ("" if graded else f" (horizon {fmt(ts[-1])} too short to grade)"),
              bool(np.all(t_most <= limit)) if graded else None,
              float(limit - np.max(t_most)) if np.all(np.isfinite(t_most)) else -np.inf,
              note="rate: the contraction rate towards the leaders (lambda; Euler: ln(1 + lambda dt) per layer); "
                   "the paper: 'after a few layers, most tokens are clustered'")


def cluster_limits(y_final, tol):
    """Centres of the clusters of a final cloud (n, f) under the fixed tolerance, with the count and
    whether every cluster has diameter <= tol."""
    from ..observables import cluster_labels

    lab = np.asarray(cluster_labels(y_final, 1.0, tol))
    centres = np.array([y_final[lab == l].mean(axis=0) for l in np.unique(lab)])
    count, compact = (int(a) for a in clustered_jnp(y_final, tol))
    return centres, count, bool(compact)


def polytope_checks(res: CaseResult, ctx: Context, ts, y, *, what: str, A2=None, lam: float = 1.0,
                    unit: str = "t", dt: float | None = None) -> None:
    """Thm 3.1 checks on clouds y (B, T, n, f): hull nesting, final tokens at vertex / 0 /
    boundary, few compact clusters, and with A2 = Q^T K SPD: the limit-set identity and the
    rate bound on max_i |A z_i|^2; Remark 3.3."""
    rel = float(ctx.settings.rel_tol)
    B, T, n, f = y.shape
    viol = np.array([np.max(hull_nesting(yb)) for yb in y])
    res.check(f"conv{{{what}(t)}} non-increasing", f"hull of {what}(t') inside hull of {what}(t) for t' > t "
              f"(violation <= {NESTING_TOL:g} x diameter)", f"max violation {fmt(viol.max())}",
              viol.max() <= NESTING_TOL, NESTING_TOL - viol.max())
    diam0 = initial_diameter(y)
    tol = rel * diam0  # (B,): fixed by the initial configuration
    classes = np.array([classify_tokens(yb[-1], rel, s0) for yb, s0 in zip(y, diam0)])  # (B, n)
    counts = {c: int(np.sum(classes == k)) for k, c in enumerate(("vertex", "origin", "boundary", "interior"))}
    interior = counts["interior"]
    res.check(f"final {what}: vertex, 0 or boundary", f"every token at a vertex, at 0 or on the boundary "
              f"(within {rel:g} x initial diameter)",
              f"{counts['vertex']} at vertices, {counts['origin']} at 0, {counts['boundary']} on the boundary, "
              f"{interior} inside (of {B * n})", interior == 0, -interior if interior else
              counts["vertex"] / (B * n))
    lims = [cluster_limits(yb[-1], tb) for yb, tb in zip(y, tol)]
    ncl = np.array([c for _, c, _ in lims])
    compact = all(cp for _, _, cp in lims)
    res.check("few vertices, each a point", f"clusters (within {rel:g} x initial diameter, each of that "
              f"diameter at most) far fewer than tokens: <= n/2 = {n // 2}",
              f"clusters per run {fmt(ncl)} of n = {n}; all compact: {compact}",
              bool(ncl.max() <= n // 2 and compact), float(n // 2 - ncl.max()) if compact else -1.0)
    if A2 is not None:
        r = np.array([np.max(polytope_set_residual(yb[-1], A2)) for yb in y])
        res.check("limit set S", f"max_j <A z, A v_j> - |A z|^2 = 0 at every final token (A = (Q^T K)^(1/2); "
                  f"<= {rel:g} x max|A v|^2)", f"max residual {fmt(r.max())}", r.max() <= rel, rel - r.max())
        anorm_rate_check(res, ts, y, A2, lam=lam, dt=dt)
    dist = np.stack([np.min(np.linalg.norm(yb[:, :, None] - c[None, None], axis=-1), axis=-1) / tb
                     for yb, (c, _, _), tb in zip(y, lims, tol)])  # (B, T, n) in units of tol
    dist = np.where((ncl <= n // 2)[:, None, None], dist, np.inf)  # no limit points: never clustered
    rate = lam if dt is None else np.log(1 + lam * dt) / dt
    remark33_check(res, ts, dist, f"{rel:g} x initial diameter", unit=unit,
                   what=f"the limit points (the <= n/2 cluster centres of {what}(t1))", rate=rate, rel=rel)


def anorm_rate_check(res: CaseResult, ts, y, A2, *, lam: float, dt: float | None) -> None:
    r"""Thm 3.1's mechanism, quantified: with :math:`M(t) = \max_i |A z_i|^2` and P_ij <=
    exp(-s g_j), s the score scale, the token of largest A-norm loses at most
    :math:`2\lambda (n-1)/(e\,s)` per unit time, so :math:`M(t) - M(t') \le \frac{n-1}{e}
    (e^{-2\lambda t} - e^{-2\lambda t'})` (continuous time, s = e^{2 lambda t}); per Euler layer
    k: :math:`2h(n-1)/(e (1+\lambda dt)^{2k})`, h = lambda dt / (1 + lambda dt). Derivation in
    docs/report.md. A collapse, uniform attention or any field that pulls the extreme token in
    at an O(1) rate violates it."""
    S = 0.5 * (A2 + A2.T)
    n = y.shape[2]
    M = np.max(np.einsum("btnd,de,btne->btn", y, S, y), axis=-1)  # (B, T)
    drop = M[:, :-1] - M[:, 1:]
    if dt is None:
        allowed = (n - 1) / np.e * (np.exp(-2 * lam * ts[:-1]) - np.exp(-2 * lam * ts[1:]))
    else:
        k = np.round(ts[:-1] / dt)
        h = lam * dt / (1 + lam * dt)
        allowed = 2 * h * (n - 1) / (np.e * (1 + lam * dt) ** (2 * k))
    excess = np.max(drop - allowed[None], axis=1) / M[:, 0]  # relative to the initial max A-norm
    res.check("max |A z_i|^2: Thm 3.1 rate bound", "decrease between saves <= (n-1)/e (e^{-2 lambda t} - "
              "e^{-2 lambda t'}) (continuous; per layer 2h(n-1)/(e (1 + lambda dt)^{2k})), up to "
              f"{NESTING_TOL:g} x M(0)", f"worst excess {fmt(excess.max())} x M(0); M(t1)/M(0) "
              f"{fmt(M[:, -1] / M[:, 0])}", bool(excess.max() <= NESTING_TOL), NESTING_TOL - float(excess.max()),
              note="a collapse of the extreme tokens (e.g. to one point) breaks it")


def hyperplane_checks(res: CaseResult, ctx: Context, ts, z, phi_dual, *, lam1: float, dt: float | None = None,
                      unit: str = "t") -> np.ndarray:
    """Thm 4.2 checks: phi_1^*(z_i) -> {a, 0, b}; max non-increasing, min non-decreasing; at most
    three levels. Returns the projections (B, T, n)."""
    rel = float(ctx.settings.rel_tol)
    s = z @ phi_dual  # (B, T, n)
    width0 = np.ptp(s[:, 0], axis=-1)
    ups, downs = zip(*[map(float, extreme_monotonicity(sb)) for sb in s])
    worst = max(max(ups), max(downs)) / max(width0.min(), 1e-300)
    res.check("max phi* z non-increasing, min non-decreasing", f"increase of max and decrease of min <= "
              f"{NESTING_TOL:g} x initial width", f"worst relative change {fmt(worst)}",
              worst <= NESTING_TOL, NESTING_TOL - worst)
    tol = rel * width0  # fixed by the initial configuration (b - a may collapse)
    a, b = s[:, -1].min(axis=1), s[:, -1].max(axis=1)
    lv = np.stack([a, np.zeros_like(a), b], axis=1)  # (B, 3)
    dist = np.min(np.abs(s[:, :, :, None] - lv[:, None, None, :]), axis=-1) / tol[:, None, None]  # (B, T, n)
    res.check("phi* z_i -> {a, 0, b}", f"every projection within {rel:g} x initial width of a = min, 0 or b = max",
              f"max distance {fmt(dist[:, -1].max() * rel)} x initial width", dist[:, -1].max() <= 1,
              rel * (1 - dist[:, -1].max()))
    lev = [tuple(int(v) for v in levels_clustered(sb[-1], t)) for sb, t in zip(s, tol)]
    used = np.array([c for c, _ in lev])
    compact = all(cp for _, cp in lev)
    res.check("hyperplanes used", f"at most 3 levels of phi* z(t1) (each of width <= {rel:g} x initial width); "
              "typically 2", f"levels per run {fmt(used)}; all compact: {compact}",
              bool(used.max() <= 3 and compact), float(3 - used.max()) if compact else -1.0)
    rate = lam1 if dt is None else np.log(1 + lam1 * dt) / dt
    remark33_check(res, ts, dist, f"{rel:g} x initial width", unit=unit,
                   what="the hyperplanes phi* z = a, 0, b (a, b: min, max at t1)", rate=rate, rel=rel)
    return s
