r"""GPU readiness check and timing of attnflow's rows at GPU-sized problems (< 8 minutes).

Needs only JAX (+ GPU plugin), equinox, diffrax and this source tree:

    PYTHONPATH=. python benchmarks/gpu.py            # on a machine with an NVIDIA GPU
    PYTHONPATH=. python benchmarks/gpu.py --cpu      # the same script on CPU (small sizes)

1. Correctness: small problems run on the device in float32 and float64 (Euler with the
   dense and the chunked attention, Tsit5 with constant steps) and are compared with
   the CPU float64 result of the same method.
2. Timing: the suite's attnflow rows (Euler float32/float64, Tsit5 fixed and adaptive)
   at B x n up to 10^6 tokens (n >= 4096 runs the tiled O(n d) path), median of repeats after
   a warm-up, as a fraction of the device's matmul rate measured in the same run. Rows that
   would not finish inside ``--budget`` seconds are skipped with a message.
   The fused kernel (``impl="flash"``, a Pallas/Triton online softmax) is checked the same way, its
   tile sizes are chosen by timing a few configurations at (256, 4096, 64) float32 (the fastest is
   used for the flash rows of the run and recorded), and the Euler rows run it beside the auto path.
3. The same Euler rows in PyTorch on the same device (the users' alternative; ``torch.bmm`` and
   ``torch.softmax`` for n <= 1024, ``scaled_dot_product_attention`` (its fused kernels) for
   n >= 4096), and PyTorch autograd for the gradient row, when PyTorch sees the device.
4. A sweep throughput row (the dynamics sweep's jitted chunk function: spectral checks,
   Euler layers of the exact discrete rescaling, classifier; systems/s and fraction of the
   matmul rate) and a gradient row (reverse-mode gradient of a loss of the final Euler state
   with respect to V, against the forward solve: time ratio).

float32 matmuls run at ``--precision highest`` by default (true float32; TF32 tensor
cores otherwise change the numbers). Results: ``results/gpu/<UTC stamp>/`` (summary.json,
table.md) unless ``--out``.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

GPU_SIZES = [(4096, 256, 128), (1024, 1024, 64), (256, 4096, 64), (16, 65536, 64), (1, 1_000_000, 64)]
CPU_SIZES = [(8, 256, 32), (2, 1024, 32), (1, 4096, 32)]


def parse(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--cpu", action="store_true", help="run on CPU with small sizes (no GPU needed)")
    p.add_argument("--budget", type=float, default=None, help="seconds for the timing part (default 240 GPU, 150 CPU; the whole script stays under 8 min on an H200-class GPU)")
    p.add_argument("--row-seconds", type=float, default=None, help="target seconds per timed call (sets steps)")
    p.add_argument("--precision", default="highest", choices=["highest", "high", "default"])
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--out", default=None)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--sweep-seconds", type=float, default=120.0, help="time limit of the sweep rows (child process)")
    p.add_argument("--sweep-route", default="host", choices=["auto", "device", "host", "cpu"],
                   help="eig route of the sweep rows' spectral stage (default host: LAPACK beside the device)")
    p.add_argument("--methods", default="euler,euler-flash,tsit5",
                   help="timing rows to run, comma-separated among euler (the auto path; euler32: its float32 rows only), "
                        "euler-flash (the fused "
                        "Pallas kernel, impl='flash') and tsit5 (fixed and adaptive); default all")
    p.add_argument("--skip", default="",
                   help="parts to leave out, comma-separated among tuning, threshold, torch, gradient, phase, meanfield, "
                        "spheres, sweep")
    p.add_argument("--flash-config", default=None, metavar="BQ,BK,WARPS,STAGES",
                   help="tiles of the fused kernel's rows (skips the tuning part; default: the tuning's fastest)")
    p.add_argument("--sweep-only", default=None, help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv=None) -> int:
    args = parse(argv)
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    # JAX takes 75% of the GPU's memory at start; leave room for the PyTorch rows in this process.
    os.environ.setdefault("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.6")
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    if args.sweep_only:
        return _sweep_only(args)
    t_start = time.perf_counter()

    import jax
    import jax.numpy as jnp
    import numpy as np

    import attnflow  # noqa: F401

    jax.config.update("jax_enable_x64", True)  # a benchmark script (not the library) sets it
    from attnflow import select_impl
    from benchmarks.common import (
        atomic_write_json,
        atomic_write_text,
        attention_flops,
        machine_info,
        make_problem,
        make_run_dir,
        matmul_rate,
    )
    from benchmarks.suite import TOL, attnflow_runner

    jax.config.update("jax_default_matmul_precision", args.precision)
    backend = jax.default_backend()
    if not args.cpu and backend != "gpu":
        print(f"no GPU visible to JAX (backend {backend!r}); run with --cpu to check the script on CPU.")
        return 2
    device = jax.devices()[0]
    cpu = jax.devices("cpu")[0]
    budget = args.budget or (150.0 if args.cpu else 240.0)
    row_seconds = args.row_seconds or (3.0 if args.cpu else 2.0)
    sizes = CPU_SIZES if args.cpu else GPU_SIZES
    run_dir = make_run_dir(args.out, prefix="gpu")
    info = machine_info()
    info["device"] = str(device)
    info["device_kind"] = getattr(device, "device_kind", None)
    info["matmul_precision"] = args.precision
    print(f"attnflow GPU check on {info['device_kind'] or device} (backend {backend}) -> {run_dir}")

    checks, rows, extra = [], [], {}

    def save() -> dict:
        """Write what is finished so far: an interrupted run keeps every finished row."""
        cols = ["B", "n", "d", "tokens", "method", "impl", "dtype", "steps", "median_s", "ms_per_eval", "tflops",
                "frac_matmul", "torch_median_s", "speedup_vs_torch", "note"]
        fmt = lambda v: "" if v is None else (f"{v:.3g}" if isinstance(v, float) else str(v))
        table = "\n".join(["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
                          + ["| " + " | ".join(fmt(r.get(c)) for c in cols) + " |" for r in rows])
        summary = dict(machine=info, checks=checks, matmul_rate=mm, rows=rows, seed=args.seed, **extra,
                       all_checks_ok=all(c["ok"] for c in checks), elapsed_s=time.perf_counter() - t_start)
        atomic_write_json(run_dir / "summary.json", summary)
        atomic_write_text(run_dir / "table.md", table + "\n")
        return summary

    mm: dict = {}
    # ---- 1. correctness against the CPU float64 reference --------------------------------
    for (B, n, d), impl, method in [
        ((2, 300, 16), "dense", "euler"),
        ((2, 300, 16), "chunked", "euler"),
        ((2, 300, 16), "dense", "tsit5"),
        ((1, 3000, 16), "auto", "euler"),
    ]:
        x0, Q, K, V = make_problem(B, n, d, seed=args.seed)
        steps, t1 = 20, 0.5
        with jax.default_device(cpu):
            ref_fn = attnflow_runner(method, steps=steps, t1=t1, impl="dense")
            ref = np.asarray(ref_fn(*(jnp.asarray(a, jnp.float64) for a in (x0, Q, K, V)))[0])
        for dtype, tol in (("float32", 2e-5), ("float64", 1e-11)):
            fn = attnflow_runner(method, steps=steps, t1=t1, impl=impl)
            xs = [jax.device_put(jnp.asarray(a, jnp.dtype(dtype)), device) for a in (x0, Q, K, V)]
            out = np.asarray(fn(*xs)[0], np.float64)
            err = float(np.abs(out - ref).max() / np.abs(ref).max())
            used = select_impl(n, n) if impl == "auto" else impl
            ok = bool(np.isfinite(err) and err < tol)
            checks.append(dict(size=[B, n, d], method=method, impl=used, dtype=dtype, rel_err=err, tol=tol, ok=ok))
            print(f"  check {method:5s} [{used:7s}] {dtype} (B, n, d) = {(B, n, d)}: rel err {err:.2e} "
                  f"(tol {tol:.0e}) {'ok' if ok else 'FAIL'}")

    # the chunked kernel with many tiles (and its custom VJP) against dense float64 on CPU
    from attnflow import attend

    kq, kk, kv = jax.random.split(jax.random.key(args.seed), 3)
    n_att = 3000
    qkv64 = [jax.random.normal(kk_, (n_att, 16), jnp.float64) for kk_ in (kq, kk, kv)]
    loss = lambda impl, cs: (lambda q, k, v: jnp.sum(jnp.sin(attend(q, k, v, impl=impl, chunk_size=cs))))
    with jax.default_device(cpu):
        ref_out = np.asarray(attend(*qkv64, impl="dense"))
        ref_grad = [np.asarray(g) for g in jax.grad(loss("dense", None), argnums=(0, 1, 2))(*qkv64)]
    for dtype, tol in (("float32", 1e-5), ("float64", 1e-11)):
        dev = [jax.device_put(a.astype(dtype), device) for a in qkv64]
        out = np.asarray(jax.jit(lambda q, k, v: attend(q, k, v, impl="chunked", chunk_size=512))(*dev), np.float64)
        grads = jax.jit(jax.grad(loss("chunked", 512), argnums=(0, 1, 2)))(*dev)
        errs = [float(np.abs(out - ref_out).max() / np.abs(ref_out).max())] + [
            float(np.abs(np.asarray(g, np.float64) - r).max() / np.abs(r).max()) for g, r in zip(grads, ref_grad)]
        ok = bool(all(np.isfinite(e) and e < 20 * tol for e in errs))
        checks.append(dict(size=[1, n_att, 16], method="attend+grad", impl="chunked(512)", dtype=dtype,
                           rel_err=max(errs), tol=20 * tol, ok=ok))
        print(f"  check attend and its gradient [chunked 512] {dtype} n = {n_att}: max rel err {max(errs):.2e} "
              f"{'ok' if ok else 'FAIL'}")

    _flash_checks(args, device, cpu, qkv64, ref_out, ref_grad, checks)

    # ---- 2. timing ---------------------------------------------------------------------
    save()
    mm.update({dt: matmul_rate(dt, n=1024 if args.cpu else 8192) for dt in ("float32", "float64")})
    print("matmul rate: " + ", ".join(f"{dt} {r['flops_per_s'] / 1e12:.2f} TF/s" for dt, r in mm.items()))
    skip = set(filter(None, args.skip.split(",")))
    methods = set(filter(None, args.methods.split(",")))
    if args.flash_config:
        from attnflow.kernels import FlashConfig, _flash

        _flash.FLASH_DEFAULT = FlashConfig(*(int(c) for c in args.flash_config.split(",")))
        extra["flash_config_given"] = args.flash_config
    elif "tuning" not in skip:
        extra["flash_tuning"] = _flash_tuning(args, device, mm)
        save()
    if "threshold" not in skip:
        extra["flash_threshold"] = _threshold_rows(args, device, mm)
        save()
    t_timing = time.perf_counter()
    for B, n, d in sizes:
        x0, Q, K, V = make_problem(B, n, d, seed=args.seed)
        per_eval = attention_flops(B, n, d)
        impl = select_impl(n, n)
        todo = [("euler", "float32", False, impl), ("euler", "float64", False, impl)] if "euler" in methods else []
        if "euler32" in methods and "euler" not in methods:
            todo = [("euler", "float32", False, impl)]
        if "euler-flash" in methods:  # float64: the first H200 run found the dense path faster at n = 4096
            todo += [("euler", "float32", False, "flash")] + ([("euler", "float64", False, "flash")]
                                                             if 4096 < n < 10**6 else [])
        if n >= 10**6:  # one float64 step there takes ~10 s: its row would not fit a device call
            todo = [t for t in todo if t[1] != "float64"]
        if "tsit5" in methods:
            todo += [("tsit5", "float32", False, impl), ("tsit5", "float32", True, impl)]
        for method, dtype, adaptive, row_impl in todo:
            evals_per_step = 1 if method == "euler" else 6
            est_eval = per_eval / (0.3 * mm[dtype]["flops_per_s"])  # assume >= 30% of matmul rate
            steps = int(max(1, min(100, row_seconds / (est_eval * evals_per_step))))
            name = f"{method} {'adaptive' if adaptive else 'fixed' if method != 'euler' else ''}".strip()
            rec = dict(B=B, n=n, d=d, tokens=B * n, method=name, impl=row_impl, dtype=dtype)
            if row_impl == "flash":
                from attnflow.kernels import _flash

                rec["flash_config"] = dataclasses.asdict(_flash.FLASH_DEFAULT)
                rec["flash_products"] = ("ieee" if dtype == "float64" else
                                         _flash.resolved_precision(_flash.FLASH_DEFAULT.precision))
            rows.append(rec)
            left = budget - (time.perf_counter() - t_timing)
            if left < 3 * row_seconds + 20:
                rec["note"] = "skipped: time budget"
                print(f"  {B}x{n}x{d} {name} {dtype}: skipped (time budget)")
                continue
            t1 = 0.01 * steps
            rtol, atol = TOL[dtype]
            fn = attnflow_runner(method, steps=steps, t1=t1, impl=row_impl, adaptive=adaptive, rtol=rtol, atol=atol)
            xs = [jax.device_put(jnp.asarray(a, jnp.dtype(dtype)), device) for a in (x0, Q, K, V)]
            try:
                t = time.perf_counter()
                out, k = jax.block_until_ready(fn(*xs))
                warm = time.perf_counter() - t
                times = []
                for _ in range(args.repeats if warm < 2 * row_seconds + 30 else 1):
                    if time.perf_counter() - t_timing > budget:
                        break
                    t = time.perf_counter()
                    jax.block_until_ready(fn(*xs))
                    times.append(time.perf_counter() - t)
            except Exception as e:  # e.g. out of device memory: say so, keep going
                rec["note"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
                print(f"  {B}x{n}x{d} {name} {dtype}: {rec['note']}")
                continue
            times = times or [warm]
            med = float(np.median(times))
            k = int(np.asarray(k).max())
            evals = k * evals_per_step + (0 if method == "euler" else 1)
            rate = evals * per_eval / med
            rec.update(steps=k, evals=evals, median_s=med, times_s=times, warmup_s=warm,
                       ms_per_eval=1e3 * med / evals, tflops=rate / 1e12, frac_matmul=rate / mm[dtype]["flops_per_s"],
                       finite=bool(np.all(np.isfinite(np.asarray(out)))))
            print(f"  {B}x{n}x{d} {name:14s} {dtype} [{row_impl}]: {k} steps, {med:.3f} s, {rec['ms_per_eval']:.2f} ms/eval, "
                  f"{rate / 1e12:.2f} TF/s = {100 * rec['frac_matmul']:.0f}% of matmul")
            save()

    # ---- 3. the PyTorch rows on the same device -----------------------------------------------
    if "torch" not in skip:
        try:
            extra["torch"] = _torch_rows(rows, args, mm)
        except Exception as e:  # the JAX rows are the point: keep them
            extra["torch"] = [{"note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"}]
            print(f"  PyTorch rows: {extra['torch'][0]['note']}")
        save()

    # ---- 4. gradient rows, then the sweep row (in a child process with a time limit) ----------
    for key, row_fn in (("gradient", lambda: _gradient_row(args, device, mm)),
                        ("gradient_torch", lambda: _torch_gradient_row(args))):
        if "gradient" in skip:
            break
        try:
            extra[key] = row_fn()
        except Exception as e:  # say so, keep going
            extra[key] = {"note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"}
        print(f"  {key} row: {extra[key]}")
        save()
    if "phase" not in skip:
        extra["phase"] = _phase_rows(args, mm)
        save()
    if "meanfield" not in skip:
        extra["meanfield"] = _meanfield_rows(args)
        save()
    if "spheres" not in skip:
        extra["spheres"] = _sphere_rows(args)
        save()
    if "sweep" not in skip:
        extra["sweep"] = _sweep_rows_in_child(args, run_dir, mm)
    summary = save()
    print((run_dir / "table.md").read_text())
    print(f"correctness: {'all ok' if summary['all_checks_ok'] else 'FAILURES'}; "
          f"total {summary['elapsed_s']:.0f} s; results in {run_dir}")
    return 0 if summary["all_checks_ok"] else 1


def _flash_checks(args, device, cpu, qkv64, ref_out, ref_grad, checks) -> None:
    """The fused kernel (impl="flash") against the dense float64 result on CPU: output and the gradient of
    sum(sin(o)) at n = 3000 (not a multiple of the tiles), float32 in IEEE and TF32x3 arithmetic and float64;
    the causal mask at n = 1000. Appends to ``checks``; a failure to compile is a failed check."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from attnflow import attend
    from attnflow.kernels import FlashConfig, flash_attend

    loss = lambda cfg, mask: (lambda q, k, v: jnp.sum(jnp.sin(flash_attend(q, k, v, config=cfg, mask=mask))))
    n_causal = 1000
    with jax.default_device(cpu):
        causal_ref = np.asarray(attend(*(a[:n_causal] for a in qkv64), impl="dense", mask="causal"))
    for dtype, precision, tol in (("float32", "highest", 2e-5), ("float32", "tf32x3", 2e-4), ("float64", "highest", 2e-10)):
        cfg = FlashConfig(precision=precision)
        rec = dict(size=[1, qkv64[0].shape[0], 16], method="flash attend+grad", impl=f"flash({precision})",
                   dtype=dtype, tol=tol)
        try:
            dev = [jax.device_put(a.astype(dtype), device) for a in qkv64]
            out = np.asarray(jax.jit(lambda q, k, v: flash_attend(q, k, v, config=cfg))(*dev), np.float64)
            grads = jax.jit(jax.grad(loss(cfg, None), argnums=(0, 1, 2)))(*dev)
            causal = np.asarray(jax.jit(lambda q, k, v: flash_attend(q, k, v, config=cfg, mask="causal"))(
                *(a[:n_causal] for a in dev)), np.float64)
            errs = [float(np.abs(out - ref_out).max() / np.abs(ref_out).max()),
                    float(np.abs(causal - causal_ref).max() / np.abs(causal_ref).max())] + [
                float(np.abs(np.asarray(g, np.float64) - r).max() / np.abs(r).max()) for g, r in zip(grads, ref_grad)]
            rec.update(rel_err=max(errs), errs=errs, ok=bool(all(np.isfinite(e) and e < tol for e in errs)))
        except Exception as e:  # a kernel that does not compile here is a failed check, and the run goes on
            rec.update(rel_err=None, ok=False, note=f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}")
        checks.append(rec)
        said = rec.get("note") or f"max rel err {rec['rel_err']:.2e}"
        print(f"  check flash attend (+ causal, + gradient) [{precision}] {dtype}: {said} {'ok' if rec['ok'] else 'FAIL'}")


#: configurations timed by :func:`_flash_tuning` (block_q, block_k, num_warps, num_stages, precision). The first
#: H200 run (benchmarks/NOTES.md) timed IEEE float32 tiles: (128, 32, 4, 3) fastest at 38% of the float32
#: matmul rate (0.53x PyTorch's SDPA), 128 x 64 and larger spilled (2% of the rate); TF32x3 arithmetic on
#: (128, 32, 4, 3) ran at 111% of that rate, 1.5x SDPA. These are the next ones to decide between.
FLASH_CANDIDATES = [(128, 32, 4, 3, "tf32x3"), (64, 64, 4, 3, "tf32x3"), (128, 64, 4, 3, "tf32x3"),
                    (128, 64, 8, 3, "tf32x3"), (64, 32, 4, 3, "tf32x3"), (128, 32, 4, 3, "highest")]


def _reference_f64(one, q, k, v):
    """``one(q, k, v)`` vmapped over the first two systems, in float64 on the CPU: the rows' reference."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    with jax.default_device(jax.devices("cpu")[0]):
        return np.asarray(jax.vmap(one)(*(jnp.asarray(np.asarray(a[:2]), jnp.float64) for a in (q, k, v))))


def _timed_attention(one, q, k, v, ref, repeats: int) -> dict:
    """``one(q, k, v)`` vmapped, compiled ahead, best of ``repeats`` calls, and its error against ``ref`` (the first
    two systems, :func:`_reference_f64`); a call that does not compile is a row that says so (the next is tried)."""
    import jax
    import numpy as np

    try:
        compiled = jax.jit(jax.vmap(one)).lower(q, k, v).compile()
        t, times = _best(lambda: compiled(q, k, v), repeats)
        err = float(np.abs(np.asarray(compiled(q, k, v)[:2], np.float64) - ref).max() / np.abs(ref).max())
    except Exception as e:
        return {"note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:200]}"}
    return {"best_s": t, "times_s": times, "rel_err_vs_f64": err}


def _flash_tuning(args, device, mm) -> dict:
    """Time the fused kernel's configurations on one attention evaluation of the (256, 4096, 64) float32
    problem (random q, k, v of the Euler rows' scale, vmapped over the batch), beside the dense path and
    PyTorch's fused SDPA on the same inputs. The fastest configuration becomes the run's ``FLASH_DEFAULT``
    (its Euler flash rows use it) and is recorded."""
    import jax
    import jax.numpy as jnp
    import numpy as np

    from attnflow import attend
    from attnflow.kernels import FlashConfig, _flash, flash_attend

    B, n, d = (4, 512, 32) if args.cpu else (256, 4096, 64)
    flops = 4.0 * B * n * n * d
    rate = mm["float32"]["flops_per_s"]
    out = {"size": [B, n, d], "flops_per_call": flops, "rows": []}
    keys = jax.random.split(jax.random.key(args.seed), 3)
    q, k, v = (jax.device_put(jax.random.normal(kk, (B, n, d), jnp.float32) / d**0.25, device) for kk in keys)
    ref = _reference_f64(lambda q, k, v: attend(q, k, v, impl="dense"), q, k, v)

    def timed(name, one, ref, row_flops, said_flops=""):
        """One row of :func:`_timed_attention`, with its fraction of the float32 matmul rate."""
        rec = {"dtype": "float32", "name": name, **_timed_attention(one, q, k, v, ref, args.repeats)}
        if "best_s" in rec:
            rec["frac_matmul"] = row_flops / rec["best_s"] / rate
        out["rows"].append(rec)
        said = rec.get("note") or (f"{1e3 * rec['best_s']:.2f} ms, {100 * rec['frac_matmul']:.0f}% of matmul"
                                   f"{said_flops}, rel err {rec['rel_err_vs_f64']:.1e}")
        print(f"  flash tuning float32 {name}: {said}")
        return rec

    best_cfg, best_t = None, np.inf
    for name, cfg in [("dense", None)] + [(f"flash{c}", FlashConfig(*c)) for c in FLASH_CANDIDATES]:
        rec = timed(name, (lambda q, k, v: attend(q, k, v, impl="dense")) if cfg is None else
                    (lambda q, k, v, cfg=cfg: flash_attend(q, k, v, config=cfg)), ref, flops)
        if cfg is not None and rec.get("best_s", np.inf) < best_t:
            best_cfg, best_t = cfg, rec["best_s"]
    if best_cfg is not None:
        _flash.FLASH_DEFAULT = best_cfg
        out["chosen_float32"] = dataclasses.asdict(best_cfg)
    # with an ALiBi bias (causal, slope 4): the kernel's bias against the tiled path's, the measurement behind
    # impl="auto" taking the kernel for a bias where flash_preferred says so (4.2x on an H100)
    biased = lambda impl: (lambda q, k, v: attend(q, k, v, impl=impl, mask="causal", positions={"alibi": 4.0}))
    ref = _reference_f64(biased("dense"), q, k, v)
    for impl in ("chunked", "flash"):
        timed(f"alibi causal {impl}", biased(impl), ref, flops / 2, " (causal: half the flops)")
    out["torch_sdpa"] = _torch_sdpa_call(args, np.array(q), np.array(k), np.array(v), flops, mm)
    print(f"  flash tuning torch SDPA: {out['torch_sdpa']}")
    return out


def _threshold_rows(args, device, mm) -> list[dict]:
    """The question behind ``GPU_FLASH_THRESHOLD`` (the scores a system from which ``impl="auto"`` takes the fused
    kernel): at JAX's *default* matmul precision, the only one under which ``"auto"`` takes it, XLA's dense product
    is one TF32 pass and the kernel's products TF32x3. One attention evaluation, vmapped, float32, at n = 1024, 2048
    and 4096 (``--cpu``: 256 and 512), dense against the kernel with the run's tiles, best of ``--repeats``; each
    with its error against float64 (the first two systems), so that a faster path is not a less exact one unseen."""
    import jax
    import jax.numpy as jnp

    from attnflow import attend
    from attnflow.kernels import _flash, flash_attend

    sizes = [(8, 256, 32), (4, 512, 32)] if args.cpu else [(1024, 1024, 64), (512, 2048, 64), (256, 4096, 64)]
    rate = mm["float32"]["flops_per_s"]
    config = dataclasses.replace(_flash.FLASH_DEFAULT, precision="tf32x3")
    paths = {"dense": lambda q, k, v: attend(q, k, v, impl="dense"),
             "flash": lambda q, k, v: flash_attend(q, k, v, config=config)}
    rows = []
    for B, n, d in sizes:
        keys = jax.random.split(jax.random.key(args.seed + n), 3)
        q, k, v = (jax.device_put(jax.random.normal(kk, (B, n, d), jnp.float32) / d**0.25, device) for kk in keys)
        ref = _reference_f64(paths["dense"], q, k, v)
        flops = 4.0 * B * n * n * d
        for name, one in paths.items():
            with jax.default_matmul_precision("default"):  # traced and compiled under it
                rec = {"B": B, "n": n, "d": d, "path": name, "matmul_precision": "default",
                       **_timed_attention(one, q, k, v, ref, args.repeats)}
            if "best_s" in rec:
                rec["frac_matmul_ieee"] = flops / rec["best_s"] / rate
            rows.append(rec)
            said = rec.get("note") or f"{1e3 * rec['best_s']:.2f} ms, rel err {rec['rel_err_vs_f64']:.1e}"
            print(f"  threshold row {B}x{n}x{d} {name} (default precision): {said}")
    return rows


def _torch_sdpa_call(args, q, k, v, flops, mm) -> dict:
    """One call of PyTorch's fused SDPA (scale 1) on the same float32 inputs: best of ``--repeats``."""
    dev, why = _torch_device(args)
    if dev is None:
        return {"note": f"skipped: {why}"}
    import torch
    import torch.nn.functional as F

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    tq, tk, tv = (torch.as_tensor(a, device=dev)[:, None] for a in (q, k, v))
    with torch.inference_mode():
        times = _torch_time(lambda: F.scaled_dot_product_attention(tq, tk, tv, scale=1.0), args.repeats, sync)
    best = min(times)
    del tq, tk, tv
    if dev.type == "cuda":
        torch.cuda.empty_cache()
    return {"best_s": best, "times_s": times, "frac_matmul": flops / best / mm["float32"]["flops_per_s"]}


def _best(fn, repeats: int) -> tuple[float, list[float]]:
    import jax

    jax.block_until_ready(fn())  # compile + warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn())
        times.append(time.perf_counter() - t)
    return min(times), times


def _phase_rows(args, mm) -> list[dict]:
    """The phase job's chunk function on the device (benchmarks/bench_phase.py times it on CPU as a whole
    command): tokens on the sphere, Q = K = V = I, n = 32, 300 Euler layers, statistics at 200 checkpoints,
    float64; d = 2 (the peers' diagram: 2048 systems x 90 betas = 184320 pairs) and d = 128, in chunks of
    4096 and 32768 pairs (the job's ``run.chunk_size``). Per row: compile + first call, the best of
    ``--repeats`` calls, pairs and system-steps per second, the seconds the 184320 pairs of the diagram
    would take at the row's layers, and the work's flops as a fraction of the float64 matmul rate (layers x
    attention_flops, which counts the d x d projections that Q = K = V = I skips, and 4 n^2 d per
    system-step without them)."""
    import numpy as np

    from attnflow.phase import check_phase_config, load_phase_config
    from attnflow.phase._engine import make_chunk_fn
    from attnflow.runs import make_mesh
    from benchmarks.common import attention_flops

    layers, checkpoints, sizes = (30, 20, [(2, 256), (128, 64)]) if args.cpu else (300, 200, [(2, 4096), (2, 32768),
                                                                                                 (128, 4096)])
    rows = []
    for d, chunk in sizes:
        rec = {"d": d, "n": 32, "chunk_pairs": chunk, "layers": layers, "checkpoints": checkpoints}
        try:
            cfg = load_phase_config(None)
            cfg.update(beta={"start": 0.1, "stop": 9.0, "num": 90}, n=32, d=d, systems=2048, t1=0.1 * layers,
                       dt=0.1, checkpoints=checkpoints)
            cfg["run"]["chunk_size"] = chunk
            config = check_phase_config(cfg)
            compute = make_chunk_fn(config, config.groups[0], make_mesh(1))
            t = time.perf_counter()
            compute(0, chunk)  # compile + first call (the outputs come back to the host as NumPy arrays)
            first = time.perf_counter() - t
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                cols = compute(0, chunk)
                times.append(time.perf_counter() - t)
            best = min(times)
            flops = layers * attention_flops(chunk, 32, d)
            rec.update(compile_and_first_s=first, best_s=best, times_s=times, pairs_per_s=chunk / best,
                       system_steps_per_s=chunk * layers / best, diagram_s=184320 / (chunk / best),
                       frac_matmul_f64=flops / best / mm["float64"]["flops_per_s"],
                       frac_matmul_f64_without_projections=layers * chunk * 4.0 * 32**2 * d / best
                       / mm["float64"]["flops_per_s"],
                       finite=bool(np.all(cols["finite"])))
        except Exception as e:  # e.g. out of device memory: say so, keep going
            rec["note"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"
        print(f"  phase row: {rec}")
        rows.append(rec)
    return rows


def _meanfield_rows(args) -> list[dict]:
    """The mean-field rows on the device (:func:`benchmarks.bench_meanfield.gpu_rows`): the Fourier path on the
    circle at n = 10^6 and 10^7 and the tiled direct sum at n = 2 x 10^4, float32 and float64 (``--cpu``:
    10^5 and 2000); a failure is recorded as a note and the script goes on."""
    from benchmarks import bench_meanfield

    try:
        rows = bench_meanfield.gpu_rows(quick=args.cpu)
    except Exception as e:  # e.g. out of device memory: say so, keep going
        rows = [{"note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"}]
    for rec in rows:
        print(f"  meanfield row: {rec}")
    return rows


def _sphere_rows(args) -> list[dict]:
    """The harmonic paths on the device (:mod:`benchmarks.bench_sphere_path`'s layer: attention, one Euler step,
    renormalisation): S^2 and S^3 at beta = 4, float64, against the tiled direct sum at the first size (``--cpu``:
    10^4 tokens); and the phase job's large-circle group (d = 2, n = 10^5, beta_n = gamma log n for 4 gammas x 2
    clouds, 200 layers: the Fourier path with the sorted-angle statistics), seconds per cloud-layer. A failure is
    recorded as a note and the script goes on."""
    import jax

    from benchmarks import bench_sphere_path as B

    sizes = [10_000] if args.cpu else [100_000, 1_000_000]
    rows = []
    with jax.enable_x64(True):
        for d in (3, 4):
            try:
                from attnflow.kernels.hypersphere import harmonic_total, hypersphere_degree

                degree = hypersphere_degree(4.0, d)
                for n in sizes:
                    x = B.tokens(n, d=d)
                    compile_s, t = B.timed(B.sphere_layer(4.0, degree, 0.1, d), x, repeats=args.repeats)
                    rec = {"path": "harmonic", "d": d, "n": n, "degree": degree, "harmonics": harmonic_total(d, degree),
                           "compile_s": compile_s, "best_s": min(t), "times_s": t}
                    print(f"  sphere row: {rec}")
                    rows.append(rec)
                x = B.tokens(sizes[0], d=d)
                compile_s, t = B.timed(B.direct_layer(4.0, 0.1, d), x, repeats=1)
                rec = {"path": "tiled", "d": d, "n": sizes[0], "compile_s": compile_s, "best_s": min(t), "times_s": t}
            except Exception as e:  # e.g. out of device memory: say so, keep going
                rec = {"d": d, "note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"}
            print(f"  sphere row: {rec}")
            rows.append(rec)
    try:
        from attnflow.phase import check_phase_config, ensemble, load_phase_config

        cfg = load_phase_config(None)
        n = 10_000 if args.cpu else 100_000
        cfg.update(beta=[0.5, 1.0, 2.0, 3.0], beta_law="log", n=[n], d=[2], systems=2, t1=20.0, dt=0.1,
                   checkpoints=50, dtype="float64")
        layers = check_phase_config(cfg).num_layers
        ensemble(cfg)  # compile + first call
        t = time.perf_counter()
        out = ensemble(cfg)
        best = time.perf_counter() - t
        rec = {"path": "phase large circle", "n": n, "clouds": 8, "layers": layers, "best_s": best,
               "per_cloud_layer_s": best / (8 * layers), "finite": bool(out["finite"].all())}
    except Exception as e:
        rec = {"path": "phase large circle", "note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    print(f"  sphere row: {rec}")
    rows.append(rec)
    return rows


def _sweep_rows_in_child(args, run_dir: Path, mm) -> list[dict]:
    """The sweep rows in a child process under ``--sweep-seconds``: on the H200 (JAX 0.11.2) the
    d = 128 chunk function's compile ran past two minutes ("Very slow compile" of a reduce
    fusion), and a compile cannot be interrupted from inside the process."""
    import json
    import subprocess

    out = run_dir / "sweep_rows.json"
    env = {**os.environ, "XLA_PYTHON_CLIENT_MEM_FRACTION": "0.2"}
    cmd = [sys.executable, __file__, "--sweep-only", str(out), "--repeats", str(args.repeats),
           "--sweep-route", args.sweep_route] + (["--cpu"] if args.cpu else [])
    try:
        subprocess.run(cmd, env=env, timeout=args.sweep_seconds, check=False)
        note = None
    except subprocess.TimeoutExpired:
        note = f"stopped after {args.sweep_seconds:.0f} s (compile or run); rows finished before are kept"
    found = json.loads(out.read_text()) if out.exists() else []
    if note:
        found.append({"note": note})
    for r in found:
        print(f"  sweep row: {r}")
    return found


def _sweep_only(args) -> int:
    """Child-process entry: the sweep rows, small size first, each written when it finishes."""
    import jax

    jax.config.update("jax_enable_x64", True)
    from benchmarks.common import atomic_write_json, matmul_rate

    mm = {"float32": matmul_rate("float32", n=1024 if args.cpu else 8192)}
    rows = []
    sizes = [(8, 32, 64, 10)] if args.cpu else [(256, 32, 64, 10), (1024, 128, 256, 20)]
    for systems, d, n, layers in sizes:
        rows.append(_sweep_row(args, mm, systems=systems, d=d, n=n, layers=layers))
        atomic_write_json(Path(args.sweep_only), rows)
    return 0


def _sweep_row(args, mm, *, systems: int, d: int, n: int, layers: int) -> dict:
    """Systems/s of the dynamics sweep's chunk function (spectral stage, Euler layers, classifier)."""
    from attnflow.ensembles import system_seeds
    from attnflow.spectral import eig_route
    from attnflow.sweep._dynamics import make_chunk_fn
    from attnflow.runs import make_mesh

    from attnflow.runs import load_config

    t0 = time.perf_counter()
    cfg = {**load_config(None, "ginibre-dynamics.toml"), "n": n, "clouds": 1, "dt": 0.1, "t1": 0.1 * layers,
           "dtype": "float32"}
    fn = make_chunk_fn({"v": "ginibre", "qk": "identity", "d": d}, cfg, eig_route(args.sweep_route), make_mesh(1))
    seeds = system_seeds(0, "gpu-sweep", 0, systems)
    best, times = _best(lambda: fn(seeds), args.repeats)
    first_s = time.perf_counter() - t0 - sum(times)
    flops = systems * layers * (4 * n * n * d + 2 * n * d * (3 * d))
    return {"d": d, "n": n, "layers": layers, "systems": systems, "route": eig_route(args.sweep_route),
            "compile_and_first_s": first_s, "best_s": best, "times_s": times,
            "systems_per_s": systems / best, "euler_frac_matmul_f32": flops / best / mm["float32"]["flops_per_s"]}


def _gradient_row(args, device, mm) -> dict:
    """Reverse-mode gradient d/dV of a loss of the final Euler state vs the forward solve."""
    import jax
    import jax.numpy as jnp

    from attnflow import AttentionFlow, vmap_systems
    from attnflow.integrate import solve_euler
    import functools

    B, n, d, steps = (2, 128, 16, 20) if args.cpu else (16, 1024, 64, 100)
    x0, Q, K, V = (jax.device_put(jnp.asarray(a, jnp.float32), device) for a in make_problem(B, n, d, seed=args.seed))

    def loss(V, impl="auto"):
        final = vmap_systems(lambda x: solve_euler(AttentionFlow(Q, K, V, attention_impl=impl), x, dt=0.01,
                                                   num_steps=steps, save_every=steps).ys[-1])(x0)
        return jnp.sum(final ** 2)

    fwd = jax.jit(loss)
    grad = jax.jit(jax.grad(loss))
    t_fwd, _ = _best(lambda: fwd(V), args.repeats)
    t_grad, _ = _best(lambda: grad(V), args.repeats)
    # the other attention paths' reverse passes (the tiled custom VJP; the fused forward with the tiled backward)
    by_impl = {}
    for impl in ("chunked", "flash"):
        try:
            f_i = jax.jit(functools.partial(loss, impl=impl))
            g_i = jax.jit(jax.grad(functools.partial(loss, impl=impl)))
            tf_i, _ = _best(lambda: f_i(V), args.repeats)
            tg_i, _ = _best(lambda: g_i(V), args.repeats)
            by_impl[impl] = {"forward_s": tf_i, "gradient_s": tg_i, "gradient_over_forward": tg_i / tf_i,
                             "gradient_over_auto_forward": tg_i / t_fwd}
        except Exception as e:  # say so, keep going
            by_impl[impl] = {"note": f"failed: {type(e).__name__}: {str(e).splitlines()[0][:160]}"}
    # the stepper unrolls checkpointed segments on the backends it was measured on
    # (attnflow.integrate._euler.UNROLL_BACKENDS: CPU, and GPU since an H100 run); time the other choice here,
    # so every GPU run checks the decision
    from attnflow.integrate import _euler as euler

    default_backends = euler.UNROLL_BACKENDS
    unrolled_default = jax.default_backend() in default_backends
    euler.UNROLL_BACKENDS = () if unrolled_default else (jax.default_backend(),)
    try:
        grad_other = jax.jit(jax.grad(loss))
        t_other, _ = _best(lambda: grad_other(V), args.repeats)
    finally:
        euler.UNROLL_BACKENDS = default_backends
    return {"B": B, "n": n, "d": d, "steps": steps, "forward_s": t_fwd, "gradient_s": t_grad,
            "gradient_over_forward": t_grad / t_fwd,
            "segments_unrolled_by_default": unrolled_default, "by_impl": by_impl,
            "gradient_other_unrolling_s": t_other}


def _torch_device(args):
    """The torch device matching the JAX one, or None (with the reason) when there is none."""
    try:
        import torch
    except ImportError:
        return None, "PyTorch is not installed"
    if args.cpu:
        return torch.device("cpu"), None
    if not torch.cuda.is_available():
        return None, "PyTorch sees no CUDA device"
    torch.backends.cuda.matmul.allow_tf32 = args.precision != "highest"  # same arithmetic as JAX's rows
    torch.backends.cudnn.allow_tf32 = args.precision != "highest"
    return torch.device("cuda"), None


def _torch_euler(x, Q, K, V, *, steps: int, dt: float, fused: bool = False):
    """The Euler layers in PyTorch: x += dt softmax((x Q^T)(x K^T)^T) x V^T, with ``torch.bmm`` and
    ``torch.softmax``, or (``fused``) ``scaled_dot_product_attention`` with scale 1."""
    import torch
    import torch.nn.functional as F

    for _ in range(steps):
        q, k, v = x @ Q.T, x @ K.T, x @ V.T
        if fused:
            att = F.scaled_dot_product_attention(q[:, None], k[:, None], v[:, None], scale=1.0)[:, 0]
        else:
            att = torch.bmm(torch.softmax(torch.bmm(q, k.transpose(1, 2)), dim=-1), v)
        x = x + dt * att
    return x


def _torch_time(fn, repeats: int, sync) -> list[float]:
    fn()
    sync()  # warm-up (kernel selection, allocator)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return times


def _torch_rows(rows, args, mm) -> list[dict]:
    """The float32 Euler rows again in PyTorch, same sizes, steps and dt, on the same device."""
    import numpy as np

    dev, why = _torch_device(args)
    if dev is None:
        print(f"  PyTorch rows: skipped ({why})")
        return [{"note": f"skipped: {why}"}]
    import torch

    from benchmarks.common import attention_flops

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    out, done = [], {}
    for r in rows:
        if r["method"] != "euler" or r["dtype"] != "float32" or "median_s" not in r:
            continue
        B, n, d, steps = r["B"], r["n"], r["d"], r["steps"]
        if (B, n, d, steps) in done:  # the same PyTorch run against another attnflow impl of the size
            med = done[(B, n, d, steps)]
            r["torch_median_s"], r["speedup_vs_torch"] = med, med / r["median_s"]
            continue
        x0, Q, K, V = (torch.as_tensor(np.asarray(a), dtype=torch.float32, device=dev)
                       for a in make_problem(B, n, d, seed=args.seed))
        dt = 0.01
        fused = n >= 4096
        rec = dict(B=B, n=n, d=d, steps=steps, path="sdpa" if fused else "bmm+softmax")

        def run():
            with torch.inference_mode():
                return _torch_euler(x0, Q, K, V, steps=steps, dt=dt, fused=fused)

        try:
            times = _torch_time(run, args.repeats, sync)
        except Exception as e:  # e.g. out of memory: say so, keep going
            rec["note"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0][:120]}"
            out.append(rec)
            print(f"  torch {B}x{n}x{d}: {rec['note']}")
            continue
        med = float(np.median(times))
        rate = steps * attention_flops(B, n, d) / med
        rec.update(median_s=med, times_s=times, ms_per_eval=1e3 * med / steps, tflops=rate / 1e12,
                   frac_matmul=rate / mm["float32"]["flops_per_s"], speedup_vs_torch=med / r["median_s"])
        r["torch_median_s"], r["speedup_vs_torch"] = med, med / r["median_s"]
        done[(B, n, d, steps)] = med
        out.append(rec)
        print(f"  torch {B}x{n}x{d} euler float32 [{rec['path']}]: {med:.3f} s, {rec['ms_per_eval']:.2f} ms/eval, "
              f"{100 * rec['frac_matmul']:.0f}% of matmul; attnflow is {med / r['median_s']:.2f}x faster")
        del x0, Q, K, V
        if dev.type == "cuda":
            torch.cuda.empty_cache()
    return out


def _torch_gradient_row(args) -> dict:
    """The gradient row of :func:`_gradient_row` in PyTorch autograd on the same device."""
    import numpy as np

    dev, why = _torch_device(args)
    if dev is None:
        return {"note": f"skipped: {why}"}
    import torch

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    B, n, d, steps = (2, 128, 16, 20) if args.cpu else (16, 1024, 64, 100)
    x0, Q, K, V = (torch.as_tensor(np.asarray(a), dtype=torch.float32, device=dev)
                   for a in make_problem(B, n, d, seed=args.seed))

    def loss(V):
        return (_torch_euler(x0, Q, K, V, steps=steps, dt=0.01) ** 2).sum()

    def fwd():
        with torch.no_grad():
            loss(V)

    def grad():
        Vg = V.clone().requires_grad_(True)
        loss(Vg).backward()

    t_fwd = min(_torch_time(fwd, args.repeats, sync))
    t_grad = min(_torch_time(grad, args.repeats, sync))
    return {"B": B, "n": n, "d": d, "steps": steps, "forward_s": t_fwd, "gradient_s": t_grad,
            "gradient_over_forward": t_grad / t_fwd}


# make_problem is imported inside main(); the row functions need it at module level
def make_problem(*a, **k):
    from benchmarks.common import make_problem as _mp

    return _mp(*a, **k)


if __name__ == "__main__":
    sys.exit(main())
