"""What ``simulate`` costs around the solve: the first call (validation, field and integrator
built, tracing, XLA compilation) and a repeated call with the same shapes (validation, building,
dispatch of the cached program), for the common settings, at sizes where the solve itself is cheap.

Usage: ``python -m benchmarks.bench_overhead [--repeats 30] [--json FILE]``. Prints one row per
setting: first-call seconds, and the median [min, max] of repeated calls in milliseconds, with the
machine (``benchmarks.common.machine_info``) and the load average at start and end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

import attnflow as af

from .common import machine_info


def _settings(n: int, d: int, B: int):
    rng = np.random.default_rng(0)
    x0 = jnp.asarray(rng.normal(size=(n, d)), jnp.float32)
    xs = jnp.asarray(rng.normal(size=(B, n, d)), jnp.float32)
    Q, K = (jnp.asarray(rng.normal(size=(d, d)) / d, jnp.float32) for _ in range(2))
    V = jnp.asarray(np.eye(d) + rng.normal(size=(d, d)) / (4 * d), jnp.float32)
    Vs = jnp.asarray(np.eye(d) + rng.normal(size=(B, d, d)) / (4 * d), jnp.float32)
    heads = af.AttentionWeights(jnp.stack([Q, K]), jnp.stack([K, Q]), jnp.stack([V, V]), axes=("head",))
    return {
        "euler raw": lambda: af.simulate(x0, Q, K, V, t1=1.0, method="euler", dt=0.1),
        "euler rescaled": lambda: af.simulate(x0, Q, K, V, t1=1.0, method="euler", dt=0.1, picture="rescaled"),
        "tsit5 raw": lambda: af.simulate(x0, Q, K, V, t1=1.0, num_saves=11),
        "tsit5 rescaled": lambda: af.simulate(x0, Q, K, V, t1=1.0, num_saves=11, picture="rescaled"),
        "euler batch x0": lambda: af.simulate(xs, Q, K, V, t1=1.0, method="euler", dt=0.1, batch="x0"),
        "euler batch V": lambda: af.simulate(x0, Q, K, Vs, t1=1.0, method="euler", dt=0.1, batch="V"),
        "tsit5 fold": lambda: af.simulate(xs, Q, K, V, t1=1.0, num_saves=11, batch="x0", batch_mode="fold"),
        "euler two heads": lambda: af.simulate(x0, heads, t1=1.0, method="euler", dt=0.1),
        "euler dynamics=": lambda: af.simulate(x0, dynamics=af.AttentionFlow(Q, K, V), t1=1.0, method="euler",
                                               dt=0.1),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeats", type=int, default=30, help="repeated calls per setting (default 30)")
    p.add_argument("--n", type=int, default=16, help="tokens (default 16)")
    p.add_argument("--d", type=int, default=4, help="dimension (default 4)")
    p.add_argument("--batch", type=int, default=8, help="systems in the batched settings (default 8)")
    p.add_argument("--json", default=None, help="also write the rows here")
    args = p.parse_args()
    load0 = os.getloadavg()
    rows = []
    for name, call in _settings(args.n, args.d, args.batch).items():
        t = time.perf_counter()
        jax.block_until_ready(call().states)
        first = time.perf_counter() - t
        times = []
        for _ in range(args.repeats):
            t = time.perf_counter()
            jax.block_until_ready(call().states)
            times.append(time.perf_counter() - t)
        ms = [1e3 * s for s in times]
        rows.append({"setting": name, "first_call_s": first, "repeat_ms_median": statistics.median(ms),
                     "repeat_ms_min": min(ms), "repeat_ms_max": max(ms)})
        print(f"{name:18s} first {first:6.2f} s   repeat {statistics.median(ms):7.2f} ms "
              f"[{min(ms):.2f}, {max(ms):.2f}]", flush=True)
    out = {"machine": machine_info(), "load_start": load0, "load_end": os.getloadavg(), "n": args.n, "d": args.d,
           "batch": args.batch, "repeats": args.repeats, "rows": rows}
    print(f"load average {load0[0]:.1f} -> {out['load_end'][0]:.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2)


if __name__ == "__main__":
    main()
