"""The mean-field limit: 10^5 tokens on the circle against the continuity equation of their density.

Tokens on the circle follow post-LN attention (Q = K = V = I, beta = 4) from a near-uniform start.
Attention runs on the Fourier fast path (O(n K) per step instead of O(n^2)); the histogram of the
particles over time is drawn beside the solution of the continuity equation
d_t rho + d_theta(rho v[rho]) = 0 from the same density. The spectral solution resolves the density
only while it stays positive: once clusters sharpen beyond the grid it undershoots, so the PDE is
drawn, and compared, only up to the last saved time before its density first goes negative (the
particles go on to the end). The example prints the exact W1 distance between particles and PDE at
that time, with the most unstable mode k* of the linear theory (the number of clusters that form)
and its margin over the runner-up.
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
SIZES = {"default": dict(n=100_000, bins=128, grid=512, t1=12.0, frames=49),
         "smoke": dict(n=2_000, bins=32, grid=128, t1=6.0, frames=7)}
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
        grid = (2 * np.pi / s["grid"]) * np.arange(s["grid"])
        k = np.arange(1, MODES + 1)
        rho0 = (1 + EPSILON * np.cos(k * (grid[:, None] - phases)).sum(1)) / (2 * np.pi)
        pde = solve_continuity(jnp.asarray(rho0), BETA, ts, dt=0.01)
        # min_density is the minimum over every RK4 step up to each save time: the PDE is resolved up to the
        # last save time before it first goes negative (the start, a positive density, always is)
        last = int(np.nonzero(np.minimum.accumulate(np.asarray(pde.min_density)) >= 0)[0][-1])
        t_end = float(ts[last])
        w1 = float(circle_w1_to_density(sim.states["last"][last], pde.density[last]))
        fastest = most_unstable_mode(BETA)
        density, hist = np.asarray(pde.density[: last + 1]), np.asarray(sim.states["hist"])
    fig, axes = ap.new_figure(2, panel=(4.6, 3.4))
    top = float(max(np.max(hist) * s["bins"], np.max(density) * 2 * np.pi))
    ap.circle_density(hist * s["bins"] / (2 * np.pi), t=ts, ax=axes[0, 0], vmax=top,
                      title=f"{s['n']} particles")
    ap.circle_density(density, t=ts[: last + 1], ax=axes[0, 1], vmax=top,
                      title=f"continuity equation, G = {s['grid']} (resolved to t = {t_end:g})")
    axes[0, 1].set_xlim(axes[0, 0].get_xlim())  # the same time axis: the blank end is where the PDE stops
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]
    print(f"{NAME}: W1(particles, PDE) at t = {t_end:g} (the last saved time the PDE resolves): {w1:.3g}; "
          f"linear theory: k* = {int(fastest.k)} clusters (runner-up {int(fastest.runner_up)}, "
          f"{float(fastest.margin):.0%} slower)")
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
