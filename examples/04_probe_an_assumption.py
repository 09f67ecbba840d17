"""Probe an assumption: the closest V that breaks Definition 4.1.

How robust is the spectral assumption of Theorem 4.2? Starting from a value matrix V0 that
satisfies Definition 4.1(1) (its eigenvalue of largest modulus is real, positive and simple),
the script searches with optax for the nearest V (in relative Frobenius distance) whose top
eigenvalue is no longer real and simple, by minimising |V - V0|^2 / |V0|^2 plus a penalty on
the differentiable margin of Definition 4.1(1) from attnflow.geometry. The figure shows the
loss curve and the eigenvalues of V0 and of the V found, coloured by Definition 4.1(1): in
the V found the eigenvalue of largest modulus is no longer a single real positive one.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import optax

import attnflow.plot as ap
from attnflow.geometry import good_triple_margins
from attnflow.spectral import check_good_triple

NAME = "04_probe_an_assumption"
SIZES = {
    "default": dict(d=6, steps=1500),
    "smoke": dict(d=3, steps=100),
}
TARGET = -0.05     # aim for a margin of Def 4.1(1) this far below 0 (a clear violation)
PENALTY = 200.0


def main(size: str = "default", out: str | Path = ".") -> list[Path]:
    """Optimise, check the result with the exact (non-differentiable) test; return the files written."""
    cfg = SIZES[size]
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    d = cfg["d"]

    with jax.enable_x64(True):
        # V0: a random matrix with a clear real top eigenvalue (a Perron-like rank-one boost)
        key = jax.random.key(4)
        G = jax.random.normal(key, (d, d)) / jnp.sqrt(d)
        u = jnp.ones(d) / jnp.sqrt(d)
        V0 = G + 1.5 * jnp.outer(u, u)
        Q = K = jnp.eye(d)

        def loss_fn(V):
            margin = good_triple_margins(Q, K, V).condition1
            distance = jnp.sum((V - V0) ** 2) / jnp.sum(V0 ** 2)
            return distance + PENALTY * jax.nn.relu(margin - TARGET) ** 2, (distance, margin)

        opt = optax.adam(optax.cosine_decay_schedule(2e-2, cfg["steps"], alpha=0.01))

        @jax.jit
        def run(V):
            def step(carry, _):
                V, state = carry
                (loss, aux), g = jax.value_and_grad(loss_fn, has_aux=True)(V)
                updates, state = opt.update(g, state, V)
                return (optax.apply_updates(V, updates), state), (loss, *aux)
            (V, _), history = jax.lax.scan(step, (V, opt.init(V)), None, length=cfg["steps"])
            return V, history

        V1, (loss, distance, margin) = run(V0)
        V0n, V1n = np.asarray(V0), np.asarray(V1)
    before, after = check_good_triple(np.eye(d), np.eye(d), V0n), check_good_triple(np.eye(d), np.eye(d), V1n)
    rel = float(np.linalg.norm(V1n - V0n) / np.linalg.norm(V0n))

    fig, axes = ap.new_figure(1, 3, panel=(6.4, 3.0))
    ax = axes[0, 0]
    ax.semilogy(np.arange(1, len(loss) + 1), np.asarray(loss), label="loss")
    ax.semilogy(np.arange(1, len(loss) + 1), np.asarray(distance), label="|V - V0|^2 / |V0|^2")
    ap.legend(ax)
    ax.set_xlabel("optax step")
    ax.set_ylabel("value")
    ax.set_title("loss", fontsize="medium")
    ap.eigenvalues(np.linalg.eigvals(V0n), ax=axes[1, 0], title=f"V0: Def 4.1(1) {'holds' if before.condition1 else 'fails'}",
                   unit_circle=False)
    ap.eigenvalues(np.linalg.eigvals(V1n), ax=axes[2, 0], title=f"V found: Def 4.1(1) {'holds' if after.condition1 else 'fails'}",
                   unit_circle=False)
    files = [out / name for name in ap.save(fig, out / f"{NAME}.png", close=True)]

    verdict = "BROKEN" if (before.condition1 and not after.condition1) else "NOT BROKEN"
    print(f"{NAME}: Def 4.1(1) {verdict} at relative distance {rel:.3f} from V0 (d = {d}); "
          f"margin {float(margin[0]):.3f} -> {float(margin[-1]):.3f}")
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
