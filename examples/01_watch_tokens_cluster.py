"""Watch tokens cluster.

Do tokens moved by self-attention gather into a few clusters, and how fast? A cloud of tokens
in the plane follows the rescaled attention flow z = e^{-tV} x with V = I and Q = K = I
(Theorem 3.1). The figure shows every token's path with the convex hull of the final cloud, and
the number of clusters against time (a second PNG shows the paths alone): after a few time units (layers) the many tokens sit on a
handful of points, the vertices of a polygon. An animation (GIF) shows the same run, its
frames spaced by how much the cloud moves rather than by time.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

import attnflow as af
import attnflow.plot as ap
from attnflow.observables import diameter, num_clusters

NAME = "01_watch_tokens_cluster"
SIZES = {
    "default": dict(n=48, t1=8.0, num_saves=161, frames=40),
    "smoke": dict(n=10, t1=4.0, num_saves=21, frames=5),
}


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Simulate, draw, animate; return the files written."""
    cfg = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)

    x0 = jax.random.normal(jax.random.key(6), (cfg["n"], 2))
    I = jnp.eye(2)
    sim = af.simulate(x0, I, I, I, t1=cfg["t1"], picture="rescaled", num_saves=cfg["num_saves"],
                      dtype="float64")
    states = np.asarray(sim.states)
    ts = np.asarray(sim.ts)

    # clusters at a fixed tolerance: 2 % of the initial cloud's diameter
    scale = float(diameter(jnp.asarray(states[0])))
    with jax.enable_x64(True):
        counts = np.asarray(jax.vmap(lambda z: num_clusters(z, rel_tol=0.02, scale=scale))(jnp.asarray(states)))

    fig, axes = ap.new_figure(2, panel=(4.4, 4.0))
    ap.trajectories(sim, ax=axes[0, 0], overlay="hull", title=f"{cfg['n']} tokens, V = I (rescaled z)")
    ap.cluster_series(ts, clusters=counts, ax=axes[0, 1], title="number of clusters")
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]
    # the paths alone, larger: the picture on the front page of the documentation
    fig, ax = ap.new_axes(figsize=(5.6, 5.0))
    ap.trajectories(sim, ax=ax, overlay="hull", title=f"{cfg['n']} tokens cluster at the vertices of a polygon")
    files += [out / name for name in ap.save(fig, out / f"{NAME}_paths.png", close=True)]
    gif = ap.animate(sim, out / f"{NAME}.gif", frames=cfg["frames"], spacing="progress", overlay="hull",
                     title="V = I")
    files.append(out / gif)
    print(f"{NAME}: {cfg['n']} tokens -> {int(counts[-1])} clusters at t = {ts[-1]:g} "
          f"(tolerance 2% of the initial diameter)")
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
