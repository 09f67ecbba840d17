"""Sensitivity to V: which entries of the value matrix change the number of clusters?

How much, and through which entries of V, does the number of clusters after a stack of
shared-weight layers depend on the value matrix? attnflow is differentiable end to end, so the
cluster geometry can be differentiated with respect to the weights. The script runs Euler layers
(dx_i = dt sum_j P_ij V x_j) from a fixed cloud, measures the soft (differentiable) number of
clusters of the normalised final tokens at a fixed scale with attnflow.geometry, takes its
gradient with respect to V by jax.grad, and checks one directional derivative against a
central finite difference. The figure shows the gradient as a heat map (entry (a, b) is
d N_eff / d V_ab) next to the paths of the token directions (projected on the plane of the
final cloud's two leading principal directions when d > 2).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import attnflow as af
import attnflow.plot as ap
from attnflow.geometry import soft_cluster_count
from attnflow.integrate import solve_euler

NAME = "05_sensitivity_to_V"
SIZES = {
    "default": dict(n=32, d=4, layers=12),
    "smoke": dict(n=8, d=3, layers=4),
}
TOL_FD = 1e-5      # relative agreement of autodiff and a central difference in float64 (step 1e-5)


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Differentiate, check against a finite difference, draw; return the files written."""
    cfg = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n, d = cfg["n"], cfg["d"]

    with jax.enable_x64(True):
        kx, kv, ku = jax.random.split(jax.random.key(5), 3)
        x0 = jax.random.normal(kx, (n, d))
        V0 = jnp.eye(d) + 0.3 * jax.random.normal(kv, (d, d))
        Q = K = jnp.eye(d)

        def directions(V):   # every layer's token directions x_i / |x_i| (the tokens' scale grows)
            xs = solve_euler(af.AttentionFlow(Q, K, V), x0, dt=0.25, num_steps=cfg["layers"]).ys
            return xs / jnp.linalg.norm(xs, axis=-1, keepdims=True)

        def final_tokens(V):
            return directions(V)[-1]

        def clusters(V):   # effective number of clusters of the directions, fixed scale 2 (the sphere's diameter)
            return soft_cluster_count(final_tokens(V), scale=2.0, temperature=0.05)

        clusters = jax.jit(clusters)
        value, grad = jax.jit(jax.value_and_grad(clusters))(V0)
        direction = jax.random.normal(ku, (d, d))
        direction = direction / jnp.linalg.norm(direction)
        h = 1e-5
        fd = (clusters(V0 + h * direction) - clusters(V0 - h * direction)) / (2 * h)
        ad = jnp.vdot(grad, direction)
        rel = float(jnp.abs(ad - fd) / jnp.maximum(jnp.abs(fd), 1e-12))
        u = np.asarray(jax.jit(directions)(V0))
    G = np.asarray(grad)

    fig, axes = ap.new_figure(2, panel=(4.2, 3.8))
    ax = axes[0, 0]
    lim = float(np.abs(G).max()) or 1.0
    im = ax.imshow(G, cmap="RdBu_r", vmin=-lim, vmax=lim)
    ax.set_xticks(range(d))
    ax.set_yticks(range(d))
    ap.colorbar(im, ax, "d N_eff / d V_ab")
    ax.set_xlabel("column b")
    ax.set_ylabel("row a")
    ax.set_title(f"gradient of N_eff = {float(value):.2f} w.r.t. V", fontsize="medium")
    ap.trajectories(u, ts=np.arange(len(u)), ax=axes[0, 1],
                    title=f"token directions x_i/|x_i| over {cfg['layers']} layers")
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]

    verdict = "AGREE" if rel <= TOL_FD else "DISAGREE"
    print(f"{NAME}: autodiff and finite difference {verdict}: directional derivative {float(ad):.6g} vs "
          f"{float(fd):.6g} (relative difference {rel:.1e}, tolerance {TOL_FD:g}: float64, step 1e-5); "
          f"N_eff = {float(value):.3f}")
    return files


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"Writes {NAME}.png (and any further figures) into --out and prints "
                                            "a one-line result.")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="default: the full example (under a minute on a laptop CPU); smoke: tiny sizes, seconds")
    parser.add_argument("--out", default=".", help="folder for the figures (default: the current folder)")
    args = parser.parse_args()
    for f in main(args.size, args.out):
        print(f)
