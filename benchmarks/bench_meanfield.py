#!/usr/bin/env python
r"""Mean-field sizes: the sphere flow of one large cloud, the direct sum against the Fourier path on the circle.

Problem: post-LN attention on the sphere (:func:`attnflow.dynamics.sphere_flow`, Q = K = V = I, inverse
temperature beta), the Euler layer stepper with ``sphere_shift`` (dt = 0.1), tokens uniform on the
circle (or the sphere S^2). One "step" is one layer: the field (attention of every token) plus the
projected update. Rows:

* ``direct-tiled``: n = 2 x 10^4 on the circle, float64, ``attention_impl="chunked"`` (the tiled online
  softmax, O(n^2) work, O(n) memory).
* ``torch-direct``: the same layers in PyTorch (:func:`benchmarks.baselines.torch_sphere_euler`: the direct
  sum over blocks of 2048 queries, float64), at its fastest thread count (1 or 2, each timed).
* ``fourier``: ``attention_impl="fourier"`` (:mod:`attnflow.kernels.fourier`, O(n K)) at n = 2 x 10^4 (same
  problem as the direct rows: speed-up and agreement) and at n = 10^6, float64, for beta = 1, 4 and 5
  (K = 14, 22 and 24 modes), 20 layers a call. Target: >= 30 steps/s at n = 10^6 and beta = 4-5 on a 2-core CPU.
* ``sphere-tiled``: n = 10^5 on S^2 (d = 3), float32, the tiled path: time per step and the fraction of
  the machine's rates it reaches, :math:`(4 n^2 d / R_{mm} + n^2 / R_{exp}) / t_{step}` (score and value
  products at the measured matmul rate :func:`benchmarks.common.matmul_rate`, the n^2 exponentials at
  the exp rate measured in the same run, :func:`exp_rate`).
* ``crossover``: one field evaluation, Fourier against the dense path, n = 64 .. 2048 (float64, beta = 4),
  the measurement behind ``attention_impl="auto"``'s threshold :data:`attnflow.kernels.fourier.TOKENS_PER_MODE`.

Timing: each program is compiled ahead of time (compile time reported), then called ``repeats`` times
(``block_until_ready``); per step: min / median / max over the calls. Memory: XLA's compiled buffer
sizes (arguments, outputs, temporaries; ``memory_analysis``), the torch row's largest block of scores.
On a shared machine quote ratios measured in one run, not absolute times.

Usage: ``python benchmarks/bench_meanfield.py [--quick] [--no-torch] [--out DIR]``; ``run(quick, torch, out)``
for the suite, :func:`gpu_rows` for ``benchmarks/gpu.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # allow `python benchmarks/bench_meanfield.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import time_call  # noqa: E402

DT = 0.1
#: big_steps: layers per call at 10^6 tokens: a call costs about 12 ms besides its layers there (24 ms each in float64 at
#: beta = 4 on a 2-core AMD EPYC: 134 ms for 5 layers, 470-550 for 20), a tenth of 5 layers' time (NOTES 52)
FULL = dict(direct_n=20_000, fourier_ns=(20_000, 1_000_000), betas=(1.0, 4.0, 5.0), sphere_n=100_000, steps=5,
            big_steps=20, repeats=3, crossover_ns=(32, 64, 96, 128, 256, 512, 1024, 2048))
QUICK = dict(direct_n=2_000, fourier_ns=(2_000, 50_000), betas=(4.0,), sphere_n=4_000, steps=2, big_steps=2, repeats=2,
             crossover_ns=(64, 256, 1024))


def circle_cloud(n: int, d: int = 2, seed: int = 0) -> np.ndarray:
    """n tokens uniform on the unit circle (d = 2) or sphere (float64, fixed seed).

    Example:
        >>> x = circle_cloud(5)
        >>> x.shape, bool(np.allclose(np.linalg.norm(x, axis=1), 1))
        ((5, 2), True)
    """
    x = np.random.default_rng(seed).standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _stats(times: list[float], per: int) -> dict:
    per_step = [t / per for t in times]
    return {"step_min_s": min(per_step), "step_median_s": statistics.median(per_step), "step_max_s": max(per_step),
            "steps_per_s": 1.0 / statistics.median(per_step), "calls": len(times), "steps_per_call": per}


def _memory(compiled) -> dict:
    try:
        m = compiled.memory_analysis()
        return {"memory_bytes": int(m.argument_size_in_bytes + m.output_size_in_bytes + m.temp_size_in_bytes),
                "temp_bytes": int(m.temp_size_in_bytes)}
    except Exception:  # not every backend reports it
        return {"memory_bytes": None, "temp_bytes": None}


def attnflow_row(n: int, *, impl: str, beta: float, dtype: str = "float64", d: int = 2, steps: int = 1,
                 repeats: int = 3, x0: np.ndarray | None = None, keep_state: bool = True, warmup: int = 0) -> dict:
    """Euler layers of the sphere flow, ``steps`` per compiled call, ``repeats`` timed calls after ``warmup``
    untimed ones (a compiled program's first call also pays for its first allocations); returns the row
    (and, with ``keep_state``, the final state under ``"_state"`` for comparisons). ``impl``: ``"chunked"``
    (the tiled direct sum, O(n) memory), ``"fourier"`` (the circle, d = 2) or ``"harmonic"`` (S^2, d = 3);
    none of them holds an n x n array (``memory_bytes``: XLA's compiled buffers)."""
    import jax
    import jax.numpy as jnp

    from attnflow.kernels import fourier as _fourier
    from attnflow.dynamics import sphere_flow
    from attnflow.integrate import EulerStepper, sphere_shift

    with jax.enable_x64(dtype == "float64"):
        x = jnp.asarray(circle_cloud(n, d) if x0 is None else x0, dtype)
        eye = jnp.eye(d, dtype=dtype)
        field = sphere_flow(eye, eye, eye, beta, attention_impl=impl)
        stepper = EulerStepper(DT, steps, shift=sphere_shift, save_every=steps)
        run = jax.jit(lambda x: stepper.solve(field, x).ys[-1])
        t = time.perf_counter()
        compiled = run.lower(x).compile()
        compile_s = time.perf_counter() - t
        timed = time_call(lambda: compiled(x), repeats=repeats, warmup=warmup)
        times, out = timed["times_s"], timed["out"]
        name = {"fourier": "fourier", "harmonic": "sphere-harmonic"}.get(impl, "direct-tiled" if d == 2
                                                                          else "sphere-tiled")
        row = {"name": name,
               "impl": impl, "n": n, "d": d, "dtype": dtype, "beta": beta, "compile_s": compile_s,
               **_stats(times, steps), **_memory(compiled)}
        if impl == "fourier":
            row["modes"] = _fourier.fourier_modes(abs(beta), dtype)
        elif impl == "harmonic":
            from attnflow.kernels.sphere import sphere_degree

            row["degree"] = sphere_degree(abs(beta), dtype)
        row["particle_steps_per_s"] = n * row["steps_per_s"]
        if keep_state:
            row["_state"] = np.asarray(out)
    return row


def torch_row(n: int, *, beta: float, steps: int = 1, repeats: int = 2, block: int = 2048,
              threads: tuple[int, ...] = (1, 2), x0: np.ndarray | None = None) -> dict:
    """The same layers in PyTorch (float64, blocked direct sum) at each thread count; the fastest is the row."""
    import torch

    from benchmarks.baselines import torch_sphere_euler

    x = circle_cloud(n) if x0 is None else x0
    eye = np.eye(2)
    best = None
    by_threads = {}
    for k in threads:
        torch_sphere_euler(x[:256], eye, eye, eye, dt=DT, num_steps=1, beta=beta, threads=k)  # warm-up
        timed = time_call(lambda: torch_sphere_euler(x, eye, eye, eye, dt=DT, num_steps=steps, beta=beta, block=block,
                                                     threads=k), repeats=repeats, warmup=0)
        times, out = timed["times_s"], timed["out"]
        stats = _stats(times, steps)
        by_threads[k] = stats["step_median_s"]
        if best is None or stats["step_median_s"] < best[0]["step_median_s"]:
            best = (stats, k, out)
    stats, k, out = best
    return {"name": "torch-direct", "impl": f"torch {torch.__version__} blocked", "n": n, "d": 2, "dtype": "float64",
            "beta": beta, "threads": k, "step_median_s_by_threads": by_threads, **stats,
            "memory_bytes": int(min(block, n) * n * 8 + 6 * n * 2 * 8), "particle_steps_per_s": n * stats["steps_per_s"],
            "_state": out}


def exp_rate(dtype: str = "float32", size: int = 4096, repeats: int = 5) -> dict:
    """The machine's rate of exponentials (jitted ``sum(exp(a))`` over a size x size array: exp-bound, not
    memory-bound), in exponentials per second.

    Example:
        >>> exp_rate("float32", size=64, repeats=2)["exp_per_s"] > 0
        True
    """
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(dtype == "float64"):
        a = jax.random.normal(jax.random.key(0), (size, size), jnp.dtype(dtype))
        f = jax.jit(lambda a: jnp.sum(jnp.exp(a)))
        times = time_call(lambda: f(a), repeats=repeats, warmup=1)["times_s"]
    return {"dtype": dtype, "size": size, "exp_per_s": size * size / statistics.median(times),
            "best_exp_per_s": size * size / min(times)}


def crossover_rows(ns, beta: float = 4.0, repeats: int = 20) -> list[dict]:
    """One field evaluation of the sphere flow, Fourier path against dense, float64, at each n."""
    import jax
    import jax.numpy as jnp

    from attnflow.dynamics import sphere_flow

    rows = []
    with jax.enable_x64(True):
        eye = jnp.eye(2)
        for n in ns:
            x = jnp.asarray(circle_cloud(n))
            row = {"name": "crossover", "n": n, "beta": beta, "dtype": "float64"}
            for impl in ("fourier", "dense"):
                field = sphere_flow(eye, eye, eye, beta, attention_impl=impl)
                call = jax.jit(lambda x, f=field: f(0.0, x)).lower(x).compile()
                row[f"{impl}_median_s"] = time_call(lambda: call(x), repeats=repeats, warmup=1)["median_s"]
            row["fourier_speedup"] = row["dense_median_s"] / row["fourier_median_s"]
            rows.append(row)
    return rows


def _loadavg():
    try:
        return list(os.getloadavg())
    except (OSError, AttributeError):
        return None


def _agreement(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


def run(quick: bool = False, torch: bool = True, out: Path | None = None) -> dict:
    """All rows (smaller sizes with ``quick``); returns the JSON-ready summary and, when ``out`` is given,
    writes it there (``out`` a ``.json`` file, or a folder that gets ``meanfield.json``)."""
    from benchmarks.common import machine_info, matmul_rate

    cfg = QUICK if quick else FULL
    summary = {"machine": machine_info(), "config": dict(cfg, dt=DT), "load_before": _loadavg(), "rows": []}
    rows = summary["rows"]

    def add(row):
        row = dict(row, load=_loadavg())
        rows.append({k: v for k, v in row.items() if not k.startswith("_")})
        print(format_row(rows[-1]), flush=True)
        return row

    n = cfg["direct_n"]
    x0 = circle_cloud(n)
    direct = add(attnflow_row(n, impl="chunked", beta=4.0, steps=1, repeats=cfg["repeats"], x0=x0))
    fast_same = add(attnflow_row(n, impl="fourier", beta=4.0, steps=1, repeats=cfg["repeats"], x0=x0))
    rows[-1]["max_abs_diff_vs_direct"] = _agreement(fast_same["_state"], direct["_state"])
    if torch:
        try:
            t_row = add(torch_row(n, beta=4.0, steps=1, repeats=cfg["repeats"], x0=x0))
            rows[-1]["max_abs_diff_vs_direct"] = _agreement(t_row["_state"], direct["_state"])
        except ImportError as err:
            rows.append({"name": "torch-direct", "note": f"skipped: {err}"})
    for n_big in cfg["fourier_ns"][1:]:
        for beta in cfg["betas"]:
            add(attnflow_row(n_big, impl="fourier", beta=beta, steps=cfg["big_steps"], repeats=cfg["repeats"],
                             warmup=1))
    mm = matmul_rate("float32")
    ex = exp_rate("float32")
    summary.update(matmul_rate=mm, exp_rate=ex)
    ns = cfg["sphere_n"]
    sphere = add(attnflow_row(ns, impl="chunked", beta=4.0, d=3, dtype="float32", steps=1,
                              repeats=max(2, cfg["repeats"] - 1)))
    ideal = 4.0 * ns * ns * 3 / mm["flops_per_s"] + ns * ns / ex["exp_per_s"]
    rows[-1].update(ideal_step_s=ideal, fraction_of_machine=ideal / sphere["step_median_s"])
    print(f"  sphere-tiled: {rows[-1]['fraction_of_machine']:.1%} of the measured matmul + exp rates", flush=True)
    for row in crossover_rows(cfg["crossover_ns"]):
        add(row)
    summary["load_after"] = _loadavg()
    summary["headline"] = _headline(rows)
    if out is not None:
        from benchmarks.common import atomic_write_json

        target = Path(out) if Path(out).suffix == ".json" else Path(out) / "meanfield.json"
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(target, summary)
        summary["written_to"] = str(target)
    return summary


def _headline(rows: list[dict]) -> dict:
    pick = lambda name, **kw: next((r for r in rows if r.get("name") == name
                                    and all(r.get(k) == v for k, v in kw.items())), None)
    direct = pick("direct-tiled")
    head = {}
    if direct:
        same = pick("fourier", n=direct["n"])
        torch = pick("torch-direct")
        if same:
            head["fourier_speedup_over_direct_same_n"] = direct["step_median_s"] / same["step_median_s"]
        if torch and "step_median_s" in torch:
            head["attnflow_direct_over_torch_direct"] = torch["step_median_s"] / direct["step_median_s"]
    big = [r for r in rows if r.get("name") == "fourier" and r.get("n", 0) >= 10**6]
    if big:
        head["fourier_1e6_steps_per_s"] = {f"beta={r['beta']:g} (K={r['modes']})": r["steps_per_s"] for r in big}
    cross = [r for r in rows if r.get("name") == "crossover" and r["fourier_speedup"] > 1]
    if cross:
        head["crossover_n"] = min(r["n"] for r in cross)
    return head


def format_row(r: dict) -> str:
    """One line of the printed table."""
    if r.get("name") == "crossover":
        return (f"crossover n={r['n']:>5}  fourier {r['fourier_median_s'] * 1e3:8.3f} ms  dense "
                f"{r['dense_median_s'] * 1e3:8.3f} ms  speed-up {r['fourier_speedup']:6.2f}")
    if "step_median_s" not in r:
        return f"{r.get('name')}: {r.get('note')}"
    mem = r.get("memory_bytes")
    extra = f"  K={r['modes']}" if "modes" in r else ""
    extra += f"  threads={r['threads']}" if "threads" in r else ""
    return (f"{r['name']:<13} n={r['n']:>8} d={r['d']} {r['dtype']:<7} beta={r['beta']:<4g}{extra}  step "
            f"{r['step_min_s']:.4g}/{r['step_median_s']:.4g}/{r['step_max_s']:.4g} s (min/med/max)  "
            f"{r['steps_per_s']:.3g} steps/s  {r['particle_steps_per_s']:.3g} particle-steps/s"
            + (f"  mem {mem / 2**20:.1f} MiB" if mem else ""))


def gpu_rows(quick: bool = False) -> list[dict]:
    """The Fourier and tiled rows on the default device (for ``benchmarks/gpu.py``): float32 and float64,
    the Fourier path at n = 10^6 and 10^7 (beta = 4), the tiled direct sum at n = 2 x 10^4; rows as in
    :func:`run`, each with the device it ran on."""
    import jax

    device = str(jax.devices()[0])
    rows = []
    sizes = (10**5,) if quick else (10**6, 10**7)
    for dtype in ("float32", "float64"):
        for n in sizes:
            rows.append(attnflow_row(n, impl="fourier", beta=4.0, dtype=dtype, steps=5, repeats=3))
        rows.append(attnflow_row(2_000 if quick else 20_000, impl="chunked", beta=4.0, dtype=dtype, steps=1,
                                 repeats=3))
    return [dict({k: v for k, v in r.items() if not k.startswith("_")}, device=device) for r in rows]


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="small sizes (a smoke test, ~1 minute)")
    p.add_argument("--no-torch", dest="torch", action="store_false", help="skip the PyTorch row")
    p.add_argument("--out", default=None, help="folder for meanfield.json (default: results/meanfield/<stamp>)")
    args = p.parse_args(argv)
    from benchmarks.common import make_run_dir

    out = make_run_dir(args.out, prefix="meanfield")
    summary = run(args.quick, args.torch, out)
    print(f"headline: {summary['headline']}")
    print(f"wrote {summary['written_to']}")
    return summary


if __name__ == "__main__":
    main()
