"""Clusters on the sphere: 10^5 tokens on S^2, their density, and the degree that selects the pattern.

Tokens on S^2 attend with Q = K = V = I (post-LN attention, the layer stepper renormalising onto the sphere),
on the O(n L^2) harmonic path (attention_impl="auto" takes it at this size). Started uniform, the cloud's
degree-l harmonics grow at lambda_l = l(l+1) K_l / beta (softmax: / K_0), fastest at l* (5 at beta = 16), and
the clusters form at the maxima of the resulting degree-l* pattern. The example draws the density as
equal-area maps at three times and prints whether the degree that grew fastest is l*.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import numpy as np

import attnflow.plot as ap
from attnflow.dynamics import IdentitySphereFlow, normalise
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.meanfield import harmonic_energies, sphere_growth_rates, sphere_histogram

NAME = "11_clusters_on_the_sphere"
SIZES = {"default": dict(n=100_000, beta=16.0), "smoke": dict(n=3000, beta=4.0)}


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Run, draw, print the verdict; return the files written."""
    s, out = SIZES[size], Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lam = np.asarray(sphere_growth_rates(s["beta"], 3, 20))
    star, top = int(np.argmax(lam)), int(np.argmax(lam)) + 4
    layers, dt = 400, 0.02 / lam.max()  # tau = lambda_max t up to 8
    x0 = normalise(jax.random.normal(jax.random.key(0), (s["n"], 3)))
    observe = lambda t, y, args: (harmonic_energies(y, top), sphere_histogram(y, 36, 72))
    stepper = EulerStepper(dt, layers, shift=sphere_shift, save_every=20)
    energies, maps = jax.jit(lambda x: stepper.solve(IdentitySphereFlow(s["beta"]), x, save_fn=observe).ys)(x0)
    grew = np.log(np.asarray(energies[5, 1:]) / np.asarray(energies[0, 1:]))  # tau 0 -> 2: the linear phase
    fastest = int(np.argmax(grew)) + 1
    fig, axes = ap.new_figure(3, panel=(4.2, 2.6), projection="mollweide")
    densities = np.asarray(maps) * maps.shape[1] * maps.shape[2] / (4 * np.pi)  # masses / cell area
    vmax = max(10.0, float(densities.max()) * 4 * np.pi)  # one scale for the three times
    for ax, k in zip(axes[0], (0, 10, 20)):
        ap.sphere_density_map(densities[k], ax=ax, log=True, vmax=vmax, colorbar_label=False,
                              title=f"$\\tau = \\lambda_{{max}} t$ = {k * 20 * 0.02:g}")
        ax.set_yticklabels([])
    fig.colorbar(axes[0][0].collections[0], ax=axes[0].tolist(), shrink=0.8, label="density / uniform (log)")
    fig.suptitle(f"{s['n']} tokens on $S^2$, $\\beta$ = {s['beta']:g}: density / uniform ($l^*$ = {star})", fontsize=9)
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]
    print(f"{NAME}: the degree that grew fastest over tau = 0..2 is {fastest}, the theory's l* is {star}: "
          f"{'MATCHES' if fastest == star else 'DIFFERS'}")
    return files


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"Writes {NAME}.png into --out and prints a one-line result.")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="default: 10^5 tokens at beta = 16 (about 2 minutes on a 2-core CPU); smoke: 3000, seconds")
    parser.add_argument("--out", default=".", help="folder for the figures (default: the current folder)")
    args = parser.parse_args()
    for f in main(args.size, args.out):
        print(f)
