"""Where one phase command's time goes: a row of bench_phase.py as one whole `attnflow phase` command, stamped
from inside, for a machine on which the bench's ratio is lower than on another.

    python benchmarks/phase_timeline.py --row small              # a first run, then a run from its kept programs
    python benchmarks/phase_timeline.py --row small --runs 3     # a first run and two from the kept programs
    python benchmarks/phase_timeline.py --row default --chunk-size 36864   # the GPU runs' chunks

The command runs in a child process whose hooks stamp, in wall seconds from the moment the parent started it: the
chunk runner's start and end, JAX's tracing, lowering and XLA compile events (``jax.monitoring``, with the thread
each ran on), the figure futures' submission and completion, the report's end, and the process's exit. The
stretches printed per run:

* start-up: interpreter, imports, config, run folder and chunk plan, to the chunk runner;
* trace and lowering: the chunk runner's start to its last lowering (the start clouds' program included);
* XLA compile: from there to the last compile's end (0 when the programs were kept);
* computation: to the chunk runner's end;
* tables and figures: to the report's end (the job's tables and fits meanwhile the figure workers draw; the
  figure that ended last is named);
* exit: to the process's end;
* between chunks (median): the time from one chunk's computation returning to the next's (the chunk files are written
  behind the next chunk's computation, so this is the longer of a computation and a write); chunk write (median):
  one chunk file's write on the writer thread;

with the CPU seconds of the whole process tree (``os.wait4``). Each run's stamps go to ``--out`` (JSON, with the
machine). The hooks wrap private functions of attnflow (``runs._chunks.run_chunks``, ``phase._run._report``,
``plot._workers.FigureWorkers.submit``): a tool for this repository's measurements, not an API.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_phase import COMMON, QUICK_ROWS, ROWS, _config_text  # noqa: E402
from benchmarks.common import atomic_write_json, machine_info  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]

#: the child: hooks, then the attnflow command's own process entry (attnflow.cli.main.run); it prints one line
#: per stamp, ``STAMP <wall time> <thread> <what>``, on stderr
CHILD = r'''
import builtins, sys, threading, time
def stamp(what):
    sys.stderr.write(f"STAMP {time.time():.6f} {threading.current_thread().name.replace(' ', '_')} {what}\n")
def wrap(owner, name, label):
    f = getattr(owner, name)
    def hooked(*a, **k):
        stamp(f"start {label}")
        try:
            return f(*a, **k)
        finally:
            stamp(f"end {label}")
    setattr(owner, name, hooked)
done = set()
_import = builtins.__import__
def watch(name, *a, **k):
    module = _import(name, *a, **k)
    m = sys.modules
    if "jax" not in done and hasattr(m.get("jax.monitoring"), "register_event_duration_secs_listener"):
        done.add("jax")
        m["jax.monitoring"].register_event_duration_secs_listener(
            lambda event, seconds, **kw: stamp(f"jax {event.rsplit('/', 1)[-1]} {seconds:.6f}"))
    if "chunks" not in done and hasattr(m.get("attnflow.runs._chunks"), "run_chunks"):
        done.add("chunks")
        wrap(m["attnflow.runs._chunks"], "run_chunks", "chunks")
    if "writes" not in done and hasattr(m.get("attnflow.runs._chunks"), "WriteBehind"):
        done.add("writes")
        behind = m["attnflow.runs._chunks"].WriteBehind
        call = behind.__call__
        def hooked_call(self, write, *a, **k):
            stamp("submit write")  # the chunk's computation has returned; the write goes behind the next one
            def timed_write(*a2, **k2):
                stamp("start write")
                try:
                    return write(*a2, **k2)
                finally:
                    stamp("end write")
            return call(self, timed_write, *a, **k)
        behind.__call__ = hooked_call
    if "report" not in done and hasattr(m.get("attnflow.phase._run"), "_report"):
        done.add("report")
        wrap(m["attnflow.phase._run"], "_report", "report")
    if "figures" not in done and hasattr(m.get("attnflow.plot._workers"), "FigureWorkers"):
        done.add("figures")
        workers = m["attnflow.plot._workers"].FigureWorkers
        submit = workers.submit
        def hooked_submit(self, target, *a, **k):
            label = str(target).rsplit(":", 1)[-1]
            stamp(f"submit figure {label}")
            future = submit(self, target, *a, **k)
            future.add_done_callback(lambda _f: stamp(f"done figure {label}"))
            return future
        workers.submit = hooked_submit
    return module
builtins.__import__ = watch
stamp("child started")
sys.argv = ["attnflow", "phase", sys.argv[1], "--out", sys.argv[2], "--no-progress"]
import importlib
importlib.import_module("attnflow.cli.main").run()  # the module (attnflow.cli.main is also its function)
'''


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--row", default="small", choices=sorted(ROWS), help="the bench_phase.py row (default small)")
    p.add_argument("--quick", action="store_true", help="the row at bench_phase.py's toy sizes (a smoke run)")
    p.add_argument("--runs", type=int, default=2,
                   help="commands in a row on one fresh program store: the first compiles, the others read the "
                        "kept programs (default 2)")
    p.add_argument("--chunk-size", type=int, default=None,
                   help="the job's [run] chunk_size, (beta, system) pairs a chunk (default: the job's own; a GPU "
                        "run of benchmarks/gpu_jobs.py uses 36864)")
    p.add_argument("--out", type=Path, default=Path("phase_timeline.json"),
                   help="JSON output (default phase_timeline.json)")
    args = p.parse_args(argv)
    if args.runs < 1:
        p.error(f"--runs must be at least 1, got {args.runs}")
    if args.chunk_size is not None and args.chunk_size < 1:
        p.error(f"--chunk-size must be a positive number of pairs, got {args.chunk_size}")
    if args.quick and args.row not in QUICK_ROWS:
        p.error(f"--quick has no toy size of the row {args.row!r}; choose among {sorted(QUICK_ROWS)}")
    return args


def one_run(config: Path, out: Path, store: Path) -> dict:
    """One command in a child process: its stamps (seconds from the start) and CPU seconds."""
    env = {**os.environ, "ATTNFLOW_COMPILE_CACHE": str(store)}
    start = time.time()
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(config), str(out)], cwd=ROOT, env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stderr = child.stderr.read()
    _, status, usage = os.wait4(child.pid, 0)
    wall = time.time() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        raise RuntimeError(f"the phase command failed (status {child.returncode}):\n{stderr[-2000:]}")
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "stamps": read_stamps(stderr, start)}


def read_stamps(text: str, start: float) -> list[dict]:
    """The child's ``STAMP <wall time> <thread> <what>`` lines of ``text``, in seconds from ``start``."""
    stamps = []
    for line in text.splitlines():
        if line.startswith("STAMP "):
            _, at, thread, what = line.split(" ", 3)
            stamps.append({"t": float(at) - start, "thread": thread, "what": what})
    return stamps


def stretches(run: dict) -> dict:
    """The run's stretches (module docstring) from its stamps, in seconds."""
    s = run["stamps"]

    def at(what, last=False):
        found = [x["t"] for x in s if x["what"] == what]
        return (found[-1] if last else found[0]) if found else None

    chunks_start, chunks_end, report_end = at("start chunks"), at("end chunks", last=True), at("end report", True)
    def events(prefix):  # (start, end) of JAX's events of this kind inside the chunk runner
        out = []
        for x in s:
            if x["what"].startswith(f"jax {prefix}") and chunks_start <= x["t"] <= chunks_end:
                out.append((x["t"] - float(x["what"].rsplit(" ", 1)[1]), x["t"], x["thread"]))
        return out

    compiles = events("backend_compile_duration")
    if compiles:  # XLA's first compile starts once the chunk program is traced and lowered
        traced_until = min(start for start, _, _ in compiles)
    else:  # kept programs: what the command's own thread still traced or lowered, if anything
        traced_until = max([end for _, end, thread in events("jaxpr_") if thread == "MainThread"], default=chunks_start)
    compiled_until = max([end for _, end, _ in compiles] + [traced_until])
    figures = [(x["t"], x["what"].split(" ", 2)[2]) for x in s if x["what"].startswith("done figure")]
    # the chunk files: each handed to the writer when its chunk's computation returns, written behind the next
    submits = [x["t"] for x in s if x["what"] == "submit write"]
    writes = [b["t"] - a["t"] for a, b in zip([x for x in s if x["what"] == "start write"],
                                              [x for x in s if x["what"] == "end write"])]
    gaps = [b - a for a, b in zip(submits, submits[1:])]
    last_figure = max(figures, default=(None, None))
    return {"start-up": chunks_start, "trace and lowering": traced_until - chunks_start,
            "XLA compile": compiled_until - traced_until, "computation": chunks_end - compiled_until,
            "tables and figures": report_end - chunks_end, "exit": run["wall_s"] - report_end,
            "wall": run["wall_s"], "cpu": run["cpu_s"],
            "chunk files": len(submits), "between chunks (median)": _median(gaps),
            "chunk write (median)": _median(writes), "last figure": last_figure[1],
            "last figure done after the chunks": None if last_figure[0] is None else last_figure[0] - chunks_end}


def _median(values: list[float]) -> float | None:
    """The median, or None for none (a run of one chunk has no interval between chunks)."""
    import statistics

    return statistics.median(values) if values else None


def format_runs(runs: list[dict]) -> str:
    names = ["start-up", "trace and lowering", "XLA compile", "computation", "tables and figures", "exit", "wall",
             "cpu", "between chunks (median)", "chunk write (median)"]
    head = f"{'stretch (s)':<22}" + "".join(f"{'first' if i == 0 else f'kept {i}':>10}" for i in range(len(runs)))
    lines = [head, "-" * len(head)]
    parts = [stretches(r) for r in runs]
    for name in names:
        lines.append(f"{name:<22}" + "".join(f"{p[name]:>10.2f}" if p[name] is not None else f"{'-':>10}"
                                             for p in parts))
    lines.append(f"{'last figure':<22}" + "".join(f"{str(p['last figure']):>10}" for p in parts))
    return "\n".join(lines)


def main(argv=None) -> int:
    args = parse(argv)
    row = {**COMMON, **(QUICK_ROWS if args.quick else ROWS)[args.row]}
    with tempfile.TemporaryDirectory(prefix="phase_timeline_") as work:
        work = Path(work)
        config = work / "phase.toml"
        config.write_text(_config_text(row) + ("" if args.chunk_size is None else f"chunk_size = {args.chunk_size}\n"))
        runs = [one_run(config, work / f"out{i}", work / "store") for i in range(args.runs)]
    print(f"phase command, row {args.row} ({machine_info()['cpu']}, {os.cpu_count()} cores)")
    print(format_runs(runs))
    record = {"kind": "phase_timeline", "row": args.row, "machine": machine_info(), "config": row,
              "chunk_size": args.chunk_size,
              "runs": [{**r, "stretches": stretches(r)} for r in runs]}
    atomic_write_json(args.out, record)
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
