"""Run the non-JAX baselines of the suite in their own process (no JAX threads around).

Measured finding (see NOTES.md): once XLA's CPU thread pool has run in a process, PyTorch's
OpenMP threads in the same process slow down by up to 500x on a 2-core machine. Each
framework is therefore timed in a process where it is alone, as its users would run it;
the suite starts this worker (same process group) once per problem size.

Usage: ``python -m benchmarks.worker TASKS.json RESULT.npz`` (written by the suite).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import baselines  # noqa: E402
from benchmarks.common import make_problem, time_call  # noqa: E402


def run_task(task: dict) -> tuple[dict, np.ndarray]:
    """Time one baseline task; returns (timing record, final state)."""
    B, n, d = task["size"]
    x0, Q, K, V = make_problem(B, n, d, seed=task["seed"])
    steps, dt, t1 = task["steps"], task["dt"], task["t1"]
    x32 = x0.astype(np.float32)
    name = task["name"]
    if name == "numpy euler":
        fn = lambda: (baselines.numpy_euler(x32, Q, K, V, dt=dt, num_steps=steps), None)
    elif name == "torch euler (bmm)":
        fn = lambda: (baselines.torch_euler(x32, Q, K, V, dt=dt, num_steps=steps), None)
    elif name == "torchdiffeq dopri5 adaptive":
        fn = lambda: baselines.torchdiffeq_solve(x32, Q, K, V, t1=t1, rtol=task["rtol"], atol=task["atol"])
    elif name == "python per-token loop":
        fn = lambda: (baselines.python_loop_euler(x0, Q, K, V, dt=dt, num_steps=steps), None)
    else:
        raise ValueError(f"unknown baseline task {name!r}")
    r = time_call(fn, repeats=task["repeats"], warmup=1, budget_s=task["budget"])
    out, nfe = r["out"]
    rec = {"median_s": r["median_s"], "times_s": r["times_s"], "warmup_s": r["warmup_s"], "nfe": nfe}
    return rec, np.asarray(out)


def main(argv=None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    tasks = json.loads(Path(argv[0]).read_text())
    records, arrays = [], {}
    for i, task in enumerate(tasks):
        rec, out = run_task(task)
        records.append(rec)
        arrays[f"out{i}"] = out
    np.savez(argv[1], records=np.array(json.dumps(records)), **arrays)


if __name__ == "__main__":
    main()
