#!/usr/bin/env python
r"""Measured strong and weak orders of attnflow's noisy integrators, with their intervals.

Problems with known answers (float64):

* **weak**: the noise alone on :math:`S^2` (d = 3, sigma = 1, T = 1) from unit tokens :math:`x_0`: the heat kernel
  gives :math:`E\langle x_T, x_0\rangle = e^{-(d-1)\sigma^2 T/2} = e^{-1}`; the error of the sample mean over
  ``tokens x paths`` independent tokens against it, at several steps, fitted as :math:`\log|err| = p\log\Delta t + c`
  (Student-t interval on p). The stochastic layer stepper (Euler-Maruyama, renormalised), and the diffrax SDE
  solves: Heun and midpoint (Stratonovich, the diffusion as given; the tokens read on the sphere as
  :math:`x/|x|`), Euler (Ito form, with the drift :math:`-(d-1)\sigma^2 x/2`).
* **strong**: the noise alone on the circle (d = 2), every run on the same virtual Brownian tree, against the
  same scheme at :math:`\Delta t = T/1024`: the mean distance :math:`E|x_T^{\Delta t} - x_T^{ref}|` at several steps.

Usage: ``python benchmarks/noise_orders.py [--out noise_orders.json] [--quick]``; prints a table (the one in
docs/guide/noise.md).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from attnflow.dynamics import AbstractDynamics  # noqa: E402
from attnflow.integrate import EulerMaruyamaStepper, SDESolver, TokenNoise, sphere_shift  # noqa: E402
from attnflow.stats import fit_slope  # noqa: E402
from benchmarks.common import machine_info  # noqa: E402


class Still(AbstractDynamics):
    """The zero field: the noise alone moves the tokens."""

    def vector_field(self, t, y, args=None):
        return jnp.zeros_like(y)


def _unit(x):
    return x / jnp.linalg.norm(x, axis=-1, keepdims=True)


def _cloud(n, d, seed):
    return _unit(jax.random.normal(jax.random.key(seed), (n, d), jnp.float64))


def _end(scheme: str, key, x0, steps: int, T: float, tol=None, brownian="layers"):
    """The tokens at T of one scheme on the Brownian path of ``key``."""
    sigma = 1.0
    if scheme == "layer stepper":
        stepper = EulerMaruyamaStepper(T / steps, steps, noise=TokenNoise(sigma, key, sphere=True), shift=sphere_shift,
                                       save_every=steps, brownian=brownian, tree_tol=tol)
        return stepper.solve(Still(), x0).ys[-1]
    solver = {"heun (Stratonovich)": "heun", "midpoint (Stratonovich)": "midpoint", "euler (Ito)": "euler"}[scheme]
    sde = SDESolver(0.0, T, dt=T / steps, noise=TokenNoise(sigma, key, sphere=True), solver=solver, tree_tol=tol)
    return _unit(sde.solve(Still(), x0).ys[-1])


SCHEMES = ("layer stepper", "heun (Stratonovich)", "midpoint (Stratonovich)", "euler (Ito)")


def weak_orders(steps_list, tokens: int, paths: int) -> list[dict]:
    d, T = 3, 1.0
    exact = math.exp(-(d - 1) * T / 2)
    x0 = _cloud(tokens, d, 0)
    keys = jax.random.split(jax.random.key(1), paths)
    rows = []
    for scheme in SCHEMES:
        errs, ses = [], []
        for steps in steps_list:
            run = jax.jit(jax.vmap(lambda k, steps=steps: jnp.sum(_end(scheme, k, x0, steps, T) * x0, -1)))
            c = np.asarray(run(keys))
            errs.append(float(c.mean() - exact))
            ses.append(float(c.std() / math.sqrt(c.size)))
        dts = T / np.asarray(steps_list, float)
        fit = fit_slope(np.log(dts), np.log(np.abs(errs)))
        rows.append({"scheme": scheme, "kind": "weak", "dt": dts.tolist(), "error": errs, "standard_error": ses,
                     "order": fit["slope"], "lo": fit["lo"], "hi": fit["hi"]})
    return rows


def strong_orders(steps_list, tokens: int, paths: int) -> list[dict]:
    T, ref_steps = 1.0, 1024
    tol = T / 2 ** 12
    x0 = _cloud(tokens, 2, 2)
    keys = jax.random.split(jax.random.key(3), paths)
    rows = []
    for scheme in SCHEMES:
        if scheme == "euler (Ito)":
            continue  # the Ito form's tokens leave the circle (x/|x| is read); its strong error is that of the drift
        end = lambda k, s: _end(scheme, k, x0, s, T, tol=tol, brownian="tree")  # noqa: E731
        ref = jax.jit(jax.vmap(lambda k: end(k, ref_steps)))(keys)
        errs = [float(jnp.mean(jnp.linalg.norm(jax.jit(jax.vmap(lambda k, s=s: end(k, s)))(keys) - ref, axis=-1)))
                for s in steps_list]
        dts = T / np.asarray(steps_list, float)
        fit = fit_slope(np.log(dts), np.log(errs))
        rows.append({"scheme": scheme, "kind": "strong", "dt": dts.tolist(), "error": errs, "order": fit["slope"],
                     "lo": fit["lo"], "hi": fit["hi"]})
    return rows


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="noise_orders.json", help="the JSON of every measurement (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="small sizes (seconds; orders are rough)")
    args = p.parse_args(argv)
    start = time.time()
    with jax.enable_x64(True):
        if args.quick:
            rows = weak_orders([8, 16], 256, 4) + strong_orders([8, 16], 16, 2)
        else:
            rows = weak_orders([8, 16, 32, 64], 4096, 32) + strong_orders([8, 16, 32, 64], 256, 8)
    out = {"machine": machine_info(), "rows": rows, "seconds": time.time() - start}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"{'scheme':<26} {'kind':<7} {'order':>6}  95% interval      errors at dt = {rows[0]['dt'][0]:g} ...")
    for r in rows:
        errs = " ".join(f"{e:+.2e}" for e in r["error"])
        print(f"{r['scheme']:<26} {r['kind']:<7} {r['order']:6.3f}  [{r['lo']:.3f}, {r['hi']:.3f}]   {errs}")
    print(f"({out['seconds']:.0f} s; {out['machine'].get('cpu', '')})")
    return out


if __name__ == "__main__":
    main()
