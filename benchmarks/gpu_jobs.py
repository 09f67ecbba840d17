r"""The project's jobs on a GPU, timed whole (about 5 minutes on an H200; ``--cpu`` checks the script on CPU).

    PYTHONPATH=. python benchmarks/gpu_jobs.py --out results/gpu_jobs      # on a machine with an NVIDIA GPU
    PYTHONPATH=. python benchmarks/gpu_jobs.py --small --out DIR           # the same rows at toy sizes on the GPU
    PYTHONPATH=. python benchmarks/gpu_jobs.py --cpu --out DIR             # toy sizes on CPU (about 2 minutes)

Where :mod:`benchmarks.gpu` times kernels, this script times what a user runs. Every row runs in a child
process under its own time limit (a compile cannot be interrupted inside a process; the child's whole process
group is killed at the limit), and every row is written to ``summary.json`` and ``table.md`` under ``--out`` as
it finishes, so an interrupted run keeps every finished row; a row that fails or runs out of time says so in
its ``note`` and the script goes on. ``--budget`` seconds (default 330 on a GPU) bound the whole run: a row
starts only with its minimum time left and gets at most what is left (a skipped row says so). Rows, in their
default order (``--rows`` picks and orders them; ``phase`` and ``sweep`` name their groups):

1. **The phase job as whole commands** (``python -m attnflow phase CONFIG --out DIR``: imports, compilation,
   chunk files, tables, figures; the configs of :func:`benchmarks.bench_phase._config_text`, tokens on the
   sphere, Q = K = V = I, n = 32, t1 = 30, dt = 0.1 (300 layers), 200 checkpoints, float64, threshold
   0.999; ``[run] chunk_size`` = ``--phase-chunk``, 36864 (beta, system) pairs on a GPU: it divides both
   diagrams' pair counts, so every chunk runs one compiled program):

   * ``phase-default``: the peers' diagram, 2048 systems x 90 betas (0.1 .. 9), limit 150 s; run three
     times (min / median / max) when the first run takes under ``--repeat-under`` seconds (30);
   * ``phase-torch``: ``benchmarks/phase_torch.py --device cuda`` (its Python loop over beta, ``torch.bmm``,
     float64) on every 10th beta of that diagram from the job's own start clouds
     (:func:`benchmarks.bench_phase._start_clouds`, :func:`~benchmarks.bench_phase._torch_cmd`), limit 150 s;
     its time scaled by 10 two ways: the whole command (bench_phase's rule) and the command's fixed part once
     plus 10 times its loop (its own printed time); the ratio to ``phase-default``, and the largest
     difference between the two programs' per-beta means;
   * ``phase-10x``: 20480 systems x 90 betas, limit 240 s;
   * ``phase-d128``: 256 systems x 10 betas at d = 128, limit 60 s.

   Each: wall seconds, the times at which the job's chunk files appeared (compile and first chunk, the
   interval between chunks, the tail of tables, fits, figures and per-system files after the last one; the
   job keeps no timing of its own, see ``job_timing``), the command's stretches stamped from inside by
   :mod:`benchmarks.phase_timeline`'s hooks (start-up, trace and lowering, XLA compile, computation, tables and
   figures; the median time between two chunks' computations and a chunk file's write, which runs behind the
   next chunk), system-layers per second, and the ratio to the
   2-core CPU's time of the same command (:data:`PHASE_CPU_SECONDS`; the 10x row against 10 times the
   default's, extrapolated). Target: the default diagram >= 20x the 2-core CPU. The output folders go to a
   temporary folder (``--work``) and are deleted after each command (the 10x diagram writes about 30 GB).
2. **The dynamics sweep's chunk function** (:func:`attnflow.sweep._dynamics.make_chunk_fn`: spectral checks
   in float64, Ginibre V, Q^T K = I, float32 Euler layers of the exact discrete rescaling, classification)
   with the eig route ``--sweep-routes`` (default ``host``: ``numpy.linalg.eig`` through a host callback, the
   layers on the device; on the H200 the ``device`` route was slower than a 2-core CPU and its d = 128 compile
   ran past two minutes), at ``sweep-d32`` (256 systems, d = 32, n = 64, 10 layers) and ``sweep-d128`` (1024
   systems, d = 128, n = 256, 20 layers), limit 60 s each: compile + first call apart from the best of
   (up to) three calls, systems/s, how many ``numpy.linalg.eig`` calls the host route made (none: eig ran elsewhere),
   and the ratio to the 2-core CPU's systems/s (:data:`SWEEP_CPU_SYSTEMS_PER_S`).
3. **Mean field** (``meanfield``, one child, limit 90 s; :func:`benchmarks.bench_meanfield.attnflow_row`,
   Euler layers of :func:`attnflow.dynamics.sphere_flow`, beta = 4, dt = 0.1): the Fourier path on the circle
   at n = 10^7 and 10^8 tokens, the harmonic path on S^2 (``attention_impl="harmonic"``) at n = 10^6 and 10^7,
   float64 and float32, and the tiled direct sum on S^2 at n = 2 x 10^4 beside the harmonic path at the same
   n (their largest difference); 2-3 calls of 1-5 layers a row; layers/s, particle-steps/s, compiled bytes
   per token (no n x n array), and the ratio to the 2-core CPU's rate (:data:`MEANFIELD_CPU`).

``--small`` runs toy sizes of the same rows on the default device (a pre-flight of every code path, two to
three minutes); ``--cpu`` is ``--small`` on CPU. Results: ``summary.json`` (machine, device kind, options, every row
with every time) and ``table.md``, plus each child's log under ``logs/``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # allow `python benchmarks/gpu_jobs.py`
    sys.path.insert(0, str(ROOT))

#: seconds of the phase job on a 2-core CPU, current code: the peers' default diagram 101.4 s and the d = 128 row
#: 17.3 s (median of 17.3, 17.3, 17.2), benchmarks/RESULTS.md, "Phase diagram against a PyTorch baseline of the
#: peers' kind, after the compute pass (2-core Intel Xeon, 2026-12-03 ...)"; the fastest of the machines measured
#: (the same command took 141.8 s on an AMD EPYC, "... second pass on the fixed costs", and 232.5 s on a slower
#: day of the Xeon, "... current code"), so the ratios below are the least favourable to the GPU. The 10x diagram
#: was never run on a CPU: 10 times the default, extrapolated. (Sections are cited by title: RESULTS.md grows
#: at the top, so line numbers move.)
PHASE_CPU_SECONDS = {"phase-default": 101.4, "phase-d128": 17.3, "phase-10x": 10 * 101.4}
PHASE_CPU_SOURCE = ("benchmarks/RESULTS.md, 'Phase diagram against a PyTorch baseline of the peers' kind, after the "
                    "compute pass' (2-core Intel Xeon, 2026-12-03: peers' default 101.4 s, d = 128 17.3 s; other 2-core "
                    "runs of the default: 141.8 s on an AMD EPYC, 232.5 s on a slower day); 10x diagram: 10 x 101.4 s, "
                    "extrapolated")
#: the 2-core CPU's systems/s of the same chunk function: d = 32, n = 64, 10 layers ~950 (benchmarks/RESULTS.md,
#: "GPU: NVIDIA H200, `benchmarks/gpu.py`", its comparison), d = 128, n = 256, 20 layers 30.92 ("Sweep
#: throughput", bench_sweeps.py, AMD EPYC 2-core, 1 device)
SWEEP_CPU_SYSTEMS_PER_S = {(32, 64, 10): (950.0, "benchmarks/RESULTS.md, 'GPU: NVIDIA H200, benchmarks/gpu.py' "
                                                 "(~950 systems/s, 2-core CPU)"),
                           (128, 256, 20): (30.92, "benchmarks/RESULTS.md, 'Sweep throughput' (bench_sweeps.py, "
                                                   "AMD EPYC 2-core, 1 device)")}
#: the 2-core CPU's float64 rates at beta = 4: the circle's Fourier path 1.08e7 particle-steps/s at n = 10^6
#: (benchmarks/RESULTS.md, "Mean-field sizes on the circle and S^2, quiet machine", 2-core Intel Xeon); the S^2
#: harmonic layer 0.83 s at n = 10^6, 1.2e6 particle-steps/s (benchmarks/NOTES.md section 36, AMD EPYC 2-core);
#: the S^2 tiled direct sum (float32) 0.105 layers/s at n = 10^5, n^2 x layers/s = 1.05e9 pair-steps/s (the same
#: RESULTS.md section)
_MEANFIELD_SECTION = "benchmarks/RESULTS.md, 'Mean-field sizes on the circle and S^2, quiet machine'"
MEANFIELD_CPU = {("fourier", "float64"): (1.08e7, "particle_steps_per_s", _MEANFIELD_SECTION),
                 ("harmonic", "float64"): (1.2e6, "particle_steps_per_s", "benchmarks/NOTES.md section 36"),
                 ("chunked", "float32"): (1.05e9, "pair_steps_per_s", _MEANFIELD_SECTION)}

#: every row: (limit s on a GPU, limit s with --small, least seconds left to start it)
ROW_LIMITS = {"phase-default": (150, 60, 20), "phase-torch": (150, 60, 20), "phase-10x": (240, 90, 45),
              "phase-d128": (60, 60, 20), "sweep-d32": (60, 60, 20), "sweep-d128": (60, 60, 20),
              "meanfield": (90, 90, 20)}
DEFAULT_ROWS = ["phase-default", "phase-torch", "sweep-d32", "sweep-d128", "meanfield", "phase-10x", "phase-d128"]
GROUPS = {"phase": ["phase-default", "phase-torch", "phase-10x", "phase-d128"], "sweep": ["sweep-d32", "sweep-d128"]}
#: (systems, d, n, layers) of the sweep rows, GPU and --small
SWEEP_SIZES = {"sweep-d32": ((256, 32, 64, 10), (16, 32, 64, 10)),
               "sweep-d128": ((1024, 128, 256, 20), (2, 128, 256, 2))}
#: the torch script runs every TORCH_STRIDE-th beta of the default diagram; its time is scaled back
TORCH_STRIDE = 10
#: disk one (beta, system) pair of the phase job takes, per checkpoint: its chunk file and its share of the
#: per-system file, 7 float64 statistics each, the second partly deflated (measured: 17 KB a pair at 200)
PHASE_BYTES_PER_PAIR_CHECKPOINT = 7 * 8 * 1.6


def phase_rows(small: bool) -> dict:
    """The phase configs of the rows (bench_phase's keys), GPU sizes or toy ones."""
    from benchmarks.bench_phase import COMMON, QUICK_ROWS, ROWS

    if small:
        default = {**COMMON, "systems": 32, "beta": (0.1, 9.0, 10), "d": 2, "t1": 3.0, "checkpoints": 20}
        return {"phase-default": default, "phase-10x": {**default, "systems": 320},
                "phase-d128": {**COMMON, **QUICK_ROWS["d128"]}}
    default = {**COMMON, **ROWS["default"]}
    return {"phase-default": default, "phase-10x": {**default, "systems": 20480},
            "phase-d128": {**COMMON, **ROWS["d128"]}}


def meanfield_plan(small: bool) -> list[dict]:
    """The mean-field rows, cheap ones first (each kind gets a row before the large sizes run); the largest
    take 2 calls, the others 3."""
    c7, c8, s6, s7, m, steps = ((10**5, 10**6, 10**4, 10**5, 2000, 2) if small
                                else (10**7, 10**8, 10**6, 10**7, 20_000, 5))
    row = lambda impl, n, dtype, steps, repeats=3, **kw: {"impl": impl, "d": 2 if impl == "fourier" else 3, "n": n,
                                                          "dtype": dtype, "steps": steps, "repeats": repeats, **kw}
    return [row("fourier", c7, "float64", steps), row("fourier", c7, "float32", steps),
            row("harmonic", s6, "float64", 2), row("harmonic", s6, "float32", 2),
            row("chunked", m, "float64", 1, keep=True), row("harmonic", m, "float64", 1, keep=True, compare=True),
            row("fourier", c8, "float64", steps, 2), row("fourier", c8, "float32", steps, 2),
            row("harmonic", s7, "float64", 2, 2), row("harmonic", s7, "float32", 2, 2),
            row("chunked", m, "float32", 1)]


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=None, help="results folder (default results/gpu_jobs/<UTC stamp>)")
    p.add_argument("--rows", default=None,
                   help=f"comma-separated rows, run in that order (default: {','.join(DEFAULT_ROWS)}); "
                        f"'phase' and 'sweep' name their groups")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole run (default 330 on a GPU, 170 with --small / --cpu); a row starts "
                        "only with its minimum left and gets at most what is left")
    p.add_argument("--small", action="store_true", help="toy sizes of every row on the default device")
    p.add_argument("--cpu", action="store_true", help="--small on CPU (JAX_PLATFORMS=cpu, torch on cpu)")
    p.add_argument("--phase-chunk", type=int, default=None,
                   help="the phase job's [run] chunk_size, (beta, system) pairs (default 36864 on a GPU: it divides "
                        "184320 and 1843200; 128 with --small)")
    p.add_argument("--repeat-under", type=float, default=30.0,
                   help="run phase-default twice more when its first run takes less than this (default 30 s)")
    p.add_argument("--sweep-routes", default="host", help="comma-separated eig routes of the sweep rows "
                                                          "(host, cpu, device; default host)")
    p.add_argument("--limit", action="append", default=[], metavar="ROW=SECONDS",
                   help="another time limit for a row (repeatable), e.g. sweep-d128=150 to learn how long its "
                        "compile takes on a GPU where 60 s did not reach its first call")
    p.add_argument("--work", default=None, help="folder for the jobs' temporary output (default: the system's "
                                                "temporary folder); about 30 GB free for phase-10x")
    p.add_argument("--child", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-spec", default=None, help=argparse.SUPPRESS)
    p.add_argument("--child-out", default=None, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.small = args.small or args.cpu
    args.limits = {}
    for item in args.limit:
        row, _, seconds = item.partition("=")
        try:
            value = float(seconds)
        except ValueError:
            value = -1.0
        if row not in ROW_LIMITS or not value > 0:
            p.error(f"--limit takes ROW=SECONDS with ROW among {list(ROW_LIMITS)} and SECONDS a positive number, "
                    f"got {item!r}")
        args.limits[row] = value
    return args


def _pick_rows(spec: str | None) -> list[str]:
    names = []
    for name in (spec.split(",") if spec else DEFAULT_ROWS):
        name = name.strip()
        if name in GROUPS:
            names += GROUPS[name]
        elif name in ROW_LIMITS:
            names.append(name)
        else:
            raise SystemExit(f"gpu_jobs.py: unknown row {name!r}; choose among {list(ROW_LIMITS)} or {list(GROUPS)}.")
    return names


def _failure(e: BaseException) -> str:
    return f"failed: {type(e).__name__}: {(str(e).splitlines() or [''])[0][:200]}"


# ---- child processes ----------------------------------------------------------------------------


def run_command(cmd: list[str], *, limit: float, env: dict, log: Path) -> dict:
    """Run ``cmd`` (cwd: the repository) with its output in ``log``, in a process group of its own that is
    killed at ``limit`` seconds; wall seconds, exit status, whether it ran out of time, its log's tail."""
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    t = time.perf_counter()
    with open(log, "w") as fh:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            rc, timed_out = proc.wait(timeout=limit), False
        except BaseException:  # the limit, or an interrupt of this script: the whole group goes
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            rc, timed_out = proc.wait(), True
            if sys.exc_info()[0] is not subprocess.TimeoutExpired:
                raise
    seconds = time.perf_counter() - t
    tail = log.read_text(errors="replace")[-1200:]
    return {"seconds": seconds, "rc": rc, "timed_out": timed_out, "started": started, "log_tail": tail}


def run_child(kind: str, spec: dict, ctx: dict, *, limit: float, name: str):
    """This script as a child (``--child kind``) under ``limit``; returns (what it wrote, the command's record)."""
    out = ctx["work"] / f"{name}.json"
    spec = {**spec, "limit_s": limit}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", kind, "--child-spec", json.dumps(spec),
           "--child-out", str(out)]
    done = run_command(cmd, limit=limit, env=ctx["env"], log=ctx["run_dir"] / "logs" / f"{name}.log")
    found = json.loads(out.read_text()) if out.exists() else None
    return found, done


def child_main(args) -> int:
    import jax

    jax.config.update("jax_enable_x64", True)  # a benchmark script (not the library) sets it
    spec, out = json.loads(args.child_spec), Path(args.child_out)
    {"sweep": sweep_child, "meanfield": meanfield_child}[args.child](spec, out)
    return 0


# ---- 1. the phase job ---------------------------------------------------------------------------


def _chunk_times(out: Path, started: float) -> dict:
    """When the job's chunk files appeared, seconds after the command started."""
    chunks = out / "chunks"
    files = [p for p in chunks.glob("*.npz") if not p.name.startswith(".")] if chunks.is_dir() else []
    t = sorted(p.stat().st_mtime - started for p in files)
    rec = {"chunks_written": len(t)}
    if t:
        gaps = [b - a for a, b in zip(t, t[1:])]
        rec.update(first_chunk_s=t[0], last_chunk_s=t[-1],
                   chunk_interval_median_s=statistics.median(gaps) if gaps else None)
    return rec


def _job_timing(out: Path):
    """Timing the job keeps in its folder (summary.json keys about seconds), or None: it keeps none today."""
    try:
        s = json.loads((out / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    found = {k: v for k, v in s.items() if any(w in k for w in ("second", "elapsed", "wall", "time_s"))}
    return found or None


def phase_command(name: str, row: dict, ctx: dict, limit: float, *, keep_cells: Path | None = None) -> dict:
    """One whole ``attnflow phase`` command of ``row``; its output folder deleted afterwards."""
    from benchmarks.bench_phase import _config_text

    folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=ctx["work"]))
    config = folder / "phase.toml"
    config.write_text(_config_text(row) + f"chunk_size = {ctx['chunk']}\n")
    out = folder / "out"
    # the command as `python -m attnflow phase CONFIG --out DIR --no-progress` would run it, with
    # benchmarks/phase_timeline.py's hooks stamping its stretches from inside (start-up, trace, XLA compile,
    # computation, tables and figures, and each chunk file's write apart from the chunks' computations)
    from benchmarks.phase_timeline import CHILD, read_stamps, stretches

    cmd = [sys.executable, "-c", CHILD, str(config), str(out)]
    try:
        log = ctx["run_dir"] / "logs" / f"{name}-{len(ctx['logs'])}.log"
        ctx["logs"].append(name)
        done = run_command(cmd, limit=limit, env=ctx["env"], log=log)
        rec = {"seconds": done["seconds"], "rc": done["rc"], "timed_out": done["timed_out"],
               **_chunk_times(out, done["started"]), "job_timing": _job_timing(out)}
        text = log.read_text(errors="replace")
        stamps = read_stamps(text, done["started"])
        if rec["chunks_written"] and not done["timed_out"]:
            rec["after_last_chunk_s"] = done["seconds"] - rec["last_chunk_s"]
        if done["rc"] == 0 and not done["timed_out"]:
            try:
                rec["stretches"] = st = stretches({"wall_s": done["seconds"], "cpu_s": None, "stamps": stamps})
            except (TypeError, KeyError, ValueError) as e:  # a stamp missing: the row keeps its wall time
                rec["stretches_note"] = _failure(e)
            else:
                print(f"    {name}: " + ", ".join(f"{k} {v:.2f}" for k, v in st.items() if isinstance(v, float)
                                              and k not in ("cpu", "last figure done after the chunks")), flush=True)
        if done["rc"] != 0 and not done["timed_out"]:
            said = "\n".join(line for line in text.splitlines() if not line.startswith("STAMP "))
            rec["note"] = f"exit status {done['rc']}: {said[-300:]}"
        if keep_cells is not None and (out / "cells.csv").is_file():
            shutil.copy(out / "cells.csv", keep_cells)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return rec


def phase_row(name: str, ctx: dict, limit: float) -> dict:
    row = ctx["phase"][name]
    pairs = row["systems"] * row["beta"][2]
    layers = round(row["t1"] / row["dt"])
    chunks = -(-pairs // ctx["chunk"])
    rec = {"what": f"attnflow phase {row['systems']} x {row['beta'][2]} betas, n {row['n']}, d {row['d']}, "
                   f"{layers} layers, {row['checkpoints']} checkpoints",
           "systems": row["systems"], "betas": row["beta"][2], "n": row["n"], "d": row["d"], "layers": layers,
           "checkpoints": row["checkpoints"], "pairs": pairs, "chunk_size": ctx["chunk"], "chunks": chunks,
           "command": f"python -m attnflow phase CONFIG --out DIR ([run] chunk_size = {ctx['chunk']})"}
    need = pairs * row["checkpoints"] * PHASE_BYTES_PER_PAIR_CHECKPOINT
    free = shutil.disk_usage(ctx["work"]).free
    rec.update(disk_needed_gb=need / 1e9, disk_free_gb=free / 1e9)
    if free < 1.1 * need:
        rec["note"] = (f"skipped: about {need / 1e9:.0f} GB of output, {free / 1e9:.0f} GB free in {ctx['work']} "
                       "(--work)")
        return rec
    keep = ctx["work"] / "default_cells.csv" if name == "phase-default" else None
    runs = [phase_command(name, row, ctx, limit, keep_cells=keep)]
    while (name == "phase-default" and len(runs) < 3 and not runs[0]["timed_out"] and runs[0]["rc"] == 0
           and runs[0]["seconds"] < ctx["args"].repeat_under):
        left = ctx["left"]()
        if left < 2 * runs[0]["seconds"] + 10:
            break
        runs.append(phase_command(name, row, ctx, min(limit, left)))
    ok = [r["seconds"] for r in runs if not r["timed_out"] and r["rc"] == 0]
    rec.update(runs=runs, seconds_each=[r["seconds"] for r in runs])
    if ok:
        med = statistics.median(ok)
        rec.update(seconds=med, seconds_min=min(ok), seconds_max=max(ok),
                   system_layers_per_s=pairs * layers / med, rate=f"{pairs * layers / med:.3g} system-layers/s")
        if name == "phase-default":
            ctx["default_seconds"] = med
        if not ctx["args"].small:
            ref = PHASE_CPU_SECONDS[name]
            rec.update(cpu_reference_s=ref, cpu_reference_source=PHASE_CPU_SOURCE, vs_cpu=ref / med)
            if name == "phase-default":
                rec.update(target_vs_cpu=20.0, target_met=ref / med >= 20.0)
            if name == "phase-10x":
                rec["note"] = "vs CPU: against 10 x the default diagram's CPU time (extrapolated, never run)"
    first = runs[0]
    if first["timed_out"]:
        est = (first.get("first_chunk_s", 0.0) + (chunks - 1) * first["chunk_interval_median_s"]
               if first.get("chunk_interval_median_s") else None)
        rec["note"] = (f"stopped at the {limit:.0f} s limit after {first['chunks_written']} of {chunks} chunk files"
                       + (f"; all chunks at this pace: about {est:.0f} s, before tables and files (estimate)"
                          if est else ""))
        rec["chunks_all_estimate_s"] = est
    elif "note" in first:
        rec["note"] = first["note"]
    return rec


def phase_torch_row(ctx: dict, limit: float) -> dict:
    """benchmarks/phase_torch.py on every TORCH_STRIDE-th beta of the default diagram, on the same device."""
    import re

    from benchmarks.bench_phase import _largest_difference, _start_clouds, _torch_cmd

    row = ctx["phase"]["phase-default"]
    folder = Path(tempfile.mkdtemp(prefix="torch-", dir=ctx["work"]))
    try:
        _start_clouds(row, folder / "x0.npy")
        threads = 1 if ctx["args"].cpu else 0  # 1 thread on a CPU (bench_phase's finding); on a GPU torch's own
        cmd, betas_run = _torch_cmd(row, folder, threads, TORCH_STRIDE)
        cmd += ["--device", ctx["torch_device"]]
        scale = row["beta"][2] / betas_run
        done = run_command(cmd, limit=limit, env=ctx["env"], log=ctx["run_dir"] / "logs" / "phase-torch.log")
        rec = {"what": f"phase_torch.py --device {ctx['torch_device']}: {row['systems']} systems x {betas_run} of "
                       f"{row['beta'][2]} betas, time x {scale:g}",
               "torch_device": ctx["torch_device"], "torch_threads": threads, "betas_run": betas_run,
               "time_scaled_by": scale, "command_s": done["seconds"], "timed_out": done["timed_out"], "rc": done["rc"]}
        if done["timed_out"] or done["rc"] != 0:
            rec["note"] = (f"stopped at the {limit:.0f} s limit" if done["timed_out"]
                           else f"exit status {done['rc']}: {done['log_tail'][-300:]}")
            return rec
        loop = re.search(r": ([0-9.]+) s; wrote", done["log_tail"])
        loop_s = float(loop.group(1)) if loop else None
        whole = done["seconds"] * scale
        rec.update(seconds=whole, scaled_whole_command_s=whole, loop_s=loop_s)
        if loop_s is not None:  # imports and device start-up once, the loop over the betas scale times
            rec["scaled_loop_plus_fixed_s"] = done["seconds"] - loop_s + scale * loop_s
        a = ctx.get("default_seconds")
        if a:
            rec["vs_torch"] = whole / a
            rec["attnflow_over_torch_time"] = a / whole
            if loop_s is not None:
                rec["vs_torch_loop_plus_fixed"] = rec["scaled_loop_plus_fixed_s"] / a
        else:
            rec["note"] = "no phase-default time in this run: no ratio"
        cells = ctx["work"] / "default_cells.csv"
        if cells.is_file():
            rec["largest_difference_of_means"] = _largest_difference(cells, folder / "torch.csv")
        pairs_layers = row["systems"] * row["beta"][2] * round(row["t1"] / row["dt"])
        rec["rate"] = f"{pairs_layers / whole:.3g} system-layers/s (scaled)"
        return rec
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---- 2. the dynamics sweep's chunk function ------------------------------------------------------


def sweep_row(name: str, route: str, ctx: dict, limit: float) -> dict:
    systems, d, n, layers = SWEEP_SIZES[name][1 if ctx["args"].small else 0]
    spec = {"systems": systems, "d": d, "n": n, "layers": layers, "route": route}
    found, done = run_child("sweep", spec, ctx, limit=limit, name=f"{name}-{route}")
    rec = {"what": f"sweep chunk fn, route {route}: {systems} systems, d {d}, n {n}, {layers} layers", **spec,
           **(found or {}), "command_s": done["seconds"]}
    ref = SWEEP_CPU_SYSTEMS_PER_S.get((d, n, layers))
    if ref and not ctx["args"].small:
        rec.update(cpu_reference_systems_per_s=ref[0], cpu_reference_source=ref[1])
        if rec.get("systems_per_s"):
            rec["vs_cpu"] = rec["systems_per_s"] / ref[0]
    if done["timed_out"]:
        stage = "compile or first call" if "compile_and_first_s" not in rec else "the timed calls"
        rec["note"] = f"stopped at the {limit:.0f} s limit during {stage}"
    elif done["rc"] != 0:
        rec["note"] = f"exit status {done['rc']}: {done['log_tail'][-300:]}"
    if rec.get("systems_per_s"):
        rec.update(seconds=rec["best_s"], rate=f"{rec['systems_per_s']:.3g} systems/s")
    return rec


def sweep_child(spec: dict, out: Path) -> None:
    import jax
    import numpy as np

    from benchmarks.common import atomic_write_json

    deadline = time.perf_counter() + spec["limit_s"] - 5
    host_eig = {"calls": 0}
    eig = np.linalg.eig

    def counted(*a, **k):  # the host route's callback calls numpy.linalg.eig: count it
        host_eig["calls"] += 1
        return eig(*a, **k)

    np.linalg.eig = counted
    from attnflow.ensembles import system_seeds
    from attnflow.runs import load_config, make_mesh
    from attnflow.spectral import eig_route
    from attnflow.sweep._dynamics import make_chunk_fn

    rec = {"backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
           "route_resolved": eig_route(spec["route"])}
    cfg = {**load_config(None, "ginibre-dynamics.toml"), "n": spec["n"], "clouds": 1, "dt": 0.1,
           "t1": 0.1 * spec["layers"], "dtype": "float32"}
    fn = make_chunk_fn({"v": "ginibre", "qk": "identity", "d": spec["d"]}, cfg, spec["route"], make_mesh(1))
    seeds = system_seeds(0, "gpu-jobs-sweep", 0, spec["systems"])
    t = time.perf_counter()
    cols = jax.block_until_ready(fn(seeds))
    rec.update(compile_and_first_s=time.perf_counter() - t, host_eig_calls_first_call=host_eig["calls"],
               finite_fraction=float(np.mean(np.asarray(cols["finite"]))))
    atomic_write_json(out, rec)
    times = []
    while len(times) < 3 and (not times or time.perf_counter() + times[-1] < deadline):
        t = time.perf_counter()
        jax.block_until_ready(fn(seeds))
        times.append(time.perf_counter() - t)
        rec.update(times_s=times, best_s=min(times), systems_per_s=spec["systems"] / min(times),
                   host_eig_calls=host_eig["calls"])
        atomic_write_json(out, rec)


# ---- 3. mean field ------------------------------------------------------------------------------------


def meanfield_rows(ctx: dict, limit: float) -> list[dict]:
    found, done = run_child("meanfield", {"plan": meanfield_plan(ctx["args"].small)}, ctx, limit=limit,
                            name="meanfield")
    rows = found or []
    for r in rows:
        ref = MEANFIELD_CPU.get((r.get("impl"), r.get("dtype")))
        if ref and r.get(ref[1]) and not ctx["args"].small:
            r.update(cpu_reference=ref[0], cpu_reference_unit=ref[1], cpu_reference_source=ref[2],
                     vs_cpu=r[ref[1]] / ref[0])
    if done["timed_out"]:
        rows.append({"note": f"stopped at the {limit:.0f} s limit; {len(found or [])} rows finished before"})
    elif done["rc"] != 0:
        rows.append({"note": f"exit status {done['rc']}: {done['log_tail'][-300:]}"})
    return rows


def meanfield_child(spec: dict, out: Path) -> None:
    import jax

    from benchmarks.bench_meanfield import _agreement, attnflow_row
    from benchmarks.common import atomic_write_json

    deadline = time.perf_counter() + spec["limit_s"] - 5
    rows, kept = [], {}
    device = str(jax.devices()[0])
    for item in spec["plan"]:
        label = f"{item['impl']} n {item['n']:.0e} d {item['d']} {item['dtype']}"
        rec = {"what": f"meanfield {label}, beta 4, {item['steps']} layers x {item['repeats']} calls (seconds: "
                       "one layer)", "impl": item["impl"], "n": item["n"], "d": item["d"], "dtype": item["dtype"],
               "device": device}
        if time.perf_counter() > deadline:
            rec["note"] = "skipped: the mean-field rows' time limit"
        else:
            try:
                r = attnflow_row(item["n"], impl=item["impl"], beta=4.0, dtype=item["dtype"], d=item["d"],
                                 steps=item["steps"], repeats=item["repeats"], keep_state=item.get("keep", False))
                state = r.pop("_state", None)
                if item.get("keep"):
                    kept[item["impl"]] = state
                rec.update(r, layers_per_s=r["steps_per_s"], seconds=r["step_median_s"],
                           rate=f"{r['particle_steps_per_s']:.3g} particle-steps/s",
                           bytes_per_token=(r["memory_bytes"] / item["n"]) if r.get("memory_bytes") else None)
                if item["impl"] == "chunked":
                    rec["pair_steps_per_s"] = float(item["n"]) ** 2 * r["steps_per_s"]
                if item.get("compare") and "chunked" in kept:
                    rec["max_abs_diff_vs_tiled"] = _agreement(state, kept["chunked"])
            except Exception as e:  # e.g. out of device memory: say so, keep going
                rec["note"] = _failure(e)
        rows.append(rec)
        atomic_write_json(out, rows)
        print(f"  {rec.get('what')}: {rec.get('rate', rec.get('note'))}", flush=True)


# ---- the run ----------------------------------------------------------------------------------------------


TABLE_COLUMNS = ["row", "what", "seconds", "rate", "vs_cpu", "vs_torch", "note"]


def write_results(run_dir: Path, summary: dict) -> None:
    from benchmarks.common import atomic_write_json, atomic_write_text

    fmt = lambda v: "" if v is None else (f"{v:.3g}" if isinstance(v, float) else str(v).replace("|", "/")
                                          .replace("\n", " "))
    lines = [f"# attnflow jobs on {summary['machine'].get('device_kind')} ({summary['machine'].get('cpu')}, "
             f"{summary['machine'].get('cpu_count')} cores), {summary['machine'].get('date_utc')}", "",
             "| " + " | ".join(TABLE_COLUMNS) + " |", "|" + "---|" * len(TABLE_COLUMNS)]
    lines += ["| " + " | ".join(fmt(r.get(c)) for c in TABLE_COLUMNS) + " |" for r in summary["rows"]]
    lines += ["", f"CPU references: phase {PHASE_CPU_SOURCE}; sweep and mean field: see summary.json "
                  "(cpu_reference_source of each row).", f"Total {summary['elapsed_s']:.0f} s."]
    atomic_write_json(run_dir / "summary.json", summary)
    atomic_write_text(run_dir / "table.md", "\n".join(lines) + "\n")


def main(argv=None) -> int:
    args = parse(argv)
    if args.child:
        return child_main(args)
    t_start = time.perf_counter()
    names = _pick_rows(args.rows)
    if args.cpu:
        os.environ["JAX_PLATFORMS"] = "cpu"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])}
    # this process only draws the torch row's start clouds: it takes device memory as it needs it, leaving the
    # children (one at a time) JAX's usual preallocation
    os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] = "false"
    import compileall

    import jax

    from benchmarks.common import machine_info, make_run_dir

    backend = jax.default_backend()
    if not args.small and backend != "gpu":
        print(f"no GPU visible to JAX (backend {backend!r}); --cpu (or --small) checks the script without one.")
        return 2
    # the children start from byte-compiled sources, as an installed package does (bench_phase's rule)
    compileall.compile_dir(str(ROOT / "attnflow"), quiet=1)
    run_dir = make_run_dir(args.out, prefix="gpu_jobs")
    work_root = Path(args.work) if args.work else Path(tempfile.gettempdir())
    work_root.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="gpu_jobs_", dir=work_root))
    budget = args.budget or (170.0 if args.small else 330.0)
    info = machine_info()
    device = jax.devices()[0]
    info.update(device=str(device), device_kind=getattr(device, "device_kind", None))
    torch_device = "cpu" if args.cpu or backend != "gpu" else "cuda"
    ctx = {"args": args, "env": env, "work": work, "run_dir": run_dir, "logs": [], "torch_device": torch_device,
           "chunk": args.phase_chunk or (128 if args.small else 36864), "phase": phase_rows(args.small),
           "left": lambda: budget - (time.perf_counter() - t_start)}
    options = {"rows": names, "budget_s": budget, "small": args.small, "cpu": args.cpu,
               "phase_chunk_size": ctx["chunk"], "sweep_routes": args.sweep_routes, "work": str(work),
               "torch_device": torch_device}
    rows: list[dict] = []
    summary = {"machine": info, "options": options, "rows": rows, "elapsed_s": 0.0}

    def save() -> None:
        summary["elapsed_s"] = time.perf_counter() - t_start
        write_results(run_dir, summary)

    print(f"attnflow jobs on {info['device_kind'] or device} (backend {backend}) -> {run_dir}; budget {budget:.0f} s")
    save()
    routes = [r.strip() for r in args.sweep_routes.split(",") if r.strip()]
    todo = [(n, r) for n in names for r in (routes if n.startswith("sweep") else [None])]
    try:
        for name, route in todo:
            label = name if route is None else f"{name} ({route})"
            gpu_limit, small_limit, least = ROW_LIMITS[name]
            left = ctx["left"]()
            limit = min(args.limits.get(name, small_limit if args.small else gpu_limit), left)
            if left < least:
                rows.append({"row": label, "note": f"skipped: time budget ({left:.0f} s left of {budget:.0f} s)"})
                print(f"{label}: skipped (time budget)", flush=True)
                save()
                continue
            print(f"{label}: up to {limit:.0f} s ...", flush=True)
            found: list[dict] = []
            try:
                if name == "meanfield":
                    found = meanfield_rows(ctx, limit)
                    rows.extend({"row": f"meanfield {r['impl']} {r['n']:.0e} {r['dtype']}" if "impl" in r
                                 else "meanfield", **r} for r in found)
                else:
                    rec = (phase_torch_row(ctx, limit) if name == "phase-torch" else
                           sweep_row(name, route, ctx, limit) if route else phase_row(name, ctx, limit))
                    rows.append({"row": label, **rec})
            except Exception as e:  # say so, keep going
                rows.append({"row": label, "note": _failure(e)})
            for r in (rows[-len(found):] if name == "meanfield" and found else rows[-1:]):
                print(f"  {r.get('row')}: {r.get('what', '')} -> {r.get('rate') or r.get('seconds')}"
                      + (f"; {r['note']}" if r.get("note") else ""), flush=True)
            save()
    finally:
        shutil.rmtree(work, ignore_errors=True)
        save()
    print((run_dir / "table.md").read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
