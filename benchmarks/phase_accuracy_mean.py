"""Accuracy of the phase job with the 1/n normalisation: the order of its rescaled layers, as for the softmax.

The job steps the 1/n field divided by s(beta) = max(sqrt(beta) e^(beta - 1/2), 1)
(:func:`attnflow.phase.step_scale`); :func:`attnflow.phase.sphere_convergence` with ``normalisation="mean"``
measures those layers against diffrax Tsit5 (float64, rtol = atol = 1e-12) on the same rescaled field, on
the ladder of ``benchmarks/phase_accuracy.py`` (``LADDERS``: 8 clouds of 32 tokens, t = 5, dt from 0.2 to
0.00625, beta = 1, 4, 9, d = 2 and 3). Prints one line per (d, beta) and writes ``summary.json`` under
``--out``; it also records the largest step dt |f| / s of the start clouds at dt = 0.1, and that of the
unscaled field.

    PYTHONPATH=. python benchmarks/phase_accuracy_mean.py --out results/phase-accuracy-mean     # about a minute
    PYTHONPATH=. python benchmarks/phase_accuracy_mean.py --quick --out /tmp/phase-accuracy-mean

Not a test.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.phase_accuracy import LADDERS


def convergence(size: str, seed: int = 0) -> list[dict]:
    """Per (d, beta): the errors at every dt, the fitted order, and the start clouds' largest step at dt = 0.1."""
    import jax
    import jax.numpy as jnp

    from attnflow.dynamics import normalise, sphere_flow
    from attnflow.phase import sphere_convergence, step_scale

    ladder = LADDERS[size]
    out = []
    for d in ladder["d"]:
        for k, beta in enumerate(ladder["beta"]):
            x0 = np.random.default_rng([seed, d, k]).standard_normal((ladder["clouds"], ladder["n"], d))
            start = time.perf_counter()
            r = sphere_convergence(x0, beta, ladder["t"], ladder["dts"], normalisation="mean")
            with jax.enable_x64(True):
                I = jnp.eye(d, dtype=jnp.float64)
                f = jax.vmap(lambda x: sphere_flow(I, I, I, beta, normalisation="mean")(0.0, x))(
                    normalise(jnp.asarray(x0)))
                unscaled = float(0.1 * jnp.linalg.norm(f, axis=-1).max())
            out.append({"d": d, "beta": beta, "t": ladder["t"], "n": ladder["n"], "clouds": ladder["clouds"],
                        "step_scale": step_scale(beta), "dt": r["dt"].tolist(),
                        "error_max": r["error"].max(axis=0).tolist(),
                        "error_median": np.median(r["error"], axis=0).tolist(), "order": r["order"],
                        "order_lo": r["order_lo"], "order_hi": r["order_hi"],
                        "largest_step_unscaled_dt0.1": unscaled,
                        "largest_step_scaled_dt0.1": unscaled / step_scale(beta),
                        "seconds": time.perf_counter() - start})
            print(f"d = {d}, beta = {beta:g} (s = {step_scale(beta):.4g}): order {r['order']:.3f} "
                  f"[{r['order_lo']:.3f}, {r['order_hi']:.3f}]; max error {r['error'].max(axis=0)[0]:.2e} at dt = "
                  f"{ladder['dts'][0]:g}, {r['error'].max(axis=0)[-1]:.2e} at dt = {ladder['dts'][-1]:g}; largest "
                  f"step at dt = 0.1: {unscaled:.3g} rad unscaled, {unscaled / step_scale(beta):.3g} scaled",
                  flush=True)
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for summary.json")
    p.add_argument("--quick", action="store_true", help="toy sizes (smoke test)")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = convergence("quick" if args.quick else "full")
    (out / "summary.json").write_text(json.dumps({"convergence": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
