r"""The sphere path (:mod:`attnflow.kernels.sphere`, O(n L^2)) against the tiled direct sum, one layer at a time.

Problem: tokens uniform on the sphere S^2 (float64, fixed seed), scores :math:`\beta\langle x_i, x_j\rangle`
(Q = K = I), V = I + a small fixed perturbation, one "layer": the attention of every token, one Euler step
:math:`x \leftarrow x + dt\, V \sum_j P_{ij} x_j` (dt = 0.1) and the renormalisation onto the sphere, all in
one jit-compiled program. Rows:

* ``sphere``: :func:`attnflow.kernels.sphere.sphere_attention` at n = 10^5 and 10^6 (beta = 4, degree
  L = :func:`~attnflow.kernels.sphere.sphere_degree` = 22 in float64: (L + 1)^2 = 529 harmonics).
* ``direct``: :func:`attnflow.kernels.chunked_attend` (the tiled online softmax, O(n^2) work) at n = 10^5
  only; its n = 10^6 time is extrapolated as 100 times that (O(n^2)), and printed as such.
* the machine's own float64 rates, measured in the same run: a 2048 x 2048 matmul (flop/s) and ``exp``
  (exp/s, numbers in cache); the direct layer's floor :math:`n^2/R_{exp}` and the sphere layer's work in
  matmul-rate units put the times in scale.
* ``--profile``: the sphere layer's two passes timed apart at the largest n (the moments
  :math:`\sum_j Y_h(x_j)(1, x_j)`, then the values at every token), with the harmonics' recurrence alone.

Timing: every program is compiled ahead of time (compile time printed), then called ``--repeats`` times with
``block_until_ready``; min / median / max per layer. Every figure is printed with the machine it was
measured on (CPU model, ``os.cpu_count()``, ``jax.devices()``, load average). On a shared machine quote the
ratios measured in one run.

``--d 4`` (or 5, ...): the same rows on :math:`S^{d-1}` through :mod:`attnflow.kernels.hypersphere` (H harmonics
of degree <= L, :math:`(L+1)(L+2)(2L+3)/6` on S^3), against the tiled direct sum in the same dimension.

Usage: ``python benchmarks/bench_sphere_path.py [--d 3] [--sizes 100000,1000000] [--beta 4] [--repeats 5]
[--direct-n 100000] [--no-direct] [--profile]``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine_info  # noqa: E402


def cpu_model() -> str:
    """The CPU's model name (``/proc/cpuinfo``), else ``platform.processor()`` (:mod:`benchmarks.common`)."""
    return machine_info()["cpu"]


def machine() -> str:
    """One line naming the machine every figure was measured on."""
    load = ", ".join(f"{a:.1f}" for a in os.getloadavg()) if hasattr(os, "getloadavg") else "n/a"
    return (f"{cpu_model()} (platform.processor()={platform.processor()!r}), os.cpu_count()={os.cpu_count()}, "
            f"jax {jax.__version__} {jax.devices()}, load average {load}")


def timed(fn, *args, repeats: int) -> tuple[float, list[float]]:
    """(compile seconds, call seconds) of ``jax.jit(fn)(*args)``: compiled ahead of time, then called."""
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile()
    compile_s = time.perf_counter() - start
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        jax.block_until_ready(compiled(*args))
        times.append(time.perf_counter() - start)
    return compile_s, times


def spread(times: list[float]) -> str:
    return f"min {min(times):.4g} s, median {statistics.median(times):.4g} s, max {max(times):.4g} s"


def tokens(n: int, seed: int = 0, d: int = 3) -> jax.Array:
    """n tokens uniform on S^(d-1) (float64)."""
    x = np.random.default_rng(seed).standard_normal((n, d))
    return jnp.asarray(x / np.linalg.norm(x, axis=1, keepdims=True))


def value_matrix(d: int = 3) -> jax.Array:
    return jnp.asarray(np.eye(d) + 0.1 * np.random.default_rng(1).standard_normal((d, d)))


def sphere_layer(beta: float, degree: int, dt: float, d: int = 3):
    from attnflow.kernels.hypersphere import hypersphere_attention
    from attnflow.kernels.sphere import sphere_attention

    V = value_matrix(d)
    attention = sphere_attention if d == 3 else hypersphere_attention

    def layer(x):
        y = x + dt * attention(x, beta, degree=degree) @ V.T
        return y / jnp.linalg.norm(y, axis=1, keepdims=True)

    return layer


def direct_layer(beta: float, dt: float, d: int = 3):
    from attnflow.kernels import chunked_attend

    V = value_matrix(d)

    def layer(x):
        y = x + dt * chunked_attend(beta * x, x, x) @ V.T
        return y / jnp.linalg.norm(y, axis=1, keepdims=True)

    return layer


def rates(repeats: int) -> tuple[float, float]:
    """The machine's float64 matmul rate (flop/s, 2048 x 2048) and exp rate (exp/s: 64 passes over 2^18 numbers
    that stay in cache, each exponential summed, as the direct sum's tiles do)."""
    a = jax.random.normal(jax.random.key(0), (2048, 2048), jnp.float64)
    _, t = timed(lambda a: a @ a, a, repeats=repeats)
    matmul = 2 * 2048.0**3 / min(t)
    e = jax.random.normal(jax.random.key(1), (1 << 18,), jnp.float64)
    passes = 64
    _, t = timed(lambda e: jax.lax.fori_loop(0, passes, lambda i, acc: acc + jnp.sum(jnp.exp(e + i * 1e-9)), 0.0), e,
                 repeats=repeats)
    return matmul, passes * e.size / min(t)


def profile(n: int, beta: float, degree: int, repeats: int) -> None:
    """The sphere layer's passes timed apart (private functions of the module: its blocks and programs)."""
    from attnflow.kernels import sphere as S

    block = S._BLOCK
    n = n - n % block
    x3 = tokens(n).T
    xb = x3.reshape(3, n // block, block).transpose(1, 0, 2)
    wb = jnp.ones((n // block, block))
    shape = (degree + 1, 2, degree + 1, 4)

    def moments(xb, wb):
        step = lambda acc, blk: (acc + S._unrolled_moments(*blk, degree), None)
        return jax.lax.scan(step, jnp.zeros(shape), (xb, wb))[0]

    def values(xb, C):
        return jax.lax.map(lambda xx: S._unrolled_values(xx, C, degree), xb)

    def harmonics(xb):  # every harmonic computed (the barriers keep them), one number per block returned
        return jax.lax.map(lambda xx: sum(jnp.sum(c[:, :1]) + jnp.sum(s[:, :1]) for c, s in
                                          S._diagonals(xx, degree)), xb)

    C = jnp.asarray(np.random.default_rng(2).standard_normal(shape)) * 1e-3
    for name, fn, args in (("moments pass", moments, (xb, wb)), ("values pass", values, (xb, C)),
                           ("harmonics' recurrence alone (one pass)", harmonics, (xb,))):
        compile_s, t = timed(fn, *args, repeats=repeats)
        print(f"  profile n={n}: {name}: {spread(t)} (compile {compile_s:.2f} s) [{cpu_model()}, {os.cpu_count()} CPUs, "
              f"load {os.getloadavg()[0]:.1f}]")
    per = (degree + 1) ** 2 * n
    print(f"  ({per:.3g} harmonic values per pass; seconds per value and pass: see the recurrence row / {per:.3g})")


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--d", type=int, default=3, help="tokens on S^(d-1) (default 3: S^2)")
    parser.add_argument("--sizes", default="100000,1000000", help="token counts of the sphere rows (comma-separated)")
    parser.add_argument("--beta", type=float, default=4.0, help="score scale beta (default 4)")
    parser.add_argument("--dt", type=float, default=0.1, help="Euler step of the layer (default 0.1)")
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per sphere row (default 5)")
    parser.add_argument("--direct-n", type=int, default=100_000, help="token count of the direct row (default 10^5)")
    parser.add_argument("--direct-repeats", type=int, default=2, help="timed calls of the direct row (default 2)")
    parser.add_argument("--no-direct", action="store_true", help="skip the direct row")
    parser.add_argument("--profile", action="store_true", help="time the sphere layer's passes apart")
    parser.add_argument("--quick", action="store_true", help="10^4 tokens, direct row at 10^4 (seconds)")
    parser.add_argument("--out", default=None, help="also write the rows as JSON here (make bench: RUN_DIR/sphere.json)")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.direct_n, args.repeats, args.direct_repeats = "10000", 10_000, 2, 1
    record = {"machine": machine(), "beta": args.beta, "dtype": "float64", "d": args.d, "rows": []}

    from attnflow.kernels.hypersphere import harmonic_total, hypersphere_degree
    from attnflow.kernels.sphere import sphere_degree

    sizes = [int(s) for s in args.sizes.split(",") if s]
    with jax.enable_x64(True):
        print(f"machine: {machine()}")
        matmul, exp = rates(5)
        print(f"float64 rates [{cpu_model()}, {os.cpu_count()} CPUs]: matmul 2048^2 {matmul / 1e9:.3g} Gflop/s, "
              f"exp {exp / 1e9:.3g} G exp/s")
        record.update(matmul_flops_per_s=matmul, exp_per_s=exp)
        d = args.d
        degree = sphere_degree(args.beta, "float64") if d == 3 else hypersphere_degree(args.beta, d, "float64")
        harmonics = harmonic_total(d, degree)
        results = {}
        for n in sizes:
            x = tokens(n, d=d)
            compile_s, t = timed(sphere_layer(args.beta, degree, args.dt, d), x, repeats=args.repeats)
            results[n] = min(t)
            record["rows"].append({"path": "sphere", "n": n, "d": d, "degree": degree, "harmonics": harmonics,
                                   "times_s": list(t), "compile_s": compile_s, "load": os.getloadavg()[0]})
            # work: two passes of H harmonics per token, each with a (d+1)-column product (2 (d+1) flops per harmonic)
            work = 2 * 2.0 * (d + 1) * harmonics * n
            print(f"sphere  n={n:>8}: S^{d - 1}, beta={args.beta:g}, L={degree} ({harmonics} harmonics), float64: {spread(t)}; "
                  f"{1 / min(t):.3g} layers/s; compile {compile_s:.2f} s; its products alone at the matmul rate "
                  f"{work / matmul:.3g} s [{cpu_model()}, {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}]")
        if not args.no_direct:
            n = args.direct_n
            x = tokens(n, d=d)
            compile_s, t = timed(direct_layer(args.beta, args.dt, d), x, repeats=args.direct_repeats)
            floor = n * n / exp
            record["rows"].append({"path": "direct", "n": n, "d": d, "times_s": list(t), "compile_s": compile_s,
                                   "load": os.getloadavg()[0]})
            print(f"direct  n={n:>8}: chunked_attend, float64: {spread(t)}; compile {compile_s:.2f} s; its n^2 exps "
                  f"alone at the exp rate {floor:.3g} s [{cpu_model()}, {os.cpu_count()} CPUs, load "
                  f"{os.getloadavg()[0]:.1f}]")
            if n in results:
                print(f"ratio   n={n:>8}: direct / sphere = {min(t) / results[n]:.3g}")
            for m in sizes:
                if m != n:
                    guess = min(t) * (m / n) ** 2
                    line = f"direct  n={m:>8}: not run; extrapolated O(n^2) from n={n}: {guess:.4g} s"
                    if m in results:
                        line += f" (direct / sphere = {guess / results[m]:.3g})"
                    print(line)
        if args.profile and sizes and d == 3:
            profile(max(sizes), args.beta, degree, args.repeats)
    if args.out:
        Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    return record


if __name__ == "__main__":
    main()
