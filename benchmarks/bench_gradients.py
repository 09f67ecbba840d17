#!/usr/bin/env python
r"""Cost of a reverse-mode gradient against the forward solve, attnflow (JAX) and PyTorch autograd.

Problem: the raw flow (SPEC 1.1) with ``benchmarks.common.make_problem`` weights, n = 256 tokens,
d = 64, t in [0, 1]; functional :math:`L = \mathrm{mean}\,x(1)^2`; gradient with respect to
(Q, K, V, x0). Rows:

* ``euler``: :func:`attnflow.integrate.solve_euler` with its defaults: ``checkpoint="auto"``
  (segments of ~sqrt(L) layers under ``jax.checkpoint`` from 64 layers on: memory
  O(sqrt(L) n d), one extra forward pass in the backward sweep) and the dense attention's
  hand-written tangent (custom JVP, residual P only);
* ``euler-store-all``: the same with ``checkpoint=None`` (every layer's residuals stored;
  memory linear in the number of steps, no recomputation);
* ``euler-autodiff-softmax``: ``euler`` with the attention differentiated by plain autodiff
  through exp / sum / divide (the previous default), for the before/after comparison;
* ``euler-diffrax``: the same Euler scheme through ``diffrax.diffeqsolve`` with constant steps
  and ``RecursiveCheckpointAdjoint`` (checkpointed reverse mode);
* ``tsit5-adaptive``: :func:`attnflow.integrate.solve_ode`, Tsit5 with PID control
  (rtol 1e-5, atol 1e-6 in float32), checkpointed reverse mode;
* ``torch-euler``: the same Euler loop in PyTorch (CPU) with autograd.

Also: the relative error of ``diffrax.BacksolveAdjoint``'s gradient against the checkpointed
one at several tolerances (:func:`backsolve_error`, float64, small problem).

Each at 100 and 1000 steps (adaptive: its own steps). Time: one jit per function, a warm-up,
then forward and gradient calls **interleaved** (forward, gradient, forward, ...;
``block_until_ready``) so that both see the same machine load; reported: median, min and max
of each, and the ratio of the medians. The machine's load (``os.getloadavg``) is recorded
before and after every row: on a shared machine quote the ratios, not the absolute times.
Memory: for JAX, XLA's compiled peak temporary buffer size
(``memory_analysis().temp_size_in_bytes``, exact for the compiled program); for PyTorch, the
bytes of the tensors autograd saves for the backward pass (``saved_tensors_hooks``, unique
storages). Targets: gradient <= 4x forward; memory sub-linear in the number of steps.

Usage: ``python benchmarks/bench_gradients.py [--n 256 --d 64 --steps 100,1000 --dtype float32]
[--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from attnflow import AttentionFlow
from attnflow.kernels import _attention as attention  # noqa: E402
from attnflow.integrate import solve_euler, solve_ode  # noqa: E402
from benchmarks.common import machine_info, make_problem  # noqa: E402


def _autodiff_dense(q, k, v, mask=None, normalisation="softmax", slope=None):
    """The dense attention as it was before its custom JVP: autodiff through the softmax (no positional bias:
    the benchmark's problem has none)."""
    if slope is not None:
        raise ValueError("the autodiff baseline of the gradient benchmark takes no ALiBi slope")
    where = attention.mask_array(mask, q.shape[0], k.shape[0])
    return attention.softmax(q @ k.T, axis=-1, where=where, normalisation=normalisation) @ v


def _loss_jax(kind: str, steps: int, impl: str):
    def solve(params):
        Q, K, V, x0 = params
        flow = AttentionFlow(Q, K, V, attention_impl=impl)
        if kind in ("euler", "euler-store-all", "euler-autodiff-softmax"):
            ck = None if kind == "euler-store-all" else "auto"
            return solve_euler(flow, x0, dt=1.0 / steps, num_steps=steps, save_every=steps, checkpoint=ck).ys[-1]
        if kind == "euler-diffrax":
            sol = diffrax.diffeqsolve(diffrax.ODETerm(flow.vector_field), diffrax.Euler(), 0.0, 1.0, 1.0 / steps, x0,
                                      saveat=diffrax.SaveAt(t1=True), max_steps=steps,
                                      adjoint=diffrax.RecursiveCheckpointAdjoint())
            return sol.ys[-1]
        return solve_ode(flow, x0, t0=0.0, t1=1.0, rtol=1e-5, atol=1e-6, max_steps=256).ys[-1]

    return solve, lambda params: jnp.mean(solve(params) ** 2)


def _interleaved(fns: dict, repeats: int) -> dict:
    """Warm up every function once, then call them in turn ``repeats`` times; per function:
    median, min and max wall time (``block_until_ready``)."""
    for f in fns.values():
        jax.block_until_ready(f())
    times, cpu = _timed_rounds(fns, repeats)
    return {k: {"median_s": statistics.median(v), "min_s": min(v), "max_s": max(v),
                "cpu_median_s": statistics.median(cpu[k])} for k, v in times.items()}


def _timed_rounds(fns: dict, repeats: int):
    """``repeats`` rounds calling every function once; wall times and this process's CPU times
    (``time.process_time``, all threads: on a loaded machine it counts the work done, not the
    time spent waiting for a core)."""
    times = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(repeats):
        for k, f in fns.items():
            t, c = time.perf_counter(), time.process_time()
            jax.block_until_ready(f())
            times[k].append(time.perf_counter() - t)
            cpu[k].append(time.process_time() - c)
    return times, cpu


def _row(t, mem_f, mem_g):
    f, g = t["forward"], t["grad"]
    return {"forward_s": f["median_s"], "grad_s": g["median_s"], "ratio": g["median_s"] / f["median_s"],
            "cpu_ratio": g["cpu_median_s"] / f["cpu_median_s"],
            "forward_min_max_s": [f["min_s"], f["max_s"]], "grad_min_max_s": [g["min_s"], g["max_s"]],
            "forward_temp_bytes": mem_f, "grad_temp_bytes": mem_g}


def _compile_jax(kind, steps, params, impl):
    """Jitted forward and value-and-gradient of one row, compiled (and run once), with their
    compiled temporary-buffer sizes."""
    solve, loss = _loss_jax(kind, steps, impl)
    fwd = jax.jit(solve)
    grad = jax.jit(jax.value_and_grad(loss))
    if kind == "euler-autodiff-softmax":  # trace (and compile) with the old dense attention
        new, attention._dense_attend = attention._dense_attend, _autodiff_dense
        try:
            mem_g = grad.lower(params).compile().memory_analysis().temp_size_in_bytes
            jax.block_until_ready(grad(params))
        finally:
            attention._dense_attend = new
    else:
        mem_g = grad.lower(params).compile().memory_analysis().temp_size_in_bytes
    mem_f = fwd.lower(params).compile().memory_analysis().temp_size_in_bytes
    return fwd, grad, int(mem_f), int(mem_g)


def bench_jax(kind, steps, params, impl, repeats):
    fwd, grad, mem_f, mem_g = _compile_jax(kind, steps, params, impl)
    t = _interleaved({"forward": lambda: fwd(params), "grad": lambda: grad(params)}, repeats)
    return _row(t, mem_f, mem_g)


def euler_variants_interleaved(steps, params, impl, repeats) -> dict:
    """The three Euler gradients (defaults, store-all, autodiff softmax) and the forward solve
    in ONE interleaved loop, so that they share the machine's load: per repeat the ratio of each
    gradient to that round's forward time; median, min and max of those ratios."""
    kinds = ("euler", "euler-store-all", "euler-autodiff-softmax")
    built = {k: _compile_jax(k, steps, params, impl) for k in kinds}
    fns = {"forward": lambda: built["euler"][0](params)}
    fns.update({k: (lambda g=built[k][1]: g(params)) for k in kinds})
    for f in fns.values():
        jax.block_until_ready(f())
    times, cpu = _timed_rounds(fns, repeats)
    out = {"steps": steps, "forward_median_s": statistics.median(times["forward"]), "load": _load()}
    for k in kinds:
        r = [g / f for g, f in zip(times[k], times["forward"])]
        rc = [g / f for g, f in zip(cpu[k], cpu["forward"])]
        out[k] = {"grad_median_s": statistics.median(times[k]), "ratio_median": statistics.median(r),
                  "ratio_min": min(r), "ratio_max": max(r), "cpu_ratio_median": statistics.median(rc),
                  "cpu_ratio_min": min(rc), "cpu_ratio_max": max(rc), "grad_temp_bytes": built[k][3]}
    return out


def bench_torch(steps, problem, repeats, threads, dtype="float32"):
    import torch

    # On a shared 2-core machine torch's OpenMP threads spin against the other processes:
    # measured 35-65 ms with 1 thread against 320-690 ms with 2 for the same 100 steps.
    torch.set_num_threads(threads)
    x0, Q, K, V = (torch.tensor(np.asarray(a), dtype=getattr(torch, dtype)) for a in problem)
    dt = 1.0 / steps

    def solve(Q, K, V, x):
        for _ in range(steps):
            s = (x @ Q.T) @ (x @ K.T).T
            x = x + dt * torch.softmax(s, dim=-1) @ (x @ V.T)
        return x

    def forward():
        with torch.no_grad():
            return solve(Q, K, V, x0)

    saved = {}

    def grad():
        ps = [a.clone().requires_grad_(True) for a in (Q, K, V, x0)]
        saved.clear()

        def pack(t):
            saved[t.untyped_storage().data_ptr()] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = (solve(*ps) ** 2).mean()
        loss.backward()
        return loss

    t = _interleaved({"forward": forward, "grad": grad}, repeats)
    return _row(t, None, int(sum(saved.values())))


def backsolve_error(n: int = 16, d: int = 4, tolerances=(1e-4, 1e-6, 1e-8, 1e-10)) -> list[dict]:
    r"""Relative error of ``BacksolveAdjoint``'s gradient against checkpointed reverse mode
    (``RecursiveCheckpointAdjoint``, the exact derivative of the discrete solve), float64, rescaled
    flow, Tsit5 with rtol = atol = tol, t in [0, 2], functional mean z(2)^2, w.r.t. (Q, K, V, x0)."""
    x0, Q, K, V = make_problem(1, n, d, seed=1)
    out = []
    with jax.enable_x64(True):
        from attnflow import RescaledFlow

        params = tuple(jnp.asarray(a) for a in (Q, K, V, x0[0]))

        def loss(params, tol, adjoint):
            Q, K, V, x0 = params
            sol = diffrax.diffeqsolve(diffrax.ODETerm(RescaledFlow(Q, K, V).vector_field), diffrax.Tsit5(), 0.0, 2.0,
                                      None, x0, saveat=diffrax.SaveAt(t1=True), max_steps=4096, adjoint=adjoint,
                                      stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol))
            return jnp.mean(sol.ys[-1] ** 2)

        # the tolerance is a traced argument: one compilation per adjoint, not one per tolerance
        grad_ref = jax.jit(jax.grad(lambda p, tol: loss(p, tol, diffrax.RecursiveCheckpointAdjoint())))
        grad_back = jax.jit(jax.grad(lambda p, tol: loss(p, tol, diffrax.BacksolveAdjoint())))
        for tol in tolerances:
            ref, back = grad_ref(params, jnp.asarray(tol)), grad_back(params, jnp.asarray(tol))
            num = max(float(jnp.abs(a - b).max()) for a, b in zip(ref, back))
            den = max(float(jnp.abs(a).max()) for a in ref)
            out.append({"tol": tol, "rel_error": num / den})
            print(f"BacksolveAdjoint vs checkpointed, tol {tol:.0e}: relative gradient error {num / den:.2e}", flush=True)
    return out


KINDS = ("euler", "euler-store-all", "euler-autodiff-softmax", "euler-diffrax", "tsit5-adaptive", "torch-euler")


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--steps", default="100,1000", help="comma-separated Euler step counts")
    p.add_argument("--repeats", type=int, default=5, help="interleaved (forward, gradient) pairs per row")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    p.add_argument("--kinds", default=",".join(KINDS), help=f"comma-separated subset of {','.join(KINDS)}")
    p.add_argument("--impl", default="dense", help="attention path of the attnflow rows")
    p.add_argument("--no-torch", dest="torch", action="store_false")
    p.add_argument("--no-backsolve", dest="backsolve", action="store_false")
    p.add_argument("--together", type=int, default=7, metavar="REPEATS",
                   help="also time the three Euler gradients and the forward in one interleaved loop (0: skip)")
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (default 1, see bench_torch)")
    p.add_argument("--out", default="bench_gradients.json")
    args = p.parse_args(argv)
    steps_list = [int(s) for s in args.steps.split(",")]
    kinds = [k for k in args.kinds.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        p.error(f"unknown --kinds {unknown}; choose from {KINDS}")
    x0, Q, K, V = make_problem(1, args.n, args.d)
    problem = (x0[0], Q, K, V)
    rows = []
    with jax.enable_x64(args.dtype == "float64"):
        params = tuple(jnp.asarray(a, args.dtype) for a in (Q, K, V, x0[0]))
        for kind in kinds:
            for steps in (steps_list if kind != "tsit5-adaptive" else [0]):
                load_before = _load()
                if kind == "torch-euler":
                    if not args.torch:
                        continue
                    try:
                        r = bench_torch(steps, problem, args.repeats, args.torch_threads, args.dtype)
                    except ImportError:
                        print("torch not installed: torch rows skipped")
                        continue
                else:
                    r = bench_jax(kind, steps, params, args.impl, args.repeats)
                r = {"kind": kind, "steps": steps or "adaptive", "n": args.n, "d": args.d, "dtype": args.dtype, **r,
                     "load_before": load_before, "load_after": _load()}
                rows.append(r)
                mem = "-" if r["grad_temp_bytes"] is None else f"{r['grad_temp_bytes'] / 2**20:.1f} MiB"
                print(f"{kind:22s} steps={str(r['steps']):>8s} forward {r['forward_s'] * 1e3:8.1f} ms "
                      f"[{r['forward_min_max_s'][0] * 1e3:.1f}, {r['forward_min_max_s'][1] * 1e3:.1f}]  grad "
                      f"{r['grad_s'] * 1e3:8.1f} ms [{r['grad_min_max_s'][0] * 1e3:.1f}, {r['grad_min_max_s'][1] * 1e3:.1f}]"
                      f"  grad/forward {r['ratio']:5.2f} (CPU time {r['cpu_ratio']:5.2f})  grad memory {mem}  "
                      f"load {r['load_after']}", flush=True)
        together = []
        if args.together:
            for steps in steps_list:
                r = euler_variants_interleaved(steps, params, args.impl, args.together)
                together.append(r)
                print(f"interleaved together, {steps} steps (load {r['load']}): gradient / forward per round, "
                      "median [min, max]: " + "; ".join(
                          f"{k} {r[k]['ratio_median']:.2f} [{r[k]['ratio_min']:.2f}, {r[k]['ratio_max']:.2f}] "
                          f"(CPU time {r[k]['cpu_ratio_median']:.2f} [{r[k]['cpu_ratio_min']:.2f}, {r[k]['cpu_ratio_max']:.2f}])"
                          for k in ("euler", "euler-store-all", "euler-autodiff-softmax")), flush=True)
    growth = {}
    for kind in ("euler", "euler-store-all", "euler-autodiff-softmax", "euler-diffrax", "torch-euler"):
        by = {r["steps"]: r["grad_temp_bytes"] for r in rows if r["kind"] == kind}
        if len(steps_list) >= 2 and all(by.get(s) for s in steps_list[:2]):
            growth[kind] = by[steps_list[1]] / by[steps_list[0]]
    out = {"machine": machine_info(), "uptime": subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip(),
           "torch_threads": args.torch_threads, "dtype": args.dtype, "repeats_interleaved": args.repeats, "rows": rows,
           "euler_variants_interleaved": together,
           "backsolve_error": backsolve_error() if args.backsolve else None,
           "memory_growth_factor": {k: v for k, v in growth.items()},
           "steps_factor": steps_list[1] / steps_list[0] if len(steps_list) >= 2 else None,
           "targets": {"grad_over_forward_max": 4.0, "memory": "sub-linear in steps"}}
    for k, v in growth.items():
        print(f"grad memory x{v:.2f} for x{out['steps_factor']:.0f} steps ({k})")
    print(f"uptime: {out['uptime']}")
    Path(args.out).write_text(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    main()
