r"""Negative controls: configurations that must NOT get a geometry label, and a run whose
dynamics are wrong, shown in the report as expected failures of the classifier and the checks.

Each row is graded PASS when the control is rejected (the label is refused, the check fails):
a classifier or a check that accepted them could not tell structure from noise.

* noise clouds (uniform in the unit ball, n = 32 and n = 1024, d = 2 and 3), unmoved: must get
  none of "polytope", "hyperplanes", "codim-k", "polytope x subspace", "origin";
* a complex-lambda_1 V (eigenvalues 0.2 +- i), simulated: predicted "none"; its final
  configuration must not be clustered (no polytope, no codim-k = d points);
* a collapsed run: the Thm 3.1 system integrated with uniform attention (a wrong field, every
  token pulled to the mean): the Thm 3.1 rate bound and the equation check must fail.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from ..observables import classify_geometry
from ..spectral import predict_geometry
from ._base import CaseResult, Context, case, defect_check, fmt, run_case_sim
from ._checks import polytope_checks
from ._draws import hyperplane_V, random_spd_factor, similar, stream
from ._mutations import mutated_field_factory

__all__ = ["negative_controls"]

REFUSED = ("origin", "polytope", "polytope x subspace", "hyperplanes", "codim-k")


def _noise(rng, n: int, d: int) -> np.ndarray:
    """n points uniform in the unit ball of R^d."""
    g = rng.normal(size=(n, d))
    return g / np.linalg.norm(g, axis=1, keepdims=True) * rng.uniform(size=(n, 1)) ** (1 / d)


@case("negative_controls", "Negative controls (must be rejected)", "controls")
def negative_controls(ctx: Context, res: CaseResult) -> None:
    rel = float(ctx.settings.rel_tol)
    rng = stream(ctx, "noise")
    Vs = {2: {"V = I": np.eye(2), "good V (1.348, -0.068)": hyperplane_V(ctx, 2)},
          3: {"V = I": np.eye(3), "paranormal (1, 1, -1/2)": np.diag([1.0, 1.0, -0.5]),
              "codim-2 V (-1.2, 1, 0.9)": similar(stream(ctx, "codim_k_neg"), np.diag([-1.2, 1.0, 0.9]))}}
    for n in (32, 1024) if not ctx.quick else (32,):
        for d, vs in Vs.items():
            z = _noise(rng, n, d)
            for vname, V in vs.items():
                o = classify_geometry(z, V, x=z, scale=1.0, rel_tol=rel)
                accepted = [lab for lab in REFUSED if o.supports(lab)]
                res.check(f"noise n = {n}, d = {d}, {vname}", "no structured label (tokens uniform in the unit ball; "
                          f"tolerance {rel:g} x 1)", f"label {o.label}; clusters {o.num_clusters}, levels "
                          f"{o.num_levels}, subspaces {o.num_subspaces}; accepted {accepted or '-'}",
                          not accepted, 1.0 if not accepted else -float(len(accepted)),
                          note="expected failure of the classifier: PASS means rejected")
    # complex top eigenvalue: simulate, expect no clustering
    n = int(ctx.settings.n)
    Vc = np.array([[0.2, -1.0], [1.0, 0.2]])
    I2 = np.eye(2)
    p = predict_geometry(I2, I2, Vc)
    run = run_case_sim(ctx, stream(ctx, "complex_x0").normal(size=(int(ctx.settings.batch), n, 2)), I2, I2, Vc,
                       t1=float(ctx.settings.t1))
    obs = [classify_geometry(zb[-1], Vc, x=xb[-1], scale=float(np.max(np.linalg.norm(zb[0], axis=-1))),
                             rel_tol=rel) for zb, xb in zip(run.z, run.x)]
    accepted = sorted({lab for o in obs for lab in REFUSED if o.supports(lab)})
    res.check("complex lambda_1 (0.2 +- i), simulated", f"predict_geometry '{p.geometry}' and no structured label",
              f"labels {[o.label for o in obs]}; clusters {[o.num_clusters for o in obs]}; accepted "
              f"{accepted or '-'}", p.geometry == "none" and not accepted, 1.0 if not accepted else -1.0,
              note="the paper expects no clustering when the top eigenvalue is complex")
    # a collapsed run: Thm 3.1's system under uniform attention must fail Thm 3.1's checks
    d = 2
    Q, K = random_spd_factor(stream(ctx, "spd", d), d)
    wrong = dataclasses.replace(ctx, field_factory=mutated_field_factory("uniform"), figures=False)
    x0 = stream(ctx, "x0", n, d).normal(size=(int(ctx.settings.batch), n, d))
    bad = run_case_sim(wrong, x0, Q, K, np.eye(d), t1=float(ctx.settings.t1))
    probe = CaseResult("collapsed", "collapsed run", "Thm 3.1")
    defect_check(probe, bad)
    polytope_checks(probe, ctx, bad.ts, bad.z, what="z", A2=Q.T @ K)
    failed = [c.name for c in probe.checks if c.passed is False]
    must = {"solves the paper's equation", "max |A z_i|^2: Thm 3.1 rate bound"}
    spread = float(np.max(np.linalg.norm(bad.z[:, -1] - bad.z[:, -1].mean(axis=1, keepdims=True), axis=-1)))
    res.check("collapsed run (Thm 3.1 system, uniform attention)", "fails the equation check and Thm 3.1's rate "
              "bound (it collapses to one point, which every other Thm 3.1 check accepts)",
              f"failed: {', '.join(failed) or '-'}; final spread {fmt(spread)}", must <= set(failed),
              1.0 if must <= set(failed) else -1.0, note="expected failure of the checks: PASS means rejected")
    if ctx.figures:
        from . import _figures as figures

        res.figures.append((figures.trajectories(ctx.out / "negative_controls_complex.png", run.ts, run.z[0],
                            title="Control: complex lambda_1 = 0.2 +- i, rescaled tokens (run 0)"),
                            "No clustering when the top eigenvalue is complex."))
        res.figures.append((figures.trajectories(ctx.out / "negative_controls_collapsed.png", bad.ts, bad.z[0],
                            title="Control: Thm 3.1 system under uniform attention (wrong field, run 0)",
                            overlay="hull"), "A wrong field collapses every token to one point."))
    res.notes.append("Every row is an expected failure: a noise cloud, a system that should not cluster, "
                     "or a wrong vector field. PASS means the classifier or the checks rejected it.")
    res.record(run, "complex")
    res.record(bad, "collapsed")
