"""Check a theorem: Theorem 3.1, tokens converge to the vertices of a polytope.

Do simulated tokens do what Theorem 3.1 proves? With V = I and Q^T K symmetric positive
definite, the theorem says that the convex hull of the rescaled tokens z(t) shrinks (it is
non-increasing for inclusion) and that every z_i(t) converges to 0 or to a point of the finite
set S = {x in K : |Ax|^2 = max_j <Ax, A v_j>}, A = (Q^T K)^{1/2}, v_j the vertices of the limit
polytope K; generically to a vertex, with far fewer vertices than tokens. The script simulates
a cloud with a random positive definite Q^T K, measures the three claims and prints a verdict.
The figure shows the token paths with the final hull, and against time the distance of the
cloud to the limit set and the hulls' nesting.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import attnflow as af
import attnflow.plot as ap
from attnflow.ensembles import sample_QK
from attnflow.observables import (
    cluster_labels,
    diameter,
    hull_nesting,
    hull_vertices,
    polytope_set_residual,
)

NAME = "02_check_a_theorem"
SIZES = {
    "default": dict(n=64, d=2, t1=10.0, num_saves=101),
    "smoke": dict(n=12, d=2, t1=8.0, num_saves=41),
}
#: The tolerances of the verdict and why they are what they are.
TOL_NESTING = 1e-6   # hulls nested up to the solver's error (adaptive Tsit5, float64)
TOL_LIMIT = 1e-3     # distance to S relative to the diameter: convergence is exponential, t1 finite


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Simulate, measure Theorem 3.1's three claims, print the verdict; return the files written."""
    cfg = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n, d = cfg["n"], cfg["d"]

    kx, kw = jax.random.split(jax.random.key(2))
    x0 = jax.random.normal(kx, (n, d))
    with jax.enable_x64(True):
        Q, K = sample_QK(kw, "spd", d)   # Q = I, K = A2 = M M^T / d + 0.1 I (SPD)
    V = jnp.eye(d)
    sim = af.simulate(x0, Q, K, V, t1=cfg["t1"], picture="rescaled", num_saves=cfg["num_saves"],
                      dtype="float64", rtol=1e-10, atol=1e-10)
    ts, z = np.asarray(sim.ts), np.asarray(sim.states)
    A2 = np.asarray(Q).T @ np.asarray(K)
    scale = float(diameter(jnp.asarray(z[0])))

    # claim 1: conv z(t) is non-increasing for inclusion
    nesting = hull_nesting(z)
    # claim 2: z_i(t_1) lies on S (residual 0 on S), computed from the final cloud's polytope
    residual = polytope_set_residual(z[-1], A2)
    # claim 3: far fewer limit points than tokens (clusters at 1 % of the initial diameter)
    with jax.enable_x64(True):
        labels = np.asarray(cluster_labels(jnp.asarray(z[-1]), rel_tol=0.01, scale=scale))
    points = z[-1][np.unique(labels)]                 # one representative per cluster
    k = len(points)
    vertices = points[hull_vertices(points)] if k > d else points
    nv = len(vertices)
    # ... and against time: distance of each token to the limit points (the vertices, and 0)
    limit_points = np.vstack([vertices, np.zeros((1, d))])
    dist = np.linalg.norm(z[:, :, None, :] - limit_points[None, None], axis=-1).min(-1).max(-1) / scale

    ok = bool(nesting.max() <= TOL_NESTING and residual.max() <= TOL_LIMIT and dist[-1] <= TOL_LIMIT
              and k < n / 2)
    verdict = "CONSISTENT" if ok else "NOT CONSISTENT"

    fig, axes = ap.new_figure(2, panel=(4.4, 4.0))
    ap.trajectories(sim, ax=axes[0, 0], overlay="hull", title=f"V = I, Q^T K > 0: {k} clusters, {nv} vertices")
    ax = axes[0, 1]
    ax.semilogy(ts, np.maximum(dist, 1e-16), label="max_i dist(z_i(t), final vertices or 0) / diam")
    ax.semilogy(ts[1:], np.maximum(nesting, 1e-16), label="hull nesting violation (<= 0 when nested)")
    ax.axhline(TOL_LIMIT, color="grey", ls="--", lw=0.8, label=f"tolerance {TOL_LIMIT:g}")
    ap.legend(ax)
    ax.set_xlabel("t")
    ax.set_ylabel("relative distance")
    ax.set_title(f"Theorem 3.1: {verdict}", fontsize="medium")
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]

    print(f"{NAME}: Theorem 3.1 {verdict}: {n} tokens -> {k} clusters ({nv} hull vertices); "
          f"max hull-nesting violation {nesting.max():.1e} (tol {TOL_NESTING:g}, solver error), "
          f"max residual to S {residual.max():.1e} and distance to the limit points {dist[-1]:.1e} "
          f"(tol {TOL_LIMIT:g} of the diameter: exponential convergence stopped at t = {ts[-1]:g})")
    return files


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"Writes {NAME}.png (and any further figures) into --out and prints "
                                            "a one-line result.")
    parser.add_argument("--size", choices=("default", "smoke"), default="default",
                        help="default: the full example (under a minute on a laptop CPU); smoke: tiny sizes, seconds")
    parser.add_argument("--out", default=".", help="folder for the figures (default: the current folder)")
    args = parser.parse_args()
    for f in main(args.size, args.out):
        print(f)
