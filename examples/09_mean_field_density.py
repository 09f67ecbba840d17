"""The mean-field limit: 10^5 tokens on the circle against the continuity equation of their density.

Tokens on the circle follow post-LN attention (Q = K = V = I, beta = 4) from a near-uniform start.
Attention runs on the Fourier fast path (O(n K) per step instead of O(n^2)); the histogram of the
particles over time is drawn beside the solution of the continuity equation
d_t rho + d_theta(rho v[rho]) = 0 from the same density, and the example prints the exact W1
distance between the two at the end, with the most unstable mode k* of the linear theory (the
number of clusters that form).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import attnflow.plot as ap
from attnflow import simulate
from attnflow.dynamics import sphere_flow
from attnflow.meanfield import (circle_histogram, circle_w1_to_density, most_unstable_mode, near_uniform_start,
                                solve_continuity)

NAME = "09_mean_field_density"
SIZES = {"default": dict(n=100_000, bins=128, t1=12.0, frames=49), "smoke": dict(n=2_000, bins=32, t1=6.0, frames=7)}
BETA, MODES, EPSILON = 4.0, 6, 0.01


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Run particles and PDE from the same near-uniform density, draw both; return the files written."""
    s = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    with jax.enable_x64(True):
        theta0, phases = near_uniform_start(s["n"], MODES, EPSILON, np.random.default_rng(0))
        x0 = jnp.stack([jnp.cos(theta0), jnp.sin(theta0)], axis=1)
        ts = jnp.linspace(0.0, s["t1"], s["frames"])
        I = jnp.eye(2)
        field = sphere_flow(I, I, I, BETA, attention_impl="fourier", fourier_max_score=BETA)
        sim = simulate(x0, dynamics=field, t1=s["t1"], method="tsit5", dt=0.05, ts=ts, dtype="float64",
                       save_fn=lambda t, y, args: {"hist": circle_histogram(y, s["bins"]), "last": y})
        grid = (2 * np.pi / s["bins"]) * np.arange(s["bins"])
        k = np.arange(1, MODES + 1)
        rho0 = (1 + EPSILON * np.cos(k * (grid[:, None] - phases)).sum(1)) / (2 * np.pi)
        pde = solve_continuity(jnp.asarray(rho0), BETA, ts, dt=0.01)
        w1 = float(circle_w1_to_density(sim.states["last"][-1], pde.density[-1]))
        k_star = int(most_unstable_mode(BETA))
    fig, axes = ap.new_figure(2, panel=(4.6, 3.4))
    top = float(max(np.max(sim.states["hist"]) * s["bins"], np.max(pde.density) * 2 * np.pi))
    ap.circle_density(np.asarray(sim.states["hist"]) * s["bins"] / (2 * np.pi), t=ts, ax=axes[0, 0], vmax=top,
                      title=f"{s['n']} particles")
    ap.circle_density(pde.density, t=ts, ax=axes[0, 1], vmax=top, title=f"continuity equation, G = {s['bins']}")
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]
    resolved = "resolved" if not bool(pde.negative) else "no longer resolved (density went negative)"
    print(f"{NAME}: W1(particles, PDE) at t = {s['t1']:g}: {w1:.3g} (PDE {resolved}); linear theory: "
          f"k* = {k_star} clusters")
    return files


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"Writes {NAME}.png into --out and prints a one-line result.")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="default: 10^5 particles (about a minute on a laptop CPU); smoke: tiny sizes, seconds")
    parser.add_argument("--out", default=".", help="folder for the figures (default: the current folder)")
    args = parser.parse_args()
    for f in main(args.size, args.out):
        print(f)
