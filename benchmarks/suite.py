r"""The attnflow benchmark suite (``make bench``): attnflow against careful baselines.

One process runs every row side by side, prints a table and writes a run folder
(``results/bench/<UTC stamp>/`` unless ``--out``): ``config.json`` (resolved options),
``summary.json`` (machine, versions, git commit, seed, matmul rates, every row,
headline ratios), ``table.csv`` (one row per measurement), ``table.md`` and
``throughput.png``.

Problem (shared weights, raw flow of SPEC 1.1, t in [0, 1], 100 steps of dt = 0.01):
tokens x0 ~ N(0, 1) in R^d, Q, K ~ N(0, d^{-3/2}) (scores of order 1),
V = I + N(0, 1/(4d)). Flops per evaluation: :func:`benchmarks.common.attention_flops`;
Euler takes 1 evaluation per step, Tsit5 and dopri5 6 (FSAL). The attnflow rows batch the
systems with :func:`attnflow.vmap_systems` (a vmap, run in cache-sized groups on CPU), the
library's way of running independent systems, as ``simulate(batch=...)`` does.

Run: ``python -m benchmarks.suite [--quick] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import csv
import io
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

if __package__ in (None, ""):  # allow `python benchmarks/suite.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import attnflow  # noqa: E402,F401
import equinox as eqx  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

# the benchmark script runs float64 rows next to float32 ones: inside main()'s jax.enable_x64(True),
# so that importing this module (as the tests do) leaves the caller's float64 mode alone

from attnflow import AttentionFlow, vmap_systems  # noqa: E402
from attnflow import select_impl  # noqa: E402
from attnflow.dynamics import FoldedBatch  # noqa: E402
from attnflow.integrate import solve_euler, solve_ode  # noqa: E402
from benchmarks import baselines  # noqa: E402
from benchmarks.common import (  # noqa: E402
    atomic_write_json,
    atomic_write_text,
    attention_flops,
    machine_info,
    make_problem,
    make_run_dir,
    matmul_rate,
    settings_line,
)

FULL_SIZES = [(64, 256, 128), (16, 1024, 64), (1, 4096, 64), (1, 100_000, 64)]
QUICK_SIZES = [(2, 64, 16), (1, 300, 16)]
TINY_SIZE = (1, 64, 32)  # where the per-token Python loop finishes
TOL = {"float32": (1e-5, 1e-6), "float64": (1e-9, 1e-11)}
EVALS_PER_STEP = {"euler": 1, "tsit5": 6, "dopri5": 6}


# -- attnflow runners: one jit around the whole (batched) solve ----------------------------


def attnflow_runner(method: str, *, steps: int, t1: float, impl: str = "auto", adaptive=False, rtol=None, atol=None):
    """A jitted ``(x0, Q, K, V) -> (x(t1), accepted steps)`` for the batched raw flow."""

    def run(x0, Q, K, V):
        dyn = AttentionFlow(Q, K, V, attention_impl=impl)
        if method == "euler":
            one = lambda x: solve_euler(dyn, x, dt=t1 / steps, num_steps=steps, save_every=steps).ys[-1]
            return vmap_systems(one)(x0), jnp.asarray(steps)
        if adaptive:  # shared weights: fold the batch into one state (as torchdiffeq does)
            traj = solve_ode(FoldedBatch(dyn), x0, t0=0.0, t1=t1, solver=method, rtol=rtol, atol=atol,
                             adaptive=True, max_steps=4096)
            return traj.ys[-1], traj.num_steps
        one = lambda x: solve_ode(dyn, x, t0=0.0, t1=t1, solver=method, dt0=t1 / steps, adaptive=False,
                                  max_steps=steps).ys[-1]
        return vmap_systems(one)(x0), jnp.asarray(steps)

    return jax.jit(eqx.debug.assert_max_traces(run, max_traces=1))


@dataclass
class Row:
    size: tuple
    name: str
    dtype: str
    fn: Callable[[], tuple] | None  # () -> (final state as array, steps, evals or None)
    steps_hint: int | None = None
    note: str = ""
    group: str = "throughput"
    task: dict | None = None  # a baseline run by benchmarks.worker in its own process
    compile: Callable[[], None] | None = None  # AOT compilation of a JAX row


def _j(a, dtype):
    return jnp.asarray(a, jnp.dtype(dtype))


def build_rows(size, args, problem) -> list[Row]:
    B, n, d = size
    x0, Q, K, V = problem
    steps = args.large_steps if n >= 50_000 else args.steps
    t1 = args.t1 * steps / args.steps  # keep dt fixed
    rows: list[Row] = []
    auto = select_impl(n, n)
    dense_bytes = 4.0 * B * n * n
    dense_fits = dense_bytes < 0.25 * args.memory_gib * 2**30

    def jax_row(name, method, dtype, impl="auto", adaptive=False, group="throughput", note=""):
        rtol, atol = TOL[dtype]
        f = attnflow_runner(method, steps=steps, t1=t1, impl=impl, adaptive=adaptive, rtol=rtol, atol=atol)
        xs = [_j(a, dtype) for a in (x0, Q, K, V)]

        compiled = []

        def compile_():  # ahead-of-time: the first call is then a clean measurement
            compiled.append(f.lower(*xs).compile())

        def call():
            out, k = (compiled[0] if compiled else f)(*xs)
            return out, k, None

        rows.append(Row(size, name, dtype, call, steps_hint=None if adaptive else steps, note=note, group=group,
                        compile=compile_))

    picked = {"dense": "dense", "chunked": "chunked"}[auto]
    jax_row(f"attnflow euler [{picked}]", "euler", "float32")
    other = "dense" if auto == "chunked" else "chunked"
    if other == "chunked" or dense_fits:
        jax_row(f"attnflow euler [{other}]", "euler", "float32", impl=other, group="impl")
    else:
        rows.append(Row(size, "attnflow euler [dense]", "float32", None, note=f"skipped: n x n scores need {dense_bytes/2**30:.0f} GiB"))
    if n >= 50_000:
        return rows  # the largest size: the stepper only (see NOTES.md)
    jax_row(f"attnflow euler [{picked}]", "euler", "float64")
    jax_row("attnflow tsit5 fixed", "tsit5", "float32")
    jax_row("attnflow tsit5 fixed", "tsit5", "float64")
    jax_row("attnflow tsit5 adaptive", "tsit5", "float32", adaptive=True, group="accuracy")
    jax_row("attnflow dopri5 adaptive", "dopri5", "float32", adaptive=True, group="accuracy")
    jax_row("attnflow tsit5 adaptive", "tsit5", "float64", adaptive=True, group="accuracy")

    dt = t1 / steps
    rtol, atol = TOL["float32"]

    def task_row(name, dtype="float32", group="throughput"):
        task = dict(name=name, size=list(size), seed=args.seed, steps=steps, dt=dt, t1=t1, rtol=rtol, atol=atol,
                    repeats=args.repeats, budget=args.budget)
        rows.append(Row(size, name, dtype, None, steps_hint=steps, group=group, task=task))

    if dense_fits:
        task_row("numpy euler")
    skipped = lambda package: "skipped: --no-torch" if not args.torch else f"skipped: {package} not installed"

    if args.torch and baselines.have_torch():
        task_row("torch euler (bmm)")
    else:
        rows.append(Row(size, "torch euler (bmm)", "float32", None, note=skipped("torch")))
    if args.torch and baselines.have_torchdiffeq():
        task_row("torchdiffeq dopri5 adaptive", group="accuracy")
    else:
        rows.append(Row(size, "torchdiffeq dopri5 adaptive", "float32", None, note=skipped("torchdiffeq")))
    if n <= args.loop_max_n:
        task_row("python per-token loop", dtype="float64")
    return rows


class Worker:
    """The baseline process (``benchmarks.worker``), one call at a time over a pipe."""

    def __init__(self, run_dir: Path):
        import subprocess
        import tempfile

        self.tmp = tempfile.TemporaryDirectory(dir=run_dir, prefix=".worker")
        root = Path(__file__).resolve().parents[1]
        import os

        env = dict(os.environ)
        # OpenMP threads that spin-wait collapse (up to 500x) when a shared machine is
        # oversubscribed; passive waiting costs nothing when it is not (NOTES.md).
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.worker"], cwd=root, text=True, env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        import atexit

        atexit.register(self.close)

    def __call__(self, task: dict, keep: bool):
        import json

        out = str(Path(self.tmp.name) / "out.npy") if keep else None
        self.proc.stdin.write(json.dumps({"task": task, "out": out}) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the baseline worker stopped (exit code {self.proc.wait()}) on {task['name']!r}")
        ans = json.loads(line)
        return ans["seconds"], ans["nfe"], (np.load(out) if keep else None)

    def close(self):
        if self.proc.poll() is None:
            self.proc.stdin.close()
            self.proc.wait()
        self.tmp.cleanup()


def _loadavg():
    try:
        import os

        return list(os.getloadavg())
    except (OSError, AttributeError):
        return None


def _timed(fn) -> float:
    t = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t


def reference_solution(problem, t1):
    """float64 Tsit5 at rtol = atol = 1e-11: the accuracy yardstick."""
    x0, Q, K, V = problem
    f = attnflow_runner("tsit5", steps=1, t1=t1, adaptive=True, rtol=1e-11, atol=1e-11)
    out, _ = f(*(_j(a, "float64") for a in (x0, Q, K, V)))
    return np.asarray(out)


def run_suite(args) -> dict:
    run_dir = make_run_dir(args.out)
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    if args.tiny and not args.quick:
        sizes = [TINY_SIZE] + list(sizes)
    config = {k: (list(map(list, v)) if k == "sizes" and v else v) for k, v in vars(args).items()}
    config["resolved_sizes"] = [list(s) for s in sizes]
    atomic_write_json(run_dir / "config.json", config)
    info = machine_info()
    info["loadavg_start"] = _loadavg()
    if info["loadavg_start"] and info["loadavg_start"][0] > (info["cpu_count"] or 1):
        print(f"WARNING: load average {info['loadavg_start']} exceeds the {info['cpu_count']} cores: "
              "other processes compete for the CPU; absolute times are unreliable, ratios less so.")
    print(f"attnflow benchmark suite -> {run_dir}\n{info['cpu']} x{info['cpu_count']}, jax {info['versions']['jax']} "
          f"({info['jax_backend']}), torch {info['versions']['torch']}")
    if args.torch and not baselines.have_torch():
        print("note: torch is not installed: the PyTorch / torchdiffeq rows are skipped (pip install '.[bench]').")

    mm = {dt: matmul_rate(dt, n=args.matmul_n) for dt in ("float32", "float64")}
    print("matmul rate: " + ", ".join(f"{dt} {r['flops_per_s']/1e9:.1f} GF/s" for dt, r in mm.items()))

    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover
        tqdm = lambda it, **k: it  # noqa: E731

    records = []
    t_start = time.perf_counter()

    def finish(rec, row, r, out, k, nfe, outputs):
        B, n, d = row.size
        k = None if k is None else int(np.asarray(k).max())
        method_key = row.name.split()[1] if row.name.startswith("attnflow") else (
            "dopri5" if "dopri5" in row.name else "euler")
        if nfe is None:
            nfe = EVALS_PER_STEP[method_key] * k + (1 if method_key != "euler" else 0)
        flops = nfe * attention_flops(B, n, d)
        rate = flops / r["median_s"]
        rec.update(
            steps=k, evals=int(nfe), median_s=r["median_s"], times_s=r["times_s"], warmup_s=r["warmup_s"],
            repeats=len(r["times_s"]), per_eval_ms=1e3 * r["median_s"] / nfe, gflops=rate / 1e9,
            frac_matmul=rate / mm[row.dtype]["flops_per_s"],
        )
        if not np.all(np.isfinite(np.asarray(out))):
            rec["note"] = (rec["note"] + " NON-FINITE OUTPUT").strip()
        outputs.append((rec, method_key, np.asarray(out, np.float64)))
    worker = Worker(run_dir)
    for size in sizes:
        B, n, d = size
        problem = make_problem(B, n, d, seed=args.seed)
        steps = args.large_steps if n >= 50_000 else args.steps
        t1 = args.t1 * steps / args.steps
        rows = build_rows(size, args, problem)
        ref = None
        if any(("adaptive" in r.name or "fixed" in r.name) and r.fn is not None for r in rows):
            ref = reference_solution(problem, t1)
        outputs = []
        # warm-up every row (compile + one call; keeps the output), then interleaved
        # repeats: round j times every row that still has repeats left, so that all rows
        # sample the same (shared-machine) load; repeats shrink to the time budget.
        live = []
        for row in tqdm(rows, desc=f"B={B} n={n} d={d} warm-up", leave=False):
            rec = {"B": B, "n": n, "d": d, "method": row.name, "dtype": row.dtype, "group": row.group, "note": row.note}
            records.append(rec)
            if row.fn is None and row.task is None:
                continue
            if row.task is not None:
                rec["note"] = "own process"
                sec, nfe, out = worker(row.task, keep=True)
                call = lambda row=row: worker(row.task, keep=False)[0]
                k = row.steps_hint if nfe is None else None
            else:
                t = time.perf_counter()
                row.compile()
                rec["compile_s"] = time.perf_counter() - t
                t = time.perf_counter()
                out, k, nfe = jax.block_until_ready(row.fn())
                sec = time.perf_counter() - t
                call = lambda row=row: _timed(row.fn)
            # A first call that is long compared with the budget is itself one timed sample
            # (JAX rows are compiled ahead of time; baseline imports happen at worker start),
            # short ones are a discarded warm-up.
            reps = 1 if n >= 50_000 else int(max(1, min(args.repeats, args.budget // max(sec, 1e-9))))
            keep_first = sec > args.budget / 3 or n >= 50_000
            live.append(dict(rec=rec, row=row, call=call, reps=reps, times=[sec] if keep_first else [],
                             warm=[] if keep_first else [sec], out=out, k=k, nfe=nfe))
        for j in tqdm(range(max((e["reps"] for e in live), default=0)), desc=f"B={B} n={n} d={d} repeats", leave=False):
            for e in live:
                if len(e["times"]) < e["reps"]:
                    e["times"].append(e["call"]())
        for e in live:
            r = {"median_s": statistics.median(e["times"]), "times_s": e["times"], "warmup_s": e["warm"]}
            finish(e["rec"], e["row"], r, e["out"], e["k"], e["nfe"], outputs)
        # errors: ODE rows against the exact-flow reference, Euler rows against attnflow's
        # float64 Euler (the same discrete map: a correctness check of every baseline)
        euler_ref = next((o for rec, mk, o in outputs if mk == "euler" and rec["dtype"] == "float64"
                          and rec["method"].startswith("attnflow")), None)
        for rec, mk, o in outputs:
            target, label = (euler_ref, "f64 euler") if mk == "euler" else (ref, "f64 ode")
            if target is not None:
                rec["rel_err"] = float(np.abs(o - target).max() / np.abs(target).max())
                rec["err_ref"] = label
    worker.close()
    info["loadavg_end"] = _loadavg()
    mm_end = {dt: matmul_rate(dt, n=args.matmul_n) for dt in ("float32", "float64")}
    elapsed = time.perf_counter() - t_start

    rescore(records, mm, mm_end)
    summary = {
        "machine": info,
        "seed": args.seed,
        "steps": args.steps,
        "t1": args.t1,
        "matmul_rate_start": mm,
        "matmul_rate_end": mm_end,
        "rows": records,
        "headline": headline(records),
        "elapsed_s": elapsed,
        "run_dir": str(run_dir),
    }
    if args.models:  # the real-model forward pass against PyTorch eager (benchmarks/bench_models.py)
        from benchmarks import bench_models

        summary["models"] = bench_models.run(32 if args.quick else 128, 3 if args.quick else 20, args.torch)
        print(bench_models.format_result(summary["models"]))
    atomic_write_json(run_dir / "summary.json", summary)
    write_tables(run_dir, records)
    plot(run_dir, records)
    print(format_table(records))
    print(format_headline(summary["headline"]))
    print(f"matmul rate at the end: " + ", ".join(f"{dt} {r['flops_per_s']/1e9:.1f} GF/s" for dt, r in mm_end.items()))
    print(f"machine: {info['cpu']} x{info['cpu_count']} ({', '.join(info.get('isa_flags') or []) or 'ISA flags unknown'}); "
          f"load average {info['loadavg_start']} at start, {info['loadavg_end']} at end. These ratios hold for this "
          "machine and load only.")
    if settings := settings_line(info):
        print(settings)
    print(f"total {elapsed:.0f} s; results in {run_dir}")
    return summary


def rescore(records, mm_start, mm_end) -> None:
    """Fractions against the larger of the matmul rates measured at the start and the end
    (conservative on a machine whose load changes); the start-rate fraction is kept."""
    for r in records:
        if "gflops" in r:
            best = max(mm_start[r["dtype"]]["flops_per_s"], mm_end[r["dtype"]]["flops_per_s"])
            r["frac_matmul_start_rate"] = r["gflops"] * 1e9 / mm_start[r["dtype"]]["flops_per_s"]
            r["frac_matmul"] = r["gflops"] * 1e9 / best


def report(run_dir) -> dict:
    """Re-read a run folder's summary.json, rescore, rewrite its tables, print them."""
    import json

    run_dir = Path(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    rescore(summary["rows"], summary["matmul_rate_start"], summary["matmul_rate_end"])
    summary["headline"] = headline(summary["rows"])
    atomic_write_json(run_dir / "summary.json", summary)
    write_tables(run_dir, summary["rows"])
    print(format_table(summary["rows"]))
    print(format_headline(summary["headline"]))
    return summary


def _find(records, B, n, d, method, dtype="float32"):
    for r in records:
        if (r["B"], r["n"], r["d"], r["method"], r["dtype"]) == (B, n, d, method, dtype) and "median_s" in r:
            return r
    return None


def ratio_spread(slow: dict, fast: dict) -> dict:
    """Per-round ratios slow/fast of two rows timed in the same interleaved rounds: the median,
    the min and the max (the spread a reader needs to judge a ratio on a shared machine)."""
    a, b = list(slow.get("times_s") or []), list(fast.get("times_s") or [])
    k = min(len(a), len(b))
    if k == 0:
        return {}
    r = sorted(x / y for x, y in zip(a[-k:], b[-k:]))
    return {"median": statistics.median(r), "min": r[0], "max": r[-1], "rounds": k}


def headline(records) -> list[dict]:
    """Ratios that have speed targets (benchmarks/RESULTS.md), per size (only where both rows ran), each with the
    spread of its per-round ratios (``spread``)."""
    out = []
    for B, n, d in sorted({(r["B"], r["n"], r["d"]) for r in records}):
        eul = next((r for r in records if (r["B"], r["n"], r["d"]) == (B, n, d) and r["group"] == "throughput"
                    and r["method"].startswith("attnflow euler") and r["dtype"] == "float32" and "median_s" in r), None)
        if eul is None:
            continue
        h = {"size": [B, n, d], "euler_f32_frac_matmul": eul["frac_matmul"]}
        for key, name in (("vs_torch", "torch euler (bmm)"), ("vs_numpy", "numpy euler"),
                          ("vs_python_loop", "python per-token loop")):
            other = _find(records, B, n, d, name, "float64" if "loop" in name else "float32")
            if other:
                h[f"euler_speedup_{key}"] = other["median_s"] / eul["median_s"]
                h.setdefault("spread", {})[f"euler_speedup_{key}"] = ratio_spread(other, eul)
        ts, tq = _find(records, B, n, d, "attnflow tsit5 adaptive"), _find(records, B, n, d, "torchdiffeq dopri5 adaptive")
        if ts and tq:
            h["tsit5_vs_torchdiffeq_time_ratio"] = tq["median_s"] / ts["median_s"]
            h.setdefault("spread", {})["tsit5_vs_torchdiffeq_time_ratio"] = ratio_spread(tq, ts)
            h["tsit5_vs_torchdiffeq_per_eval_ratio"] = tq["per_eval_ms"] / ts["per_eval_ms"]
            h["errors"] = {"attnflow tsit5": ts.get("rel_err"), "torchdiffeq dopri5": tq.get("rel_err")}
        dp = _find(records, B, n, d, "attnflow dopri5 adaptive")
        if dp and tq:
            h["dopri5_vs_torchdiffeq_time_ratio"] = tq["median_s"] / dp["median_s"]
        out.append(h)
    return out


COLUMNS = ["B", "n", "d", "method", "dtype", "steps", "evals", "repeats", "median_s", "per_eval_ms", "gflops",
           "frac_matmul", "rel_err", "err_ref", "note"]


def _fmt(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e4 else f"{v:.4g}"
    return str(v)


def format_table(records) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for r in records:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in COLUMNS) + " |")
    return "\n".join(lines)


def format_headline(h) -> str:
    lines = ["", "Headline ratios (higher is better for attnflow):"]
    for e in h:
        parts = [f"(B, n, d) = {tuple(e['size'])}: euler f32 at {100 * e['euler_f32_frac_matmul']:.0f}% of matmul rate"]
        for k, v in e.items():
            if k.endswith("ratio") or "speedup" in k:
                sp = e.get("spread", {}).get(k) or {}
                rng = f" [{sp['min']:.2f}-{sp['max']:.2f} over {sp['rounds']} rounds]" if sp else ""
                parts.append(f"{k} {v:.2f}x{rng}")
        if "errors" in e:
            parts.append("errors " + ", ".join(f"{k}: {v:.2g}" for k, v in e["errors"].items() if v is not None))
        lines.append("; ".join(parts))
    return "\n".join(lines)


def write_tables(run_dir: Path, records) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, extrasaction="ignore")
    w.writeheader()
    for r in records:
        w.writerow({c: r.get(c) for c in COLUMNS})
    atomic_write_text(run_dir / "table.csv", buf.getvalue())
    atomic_write_text(run_dir / "table.md", format_table(records) + "\n")


def plot(run_dir: Path, records) -> None:
    from attnflow import plot as ap

    done = [r for r in records if "gflops" in r]
    if not done:
        return
    labels = [f"{r['method']} {r['dtype'][-2:]} ({r['B']},{r['n']},{r['d']})" for r in done]
    ax = ap.bars_with_spread([100 * r["frac_matmul"] for r in done], labels=labels, reference=100.0,
                             reference_label="measured matmul rate", value_label="% of measured matmul rate (same dtype)",
                             category_label="method, dtype (B, n, d)", title="attnflow benchmark suite")
    ap.save(ax.figure, run_dir / "throughput.png", dpi=120, close=True)


def parse_sizes(text: str):
    return [tuple(int(float(v)) for v in s.lower().split("x")) for s in text.split(",") if s]


def main(argv=None) -> dict:
    with jax.enable_x64(True):
        return _main(argv)


def _main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="tiny sizes and few steps (a smoke test, seconds)")
    p.add_argument("--sizes", type=parse_sizes, default=None, help="e.g. 64x256x128,16x1024x64 (B x n x d)")
    p.add_argument("--steps", type=int, default=100)
    p.add_argument("--t1", type=float, default=1.0, help="end time of the 100-step runs (dt = t1/steps)")
    p.add_argument("--large-steps", type=int, default=1, help="steps at n >= 50000 (100 would take ~25 min per row)")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--budget", type=float, default=15.0, help="seconds of timed repeats per row (repeats shrink to fit)")
    p.add_argument("--no-tiny", dest="tiny", action="store_false", help="skip the small size of the Python-loop row")
    p.add_argument("--loop-max-n", type=int, default=64, help="largest n of the per-token Python loop")
    p.add_argument("--no-torch", dest="torch", action="store_false")
    p.add_argument("--no-models", dest="models", action="store_false", help="skip the MiniLM forward-pass rows")
    p.add_argument("--matmul-n", type=int, default=2048)
    p.add_argument("--memory-gib", type=float, default=24.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None)
    p.add_argument("--report", default=None, metavar="RUN_DIR", help="only re-read and re-print a finished run")
    p.add_argument("--no-gradients", dest="gradients", action="store_false",
                   help="skip the gradient benchmark (benchmarks/bench_gradients.py -> RUN_DIR/gradients.json)")
    p.add_argument("--no-phase", dest="phase", action="store_false",
                   help="skip the phase-diagram benchmark against its PyTorch baseline (benchmarks/bench_phase.py "
                        "-> RUN_DIR/phase.json)")
    p.add_argument("--no-meanfield", dest="meanfield", action="store_false",
                   help="skip the large-n benchmark on the circle and S^2 (benchmarks/bench_meanfield.py "
                        "-> RUN_DIR/meanfield.json)")
    p.add_argument("--no-noise", dest="noise", action="store_false",
                   help="skip the stochastic layer against the deterministic one (benchmarks/bench_noise.py "
                        "-> RUN_DIR/noise.json)")
    p.add_argument("--no-sphere", dest="sphere", action="store_false",
                   help="skip the S^2 and S^3 paths against the tiled direct sum (benchmarks/bench_sphere_path.py "
                        "-> RUN_DIR/sphere.json, sphere-s3.json)")
    args = p.parse_args(argv)
    if args.report:
        return report(args.report)
    if args.quick:
        args.steps, args.repeats, args.matmul_n, args.budget = min(args.steps, 5), 1, 256, 1.0
    summary = run_suite(args)
    if args.gradients:
        from benchmarks import bench_gradients

        sizes = ["--n", "32", "--d", "8", "--steps", "5", "--repeats", "1", "--together", "0"] if args.quick else []
        sizes += [] if args.torch else ["--no-torch"]
        summary["gradients"] = bench_gradients.main(sizes + ["--out", str(Path(summary["run_dir"]) / "gradients.json")])
    # whole-job benchmarks, each writing its own JSON into the run folder
    if args.phase:
        from benchmarks import bench_phase

        summary["phase"] = bench_phase.run(args.quick, args.torch, Path(summary["run_dir"]) / "phase.json")
    if args.meanfield:
        from benchmarks import bench_meanfield

        summary["meanfield"] = bench_meanfield.run(args.quick, args.torch, Path(summary["run_dir"]) / "meanfield.json")
    if args.noise:
        from benchmarks import bench_noise

        summary["noise"] = bench_noise.main((["--quick"] if args.quick else [])
                                            + ["--out", str(Path(summary["run_dir"]) / "noise.json")])
    if args.sphere:
        from benchmarks import bench_sphere_path

        summary["sphere"] = bench_sphere_path.main((["--quick"] if args.quick else [])
                                                   + ["--out", str(Path(summary["run_dir"]) / "sphere.json")])
        # S^3 (attnflow.kernels.hypersphere) at 10^5 tokens against the tiled sum in d = 4, one direct call
        summary["sphere_s3"] = bench_sphere_path.main(
            ["--d", "4", "--direct-repeats", "1"] + (["--quick"] if args.quick else ["--sizes", "100000"])
            + ["--out", str(Path(summary["run_dir"]) / "sphere-s3.json")])
    return summary


if __name__ == "__main__":
    main()
