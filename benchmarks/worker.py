"""Run the non-JAX baselines of the suite in their own process (no JAX threads around).

Measured finding (see NOTES.md): once XLA's CPU thread pool has run in a process, PyTorch's
OpenMP threads in the same process slow down by up to 500x on a 2-core machine. Each
framework is therefore timed in a process where it is alone, as its users would run it.
The suite starts one worker (same process group) and sends it one call at a time, so that
baseline and attnflow repeats interleave (robust to load changing on a shared machine).

Protocol (``python -m benchmarks.worker``): one JSON object per stdin line,
``{"task": {...}, "out": "path.npy" or null}``; answers one JSON line
``{"seconds": wall time of the call, "nfe": evaluations or null}``.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks import baselines  # noqa: E402
from benchmarks.common import make_problem  # noqa: E402


def make_call(task: dict):
    """A zero-argument callable running one baseline task -> (final state, nfe or None)."""
    B, n, d = task["size"]
    x0, Q, K, V = make_problem(B, n, d, seed=task["seed"])
    steps, dt, t1 = task["steps"], task["dt"], task["t1"]
    x32 = x0.astype(np.float32)
    name = task["name"]
    if name == "numpy euler":
        return lambda: (baselines.numpy_euler(x32, Q, K, V, dt=dt, num_steps=steps), None)
    if name == "torch euler (bmm)":
        return lambda: (baselines.torch_euler(x32, Q, K, V, dt=dt, num_steps=steps), None)
    if name == "torchdiffeq dopri5 adaptive":
        return lambda: baselines.torchdiffeq_solve(x32, Q, K, V, t1=t1, rtol=task["rtol"], atol=task["atol"])
    if name == "python per-token loop":
        return lambda: (baselines.python_loop_euler(x0, Q, K, V, dt=dt, num_steps=steps), None)
    raise ValueError(f"unknown baseline task {name!r}")


def serve(stdin=sys.stdin, stdout=sys.stdout) -> None:
    calls: dict[str, object] = {}
    for line in stdin:
        if not line.strip():
            continue
        msg = json.loads(line)
        key = json.dumps(msg["task"], sort_keys=True)
        if key not in calls:
            calls = {key: make_call(msg["task"])}  # keep one problem in memory at a time
        t = time.perf_counter()
        out, nfe = calls[key]()
        seconds = time.perf_counter() - t
        if msg.get("out"):
            np.save(msg["out"], np.asarray(out))
        stdout.write(json.dumps({"seconds": seconds, "nfe": nfe}) + "\n")
        stdout.flush()


if __name__ == "__main__":
    for _mod in ("torch", "torchdiffeq"):  # one-time import cost outside every timed call
        try:
            __import__(_mod)
        except ImportError:
            pass
    serve()
