#!/usr/bin/env python
r"""Cost of a reverse-mode gradient against the forward solve, attnflow (JAX) and PyTorch autograd.

Problem: the raw flow (SPEC 1.1) with ``benchmarks.common.make_problem`` weights, n = 256 tokens,
d = 64, t in [0, 1]; functional :math:`L = \mathrm{mean}\,x(1)^2`; gradient with respect to
(Q, K, V, x0). Rows:

* ``euler-scan``: :func:`attnflow.integrate.solve_euler` (``lax.scan``; reverse mode stores every
  layer's state, memory linear in the number of steps);
* ``euler-remat``: the same layers in two nested ``lax.scan`` with ``jax.checkpoint`` on each
  layer and each block of ~sqrt(steps) layers (what ``solve_euler`` could do; O(sqrt(steps) n d));
* ``euler-diffrax``: the same Euler scheme through ``diffrax.diffeqsolve`` with constant steps
  and ``RecursiveCheckpointAdjoint`` (checkpointed reverse mode);
* ``tsit5-adaptive``: :func:`attnflow.integrate.solve_ode`, Tsit5 with PID control
  (rtol 1e-5, atol 1e-6 in float32), checkpointed reverse mode;
* ``torch-euler``: the same Euler loop in PyTorch (CPU) with autograd.

Also: the relative error of ``diffrax.BacksolveAdjoint``'s gradient against the checkpointed
one at several tolerances (:func:`backsolve_error`, float64, small problem).

Each at 100 and 1000 steps (adaptive: its own steps). Time: one jit, warm-up, median of repeats,
``block_until_ready``. Memory: for JAX, XLA's compiled peak temporary buffer size
(``memory_analysis().temp_size_in_bytes``, exact for the compiled program); for PyTorch, the
bytes of the tensors autograd saves for the backward pass (``saved_tensors_hooks``, unique
storages). Targets: gradient <= 4x forward; memory sub-linear in the number of steps.

Usage: ``python benchmarks/bench_gradients.py [--n 256 --d 64 --steps 100,1000] [--out FILE.json]``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import diffrax  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

from attnflow import AttentionFlow  # noqa: E402
from attnflow.integrate import solve_euler, solve_ode  # noqa: E402
from benchmarks.common import machine_info, make_problem, time_call  # noqa: E402


def _euler_remat(flow, x0, steps: int):
    """Euler in two nested scans, blocks of ~sqrt(steps) layers, each block and each layer under
    ``jax.checkpoint``: the backward pass stores one state per block and recomputes the attention
    matrices, so memory is O((steps / b + b) n d) instead of O(steps n^2)."""
    dt = 1.0 / steps
    b = max(1, int(round(steps ** 0.5)))
    while steps % b:
        b -= 1
    layer = jax.checkpoint(lambda x: x + dt * flow.vector_field(0.0, x))

    @jax.checkpoint
    def block(x, _):
        return jax.lax.scan(lambda x, _: (layer(x), None), x, None, length=b)[0], None

    return jax.lax.scan(block, x0, None, length=steps // b)[0]


def _loss_jax(kind: str, steps: int, impl: str):
    def solve(params):
        Q, K, V, x0 = params
        flow = AttentionFlow(Q, K, V, attention_impl=impl)
        if kind == "euler-scan":
            return solve_euler(flow, x0, dt=1.0 / steps, num_steps=steps, save_every=steps).ys[-1]
        if kind == "euler-remat":
            return _euler_remat(flow, x0, steps)
        if kind == "euler-diffrax":
            sol = diffrax.diffeqsolve(diffrax.ODETerm(flow.vector_field), diffrax.Euler(), 0.0, 1.0, 1.0 / steps, x0,
                                      saveat=diffrax.SaveAt(t1=True), max_steps=steps,
                                      adjoint=diffrax.RecursiveCheckpointAdjoint())
            return sol.ys[-1]
        return solve_ode(flow, x0, t0=0.0, t1=1.0, rtol=1e-5, atol=1e-6, max_steps=256).ys[-1]

    return solve, lambda params: jnp.mean(solve(params) ** 2)


def bench_jax(kind, steps, params, impl, repeats):
    solve, loss = _loss_jax(kind, steps, impl)
    fwd = jax.jit(solve)
    grad = jax.jit(jax.value_and_grad(loss))
    tf = time_call(lambda: fwd(params), repeats=repeats)["median_s"]
    tg = time_call(lambda: grad(params), repeats=repeats)["median_s"]
    mem_f = fwd.lower(params).compile().memory_analysis().temp_size_in_bytes
    mem_g = grad.lower(params).compile().memory_analysis().temp_size_in_bytes
    return {"forward_s": tf, "grad_s": tg, "ratio": tg / tf, "forward_temp_bytes": int(mem_f), "grad_temp_bytes": int(mem_g)}


def bench_torch(steps, problem, repeats, threads):
    import torch

    # On a shared 2-core machine torch's OpenMP threads spin against the other processes:
    # measured 35-65 ms with 1 thread against 320-690 ms with 2 for the same 100 steps.
    torch.set_num_threads(threads)
    x0, Q, K, V = (torch.tensor(np.asarray(a), dtype=torch.float32) for a in problem)
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

    tf = time_call(forward, repeats=repeats)["median_s"]
    tg = time_call(grad, repeats=repeats)["median_s"]
    return {"forward_s": tf, "grad_s": tg, "ratio": tg / tf, "forward_temp_bytes": None,
            "grad_temp_bytes": int(sum(saved.values()))}


def backsolve_error(n: int = 16, d: int = 4, tolerances=(1e-4, 1e-6, 1e-8, 1e-10)) -> list[dict]:
    r"""Relative error of ``BacksolveAdjoint``'s gradient against checkpointed reverse mode
    (``RecursiveCheckpointAdjoint``, the exact derivative of the discrete solve), float64, rescaled
    flow, Tsit5 with rtol = atol = tol, t in [0, 2], functional mean z(2)^2, w.r.t. (Q, K, V, x0)."""
    x0, Q, K, V = make_problem(1, n, d, seed=1)
    out = []
    with jax.enable_x64(True):
        from attnflow import RescaledFlow

        params = tuple(jnp.asarray(a) for a in (Q, K, V, x0[0]))
        for tol in tolerances:
            def loss(params, adjoint):
                Q, K, V, x0 = params
                sol = diffrax.diffeqsolve(diffrax.ODETerm(RescaledFlow(Q, K, V).vector_field), diffrax.Tsit5(), 0.0, 2.0,
                                          None, x0, saveat=diffrax.SaveAt(t1=True), max_steps=4096, adjoint=adjoint,
                                          stepsize_controller=diffrax.PIDController(rtol=tol, atol=tol))
                return jnp.mean(sol.ys[-1] ** 2)

            ref = jax.grad(loss)(params, diffrax.RecursiveCheckpointAdjoint())
            back = jax.grad(loss)(params, diffrax.BacksolveAdjoint())
            num = max(float(jnp.abs(a - b).max()) for a, b in zip(ref, back))
            den = max(float(jnp.abs(a).max()) for a in ref)
            out.append({"tol": tol, "rel_error": num / den})
            print(f"BacksolveAdjoint vs checkpointed, tol {tol:.0e}: relative gradient error {num / den:.2e}", flush=True)
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=256)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--steps", default="100,1000", help="comma-separated Euler step counts")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--impl", default="dense", help="attention path of the attnflow rows")
    p.add_argument("--no-torch", dest="torch", action="store_false")
    p.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads (default 1, see bench_torch)")
    p.add_argument("--out", default="bench_gradients.json")
    args = p.parse_args(argv)
    steps_list = [int(s) for s in args.steps.split(",")]
    x0, Q, K, V = make_problem(1, args.n, args.d)
    problem = (x0[0], Q, K, V)
    params = tuple(jnp.asarray(a, jnp.float32) for a in (Q, K, V, x0[0]))
    rows = []
    for kind in ("euler-scan", "euler-remat", "euler-diffrax", "tsit5-adaptive", "torch-euler"):
        for steps in (steps_list if kind != "tsit5-adaptive" else [0]):
            if kind == "torch-euler":
                if not args.torch:
                    continue
                try:
                    r = bench_torch(steps, problem, args.repeats, args.torch_threads)
                except ImportError:
                    print("torch not installed: torch rows skipped")
                    continue
            else:
                r = bench_jax(kind, steps, params, args.impl, args.repeats)
            r = {"kind": kind, "steps": steps or "adaptive", "n": args.n, "d": args.d, **r}
            rows.append(r)
            mem = "-" if r["grad_temp_bytes"] is None else f"{r['grad_temp_bytes'] / 2**20:.1f} MiB"
            print(f"{kind:15s} steps={str(r['steps']):>8s} forward {r['forward_s'] * 1e3:9.1f} ms  grad "
                  f"{r['grad_s'] * 1e3:9.1f} ms  grad/forward {r['ratio']:5.2f}  grad memory {mem}", flush=True)
    growth = {}
    for kind in ("euler-scan", "euler-remat", "euler-diffrax", "torch-euler"):
        by = {r["steps"]: r["grad_temp_bytes"] for r in rows if r["kind"] == kind}
        if len(steps_list) >= 2 and all(by.get(s) for s in steps_list[:2]):
            growth[kind] = by[steps_list[1]] / by[steps_list[0]]
    out = {"machine": machine_info(), "torch_threads": args.torch_threads, "rows": rows, "backsolve_error": backsolve_error(),
           "memory_growth_factor": {k: v for k, v in growth.items()},
           "steps_factor": steps_list[1] / steps_list[0] if len(steps_list) >= 2 else None,
           "targets": {"grad_over_forward_max": 4.0, "memory": "sub-linear in steps"}}
    for k, v in growth.items():
        print(f"grad memory x{v:.2f} for x{out['steps_factor']:.0f} steps ({k})")
    Path(args.out).write_text(json.dumps(out, indent=2, default=str))
    return out


if __name__ == "__main__":
    main()
