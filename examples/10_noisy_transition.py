"""Noise against clustering: the phase transition of noisy tokens on the circle.

Tokens with independent noise of strength sigma have the mean-field limit
d_t rho = (sigma^2/2) d_theta^2 rho - d_theta(rho v[rho]) (1/n attention). The uniform state is stable
above the closed-form threshold sigma_c(beta); below it the tokens cluster. The example solves the noisy
continuity equation to a long time for a grid of sigma, from a nearly uniform start and from a clustered
one, at one beta below beta* = 2.4469 (continuous transition: both starts agree) and one above it
(discontinuous: just above sigma_c the clustered start stays clustered, a second stable state). It draws the
order parameter r = |int rho e^{i theta}| against sigma / sigma_c and prints whether the measured loss of
stability of the uniform state brackets the closed form.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import attnflow.plot as ap
from attnflow.meanfield import critical_noise, noisy_transition, tricritical_beta

NAME = "10_noisy_transition"
SIZES = {"default": dict(ratios=np.linspace(0.8, 1.2, 17), grid=64, t1=300.0, dt=0.01),
         "smoke": dict(ratios=np.array([0.9, 1.15]), grid=32, t1=100.0, dt=0.025)}
BETAS = (1.5, 4.0)


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Solve, draw, print the verdict; return the files written."""
    s, out = SIZES[size], Path(out)
    out.mkdir(parents=True, exist_ok=True)
    fig, axes = ap.new_figure(2, panel=(4.4, 3.4))
    verdicts = []
    for ax, beta in zip(axes[0], BETAS):
        sc = float(critical_noise(beta, 2, "mean"))
        t = noisy_transition(beta, sc * s["ratios"], num_points=s["grid"], t1=s["t1"], dt=s["dt"])
        ap.order_vs_noise(s["ratios"], t["from_uniform"], t["from_clustered"], beta=beta, beta_star=t["beta_star"],
                          ax=ax)
        verdicts.append(t["threshold"]["contains_sigma_c"])
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]
    print(f"{NAME}: the uniform state's measured loss of stability brackets the closed form sigma_c: "
          f"{'INSIDE' if all(verdicts) else 'OUTSIDE'} at beta = {', '.join(map(str, BETAS))} "
          f"(beta* = {tricritical_beta(2):.4f})")
    return files


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=f"Writes {NAME}.png into --out and prints a one-line result.")
    parser.add_argument("--size", choices=sorted(SIZES), default="default",
                        help="default: 17 noise strengths (a few minutes on a laptop CPU); smoke: 2, seconds")
    parser.add_argument("--out", default=".", help="folder for the figures (default: the current folder)")
    args = parser.parse_args()
    for f in main(args.size, args.out):
        print(f)
