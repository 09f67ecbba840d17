r"""The cases of the reproduction report, one function per theorem / remark (SPEC §2, §3).

Each case builds its weights (seeded), computes its hypotheses (nothing is asserted), draws
``batch`` random initial configurations, integrates ``ctx.field_factory``'s vector field for
them in one batched call, and compares the trajectory with predictions derived from the
hypotheses. Every tolerance is absolute: a fixed fraction of the *initial* configuration's size,
times the rate at which the theorem lets the quantity change (reasons in docs/report.md).
Every case also checks that its trajectory solves the paper's equation
(:func:`~attnflow.report._base.defect_check`).
"""

from __future__ import annotations

import numpy as np

from ..observables import (
    classify_geometry,
    collapse_bound,
    double_log_slope,
    leaders,
    num_clusters,
    off_leader_mass,
    split_coordinates,
    uniform_distance,
    unstable_left_basis,
)
from ..spectral import check_good_triple, is_positive_definite, paranormal_split, spectral_one
from . import _figures as figures
from ._base import CaseResult, Context, Run, case, defect_check, fmt, run_case_sim
from ._checks import initial_diameter, geometry_hyp, geometry_check, cluster_limits, polytope_checks, hyperplane_checks
from ._draws import stream, initial, random_spd_factor, similar, good_qk, hyperplane_V, uniform_qk_with_pd_F_block


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
                        title=f"{res.title}: P(t) of run 0 with numerical rank (tol {ctx.settings.rank_tol:g})"),
                        "Attention matrices at four times, with their numerical rank."))
    res.figures.append((figures.cluster_boolean(out / f"{name}_clusters.png", run.ts, run.clusters, run.boolean,
                        title=f"{res.title}: clusters (blue) and max_i(1 - max_j P_ij) (red), all runs",
                        xlabel=unit), "Cluster count and distance of P to the nearest Boolean matrix."))
    if gif and int(ctx.settings.gif_frames) > 0 and z0.shape[-1] == 2:
        res.figures.append((figures.animation(out / f"{name}.gif", run.ts, z0, title=res.title, overlay=overlay,
                            phi_dual=phi_dual, frames=int(ctx.settings.gif_frames)), "Animation of run 0."))


def euler_hyp(res: CaseResult, V, method: str, dt) -> None:
    if method == "euler":
        s = np.linalg.svd(np.eye(V.shape[0]) + dt * V, compute_uv=False)
        res.hyp(f"Euler layers dt = {dt:g}, I + dt V invertible (smallest singular value)", s[-1] > 1e-12 * s[0],
                float(s[-1]))


# ----------------------------------------------------------------------------- cases
@case("thm2_1", "Thm 2.1 (d = 1)", "Thm 2.1")
def thm2_1(ctx: Context, res: CaseResult) -> None:
    n, t1 = int(ctx.settings.n), float(ctx.settings.t1)
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
    small = np.sum(np.abs(gam[:, -1]) <= float(ctx.settings.rel_tol) * scale_g[:, None], axis=1)
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
    d, n, t1 = V.shape[0], int(ctx.settings.n), float(ctx.settings.t1)
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


@case("thm3_1", "Thm 3.1 (V = I, Q^T K > 0)", "Thm 3.1")
def thm3_1(ctx: Context, res: CaseResult) -> None:
    d = int(ctx.settings.d)
    Q, K = random_spd_factor(stream(ctx, "spd", d), d)
    _polytope_case(ctx, res, Q, K, np.eye(d), gif=True)




def _hyperplane_case(ctx: Context, res: CaseResult, V, *, method="tsit5", dt=None, gif=False) -> None:
    d, n, t1 = V.shape[0], int(ctx.settings.n), float(ctx.settings.t1)
    Q, K = good_qk(stream(ctx, "good_qk", d), V)  # tagged by d, not by V's bits (which vary with the BLAS)
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
                            r"$\phi_1^*(z_i(t))$ (run 0)", xlabel=unit), "Projections on the dual leading eigenvector: "
                            "max non-increasing, min non-decreasing, limits in {a, 0, b}."))


@case("thm4_2_2d", "Thm 4.2 (good triple, d = 2, eigenvalues 1.348, -0.068)", "Thm 4.2")
def thm4_2_2d(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 2), gif=True)


@case("thm4_2_3d", "Thm 4.2 (good triple, d = 3, transverse -0.3 +- 0.6i)", "Thm 4.2")
def thm4_2_3d(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 3))


@case("codim_k", "Conjecture: codimension k (top eigenvalue negative: not a good triple)",
          "Conjecture (codim k)")
def codim_k(ctx: Context, res: CaseResult) -> None:
    rng = stream(ctx, "codim_k_neg")
    d, n, t1 = 3, int(ctx.settings.n), float(ctx.settings.t1)
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
    rel = float(ctx.settings.rel_tol)
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
    d, n, t1 = V.shape[0], int(ctx.settings.n), float(ctx.settings.t1)
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


@case("thm5_2", "Thm 5.2 (V paranormal: eigenvalues 1, 1, -1/2, F and G not orthogonal)", "Thm 5.2")
def thm5_2(ctx: Context, res: CaseResult) -> None:
    Q, K = random_spd_factor(stream(ctx, "spd", 3), 3)
    _paranormal_case(ctx, res, Q, K, similar(stream(ctx, "paranormal_V"), PARANORMAL_BLOCKS), section12=False)


@case("thm8_5", "Thm 8.5 (V = -I, Q^T K = I)", "Thm 8.5")
def thm8_5(ctx: Context, res: CaseResult) -> None:
    d, n, t1 = int(ctx.settings.d), int(ctx.settings.n), float(ctx.settings.t1)
    I = np.eye(d)
    sp = spectral_one(I, I, -I)
    res.hyp("V = -c I and Q^T K = c' I, c, c' > 0 (here c = c' = 1)", bool(sp.origin_case[0]),
            {"c": float(-sp.stats.lambda1[0].real)})
    geometry_hyp(res, I, I, -I)
    x0 = initial(ctx, n, d, scale=float(ctx.settings.x0_scale))
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
                             rel_tol=float(ctx.settings.rel_tol)) for xb in x]
    res.check("observed geometry (classify_geometry)", "'origin' (asymptotically)",
              f"labels at t1 {[o.label for o in obs]}; max|x(t1)| / max|x(0)| "
              f"{fmt(norms[:, -1] / norms[:, 0])} (origin needs <= {ctx.settings.rel_tol:g})", None, float("nan"),
              note="info: the t^(-1/2) collapse reaches the 'origin' tolerance only at much larger t")
    if ctx.figures:
        res.figures.append((figures.trajectories(ctx.out / "thm8_5_trajectories.png", ts, x[0], title="Thm 8.5: raw "
                            "tokens (run 0)"), "Raw tokens spiral into 0."))
        res.figures.append((figures.levels(ctx.out / "thm8_5_norms.png", ts, np.stack([norms[0], spread[0], mean[0]], 1),
                            title="Thm 8.5: size of the raw cloud (run 0)", ylabel="size",
                            labels=["max_i ||x_i||", "spread", "||mean||"]), "max norm, spread and mean against time."))
        res.figures.append((figures.attention_maps(ctx.out / "thm8_5_attention.png", ts, run.P[0], run.rank[0],
                            title="Thm 8.5: P(t) -> 11^T/n (run 0)"), "P(t) becomes uniform (rank 1)."))


@case("remark7_9", "Remark 7.9 (rank of lim P vs clusters)", "Remark 7.9")
def remark7_9(ctx: Context, res: CaseResult) -> None:
    eps, t1 = float(ctx.settings.eps), float(ctx.settings.t1)
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
    rel = float(ctx.settings.rel_tol)
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


@case("sec12_1_polytope", "Sec 12.1: V = I, Q^T K with U[-1,1] entries", "Section 12.1")
def sec12_1_polytope(ctx: Context, res: CaseResult) -> None:
    d = int(ctx.settings.d)
    Q = stream(ctx, "uniform", d).uniform(-1, 1, size=(d, d))
    _polytope_case(ctx, res, Q, np.eye(d), np.eye(d), theorem_needs_spd=False)




@case("sec12_1_paranormal", "Sec 12.1: V = diag(1, 1, -1/2), Q^T K with U[-1,1] entries", "Section 12.1")
def sec12_1_paranormal(ctx: Context, res: CaseResult) -> None:
    K = uniform_qk_with_pd_F_block(ctx)
    _paranormal_case(ctx, res, np.eye(3), K, PARANORMAL_BLOCKS, section12=True)


def _euler_polytope(ctx: Context, res: CaseResult, dt: float) -> None:
    d = int(ctx.settings.d)
    Q, K = random_spd_factor(stream(ctx, "spd", d), d)
    _polytope_case(ctx, res, Q, K, np.eye(d), method="euler", dt=dt)


@case("thm3_1_euler_dt01", "Thm 3.1, Euler dt = 0.1", "Thm 3.1 (discrete)", euler_dt=0.1)
def thm3_1_euler_dt01(ctx: Context, res: CaseResult) -> None:
    _euler_polytope(ctx, res, thm3_1_euler_dt01.info.euler_dt)


@case("thm3_1_euler_dt1", "Thm 3.1, Euler dt = 1", "Thm 3.1 (discrete)", euler_dt=1.0)
def thm3_1_euler_dt1(ctx: Context, res: CaseResult) -> None:
    _euler_polytope(ctx, res, thm3_1_euler_dt1.info.euler_dt)


@case("thm4_2_euler_dt01", "Thm 4.2, Euler dt = 0.1", "Thm 4.2 (discrete)", euler_dt=0.1)
def thm4_2_euler_dt01(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 2), method="euler", dt=thm4_2_euler_dt01.info.euler_dt)


@case("thm4_2_euler_dt1", "Thm 4.2, Euler dt = 1", "Thm 4.2 (discrete)", euler_dt=1.0)
def thm4_2_euler_dt1(ctx: Context, res: CaseResult) -> None:
    _hyperplane_case(ctx, res, hyperplane_V(ctx, 2), method="euler", dt=thm4_2_euler_dt1.info.euler_dt)

