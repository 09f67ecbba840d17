#!/usr/bin/env python
r"""Throughput of the two sweeps (systems per second), and its scaling with the device count.

* spectral: Def 4.1(1) statistics of Ginibre V (d x d), the sweep's own sharded chunk function;
* dynamics: the dynamics sweep's chunk function (spectral checks in float64, ``clouds`` clouds of n
  tokens, ``layers`` Euler layers of the exact discrete rescaling, batched classification).

Method: one jitted sharded function per measurement, a warm-up call (compilation), then the
best of ``--repeats`` timed calls with ``block_until_ready``. The dynamics flop count per system
is ``clouds * layers * (4 n^2 m + 2 n d (2m + d))`` (GUIDE.md; m = d here), compared with the
float32 matmul rate measured in the same run.

Usage (CPU here; on a GPU machine the same command uses the GPU):

    python benchmarks/bench_sweeps.py                       # d = 128, n = 256
    python benchmarks/bench_sweeps.py --host-devices 4 --devices 1,2,4   # CPU: forced host devices
    python benchmarks/bench_sweeps.py --systems 4096 --spectral-systems 20000   # accelerator sizes

Prints a table and writes JSON (``--out``, default ``bench_sweeps.json``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d", type=int, default=128, help="token dimension (default 128)")
    p.add_argument("--n", type=int, default=256, help="tokens per cloud (default 256)")
    p.add_argument("--clouds", type=int, default=1, help="token clouds per system (default 1)")
    p.add_argument("--layers", type=int, default=20, help="Euler layers (default 20, dt = 0.1)")
    p.add_argument("--systems", type=int, default=8, help="systems per dynamics measurement (default 8)")
    p.add_argument("--spectral-systems", type=int, default=200, help="systems per spectral measurement (default 200)")
    p.add_argument("--devices", default="1", help="comma-separated device counts to measure (default 1)")
    p.add_argument("--host-devices", type=int, default=0,
                   help="CPU only: force this many host devices (XLA_FLAGS) to exercise sharding")
    p.add_argument("--eig-route", default="auto", choices=["auto", "device", "host", "cpu"])
    p.add_argument("--repeats", type=int, default=2)
    p.add_argument("--skip-dynamics", action="store_true")
    p.add_argument("--out", default="bench_sweeps.json", help="JSON output path")
    return p.parse_args()


def best_time(fn, repeats: int) -> float:
    import jax

    jax.block_until_ready(fn())  # warm-up / compile
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        best = min(best, time.perf_counter() - t)
    return best


def main() -> int:
    args = parse()
    if args.host_devices:
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_force_host_platform_device_count={args.host_devices}").strip()
    import jax
    import jax.numpy as jnp

    import attnflow  # noqa: F401

    jax.config.update("jax_enable_x64", True)  # a benchmark script (not the library) sets it
    from attnflow.ensembles import system_seeds
    from attnflow.runs import atomic_write_json, load_config, provenance
    from attnflow.spectral import eig_route
    from attnflow.runs import make_mesh
    from attnflow.sweep import check_eig_route
    from attnflow.sweep._dynamics import make_chunk_fn  # the chunk functions the runners shard (engine, timed here)
    from attnflow.sweep._spectral import make_spectral_chunk_fn

    route = eig_route(args.eig_route)
    counts = [int(c) for c in args.devices.split(",")]
    avail = len(jax.local_devices())
    counts = [c for c in counts if c <= avail]

    # machine matmul rate (float32), measured in this run
    a = jnp.ones((2048, 2048), jnp.float32)
    mm = jax.jit(lambda x: x @ x)
    t_mm = best_time(lambda: mm(a), 3)
    matmul_gflops = 2 * 2048**3 / t_mm / 1e9

    d, n = args.d, args.n
    flops = args.clouds * args.layers * (4 * n * n * d + 2 * n * d * (2 * d + d))
    rows = []
    for ndev in counts:
        mesh = make_mesh(ndev)
        check_eig_route(route, mesh)
        seeds = system_seeds(0, "bench-spectral", 0, args.spectral_systems)
        fs = make_spectral_chunk_fn("ginibre", d, jnp.float64, 0.1, route, mesh)
        ts = best_time(lambda: fs(seeds), args.repeats)
        row = {"devices": ndev, "spectral_systems_per_s": args.spectral_systems / ts, "spectral_s": ts}
        if not args.skip_dynamics:
            # the shipped dynamics config (every key a chunk reads, e.g. `dynamics`), sized here
            cfg = {**load_config(None, "ginibre-dynamics.toml"), "n": n, "clouds": args.clouds, "dt": 0.1,
                   "t1": 0.1 * args.layers, "dtype": "float32", "rel_tol": 0.02, "max_clusters": 0, "density": 0.1}
            fd = make_chunk_fn({"v": "ginibre", "qk": "identity", "d": d}, cfg, route, mesh)
            seeds_d = system_seeds(0, "bench-dynamics", 0, args.systems)
            td = best_time(lambda: fd(seeds_d), args.repeats)
            row.update(dynamics_systems_per_s=args.systems / td, dynamics_s=td,
                       dynamics_gflops=flops * args.systems / td / 1e9,
                       dynamics_fraction_of_matmul=flops * args.systems / td / 1e9 / matmul_gflops)
        rows.append(row)

    print(f"backend {jax.default_backend()}, {avail} local device(s), eig route {route}, "
          f"d = {d}, n = {n}, clouds = {args.clouds}, layers = {args.layers}; "
          f"float32 matmul {matmul_gflops:.1f} GFLOP/s")
    head = f"{'devices':>7} {'spectral sys/s':>15} {'dynamics sys/s':>15} {'dyn GFLOP/s':>12} {'of matmul':>10}"
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['devices']:>7} {r['spectral_systems_per_s']:>15.1f} "
              f"{r.get('dynamics_systems_per_s', float('nan')):>15.2f} {r.get('dynamics_gflops', float('nan')):>12.2f} "
              f"{r.get('dynamics_fraction_of_matmul', float('nan')):>10.1%}")
    result = {"args": vars(args), "backend": jax.default_backend(), "local_devices": avail, "eig_route": route,
              "matmul_gflops_f32": matmul_gflops, "dynamics_flops_per_system": flops, "rows": rows,
              "provenance": provenance(0)}
    atomic_write_json(args.out, result)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # attnflow's InputError: one sentence, no traceback
        if type(e).__name__ != "InputError":
            raise
        print(f"bench_sweeps: error: {e}", file=sys.stderr)
        sys.exit(2)
