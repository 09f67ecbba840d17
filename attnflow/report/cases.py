r"""The cases of the reproduction report, one function per theorem / remark (SPEC §2, §3).

Each case builds its weights (seeded), draws ``batch`` random initial configurations,
simulates them in one batched call, checks the hypotheses, measures the predicted
quantities, and draws its figures. Thresholds are stated in each check's text.
"""

from __future__ import annotations

import zlib

import jax
import jax.numpy as jnp
import numpy as np

from ..observables import (
    abz_levels,
    classify_geometry,
    classify_tokens,
    codim_projections,
    collapse_bound,
    double_log_slope,
    extreme_monotonicity,
    leaders,
    hull_nesting,
    leading_vectors,
    num_clusters,
    off_leader_mass,
    polytope_set_residual,
    split_coordinates,
    uniform_distance,
    unstable_left_basis,
)
from ..spectral import check_good_triple, is_positive_definite, paranormal_split, predict_geometry
from . import figures
from .base import CaseResult, Context, Run, fmt, register, run_case_sim

NESTING_TOL = 1e-6  # relative hull / extreme-value violations allowed (solver rtol 1e-9 in float64)


# ----------------------------------------------------------------------------- weights
def random_spd_factor(rng, d: int) -> tuple[np.ndarray, np.ndarray]:
    """Q = K = R with R^T R a random SPD matrix (Wishart + 0.5 I)."""
    M = rng.normal(size=(d, d))
    S = M @ M.T / d + 0.5 * np.eye(d)
    R = np.linalg.cholesky(S).T
    return R, R.copy()


def similar(rng, blocks: np.ndarray) -> np.ndarray:
    """B blocks B^{-1} with a random, well-conditioned B (spectrum of ``blocks`` kept)."""
    d = blocks.shape[0]
    for _ in range(100):
        B = np.eye(d) + 0.5 * rng.normal(size=(d, d))
        if np.linalg.cond(B) < 8:
            return B @ blocks @ np.linalg.inv(B)
    return blocks


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


def geometry_hyp(res: CaseResult, Q, K, V) -> None:
    p = predict_geometry(Q, K, V)
    res.settings["predicted_geometry"] = {"geometry": p.geometry, "theorem": p.theorem, "reason": p.reason}


def geometry_check(res: CaseResult, ctx: Context, run: Run, Q, K, V) -> None:
    """classify_geometry on every final configuration against predict_geometry's label."""
    pred = predict_geometry(Q, K, V).geometry
    obs = [classify_geometry(zb[-1], V, Q, K, x=xb[-1], scale=np.max(np.linalg.norm(zb[0], axis=-1)),
                             rel_tol=float(ctx["rel_tol"])) for zb, xb in zip(run.z, run.x)]
    ok = [o.supports(pred) for o in obs]
    res.check("observed geometry (classify_geometry)", f"supports predict_geometry's '{pred}'",
              f"labels {[o.label for o in obs]}; clusters {[o.num_clusters for o in obs]}, "
              f"levels {[o.num_levels for o in obs]}", all(ok), sum(ok) / len(ok) - 1 if not all(ok) else 1.0,
              note="margin: 1 when every run supports the prediction, else (fraction supporting) - 1")


# ----------------------------------------------------------------------------- shared checks
def clustering_time(ts, z, tol_rel: float, scales) -> np.ndarray:
    """Per member: first save time from which on ``frac`` = 90% of the tokens are within
    tol = tol_rel * scale of their final position (Remark 3.3)."""
    frac = 0.9
    out = []
    for zb, diam in zip(z, scales):
        near = np.linalg.norm(zb - zb[-1][None], axis=-1) <= tol_rel * max(diam, 1e-300)  # (T, n)
        ok = near.mean(axis=1) >= frac
        bad = np.nonzero(~ok)[0]
        k = 0 if bad.size == 0 else bad[-1] + 1
        out.append(ts[k] if k < len(ts) else np.nan)
    return np.asarray(out)


def polytope_checks(res: CaseResult, ctx: Context, ts, y, *, what: str, A2=None, unit: str = "t",
                    remark33: bool = True) -> None:
    """Thm 3.1 checks on clouds y (B, T, n, f): hull nesting, final tokens at vertex / 0 /
    boundary, few vertices, the limit-set identity (when A2 = Q^T K is given), Remark 3.3."""
    rel = float(ctx["rel_tol"])
    B, T, n, f = y.shape
    viol = np.array([np.max(hull_nesting(yb)) for yb in y])
    res.check(f"conv{{{what}(t)}} non-increasing", f"hull of {what}(t') inside hull of {what}(t) for t' > t "
              f"(violation <= {NESTING_TOL:g} x diameter)", f"max violation {fmt(viol.max())}",
              viol.max() <= NESTING_TOL, NESTING_TOL - viol.max())
    # tolerances relative to each run's initial diameter: a cloud that collapsed to one point is one cluster
    scale0 = np.array([np.max(np.linalg.norm(yb[0][:, None] - yb[0][None], axis=-1)) for yb in y])
    classes = np.array([classify_tokens(yb[-1], rel, s0) for yb, s0 in zip(y, scale0)])  # (B, n)
    counts = {c: int(np.sum(classes == k)) for k, c in enumerate(("vertex", "origin", "boundary", "interior"))}
    interior = counts["interior"]
    res.check(f"final {what}: vertex, 0 or boundary", f"every token at a vertex, at 0 or on the boundary "
              f"(tol {rel:g} x initial diameter); generically all at vertices",
              f"{counts['vertex']} at vertices, {counts['origin']} at 0, {counts['boundary']} on the boundary, "
              f"{interior} inside (of {B * n})", interior == 0, -interior if interior else
              counts["vertex"] / (B * n))
    ncl = np.array([int(num_clusters(yb[-1], rel, s0)) for yb, s0 in zip(y, scale0)])
    res.check("few vertices", f"clusters far fewer than tokens (<= n/2 = {n // 2})",
              f"clusters per run {fmt(ncl)} of n = {n}", ncl.max() <= n // 2, n // 2 - ncl.max())
    if A2 is not None:
        r = np.array([np.max(polytope_set_residual(yb[-1], A2)) for yb in y])
        res.check("limit set S", f"max_j <A z, A v_j> - |A z|^2 = 0 at every final token (A = (Q^T K)^(1/2); "
                  f"<= {rel:g} x max|A v|^2)", f"max residual {fmt(r.max())}", r.max() <= rel, rel - r.max())
    if remark33:
        t90 = clustering_time(ts, y, rel, scale0)
        limit = 10.0
        res.check("Remark 3.3: clustered after a few layers", f"90% of tokens within {rel:g} x initial diameter of their "
                  f"final position by {unit} <= {limit:g} (our reading of 'a few')",
                  f"{unit}_90 per run {fmt(t90)} (horizon {fmt(ts[-1])})", np.nanmax(t90) <= limit,
                  limit - np.nanmax(t90))


def hyperplane_checks(res: CaseResult, ctx: Context, ts, z, phi_dual, *, unit: str = "t") -> np.ndarray:
    """Thm 4.2 checks: phi_1^*(z_i) -> {a, 0, b}; max non-increasing, min non-decreasing.
    Returns the projections (B, T, n)."""
    rel = float(ctx["rel_tol"])
    s = z @ phi_dual  # (B, T, n)
    width0 = np.ptp(s[:, 0], axis=-1)
    ups, downs = zip(*[map(float, extreme_monotonicity(sb)) for sb in s])
    worst = max(max(ups), max(downs)) / max(width0.min(), 1e-300)
    res.check("max phi* z non-increasing, min non-decreasing", f"increase of max and decrease of min <= "
              f"{NESTING_TOL:g} x initial width", f"worst relative change {fmt(worst)}",
              worst <= NESTING_TOL, NESTING_TOL - worst)
    dist, used = [], []
    for sb, w0 in zip(s, width0):  # tolerance relative to the initial width (b - a may collapse)
        _, dmax, u = abz_levels(sb[-1], rel * w0)
        dist.append(float(dmax) / w0)
        used.append(int(u))
    dist = np.asarray(dist)
    res.check("phi* z_i -> {a, 0, b}", f"every projection within {rel:g} x initial width of a = min, 0 or b = max",
              f"max distance {fmt(dist.max())} x initial width", dist.max() <= rel, rel - dist.max())
    res.check("hyperplanes used", "at most 3; typically 2", f"levels used per run {fmt(used)}",
              max(used) <= 3, 3 - max(used))
    t90 = clustering_time(ts, s[..., None], rel, width0)
    limit = 10.0
    res.check("Remark 3.3: on the hyperplanes after a few layers", f"90% of projections within {rel:g} x initial "
              f"width of their final level by {unit} <= {limit:g} (our reading of 'a few')",
              f"{unit}_90 per run {fmt(t90)} (horizon {fmt(ts[-1])})", np.nanmax(t90) <= limit,
              limit - np.nanmax(t90))
    return s


def standard_figures(res: CaseResult, ctx: Context, run: Run, *, overlay: str | None = None, phi_dual=None,
                     gif: bool = False, unit: str = "t", coords=None) -> None:
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


# ----------------------------------------------------------------------------- cases
@register("thm2_1", "Thm 2.1 (d = 1)", "Thm 2.1")
def thm2_1(ctx: Context) -> CaseResult:
    res = CaseResult("thm2_1", "Thm 2.1 (d = 1)", "Thm 2.1")
    n, t1 = int(ctx["n"]), float(ctx["t1"])
    Q = K = V = np.ones((1, 1))
    x0 = initial(ctx, n, 1)
    res.hyp("d = 1, V = 1 > 0, QK = 1 > 0", True)
    gaps0 = np.min(np.diff(np.sort(x0[..., 0], axis=1), axis=1))
    res.hyp("tokens pairwise distinct", gaps0 > 0, float(gaps0))
    run = run_case_sim(ctx, x0, Q, K, V, t1=t1, picture="raw")
    res.record(run)
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
    res.check("rank P*", "<= 3; 1 or 2 for almost every start", f"ranks {fmt(ranks)}", max(ranks) <= 3,
              3 - max(ranks))
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
    res.check("|x_i - x_j| non-decreasing", "no pairwise distance decreases (relative <= 1e-9)",
              f"largest relative decrease {fmt(max(drop, 0.0))}", drop <= 1e-9, 1e-9 - max(drop, 0.0))
    gam = x * np.exp(-ts)[None, :, None]  # x_k e^{-t}
    scale_g = np.max(np.abs(gam[:, -1]), axis=1)  # (B,)
    small = np.sum(np.abs(gam[:, -1]) <= float(ctx["rel_tol"]) * scale_g[:, None], axis=1)
    # convergence: change over unit windows decays like e^{-lambda t} (lambda = 1); extrapolate the rest
    step = max(1, int(round(1.0 / (ts[1] - ts[0]))))
    idx = np.arange(len(ts) - 1, step - 1, -step)[::-1]
    win = np.array([np.max(np.abs(gam[:, k] - gam[:, k - step]), axis=1) / scale_g for k in idx])  # (W, B)
    late = idx >= len(ts) // 2
    rate = np.array([np.polyfit(ts[idx[late]], np.log(np.maximum(win[late, b], 1e-300)), 1)[0]
                     for b in range(B)])
    rest = win[-1] * np.exp(rate) / np.maximum(1 - np.exp(rate), 1e-300)
    res.check("x_k e^{-t} -> gamma_k != 0", "all but at most one |gamma_k| > rel_tol x max|gamma|; x e^{-t} converges "
              "(pass: the change over unit windows decays exponentially, rate <= -0.5)",
              f"near-zero gamma per run {fmt(small)}; decay rate of the change {fmt(rate)} (expected -1); "
              f"extrapolated remaining change {fmt(rest)} x max|gamma|",
              bool(small.max() <= 1 and np.all(rate <= -0.5)), float(-0.5 - rate.max()),
              note="tokens follow the extreme tokens: x_i(t) ~ x_i(s) + c (e^t - e^s), so "
              "gamma_k = lim x_k e^{-t} converges at rate e^{-t} (summable increments); the gammas of one group "
              "differ by O(e^{-s}) but stay distinct (order preserved)")
    off = np.array([off_leader_mass(p) for p in P.reshape(-1, n, n)]).reshape(B, len(ts), n)
    slopes = []
    for b in range(B):
        second = np.sort(off[b], axis=1)[:, -2] if n > 1 else off[b, :, 0]  # spare the one free row
        ok = (second > 1e-250) & (second < 0.1)
        t_ok = ts[ok]
        keep = ok & (ts >= (t_ok.min() + t_ok.max()) / 2 if t_ok.size else ok)
        slopes.append(float(double_log_slope(ts[keep], second[keep])))
    slopes = np.asarray(slopes)
    dev = np.nanmax(np.abs(slopes - 1.0)) if np.any(np.isfinite(slopes)) else np.inf
    res.check("doubly exponential saturation", "log(-log P_off) grows linearly in t with slope lambda = 1 "
              "(late half of the measurable window; pass: |slope - 1| <= 0.25)", f"slopes {fmt(slopes)}",
              dev <= 0.25, 0.25 - dev,
              note="P_off = second-largest off-leader mass over rows (the theorem spares one row). The gaps "
              "x_j - x_n stay O(1) while x_i ~ e^t, so the exponents grow like e^{lambda t}: slope lambda, not 2 lambda")
    res.figures.append((figures.trajectories(ctx.out / "thm2_1_gamma.png", ts, gam[0][:, :, None],
                        title="Thm 2.1: x_k(t) e^{-t} (run 0)", ylabel="x e^{-t}"),
                        "Rescaled tokens x_k e^{-t} converge to distinct gamma_k (order preserved)."))
    res.figures.append((figures.attention_maps(ctx.out / "thm2_1_attention.png", ts, P[0][:, order[0]][:, :,
                        order[0]], run.rank[0], title="Thm 2.1: P(t) in sorted token order (run 0)"),
                        "P(t) in sorted order: the mass moves to the first or last column."))
    res.figures.append((figures.levels(ctx.out / "thm2_1_offmass.png", ts, np.log10(np.clip(off[0], 1e-300, 1)),
                        title="Thm 2.1: log10 off-leader mass per row (run 0)", ylabel="log10(1 - max_j P_ij)"),
                        "Off-leader mass per row: doubly exponential decay (all rows but at most one)."))
    return res


def _polytope_case(ctx: Context, name: str, title: str, theorem: str, Q, K, V, *, method="tsit5", dt=None,
                   gif=False, extra_hyp=None) -> CaseResult:
    res = CaseResult(name, title, theorem)
    d, n, t1 = V.shape[0], int(ctx["n"]), float(ctx["t1"])
    A2 = Q.T @ K
    spd, lam_min = is_positive_definite(A2)
    res.hyp("V = I", np.allclose(V, np.eye(d)))
    if extra_hyp is None:
        res.hyp("Q^T K symmetric positive definite", spd, lam_min)
    else:
        res.hyp(extra_hyp, True, lam_min)
    if method == "euler":
        res.hyp(f"Euler layers dt = {dt:g}, I + dt V invertible", abs(np.linalg.det(np.eye(d) + dt * V)) > 0)
    geometry_hyp(res, Q, K, V)
    unit = "layer" if (method == "euler" and dt == 1.0) else "t"
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1, method=method, dt=dt)
    res.record(run)
    polytope_checks(res, ctx, run.ts, run.z, what="z", A2=A2 if spd else None, unit=unit)
    slopes = []
    for Pb in run.P:
        off = np.asarray(jax.vmap(off_leader_mass)(jnp.asarray(Pb)))  # (T, n)
        slopes.append(float(double_log_slope(jnp.asarray(run.ts), jnp.asarray(np.median(off, axis=1)))))
    res.check("off-leader mass (median row)", "vanishes doubly exponentially: log(-log) linear in t",
              f"slope of log(-log P_off) {fmt(np.asarray(slopes))}", None, float("nan"),
              note="no rate is stated for Thm 3.1; measured for comparison with Thm 2.1 (slope 1)")
    leaders_t1 = [int(np.sum(leaders(P[-1]))) for P in run.P]
    res.check("leaders of lim P", "mass on few leader columns (one per cluster)",
              f"leader columns per run {leaders_t1}; clusters {[int(c) for c in run.clusters[:, -1]]}", None,
              float("nan"))
    geometry_check(res, ctx, run, Q, K, V)
    standard_figures(res, ctx, run, overlay="hull", gif=gif, unit=unit)
    return res


@register("thm3_1", "Thm 3.1 (V = I, Q^T K > 0)", "Thm 3.1")
def thm3_1(ctx: Context) -> CaseResult:
    d = int(ctx["d"])
    Q, K = random_spd_factor(stream(ctx, "spd", d), d)
    return _polytope_case(ctx, "thm3_1", "Thm 3.1 (V = I, Q^T K > 0)", "Thm 3.1", Q, K, np.eye(d), gif=True)


def _hyperplane_case(ctx: Context, name: str, title: str, theorem: str, V, *, method="tsit5", dt=None,
                     gif=False) -> CaseResult:
    res = CaseResult(name, title, theorem)
    d, n, t1 = V.shape[0], int(ctx["n"]), float(ctx["t1"])
    Q, K = good_qk(stream(ctx, "good_qk", V.tobytes()), V, d)
    g = check_good_triple(Q, K, V)
    eig = np.linalg.eigvals(V)
    res.hyp("Def 4.1 (1): top-modulus eigenvalue real, positive, simple", g.condition1,
            {"lambda1": g.lambda1.real, "gap": g.gap, "eigenvalues": [str(np.round(e, 4)) for e in eig]})
    res.hyp("Def 4.1 (2): <Q phi_1, K phi_1> > 0", g.condition2, g.qk_value)
    pd, lam_min = is_positive_definite(Q.T @ K)
    res.hyp(f"Q^T K is {'' if pd else 'not '}positive definite (Thm 4.2 does not need it; value: min eigenvalue "
            "of its symmetric part)", True, lam_min)
    if method == "euler":
        res.hyp(f"Euler layers dt = {dt:g}, I + dt V invertible", abs(np.linalg.det(np.eye(d) + dt * V)) > 0)
    geometry_hyp(res, Q, K, V)
    res.settings["weights"] = {"Q": Q, "K": K, "V": V}
    unit = "layer" if (method == "euler" and dt == 1.0) else "t"
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1, method=method, dt=dt)
    res.record(run)
    phi, phi_dual, _ = leading_vectors(V)
    res.hyp("leading right / left eigenvectors phi_1, phi_1^* (phi_1^* phi_1 = 1)", True,
            {"phi_1": np.round(phi, 4).tolist(), "phi_1^*": np.round(phi_dual, 4).tolist()})
    s = hyperplane_checks(res, ctx, run.ts, run.z, phi_dual, unit=unit)
    geometry_check(res, ctx, run, Q, K, V)
    if np.all(np.abs(eig.imag) < 1e-12) and np.all(eig.real >= 0):
        growth = np.max(np.linalg.norm(run.z[:, -1], axis=-1)) / np.max(np.linalg.norm(run.z[:, 0], axis=-1))
        res.check("z bounded (all eigenvalues real >= 0)", "max|z_i(t)| stays bounded",
                  f"max|z(t1)| / max|z(0)| = {fmt(growth)}", None, float("nan"))
    standard_figures(res, ctx, run, overlay="hyperplanes", phi_dual=phi_dual, gif=gif, unit=unit)
    res.figures.append((figures.levels(ctx.out / f"{name}_levels.png", run.ts, s[0], title=f"{title}: "
                        "phi_1^*(z_i(t)) (run 0)", xlabel=unit), "Projections on the dual leading eigenvector: "
                        "max non-increasing, min non-decreasing, limits in {a, 0, b}."))
    return res


V2D = np.array([[1.0, 0.3], [0.2, 0.4]])  # eigenvalues 1.087, 0.313: a good triple, all real >= 0


def v3d(rng) -> np.ndarray:
    """3-d V with eigenvalues 1 and 0.3 +- 0.6i (complex sub-leading, |.| = 0.67)."""
    return similar(rng, np.array([[1.0, 0, 0], [0, 0.3, 0.6], [0, -0.6, 0.3]]))


@register("thm4_2_2d", "Thm 4.2 (good triple, d = 2)", "Thm 4.2")
def thm4_2_2d(ctx: Context) -> CaseResult:
    return _hyperplane_case(ctx, "thm4_2_2d", "Thm 4.2 (good triple, d = 2)", "Thm 4.2", V2D, gif=True)


@register("thm4_2_3d", "Thm 4.2 (good triple, d = 3, complex sub-leading)", "Thm 4.2")
def thm4_2_3d(ctx: Context) -> CaseResult:
    return _hyperplane_case(ctx, "thm4_2_3d", "Thm 4.2 (good triple, d = 3, complex sub-leading)", "Thm 4.2",
                            v3d(stream(ctx, "v3d")))


@register("codim_k", "Conjecture: codimension k", "Conjecture (codim k)")
def codim_k(ctx: Context) -> CaseResult:
    res = CaseResult("codim_k", "Conjecture: codimension k", "Conjecture (codim k)")
    rng = stream(ctx, "codim_k")
    d, n, t1 = 3, int(ctx["n"]), float(ctx["t1"])
    V = similar(rng, np.diag([1.0, 0.7, -0.5]))
    Q, K = rng.normal(size=(d, d)), rng.normal(size=(d, d))
    W = unstable_left_basis(V)
    k = W.shape[0]
    res.hyp(f"k = #eigenvalues of V with positive real part = {k}", k >= 1,
            [str(np.round(e, 4)) for e in np.linalg.eigvals(V)])
    res.hyp("no hypothesis on Q, K (Gaussian)", True, {"Q^T K PD": is_positive_definite(Q.T @ K)[0]})
    geometry_hyp(res, Q, K, V)
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1)
    res.record(run)
    rel = float(ctx["rel_tol"])
    p0 = np.array([np.asarray(codim_projections(zb[0], W)) for zb in run.z])  # (B, n, k)
    p = np.array([np.asarray(codim_projections(zb[-1], W)) for zb in run.z])
    scale0 = [np.max(np.linalg.norm(q[:, None] - q[None], axis=-1)) for q in p0]
    counts = np.array([int(num_clusters(pb, rel, s0)) for pb, s0 in zip(p, scale0)])
    from ..observables import cluster_labels

    lab0 = np.asarray(cluster_labels(p[0], rel, scale0[0]))
    centers = [np.round(p[0][lab0 == l].mean(axis=0), 3).tolist() for l in np.unique(lab0)]
    res.notes.append(f"Run 0 approaches the affine subspaces {{z : W z = c}} with c in {centers} "
                     f"(W = {np.round(W, 3).tolist()}).")
    res.check(f"<= 3 affine subspaces of codimension {k}", f"W z_i (W: unstable left subspace, {k} x {d}) takes "
              f"<= 3 values (tol {rel:g} x initial diameter of the W z_i)", f"values per run {fmt(counts)}", counts.max() <= 3,
              3 - counts.max())
    geometry_check(res, ctx, run, Q, K, V)
    pt = np.einsum("btnd,kd->btnk", run.z, W)
    standard_figures(res, ctx, run)
    res.figures.append((figures.trajectories(ctx.out / "codim_k_projections.png", run.ts, pt[0],
                        title=f"codim-k: W z_i(t) in R^{k} (run 0)"), "Projections on the unstable left "
                        "subspace: each limit point is one affine subspace of codimension k."))
    return res


def _paranormal_case(ctx: Context, name: str, title: str, theorem: str, Q, K, V, hyp_qk: str) -> CaseResult:
    res = CaseResult(name, title, theorem)
    d, n, t1 = V.shape[0], int(ctx["n"]), float(ctx["t1"])
    split = paranormal_split(V)
    spd, lam_min = is_positive_definite(Q.T @ K)
    res.hyp(f"V paranormal: {split.reason}", split.paranormal)
    res.hyp(hyp_qk, spd if "positive definite" in hyp_qk else True, lam_min)
    geometry_hyp(res, Q, K, V)
    run = run_case_sim(ctx, initial(ctx, n, d), Q, K, V, t1=t1)
    res.record(run)
    a, c = split_coordinates(run.z, split.F, split.G)
    a, c = np.asarray(a), np.asarray(c)
    polytope_checks(res, ctx, run.ts, a, what="F-part of z", remark33=False)
    AF = split.F.T @ (Q.T @ K) @ split.F
    sym = np.linalg.eigvalsh(0.5 * (AF + AF.T))
    res.notes.append(f"F-block of Q^T K (F^T Q^T K F): eigenvalues of its symmetric part {fmt(sym)}. "
                     "The F-parts evolve like a V = I system with this block as Q^T K (their scores dominate, "
                     "x_F ~ e^t); a negative definite block makes every F-part collapse to one point.")
    g0 = np.max(np.linalg.norm(c[:, 0], axis=-1))
    g1 = np.max(np.linalg.norm(c[:, -1], axis=-1))
    geometry_check(res, ctx, run, Q, K, V)
    res.check("G-components", "free (may diverge)", f"max|G-coordinate| {fmt(g0)} at t = 0 -> {fmt(g1)} at t1",
              None, float("nan"))
    standard_figures(res, ctx, run, overlay=None)
    res.figures.append((figures.trajectories(ctx.out / f"{name}_F.png", run.ts, a[0], title=f"{title}: F-coordinates"
                        " with their hull (run 0)", overlay="hull"), "F-components converge to the vertices of a "
                        "polytope in F (or 0)."))
    res.figures.append((figures.levels(ctx.out / f"{name}_G.png", run.ts, c[0].reshape(len(run.ts), -1),
                        title=f"{title}: G-coordinates (run 0)", ylabel="G-coordinate"),
                        "G-components are not constrained."))
    return res


@register("thm5_2", "Thm 5.2 (V = diag(1, 1, -1/2))", "Thm 5.2")
def thm5_2(ctx: Context) -> CaseResult:
    Q, K = random_spd_factor(stream(ctx, "spd", 3), 3)
    return _paranormal_case(ctx, "thm5_2", "Thm 5.2 (V = diag(1, 1, -1/2))", "Thm 5.2", Q, K,
                            np.diag([1.0, 1.0, -0.5]), "Q^T K symmetric positive definite")


@register("thm8_5", "Thm 8.5 (V = -I)", "Thm 8.5")
def thm8_5(ctx: Context) -> CaseResult:
    res = CaseResult("thm8_5", "Thm 8.5 (V = -I)", "Thm 8.5")
    d, n, t1 = int(ctx["d"]), int(ctx["n"]), float(ctx["t1"])
    I = np.eye(d)
    res.hyp("V = -I, Q^T K = I", True)
    geometry_hyp(res, I, I, -I)
    x0 = initial(ctx, n, d, scale=float(ctx["x0_scale"]))
    run = run_case_sim(ctx, x0, I, I, -I, t1=t1, picture="raw")
    res.record(run)
    x, ts = run.x, run.ts
    norms = np.max(np.linalg.norm(x, axis=-1), axis=-1)  # (B, T)
    bound = np.array([float(collapse_bound(xb)) for xb in x0])
    margin = np.min(bound[:, None] - norms) / bound.max()
    res.check("||x_i(t)|| <= max(max_j ||x_j(0)||, sqrt(2n))", f"bound {fmt(bound)} (sqrt(2n) = "
              f"{fmt(np.sqrt(2 * n))}) at every save", f"max over t of max_i||x_i|| {fmt(norms.max(axis=1))}",
              margin >= -1e-9, margin)
    half = ts >= ts[-1] / 2
    slope = np.array([np.polyfit(np.log(ts[half]), np.log(nb[half]), 1)[0] for nb in norms])
    res.check("tokens -> 0", "max_i ||x_i(t)|| decreases to 0 (pass: log-log slope over the second half < 0)",
              f"max||x|| at t1 {fmt(norms[:, -1])}; decay ~ t^{fmt(slope)}", slope.max() < 0, -slope.max(),
              note="decay is algebraic, not exponential: the collapse is slow")
    unif = np.array([[float(uniform_distance(p)) for p in Pb] for Pb in run.P])
    res.check("P -> 11^T / n", "max_ij |P_ij - 1/n| decreases to 0", f"{fmt(unif[:, 0])} -> {fmt(unif[:, -1])}",
              bool(np.all(unif[:, -1] < unif[:, 0])) and unif[:, -1].max() < 0.05, 0.05 - unif[:, -1].max(),
              note="pass: final distance < 0.05")
    mean = np.linalg.norm(x.mean(axis=2), axis=-1)  # (B, T)
    spread = np.max(np.linalg.norm(x - x.mean(axis=2, keepdims=True), axis=-1), axis=-1)
    res.check("slow collapse (spread vs mean)", "the spread decays far slower than the mean",
              f"mean {fmt(mean[:, -1])}, spread {fmt(spread[:, -1])} at t1", bool(np.all(spread[:, -1] > 10 *
              mean[:, -1])), float(np.min(spread[:, -1] / np.maximum(mean[:, -1], 1e-300))),
              note="pass: spread > 10 x |mean| at t1; margin = ratio")
    obs = [classify_geometry(xb[-1], -I, I, I, x=xb[-1], scale=float(np.max(np.linalg.norm(xb[0], axis=-1))),
                             rel_tol=float(ctx["rel_tol"])) for xb in x]
    res.check("observed geometry (classify_geometry)", "'origin' (asymptotically)",
              f"labels at t1 {[o.label for o in obs]}; max|x(t1)| / max|x(0)| "
              f"{fmt(norms[:, -1] / norms[:, 0])} (origin needs <= {ctx['rel_tol']:g})", None, float("nan"),
              note="info: the t^(-1/2) collapse reaches the 'origin' tolerance only at much larger t")
    res.figures.append((figures.trajectories(ctx.out / "thm8_5_trajectories.png", ts, x[0], title="Thm 8.5: raw "
                        "tokens (run 0)"), "Raw tokens spiral into 0."))
    res.figures.append((figures.levels(ctx.out / "thm8_5_norms.png", ts, np.stack([norms[0], spread[0], mean[0]], 1),
                        title="Thm 8.5: max||x_i|| (blue), spread (orange), ||mean|| (green), run 0",
                        ylabel="size"), "max norm, spread and mean against time."))
    res.figures.append((figures.attention_maps(ctx.out / "thm8_5_attention.png", ts, run.P[0], run.rank[0],
                        title="Thm 8.5: P(t) -> 11^T/n (run 0)"), "P(t) becomes uniform (rank 1)."))
    return res


@register("remark7_9", "Remark 7.9 (rank of lim P vs clusters)", "Remark 7.9")
def remark7_9(ctx: Context) -> CaseResult:
    res = CaseResult("remark7_9", "Remark 7.9 (rank of lim P vs clusters)", "Remark 7.9")
    eps, t1 = float(ctx["eps"]), float(ctx["t1"])
    I = np.eye(2)
    x0 = np.array([[[1.0, eps], [1.0, -eps]]])
    res.hyp(f"d = n = 2, Q = K = V = I, x(0) = (1, +-{eps:g})", True)
    run = run_case_sim(ctx, x0, I, I, I, t1=t1)
    res.record(run)
    z = run.z[0]
    gap = np.linalg.norm(z[-1, 0] - z[-1, 1])
    size = np.max(np.linalg.norm(z[-1], axis=-1))
    rel = float(ctx["rel_tol"])
    ncl = int(num_clusters(z[-1], rel, size))
    rank = int(run.rank[0, -1])
    res.check("clusters of z", f"1 (tokens within {rel:g} x max|z_i| of each other)",
              f"{ncl} (gap {fmt(gap)}, from {fmt(2 * eps)})", ncl == 1, rel - gap / size)
    res.check("rank of lim P", "2 (P -> I_2)", f"rank {rank}, dist(P, I) = {fmt(np.max(np.abs(run.P[0, -1] - I)))}",
              rank == 2 and np.max(np.abs(run.P[0, -1] - I)) < 1e-3, 1e-3 - np.max(np.abs(run.P[0, -1] - I)),
              note="pass: rank 2 and max|P - I| < 1e-3 at t1")
    gx = np.linalg.norm(run.x[0, :, 0] - run.x[0, :, 1], axis=-1)  # raw distance |x_1 - x_2|(t)
    drop = float(np.max(-np.diff(gx) / gx[:-1]))
    res.check("raw |x_1 - x_2| non-decreasing", "never decreases when Q = K = V = I, any d (Thm 2.1's remark; "
              "relative <= 1e-9)", f"largest relative decrease {fmt(max(drop, 0.0))}; |x_1 - x_2| "
              f"{fmt(gx[0])} -> {fmt(gx[-1])}", drop <= 1e-9, 1e-9 - max(drop, 0.0),
              note="while the rescaled tokens merge, the raw ones separate")
    standard_figures(res, ctx, run)
    return res


@register("sec12_1_polytope", "Sec 12.1: V = I, Q^T K with U[-1,1] entries", "Section 12.1")
def sec12_1_polytope(ctx: Context) -> CaseResult:
    d = int(ctx["d"])
    Q = stream(ctx, "uniform", d).uniform(-1, 1, size=(d, d))
    return _polytope_case(ctx, "sec12_1_polytope", "Sec 12.1: V = I, Q^T K with U[-1,1] entries", "Section 12.1",
                          Q, np.eye(d), np.eye(d), extra_hyp="Q^T K with i.i.d. U[-1,1] entries (not SPD)")


@register("sec12_1_paranormal", "Sec 12.1: V = diag(1, 1, -1/2), Q^T K with U[-1,1] entries", "Section 12.1")
def sec12_1_paranormal(ctx: Context) -> CaseResult:
    Q = stream(ctx, "uniform", 3).uniform(-1, 1, size=(3, 3))
    return _paranormal_case(ctx, "sec12_1_paranormal", "Sec 12.1: V = diag(1, 1, -1/2), U[-1,1] Q^T K",
                            "Section 12.1", Q, np.eye(3), np.diag([1.0, 1.0, -0.5]),
                            "Q^T K with i.i.d. U[-1,1] entries (not SPD)")


def _euler_polytope(ctx: Context, name: str, dt: float) -> CaseResult:
    d = int(ctx["d"])
    Q, K = random_spd_factor(stream(ctx, "spd", d), d)
    return _polytope_case(ctx, name, f"Thm 3.1, Euler dt = {dt:g}", "Thm 3.1 (discrete)", Q, K, np.eye(d),
                          method="euler", dt=dt)


@register("thm3_1_euler_dt01", "Thm 3.1, Euler dt = 0.1", "Thm 3.1 (discrete)")
def thm3_1_euler_dt01(ctx: Context) -> CaseResult:
    return _euler_polytope(ctx, "thm3_1_euler_dt01", 0.1)


@register("thm3_1_euler_dt1", "Thm 3.1, Euler dt = 1", "Thm 3.1 (discrete)")
def thm3_1_euler_dt1(ctx: Context) -> CaseResult:
    return _euler_polytope(ctx, "thm3_1_euler_dt1", 1.0)


@register("thm4_2_euler_dt01", "Thm 4.2, Euler dt = 0.1", "Thm 4.2 (discrete)")
def thm4_2_euler_dt01(ctx: Context) -> CaseResult:
    return _hyperplane_case(ctx, "thm4_2_euler_dt01", "Thm 4.2, Euler dt = 0.1", "Thm 4.2 (discrete)", V2D,
                            method="euler", dt=0.1)


@register("thm4_2_euler_dt1", "Thm 4.2, Euler dt = 1", "Thm 4.2 (discrete)")
def thm4_2_euler_dt1(ctx: Context) -> CaseResult:
    return _hyperplane_case(ctx, "thm4_2_euler_dt1", "Thm 4.2, Euler dt = 1", "Thm 4.2 (discrete)", V2D,
                            method="euler", dt=1.0)
