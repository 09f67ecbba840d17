r"""The cases of the reproduction report, one function per theorem / remark (SPEC §2, §3).

Each case builds its weights (seeded), computes its hypotheses (nothing is asserted), draws
``batch`` random initial configurations, integrates ``ctx.field_factory``'s vector field for
them in one batched call, and compares the trajectory with predictions derived from the
hypotheses. Every tolerance is absolute: a fixed fraction of the *initial* configuration's size,
times the rate at which the theorem lets the quantity change (reasons in docs/report.md).
Every case also checks that its trajectory solves the paper's equation
(:func:`~attnflow.report.base.defect_check`).
"""

from __future__ import annotations

import zlib

import numpy as np

from ..observables import (
    classify_geometry,
    classify_tokens,
    collapse_bound,
    double_log_slope,
    extreme_monotonicity,
    hull_nesting,
    leaders,
    levels_clustered,
    num_clusters,
    off_leader_mass,
    polytope_set_residual,
    split_coordinates,
    uniform_distance,
    unstable_left_basis,
)
from ..observables import clustered as clustered_jnp
from ..spectral import check_good_triple, is_positive_definite, paranormal_split, predict_geometry, spectral_one
from . import figures
from .base import EULER_STEPS, CaseResult, Context, Run, defect_check, fmt, register, run_case_sim

NESTING_TOL = 1e-6  # relative hull / extreme-value violations allowed (solver rtol 1e-9 in float64)


# ----------------------------------------------------------------------------- weights
def random_spd_factor(rng, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Q = K = R with R^T R a random SPD matrix (Wishart + 0.5 I)."""
    M = rng.normal(size=(d, d))
    S = M @ M.T / d + 0.5 * np.eye(d)
    R = np.linalg.cholesky(S).T
    return R, R.copy()


def similar(rng, blocks: np.ndarray) -> np.ndarray:
    """B blocks B^{-1} with a random, well-conditioned, non-orthogonal B (spectrum of ``blocks`` kept)."""
    d = blocks.shape[0]
    for _ in range(100):
        B = np.eye(d) + 0.5 * rng.normal(size=(d, d))
        if np.linalg.cond(B) < 8:
            return B @ blocks @ np.linalg.inv(B)
    return blocks  # pragma: no cover


def good_qk(rng, V, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian Q, K resampled until <Q phi_1, K phi_1> > 0.1 (Def 4.1 (2)); Q^T K is left
    unsymmetric and typically indefinite, which Thm 4.2 allows."""
    for _ in range(1000):
        Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
        if check_good_triple(Q, K, V).qk_value > 0.1:
            return Q, K
    raise RuntimeError("no Q, K with <Q phi, K phi> > 0 found")  # pragma: no cover


def stream(ctx: Context, *tags) -> np.random.Generator:
    """A seeded generator named by tags: cases that share tags share draws (e.g. Thm 3.1 and
    its Euler versions use the same weights and initial configurations)."""
    return np.random.default_rng([ctx.seed] + [zlib.crc32(str(t).encode()) for t in tags])


def initial(ctx: Context, n: int, d: int, scale: float = 1.0) -> np.ndarray:
    """``batch`` initial configurations (B, n, d) with i.i.d. N(0, scale^2) entries."""
    return scale * stream(ctx, "x0", n, d).normal(size=(int(ctx["batch"]), n, d))


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
                             rel_tol=float(ctx["rel_tol"])) for zb, xb in zip(zs, run.x)]
    ok = [o.supports(pred) for o in obs]
    res.check("observed geometry (classify_geometry)", f"supports predict_geometry's '{pred}'",
              f"labels {[o.label for o in obs]}; clusters {[o.num_clusters for o in obs]}, "
              f"levels {[o.num_levels for o in obs]}", all(ok), sum(ok) / len(ok) - 1 if not all(ok) else 1.0,
              note="margin: 1 when every run supports the prediction, else (fraction supporting) - 1")


# ----------------------------------------------------------------------------- shared checks
def entrance_time(ts, dist, tol) -> np.ndarray:
    """Per member: the first save time from which on ``dist`` (B, T, n) stays <= tol for every token
    (inf when the last save is still outside)."""
    out = []
    for db in dist:
        inside = np.all(db <= tol, axis=1)
        bad = np.nonzero(~inside)[0]
        k = 0 if bad.size == 0 else bad[-1] + 1
        out.append(ts[k] if k < len(ts) else np.inf)
    return np.asarray(out)


def remark33_check(res: CaseResult, ts, dist, tol_text: str, *, unit: str, what: str, rate: float,
                   rel: float) -> None:
    """Remark 3.3: the time the configuration enters (and stays in) the stated neighbourhood of
    the limit set, against the time the theorem's mechanism needs: tokens move towards their
    leaders at rate ``rate`` (distance ~ e^{-rate t}), so reaching ``rel`` of the initial size
    takes ln(1/rel)/rate once P has saturated (doubly exponentially fast, O(1) time); pass when
    the entrance comes by twice that."""
    t_in = entrance_time(ts, dist, 1.0)
    limit = 2 * np.log(1 / rel) / rate
    graded = limit < float(ts[-1])
    res.check("Remark 3.3: clustered early", f"every token enters and stays within {tol_text} of {what} by "
              f"{unit} <= 2 ln(1/{rel:g}) / {rate:.3g} = {fmt(limit)}", f"{unit} entered per run {fmt(t_in)}"
              + ("" if graded else f" (horizon {fmt(ts[-1])} too short to grade)"),
              bool(np.all(t_in <= limit)) if graded else None,
              float(limit - np.max(t_in)) if np.all(np.isfinite(t_in)) else -np.inf,
              note="rate: the contraction rate towards the leaders (lambda; Euler: ln(1 + lambda dt) per layer); "
                   "the paper: clusters appear 'after a few layers'")


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
    rel = float(ctx["rel_tol"])
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
    rel = float(ctx["rel_tol"])
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


def standard_figures(res: CaseResult, ctx: Context, run: Run, *, overlay: str | None = None, phi_dual=None,
                     gif: bool = False, unit: str = "t", coords=None) -> None:
    if not ctx.figures:
        return
    name = res.name
    out = ctx.out
    z0 = run.z[0]
    d = z0.shape[-1] if coords is None else len(coords)
    res.figures.append((figures.trajectories(out / f"{name}_trajectories.png", run.ts, z0, title=f"{res.title}: "
                        f"rescaled tokens (run 0)", overlay=overlay if d <= 3 else None, phi_dual=phi_dual,
                        coords=coords), "Token paths of run 0 (grey), final positions (blue), "
                        + {"hull": "final convex hull (red).", "hyperplanes": "hyperplanes phi_1^* z = a, b "
                           "(red)" + (" and 0 (dotted)." if d == 2 else ".")}.get(overlay, "")))
    res.figures.append((figures.attention_maps(out / f"{name}_attention.png", run.ts, run.P[0], run.rank[0],
                        title=f"{res.title}: P(t) of run 0 with numerical rank (tol {ctx['rank_tol']:g})"),
                        "Attention matrices at four times, with their numerical rank."))
    res.figures.append((figures.cluster_boolean(out / f"{name}_clusters.png", run.ts, run.clusters, run.boolean,
                        title=f"{res.title}: clusters (blue) and max_i(1 - max_j P_ij) (red), all runs",
                        xlabel=unit), "Cluster count and distance of P to the nearest Boolean matrix."))
    if gif and int(ctx["gif_frames"]) > 0 and z0.shape[-1] == 2:
        res.figures.append((figures.animation(out / f"{name}.gif", run.ts, z0, title=res.title, overlay=overlay,
                            phi_dual=phi_dual, frames=int(ctx["gif_frames"])), "Animation of run 0."))


def euler_hyp(res: CaseResult, V, method: str, dt) -> None:
    if method == "euler":
        s = np.linalg.svd(np.eye(V.shape[0]) + dt * V, compute_uv=False)
        res.hyp(f"Euler layers dt = {dt:g}, I + dt V invertible (smallest singular value)", s[-1] > 1e-12 * s[0],
                float(s[-1]))


# ----------------------------------------------------------------------------- cases
@register("thm2_1", "Thm 2.1 (d = 1)", "Thm 2.1")
def thm2_1(ctx: Context, res: CaseResult) -> None:
    n, t1 = int(ctx["n"]), float(ctx["t1"])
    Q = K = V = np.ones((1, 1))
    x0 = initial(ctx, n, 1)
    res.hyp("d = 1", V.shape == (1, 1), V.shape[0])
    res.hyp("V > 0", float(V[0, 0]) > 0, float(V[0, 0]))
    res.hyp("QK > 0", float((Q.T @ K)[0, 0]) > 0, float((Q.T @ K)[0, 0]))
    gaps0 = np.min(np.diff(np.sort(x0[..., 0], axis=1), axis=1))
    res.hyp("tokens pairwise distinct (smallest gap)", gaps0 > 0, float(gaps0))
    run = run_case_sim(ctx, x0, Q, K, V, t1=t1, picture="raw")
    res.record(run)
    defect_check(res, run)
    x, P, ts = run.x[..., 0], run.P, run.ts
    B = x.shape[0]
    order = np.argsort(x0[..., 0], axis=1)
    ranks, exceptions = [], []
    for b in range(B):
        o = order[b]
        Ps = P[b, -1][np.ix_(o, o)]
        lead = np.argmax(Ps, axis=1)
        ok = ((lead == 0) | (lead == n - 1)) & (1 - Ps.max(axis=1) <= 1e-6)
        exceptions.append(int(np.sum(~ok)))
        ranks.append(int(run.rank[b, -1]))
    res.check("P* Boolean: rows e_1 / e_n", "in sorted order every row of P(t1) is e_1 or e_n (1 - max <= 1e-6), "
              "except at most one", f"non-conforming rows per run {fmt(exceptions)}", max(exceptions) <= 1,
              1 - max(exceptions))
    res.check("rank P*", "1 or 2 (almost every start; <= 3 always)", f"ranks {fmt(ranks)}", max(ranks) <= 2,
              2 - max(ranks))
    lead = [np.nonzero(leaders(P[b, -1][np.ix_(order[b], order[b])]))[0].tolist() for b in range(B)]
    res.check("leader columns of P*", f"the smallest and/or largest token (sorted positions 0, {n - 1})",
              f"leaders per run {lead}", all(set(l) <= {0, n - 1} for l in lead),
              1.0 if all(set(l) <= {0, n - 1} for l in lead) else -1.0, note="margin +-1: a yes/no check")
    xs = np.take_along_axis(x, np.broadcast_to(order[:, None, :], x.shape), axis=2)
    gaps = np.diff(xs, axis=2)  # (B, T, n-1), positive while the order is preserved
    rel_gap = np.min(gaps / np.max(np.abs(xs), axis=2, keepdims=True))
    res.check("order preserved, no collision", "sorted gaps stay > 0", f"min relative gap {fmt(rel_gap)}",
              rel_gap > 0, rel_gap)
    dists = np.abs(x[:, :, :, None] - x[:, :, None, :])
    drop = np.max(-np.diff(dists, axis=1) / np.maximum(dists[:, :-1], 1e-300))
    res.check("|x_i - x_j| non-decreasing", "no pairwise distance decreases (relative <= 1e-9, the solver's rtol)",
              f"largest relative decrease {fmt(max(drop, 0.0))}", drop <= 1e-9, 1e-9 - max(drop, 0.0))
    gam = x * np.exp(-ts)[None, :, None]  # x_k e^{-t}
    scale_g = np.max(np.abs(gam[:, -1]), axis=1)  # (B,)
    small = np.sum(np.abs(gam[:, -1]) <= float(ctx["rel_tol"]) * scale_g[:, None], axis=1)
    step = max(1, int(round(1.0 / (ts[1] - ts[0]))))
    idx = np.arange(len(ts) - 1, step - 1, -step)[::-1]
    win = np.array([np.max(np.abs(gam[:, k] - gam[:, k - step]), axis=1) / scale_g for k in idx])  # (W, B)
    late = idx >= len(ts) // 2
    rate = np.array([np.polyfit(ts[idx[late]], np.log(np.maximum(win[late, b], 1e-300)), 1)[0]
                     for b in range(B)])
    res.check("x_k e^{-t} -> gamma_k != 0", "all but at most one |gamma_k| > rel_tol x max|gamma|; x e^{-t} converges "
              "at the predicted rate e^{-lambda_1 t} = e^{-t} (pass: fitted rate <= -0.5 = half of it)",
              f"near-zero gamma per run {fmt(small)}; decay rate of the change {fmt(rate)} (predicted -1)",
              bool(small.max() <= 1 and np.all(rate <= -0.5)), float(-0.5 - rate.max()),
              note="tokens follow the extreme tokens: x_i(t) ~ x_i(s) + c (e^t - e^s), so x_k e^{-t} changes by "
              "O(e^{-t}) per unit time")
    off = np.stack([np.asarray(off_leader_mass_batch(P[b])) for b in range(B)])  # (B, T, n)
    slopes = []
    for b in range(B):
        second = np.sort(off[b], axis=1)[:, -2] if n > 1 else off[b, :, 0]  # spare the one free row
        ok = (second > 1e-250) & (second < 0.1)
        t_ok = ts[ok]
        keep = ok & (ts >= (t_ok.min() + t_ok.max()) / 2 if t_ok.size else ok)
        slopes.append(float(double_log_slope(ts[keep], second[keep])))
    slopes = np.asarray(slopes)
    dev = np.nanmax(np.abs(slopes - 1.0)) if np.any(np.isfinite(slopes)) else np.inf
    res.check("doubly exponential saturation", "log(-log P_off) grows linearly in t with slope lambda_1 = 1 "
              "(late half of the measurable window; pass: |slope - 1| <= 0.25)", f"slopes {fmt(slopes)}",
              dev <= 0.25, 0.25 - dev,
              note="P_off = second-largest off-leader mass over rows (the theorem spares one row); the score gaps "
              "grow like e^{lambda_1 t}; 0.25: the fit's bias from the O(e^{-t}) corrections over the window")
    if ctx.figures:
        res.figures.append((figures.trajectories(ctx.out / "thm2_1_gamma.png", ts, gam[0][:, :, None],
                            title="Thm 2.1: x_k(t) e^{-t} (run 0)", ylabel="x e^{-t}"),
                            "Rescaled tokens x_k e^{-t} converge to distinct gamma_k (order preserved)."))
        res.figures.append((figures.attention_maps(ctx.out / "thm2_1_attention.png", ts, P[0][:, order[0]][:, :,
                            order[0]], run.rank[0], title="Thm 2.1: P(t) in sorted token order (run 0)"),
                            "P(t) in sorted order: the mass moves to the first or last column."))
        res.figures.append((figures.levels(ctx.out / "thm2_1_offmass.png", ts, np.log10(np.clip(off[0], 1e-300, 1)),
                            title="Thm 2.1: log10 off-leader mass per row (run 0)", ylabel="log10(1 - max_j P_ij)"),
                            "Off-leader mass per row: doubly exponential decay (all rows but at most one)."))


def off_leader_mass_batch(P):
    import jax

    return jax.vmap(off_leader_mass)(P)


def _polytope_case(ctx: Context, res: CaseResult, Q, K, V, *, method="tsit5", dt=None, gif=False,
                   theorem_needs_spd: bool = True) -> None:
    d, n, t1 = V.shape[0], int(ctx["n"]), float(ctx["t1"])
    A2 = Q.T @ K
    sp = spectral_one(Q, K, V)
    lam = float(sp.stats.lambda1[0].real)
    res.hyp("V = lambda I, lambda > 0", bool(sp.scalar_V[0]) and lam > 0, lam)
    spd, lam_min = is_positive_definite(A2)
    if theorem_needs_spd:
        res.hyp("Q^T K symmetric positive definite (min eigenvalue)", spd, lam_min)
    else:
        res.hyp(f"Q^T K {'symmetric' if sp.qk_symmetric[0] else 'not symmetric'}, not SPD (Section 12.1: "
                "no theorem; min eigenvalue of the symmetric part)", not spd, lam_min)
    euler_hyp(res, V, method, dt)
    geometry_hyp(res, Q, K, V)
    unit = "layer" if (method == "euler" and dt == 1.0) else "t"
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1, method=method, dt=dt)
    res.record(run)
    defect_check(res, run)
    ts = run.ts / dt if unit == "layer" else run.ts
    polytope_checks(res, ctx, ts, run.z, what="z", A2=A2 if spd else None, lam=lam, unit=unit,
                    dt=dt if method == "euler" else None)
    slopes = [float(double_log_slope(run.ts, np.median(np.asarray(off_leader_mass_batch(Pb)), axis=1)))
              for Pb in run.P]
    res.check("off-leader mass (median row)", "vanishes doubly exponentially: log(-log) linear in t",
              f"slope of log(-log P_off) {fmt(np.asarray(slopes))}", None, float("nan"),
              note="no rate is stated for Thm 3.1; measured for comparison with Thm 2.1 (slope 1)")
    leaders_t1 = [int(np.sum(leaders(P[-1]))) for P in run.P]
    res.check("leaders of lim P", "mass on few leader columns (one per cluster)",
              f"leader columns per run {leaders_t1}; clusters {[int(c) for c in run.clusters[:, -1]]}", None,
              float("nan"))
    geometry_check(res, ctx, run, Q, K, V)
    standard_figures(res, ctx, run, overlay="hull", gif=gif, unit=unit)


@register("thm3_1", "Thm 3.1 (V = I, Q^T K > 0)", "Thm 3.1")
def thm3_1(ctx: Context, res: CaseResult) -> None:
    d = int(ctx["d"])
    Q, K = random_spd_factor(stream(ctx, "spd", d), d)
    _polytope_case(ctx, res, Q, K, np.eye(d), gif=True)


def hyperplane_V(ctx: Context, d: int) -> np.ndarray:
    """The hyperplane regime of Thm 4.2: lambda_1 = 1.348 with transverse eigenvalues of negative
    real part, whose components diverge in z (d = 2: -0.068; d = 3: -0.3 +- 0.6 i), in a random
    non-orthogonal basis."""
    rng = stream(ctx, "hyperplane_V", d)
    if d == 2:
        return similar(rng, np.diag([1.348, -0.068]))
    return similar(rng, np.array([[1.348, 0, 0], [0, -0.3, 0.6], [0, -0.6, -0.3]]))


def _hyperplane_case(ctx: Context, res: CaseResult, V, *, method="tsit5", dt=None, gif=False) -> None:
    d, n, t1 = V.shape[0], int(ctx["n"]), float(ctx["t1"])
    Q, K = good_qk(stream(ctx, "good_qk", V.tobytes()), V, d)
    g = check_good_triple(Q, K, V)
    eig = np.linalg.eigvals(V)
    res.hyp("Def 4.1 (1): top-modulus eigenvalue real, positive, simple (gap lambda_1 - |lambda_2|)", g.condition1,
            {"lambda1": g.lambda1.real, "gap": g.gap, "eigenvalues": [str(np.round(e, 4)) for e in eig]})
    res.hyp("Def 4.1 (2): <Q phi_1, K phi_1> > 0", g.condition2, g.qk_value)
    transverse = sorted(e.real for e in eig if abs(e - g.lambda1) > 1e-9)
    res.hyp("hyperplane regime: every transverse eigenvalue has Re < 0 (z's transverse parts diverge)",
            max(transverse) < 0, [round(t, 4) for t in transverse])
    pd, lam_min = is_positive_definite(Q.T @ K)
    res.notes.append(f"Q^T K is {'' if pd else 'not '}symmetric positive definite (smallest eigenvalue of its "
                     f"symmetric part {lam_min:.3g}); Thm 4.2 does not need it.")
    euler_hyp(res, V, method, dt)
    geometry_hyp(res, Q, K, V)
    res.settings["weights"] = {"Q": Q, "K": K, "V": V}
    unit = "layer" if (method == "euler" and dt == 1.0) else "t"
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1, method=method, dt=dt)
    res.record(run)
    defect_check(res, run)
    phi, phi_dual = g.eig.phi, g.eig.phi_dual
    ts = run.ts / dt if unit == "layer" else run.ts
    s = hyperplane_checks(res, ctx, ts, run.z, phi_dual, lam1=g.lambda1.real, dt=dt, unit=unit)
    geometry_check(res, ctx, run, Q, K, V)
    trans = run.z - s[..., None] * phi  # transverse parts
    g0 = np.max(np.linalg.norm(trans[:, 0], axis=-1))
    g1 = np.max(np.linalg.norm(trans[:, -1], axis=-1))
    res.check("transverse components", "need not converge; here predicted to diverge like e^{-Re mu t}",
              f"max|z - phi*(z) phi| {fmt(g0)} at t = 0 -> {fmt(g1)} at t1 (e^(-Re mu t1) = "
              f"{fmt(np.exp(-max(transverse) * float(run.ts[-1])))}..{fmt(np.exp(-min(transverse) * float(run.ts[-1])))})",
              None, float("nan"))
    standard_figures(res, ctx, run, overlay="hyperplanes", phi_dual=phi_dual, gif=gif, unit=unit)
    if ctx.figures:
        res.figures.append((figures.levels(ctx.out / f"{res.name}_levels.png", ts, s[0], title=f"{res.title}: "
                            "phi_1^*(z_i(t)) (run 0)", xlabel=unit), "Projections on the dual leading eigenvector: "
                            "max non-increasing, min non-decreasing, limits in {a, 0, b}."))


@register("thm4_2_2d", "Thm 4.2 (good triple, d = 2, eigenvalues 1.348, -0.068)", "Thm 4.2")
def thm4_2_2d(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 2), gif=True)


@register("thm4_2_3d", "Thm 4.2 (good triple, d = 3, transverse -0.3 +- 0.6i)", "Thm 4.2")
def thm4_2_3d(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 3))


@register("codim_k", "Conjecture: codimension k (top eigenvalue negative: not a good triple)",
          "Conjecture (codim k)")
def codim_k(ctx: Context, res: CaseResult) -> None:
    rng = stream(ctx, "codim_k_neg")
    d, n, t1 = 3, int(ctx["n"]), float(ctx["t1"])
    V = similar(rng, np.diag([-1.2, 1.0, 0.9]))
    Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    W = unstable_left_basis(V)
    k = W.shape[0]
    g = check_good_triple(Q, K, V)
    res.hyp("not a good triple (Def 4.1 fails: the top-modulus eigenvalue is negative)", not g.good,
            {"lambda1": str(np.round(g.lambda1, 4)), "gap": g.gap})
    res.hyp(f"k = #eigenvalues of V with positive real part = {k} >= 1", k >= 1,
            [str(np.round(e, 4)) for e in np.linalg.eigvals(V)])
    res.notes.append(f"No hypothesis on Q, K (Gaussian); Q^T K symmetric positive definite: "
                     f"{is_positive_definite(Q.T @ K)[0]}.")
    geometry_hyp(res, Q, K, V)
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1)
    res.record(run)
    defect_check(res, run)
    rel = float(ctx["rel_tol"])
    p = np.einsum("btnd,kd->btnk", run.z, W)  # W z_i (B, T, n, k)
    tol = rel * initial_diameter(p)
    lims = [cluster_limits(pb[-1], tb) for pb, tb in zip(p, tol)]
    counts = np.array([c for _, c, _ in lims])
    compact = all(cp for _, _, cp in lims)
    res.notes.append(f"Run 0 approaches the affine subspaces {{z : W z = c}} with c in "
                     f"{np.round(lims[0][0], 3).tolist()} (W = {np.round(W, 3).tolist()}).")
    res.check(f"<= 3 affine subspaces of codimension {k}", f"W z_i (W: unstable left subspace, {k} x {d}) takes "
              f"<= 3 values, each within {rel:g} x the initial diameter of the W z_i", f"values per run {fmt(counts)}; "
              f"all compact: {compact}", bool(counts.max() <= 3 and compact), float(3 - counts.max()) if compact
              else -1.0)
    geometry_check(res, ctx, run, Q, K, V)
    standard_figures(res, ctx, run)
    if ctx.figures:
        res.figures.append((figures.trajectories(ctx.out / "codim_k_projections.png", run.ts, p[0],
                            title=f"codim-k: W z_i(t) in R^{k} (run 0)"), "Projections on the unstable left "
                            "subspace: each limit point is one affine subspace of codimension k."))


def _paranormal_case(ctx: Context, res: CaseResult, Q, K, V, *, section12: bool) -> None:
    d, n, t1 = V.shape[0], int(ctx["n"]), float(ctx["t1"])
    split = paranormal_split(V)
    spd, lam_min = is_positive_definite(Q.T @ K)
    res.hyp(f"V paranormal: {split.reason}", split.paranormal)
    cosine = float(np.max(np.abs(np.linalg.qr(split.F)[0].T @ np.linalg.qr(split.G)[0])))
    res.hyp("F and G not orthogonal (largest cosine between them; the general direct sum)", cosine > 1e-6, cosine)
    if section12:
        res.hyp("Q^T K with i.i.d. U[-1,1] entries, not SPD (min eigenvalue of its symmetric part)", not spd, lam_min)
    else:
        res.hyp("Q^T K symmetric positive definite (min eigenvalue)", spd, lam_min)
    AF = split.F.T @ (Q.T @ K) @ split.F
    sym = np.linalg.eigvalsh(0.5 * (AF + AF.T))
    res.hyp("F-block F^T Q^T K F: symmetric part positive definite (eigenvalues)", sym.min() > 0, sym.tolist())
    geometry_hyp(res, Q, K, V)
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1)
    res.record(run)
    defect_check(res, run)
    a, c = split_coordinates(run.z, split.F, split.G)
    a, c = np.asarray(a), np.asarray(c)
    polytope_checks(res, ctx, run.ts, a, what="F-part of z", lam=split.lam)
    g0 = np.max(np.linalg.norm(c[:, 0], axis=-1))
    g1 = np.max(np.linalg.norm(c[:, -1], axis=-1))
    geometry_check(res, ctx, run, Q, K, V)
    res.check("G-components", "free (may diverge)", f"max|G-coordinate| {fmt(g0)} at t = 0 -> {fmt(g1)} at t1",
              None, float("nan"))
    standard_figures(res, ctx, run, overlay=None)
    if ctx.figures:
        res.figures.append((figures.trajectories(ctx.out / f"{res.name}_F.png", run.ts, a[0], title=f"{res.title}: "
                            "F-coordinates with their hull (run 0)", overlay="hull"), "F-components converge to the "
                            "vertices of a polytope in F (or 0)."))
        res.figures.append((figures.levels(ctx.out / f"{res.name}_G.png", run.ts, c[0].reshape(len(run.ts), -1),
                            title=f"{res.title}: G-coordinates (run 0)", ylabel="G-coordinate"),
                            "G-components are not constrained."))


PARANORMAL_BLOCKS = np.diag([1.0, 1.0, -0.5])


@register("thm5_2", "Thm 5.2 (V paranormal: eigenvalues 1, 1, -1/2, F and G not orthogonal)", "Thm 5.2")
def thm5_2(ctx: Context, res: CaseResult) -> None:
    Q, K = random_spd_factor(stream(ctx, "spd", 3), 3)
    _paranormal_case(ctx, res, Q, K, similar(stream(ctx, "paranormal_V"), PARANORMAL_BLOCKS), section12=False)


@register("thm8_5", "Thm 8.5 (V = -I, Q^T K = I)", "Thm 8.5")
def thm8_5(ctx: Context, res: CaseResult) -> None:
    d, n, t1 = int(ctx["d"]), int(ctx["n"]), float(ctx["t1"])
    I = np.eye(d)
    sp = spectral_one(I, I, -I)
    res.hyp("V = -c I and Q^T K = c' I, c, c' > 0 (here c = c' = 1)", bool(sp.origin_case[0]),
            {"c": float(-sp.stats.lambda1[0].real)})
    geometry_hyp(res, I, I, -I)
    x0 = initial(ctx, n, d, scale=float(ctx["x0_scale"]))
    run = run_case_sim(ctx, x0, I, I, -I, t1=t1, picture="raw")
    res.record(run)
    defect_check(res, run)
    x, ts = run.x, run.ts
    norms = np.max(np.linalg.norm(x, axis=-1), axis=-1)  # (B, T)
    bound = np.array([float(collapse_bound(xb)) for xb in x0])
    margin = np.min(bound[:, None] - norms) / bound.max()
    res.check("||x_i(t)|| <= max(max_j ||x_j(0)||, sqrt(2n))", f"bound {fmt(bound)} (sqrt(2n) = "
              f"{fmt(np.sqrt(2 * n))}) at every save (relative slack 1e-9)",
              f"max over t of max_i||x_i|| {fmt(norms.max(axis=1))}", margin >= -1e-9, margin)
    half = ts >= ts[-1] / 2
    slope = np.array([np.polyfit(np.log(ts[half]), np.log(nb[half]), 1)[0] for nb in norms])
    res.check("tokens -> 0", "max_i ||x_i(t)|| decreases to 0: log-log slope over the second half in "
              "[-1, -0.25] (the measured law is t^(-1/2))",
              f"max||x|| at t1 {fmt(norms[:, -1])}; decay ~ t^{fmt(slope)}",
              bool(np.all((slope <= -0.25) & (slope >= -1.0))), float(min(-0.25 - slope.max(), slope.min() + 1.0)),
              note="decay is algebraic, not exponential: the collapse is slow (docs/report.md)")
    unif = np.array([[float(uniform_distance(p)) for p in Pb] for Pb in run.P])
    m2 = norms[:, -1] ** 2
    allowed = (np.exp(2 * m2) - 1) / n  # |P_ij - 1/n| <= (e^{2 max|x|^2} - 1)/n when |<x_i, x_j>| <= max|x|^2
    res.check("P -> 11^T / n", "max_ij |P_ij - 1/n| at t1 <= (e^{2 m^2} - 1)/n, m = max_i|x_i(t1)| "
              "(softmax of scores bounded by m^2), and smaller than at t = 0",
              f"{fmt(unif[:, 0])} -> {fmt(unif[:, -1])}; allowed {fmt(allowed)}",
              bool(np.all(unif[:, -1] < unif[:, 0]) and np.all(unif[:, -1] <= allowed)),
              float(np.min(allowed - unif[:, -1])))
    mean = np.linalg.norm(x.mean(axis=2), axis=-1)  # (B, T)
    spread = np.max(np.linalg.norm(x - x.mean(axis=2, keepdims=True), axis=-1), axis=-1)
    res.check("slow collapse (spread vs mean)", "the spread decays far slower than the mean: spread > 10 |mean| at t1",
              f"mean {fmt(mean[:, -1])}, spread {fmt(spread[:, -1])} at t1", bool(np.all(spread[:, -1] > 10 *
              mean[:, -1])), float(np.min(spread[:, -1] / np.maximum(mean[:, -1], 1e-300))),
              note="the mean decays like e^{-t} (sum_i P_ij -> 1), the spread like t^(-1/2): predicted ratio > 1e10 "
              "at t = 30; margin = ratio")
    obs = [classify_geometry(xb[-1], -I, I, I, x=xb[-1], scale=float(np.max(np.linalg.norm(xb[0], axis=-1))),
                             rel_tol=float(ctx["rel_tol"])) for xb in x]
    res.check("observed geometry (classify_geometry)", "'origin' (asymptotically)",
              f"labels at t1 {[o.label for o in obs]}; max|x(t1)| / max|x(0)| "
              f"{fmt(norms[:, -1] / norms[:, 0])} (origin needs <= {ctx['rel_tol']:g})", None, float("nan"),
              note="info: the t^(-1/2) collapse reaches the 'origin' tolerance only at much larger t")
    if ctx.figures:
        res.figures.append((figures.trajectories(ctx.out / "thm8_5_trajectories.png", ts, x[0], title="Thm 8.5: raw "
                            "tokens (run 0)"), "Raw tokens spiral into 0."))
        res.figures.append((figures.levels(ctx.out / "thm8_5_norms.png", ts, np.stack([norms[0], spread[0], mean[0]], 1),
                            title="Thm 8.5: max||x_i|| (blue), spread (orange), ||mean|| (green), run 0",
                            ylabel="size"), "max norm, spread and mean against time."))
        res.figures.append((figures.attention_maps(ctx.out / "thm8_5_attention.png", ts, run.P[0], run.rank[0],
                            title="Thm 8.5: P(t) -> 11^T/n (run 0)"), "P(t) becomes uniform (rank 1)."))


@register("remark7_9", "Remark 7.9 (rank of lim P vs clusters)", "Remark 7.9")
def remark7_9(ctx: Context, res: CaseResult) -> None:
    eps, t1 = float(ctx["eps"]), float(ctx["t1"])
    I = np.eye(2)
    x0 = np.array([[[1.0, eps], [1.0, -eps]]])
    res.hyp("d = n = 2, Q = K = V = I", x0.shape[1:] == (2, 2))
    res.hyp(f"x(0) = (1, +-eps), eps = {eps:g}: distinct tokens", bool(np.linalg.norm(x0[0, 0] - x0[0, 1]) > 0),
            x0[0].tolist())
    run = run_case_sim(ctx, x0, I, I, I, t1=t1)
    res.record(run)
    defect_check(res, run)
    z = run.z[0]
    gap = np.linalg.norm(z[-1, 0] - z[-1, 1])
    size0 = np.max(np.linalg.norm(z[0], axis=-1))
    rel = float(ctx["rel_tol"])
    ncl = int(num_clusters(z[-1], rel, size0))
    rank = int(run.rank[0, -1])
    res.check("clusters of z", f"1 (tokens within {rel:g} x max|z_i(0)| of each other)",
              f"{ncl} (gap {fmt(gap)}, from {fmt(2 * eps)})", ncl == 1, rel - gap / size0)
    dP = np.max(np.abs(run.P[0, -1] - I))
    res.check("rank of lim P", "2 (P -> I_2; off-diagonal ~ exp(-e^{2t} |x_1 - x_2|^2 / 2): below 1e-3 by t1)",
              f"rank {rank}, dist(P, I) = {fmt(dP)}", rank == 2 and dP < 1e-3, 1e-3 - dP)
    gx = np.linalg.norm(run.x[0, :, 0] - run.x[0, :, 1], axis=-1)  # raw distance |x_1 - x_2|(t)
    drop = float(np.max(-np.diff(gx) / gx[:-1]))
    res.check("raw |x_1 - x_2| non-decreasing", "never decreases when Q = K = V = I, any d (Thm 2.1's remark; "
              "relative <= 1e-9)", f"largest relative decrease {fmt(max(drop, 0.0))}; |x_1 - x_2| "
              f"{fmt(gx[0])} -> {fmt(gx[-1])}", drop <= 1e-9, 1e-9 - max(drop, 0.0),
              note="while the rescaled tokens merge, the raw ones separate")
    standard_figures(res, ctx, run)


@register("sec12_1_polytope", "Sec 12.1: V = I, Q^T K with U[-1,1] entries", "Section 12.1")
def sec12_1_polytope(ctx: Context, res: CaseResult) -> None:
    d = int(ctx["d"])
    Q = stream(ctx, "uniform", d).uniform(-1, 1, size=(d, d))
    _polytope_case(ctx, res, Q, np.eye(d), np.eye(d), theorem_needs_spd=False)


def uniform_qk_with_pd_F_block(ctx: Context, d: int = 3, f: int = 2) -> np.ndarray:
    """A U[-1, 1] matrix (Q^T K, with Q = I) whose F-block (F = the first f coordinates) has a
    positive definite symmetric part: the first draw of the seeded stream that has one (a negative
    definite block collapses every F-part to one point, the degenerate polytope)."""
    rng = stream(ctx, "uniform_pd_F", d)
    for _ in range(1000):
        A = rng.uniform(-1, 1, size=(d, d))
        if np.linalg.eigvalsh(0.5 * (A[:f, :f] + A[:f, :f].T)).min() > 0.1:
            return A
    raise RuntimeError("no U[-1,1] draw with a positive definite F-block")  # pragma: no cover


@register("sec12_1_paranormal", "Sec 12.1: V = diag(1, 1, -1/2), Q^T K with U[-1,1] entries", "Section 12.1")
def sec12_1_paranormal(ctx: Context, res: CaseResult) -> None:
    K = uniform_qk_with_pd_F_block(ctx)
    _paranormal_case(ctx, res, np.eye(3), K, PARANORMAL_BLOCKS, section12=True)


def _euler_polytope(ctx: Context, res: CaseResult, dt: float) -> None:
    d = int(ctx["d"])
    Q, K = random_spd_factor(stream(ctx, "spd", d), d)
    _polytope_case(ctx, res, Q, K, np.eye(d), method="euler", dt=dt)


@register("thm3_1_euler_dt01", "Thm 3.1, Euler dt = 0.1", "Thm 3.1 (discrete)", euler_dt=0.1)
def thm3_1_euler_dt01(ctx: Context, res: CaseResult) -> None:
    _euler_polytope(ctx, res, EULER_STEPS["thm3_1_euler_dt01"])


@register("thm3_1_euler_dt1", "Thm 3.1, Euler dt = 1", "Thm 3.1 (discrete)", euler_dt=1.0)
def thm3_1_euler_dt1(ctx: Context, res: CaseResult) -> None:
    _euler_polytope(ctx, res, EULER_STEPS["thm3_1_euler_dt1"])


@register("thm4_2_euler_dt01", "Thm 4.2, Euler dt = 0.1", "Thm 4.2 (discrete)", euler_dt=0.1)
def thm4_2_euler_dt01(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 2), method="euler", dt=EULER_STEPS["thm4_2_euler_dt01"])


@register("thm4_2_euler_dt1", "Thm 4.2, Euler dt = 1", "Thm 4.2 (discrete)", euler_dt=1.0)
def thm4_2_euler_dt1(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 2), method="euler", dt=EULER_STEPS["thm4_2_euler_dt1"])


from . import controls as _controls  # noqa: E402,F401  (registers the negative controls last)
