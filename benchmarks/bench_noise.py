#!/usr/bin/env python
r"""The stochastic layer against the deterministic one, side by side in one process.

Rows (tokens on the sphere, Q = K = V = I, the noise ``TokenNoise(sigma, key, sphere=True)``, increments from
``fold_in(key, layer)``, noise generation included):

* ``phase``: the phase job's small row, 256 systems x 10 betas of n = 32 tokens in d = 2, 300 projected layers of
  dt = 0.1 (float64, one vmapped program, the final state kept);
* ``circle``: n = 10^6 tokens on the circle, softmax attention on the Fourier path (K modes for beta = 4),
  20 layers of dt = 0.05 (float32).

Each row times the deterministic :class:`~attnflow.integrate.EulerStepper` and the
:class:`~attnflow.integrate.EulerMaruyamaStepper` in interleaved rounds (the order alternating) and reports the
median of each and the ratio per round (min / median / max), with the machine's float32 matmul rate measured in
the same run.

Usage: ``python benchmarks/bench_noise.py [--rounds 5] [--quick] [--out bench_noise.json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from attnflow.dynamics import IdentitySphereFlow, normalise, sphere_flow  # noqa: E402
from attnflow.integrate import EulerMaruyamaStepper, EulerStepper, TokenNoise, sphere_shift  # noqa: E402
from benchmarks.common import machine_info, matmul_rate  # noqa: E402

SIGMA = 0.3


def _phase_row(quick: bool):
    systems, betas, layers, n, d = (16, 2, 30, 32, 2) if quick else (256, 10, 300, 32, 2)
    dtype = jnp.float64
    x0 = normalise(jax.random.normal(jax.random.key(0), (systems * betas, n, d), dtype))
    beta = jnp.repeat(jnp.linspace(0.1, 9.0, betas, dtype=dtype), systems)
    keys = jax.random.split(jax.random.key(1), systems * betas)

    def plain(b, x):
        return EulerStepper(0.1, layers, shift=sphere_shift, save_every=layers).solve(IdentitySphereFlow(b), x).ys[-1]

    def noisy(b, x, k):
        stepper = EulerMaruyamaStepper(0.1, layers, noise=TokenNoise(SIGMA, k, sphere=True), shift=sphere_shift,
                                       save_every=layers)
        return stepper.solve(IdentitySphereFlow(b), x).ys[-1]

    f, g = jax.jit(jax.vmap(plain)), jax.jit(jax.vmap(noisy))
    return (lambda: f(beta, x0)), (lambda: g(beta, x0, keys)), {
        "systems": systems * betas, "n": n, "d": d, "layers": layers, "dtype": "float64"}


def _circle_row(quick: bool):
    n, layers, beta = (10_000 if quick else 1_000_000), 20, 4.0
    theta = jax.random.uniform(jax.random.key(2), (n,), jnp.float32, 0.0, 2 * np.pi)
    x0 = jnp.stack([jnp.cos(theta), jnp.sin(theta)], axis=1)
    I = jnp.eye(2)
    field = sphere_flow(I, I, I, beta, attention_impl="fourier", fourier_max_score=beta)
    plain = jax.jit(lambda x: EulerStepper(0.05, layers, shift=sphere_shift, save_every=layers).solve(field, x).ys[-1])
    noisy = jax.jit(lambda x, k: EulerMaruyamaStepper(
        0.05, layers, noise=TokenNoise(SIGMA, k, sphere=True), shift=sphere_shift, save_every=layers)
        .solve(field, x).ys[-1])
    key = jax.random.key(3)
    return (lambda: plain(x0)), (lambda: noisy(x0, key)), {"n": n, "d": 2, "layers": layers, "dtype": "float32",
                                                           "attention": "fourier"}


def _time(fn) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="interleaved timed rounds per row (default %(default)s)")
    p.add_argument("--quick", action="store_true", help="tiny sizes (a smoke run, seconds)")
    p.add_argument("--out", default="bench_noise.json", help="the JSON record (default %(default)s)")
    args = p.parse_args(argv)
    rate = matmul_rate("float32", n=256 if args.quick else 2048)
    rows = []
    for name, make in (("phase", _phase_row), ("circle", _circle_row)):
        with jax.enable_x64(name == "phase"):
            plain, noisy, sizes = make(args.quick)
            compile_s = {"deterministic": _time(plain), "stochastic": _time(noisy)}  # first calls: compile + run
            times = {"deterministic": [], "stochastic": []}
            for r in range(args.rounds):
                order = ("deterministic", "stochastic") if r % 2 == 0 else ("stochastic", "deterministic")
                for who in order:
                    times[who].append(_time(plain if who == "deterministic" else noisy))
        ratios = [s / d for s, d in zip(times["stochastic"], times["deterministic"])]
        rows.append({"row": name, **sizes, "sigma": SIGMA, "first_call_s": compile_s, "times_s": times,
                     "deterministic_s": statistics.median(times["deterministic"]),
                     "stochastic_s": statistics.median(times["stochastic"]),
                     "ratio": {"min": min(ratios), "median": statistics.median(ratios), "max": max(ratios)}})
    out = {"machine": machine_info(), "matmul_float32_flops_per_s": rate["flops_per_s"], "rows": rows}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    cpu = out["machine"].get("cpu", "")
    print(f"stochastic layer / deterministic layer ({cpu}; float32 matmul {rate['flops_per_s'] / 1e9:.1f} GFLOP/s)")
    for r in rows:
        print(f"  {r['row']:<7} deterministic {r['deterministic_s']:.3f} s, stochastic {r['stochastic_s']:.3f} s: "
              f"ratio {r['ratio']['min']:.2f} / {r['ratio']['median']:.2f} / {r['ratio']['max']:.2f} (min / median / max)")
    return out


if __name__ == "__main__":
    main()
