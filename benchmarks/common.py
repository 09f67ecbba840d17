"""Shared benchmark machinery: timing, flop counts, the machine's matmul rate, run folders.

Timing method (GUIDE.md, "Performance method"): one jit around everything, a warm-up
(compilation and one full run), ``block_until_ready``, then the median of repeats.
Ratios measured side by side in one run are the numbers to quote.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from attnflow.runs import atomic_write_text  # noqa: F401  (re-exported)
from attnflow.runs import git_commit as _git_commit

__all__ = [
    "make_problem",
    "attention_flops",
    "time_call",
    "matmul_rate",
    "machine_info",
    "make_run_dir",
    "atomic_write_text",
    "atomic_write_json",
]


def atomic_write_json(path, obj) -> None:
    """A benchmark record, written atomically as JSON with Python's ``NaN`` / ``Infinity`` kept: the records are read
    back by the benchmarks' own Python (``--redraw``, ``--refit``, the suite's report), which computes with those
    values. A job's run folder is standard JSON instead (:func:`attnflow.runs.atomic_write_json`).

    Example:
        >>> import tempfile, pathlib
        >>> target = pathlib.Path(tempfile.mkdtemp()) / "r.json"
        >>> atomic_write_json(target, {"ratio": float("nan")})
        >>> target.read_text()
        '{\\n  "ratio": NaN\\n}\\n'
    """
    from attnflow.runs import atomic_write_json as write

    write(path, obj, strict=False)


def make_problem(B: int, n: int, d: int, seed: int = 0):
    r"""The benchmark problem, float64 NumPy: x0 (B, n, d) ~ N(0, 1), Q, K ~ N(0, d^{-3/2})
    (scores of order 1), V = I + N(0, 1/(4d)); weights shared by the batch.

    Example:
        >>> [a.shape for a in make_problem(2, 5, 3)]
        [(2, 5, 3), (3, 3), (3, 3), (3, 3)]
    """
    rng = np.random.default_rng(seed)
    x0 = rng.standard_normal((B, n, d))
    Q = rng.standard_normal((d, d)) * d**-0.75
    K = rng.standard_normal((d, d)) * d**-0.75
    V = np.eye(d) + 0.5 * rng.standard_normal((d, d)) / np.sqrt(d)
    return x0, Q, K, V


def attention_flops(B: int, n: int, d: int, m: int | None = None) -> float:
    r"""Flops of one vector-field evaluation of the attention flow for B systems.

    Scores :math:`2n^2m`, attention times values :math:`2n^2d`, projections
    :math:`2nd(2m + d)` (GUIDE.md: about :math:`4n^2m + 2nd(2m+d)` for m = d);
    the n^2 exponentials are not counted.

    Example:
        >>> attention_flops(1, 2, 1)  # 2*4*(1+1) + 2*2*1*3
        28.0
    """
    m = d if m is None else m
    return float(B) * (2.0 * n * n * (m + d) + 2.0 * n * d * (2 * m + d))


def _block(out):
    try:
        import jax

        jax.block_until_ready(out)
    except Exception:  # non-JAX outputs are already computed
        pass
    return out


def time_call(
    fn: Callable[[], Any], *, repeats: int = 3, warmup: int = 1, budget_s: float | None = None
) -> dict:
    """Median wall time of ``fn()`` over repeats after ``warmup`` calls.

    With ``budget_s`` the number of repeats is reduced (down to 1) so that the timed
    calls take about that long, judged from the warm-up. Returns a dict with
    ``median_s``, ``times_s``, ``warmup_s`` and the last output under ``out``.

    Example:
        >>> r = time_call(lambda: sum(range(1000)), repeats=3)
        >>> len(r["times_s"]), r["out"]
        (3, 499500)
    """
    warm = []
    out = None
    for _ in range(warmup):
        t = time.perf_counter()
        out = _block(fn())
        warm.append(time.perf_counter() - t)
    if budget_s is not None and warm:
        repeats = int(max(1, min(repeats, budget_s // max(warm[-1], 1e-9))))
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = _block(fn())
        times.append(time.perf_counter() - t)
    return {"median_s": statistics.median(times), "times_s": times, "warmup_s": warm, "out": out}


def matmul_rate(dtype: str = "float32", n: int = 2048, repeats: int = 5) -> dict:
    """The machine's measured (jitted XLA) matmul rate in flop/s for n x n @ n x n.

    Example:
        >>> r = matmul_rate("float32", n=64, repeats=2)
        >>> r["flops_per_s"] > 0
        True
    """
    import jax
    import jax.numpy as jnp

    a = jax.random.normal(jax.random.key(0), (n, n), jnp.dtype(dtype))
    b = jax.random.normal(jax.random.key(1), (n, n), jnp.dtype(dtype))
    f = jax.jit(lambda a, b: a @ b)
    r = time_call(lambda: f(a, b), repeats=repeats, warmup=2)
    flops = 2.0 * n**3
    return {
        "dtype": dtype,
        "n": n,
        "median_s": r["median_s"],
        "flops_per_s": flops / r["median_s"],
        "best_flops_per_s": flops / min(r["times_s"]),
    }


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


#: instruction-set flags that decide XLA:CPU's and PyTorch's kernels (reported with every figure)
ISA_FLAGS = ("sse4_2", "avx", "avx2", "fma", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16", "amx_tile", "neon")


def _isa_flags() -> list[str]:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.lower().startswith(("flags", "features")):
                have = set(line.split(":", 1)[1].split())
                return [f for f in ISA_FLAGS if f in have]
    except OSError:
        pass
    return []


#: environment variables that change which kernels or how many threads XLA:CPU, PyTorch and BLAS use, or where the
#: attnflow command keeps its compiled programs: a record names those that were set
ENVIRONMENT_KEYS = ("XLA_FLAGS", "ATEN_CPU_CAPABILITY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
                    "ATTNFLOW_COMPILE_CACHE", "JAX_PLATFORMS", "JAX_ENABLE_X64")


def environment_settings() -> dict:
    """The variables of :data:`ENVIRONMENT_KEYS` set in this process, with their values.

    Example:
        >>> import os
        >>> from benchmarks.common import environment_settings
        >>> os.environ["ATEN_CPU_CAPABILITY"] = "avx2"
        >>> environment_settings()["ATEN_CPU_CAPABILITY"]
        'avx2'
        >>> del os.environ["ATEN_CPU_CAPABILITY"]
        >>> "ATEN_CPU_CAPABILITY" in environment_settings()
        False
    """
    return {k: os.environ[k] for k in ENVIRONMENT_KEYS if k in os.environ}


def settings_line(machine: dict) -> str | None:
    """The line a benchmark prints under its machine line when a record ran under settings of
    :data:`ENVIRONMENT_KEYS` (``machine["environment"]``), else None.

    Example:
        >>> from benchmarks.common import settings_line
        >>> settings_line({"environment": {"XLA_FLAGS": "--xla_cpu_max_isa=AVX2"}})
        'settings in force: XLA_FLAGS=--xla_cpu_max_isa=AVX2'
        >>> settings_line({"environment": {}}) is None
        True
    """
    settings = machine.get("environment") or {}
    return "settings in force: " + ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else None


def machine_info() -> dict:
    """Machine, devices and library versions, for the JSON record of a run; ``environment``: the settings of
    :data:`ENVIRONMENT_KEYS` in force (a run with ``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` says so)."""
    import jax

    versions = {"python": sys.version.split()[0]}
    for mod in ("jax", "jaxlib", "equinox", "diffrax", "numpy", "torch", "torchdiffeq", "attnflow"):
        try:
            versions[mod] = __import__(mod).__version__
        except Exception:
            versions[mod] = None
    try:
        mem_gib = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (ValueError, OSError, AttributeError):
        mem_gib = None
    return {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "hostname": platform.node(),
        "platform": platform.platform(),
        "cpu": _cpu_model(),
        "isa_flags": _isa_flags(),
        "cpu_count": os.cpu_count(),
        "memory_gib": mem_gib,
        "jax_backend": jax.default_backend(),
        "jax_devices": [str(d) for d in jax.devices()],
        "versions": versions,
        "git_commit": _git_commit(),  # attnflow.runs.git_commit, one implementation
        "environment": environment_settings(),
    }


def make_run_dir(out: str | os.PathLike | None, prefix: str = "bench") -> Path:
    """A fresh output folder (``results/<prefix>/<UTC timestamp>`` by default)."""
    if out is None:
        stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        out = Path("results") / prefix / stamp
    path = Path(out)
    path.mkdir(parents=True, exist_ok=True)
    return path


def add_record_arguments(parser, stem: str, *, redraw: bool = True) -> None:
    """The study scripts' outputs: ``--out`` (the JSON record, default ``<stem>.json``), ``--figure`` (default
    ``<stem>.png``) and, with ``redraw``, ``--redraw RECORD`` (draw the figure from a saved record and stop).

    Example:
        >>> import argparse
        >>> p = argparse.ArgumentParser()
        >>> add_record_arguments(p, "study")
        >>> a = p.parse_args([])
        >>> str(a.out), str(a.figure), a.redraw
        ('study.json', 'study.png', None)
    """
    parser.add_argument("--out", type=Path, default=Path(f"{stem}.json"), help="JSON record (default %(default)s)")
    parser.add_argument("--figure", type=Path, default=Path(f"{stem}.png"), help="figure (default %(default)s)")
    if redraw:
        parser.add_argument("--redraw", type=Path, default=None, help="draw the figure from this JSON record and stop")


def redrawn(args, draw) -> dict | None:
    """With ``--redraw RECORD`` (:func:`add_record_arguments`): ``draw(record, args.figure)`` from the saved JSON
    record and return the record (the script then stops); None without it.

    Example:
        >>> import argparse
        >>> redrawn(argparse.Namespace(redraw=None), print) is None
        True
    """
    if args.redraw is None:
        return None
    record = json.loads(Path(args.redraw).read_text())
    draw(record, args.figure)
    return record
