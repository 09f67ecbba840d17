"""Tokens on the sphere: how fast do normalised tokens cluster, at each temperature?

With layer normalisation the tokens live on the unit sphere (post-LN: every token is projected
back onto the sphere after each layer). How does the inverse temperature beta, which multiplies
the attention scores, change how fast they cluster? The script runs the sphere dynamics of
attnflow (fields entry "sphere", Q = K = V = I, Euler layers renormalised after each step) for
one cloud at several beta at once. The figure shows the number of clusters against time for
each beta, and the fraction of token pairs that are clustered as a beta x t heat map
(attnflow.plot.phase_diagram).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import attnflow.plot as ap
from attnflow.dynamics import normalise
from attnflow.fields import build_field
from attnflow.integrate import EulerStepper, sphere_shift
from attnflow.observables import clusters_above, pairs_clustered

NAME = "07_tokens_on_the_sphere"
SIZES = {
    "default": dict(n=32, d=3, betas=[0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0], dt=0.1, layers=300, every=5),
    "smoke": dict(n=8, d=3, betas=[1.0, 4.0], dt=0.25, layers=40, every=4),
}
THRESHOLD = 0.999   # two tokens are clustered when <x_i, x_j> >= 0.999 (an angle below 2.6 degrees)


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Run every beta as one batch, measure, draw; return the files written."""
    cfg = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    n, d = cfg["n"], cfg["d"]
    betas = jnp.asarray(cfg["betas"])

    x0 = normalise(jax.random.normal(jax.random.key(7), (n, d)))
    I = jnp.eye(d)
    stepper = EulerStepper(dt=cfg["dt"], num_layers=cfg["layers"], shift=sphere_shift, save_every=cfg["every"])

    @jax.jit
    def run(beta):
        traj = stepper.solve(build_field("sphere", I, I, I, beta=beta), x0)
        ys = traj.ys                                                  # (T, n, d)
        pairs = jax.vmap(lambda y: pairs_clustered(y, THRESHOLD))(ys)
        counts = jax.vmap(lambda y: clusters_above(y, THRESHOLD))(ys)
        return traj.ts, counts, pairs

    ts, counts, pairs = jax.vmap(run)(betas)
    ts, counts, pairs = np.asarray(ts[0]), np.asarray(counts), np.asarray(pairs)

    fig, axes = ap.new_figure(2, panel=(4.8, 3.8))
    ap.series_by_parameter(ts, counts.astype(float), values=np.asarray(betas), parameter="beta", ax=axes[0, 0],
                           xlabel="time t (layers x dt)", ylabel="number of clusters", log=False,
                           title=f"{n} tokens on the sphere S^{d - 1}, Q = K = V = I")
    ap.phase_diagram(pairs, beta=np.asarray(betas), t=ts, ax=axes[0, 1], log_beta=True, vmin=0.0, vmax=1.0,
                     title=f"clustered pairs (<x_i, x_j> >= {THRESHOLD:g})")
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]

    final = ", ".join(f"beta={b:g}: {int(c)}" for b, c in zip(cfg["betas"], counts[:, -1]))
    print(f"{NAME}: clusters at t = {ts[-1]:g}: {final}")
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
