#!/usr/bin/env python
r"""The phase job against a PyTorch script of the peers' kind, timed as whole commands.

Each row writes a phase config (tokens on the sphere, Q = K = V = I, n = 32, t1 = 30, dt = 0.1:
300 projected-Euler layers, statistics at 200 checkpoints, float64) to a temporary folder and times,
in interleaved rounds (round j runs each command once, their order alternating), the two commands

* ``python -m attnflow phase CONFIG --out DIR`` (imports, compilation, chunk files, tables, figures);
* the same command with ``--no-figures``: tables, summary and report without the figures, the outputs the torch
  script writes (its CSV of per-beta means, no figure); it keeps programs of its own, so that its round 0 is a
  first run too;
* ``python benchmarks/phase_torch.py ...`` (a Python loop over beta, ``torch.bmm`` and ``torch.softmax``,
  the same statistics at every checkpoint, per-beta means to a CSV) from the same start clouds
  (``--x0``, :func:`attnflow.phase.start_clouds`), at its faster thread count: 1 and 2 threads
  are timed once on the small row and the faster is used (recorded).

Both ratios are printed: torch against the whole command with its figures (``ratio``), and against the command
without them (``ratio_tables``: the same outputs on both sides).

Rows: ``small`` (256 systems x 10 betas, d = 2), ``default`` (the peers' diagram: 2048 systems x 90
betas, d = 2), ``d128`` (256 systems x 10 betas, d = 128: the same layers and checkpoints as the
others, a few minutes a round on a 2-core CPU), ``noise`` (the small row at sigma = 0.25 and 0.5: a
(beta, sigma) diagram of stochastic layers; the torch script adds ``torch.randn`` tangent noise; the two
programs draw other paths, so their means are compared in units of the cells' interval half-widths). Per row: the ratio torch / attnflow per round (min,
median, max), seconds per system-step (median), the work's flops (layers x
:func:`benchmarks.common.attention_flops`, which counts the three d x d projections; also without them,
:math:`4 n^2 d` per system-step, what both programs compute for Q = K = V = I; the statistics are not
counted) and their fraction of the float64 matmul rate measured in the same run
(:func:`benchmarks.common.matmul_rate`), the largest
difference between the two programs' per-beta means (the same work gives the same answer), and the
machine's load average before and after.

Usage:

    python benchmarks/bench_phase.py                          # small and d128: 3 rounds; default: 1 round,
                                                              # torch on every 10th beta (about 15 minutes)
    python benchmarks/bench_phase.py --rows small --rounds 5
    python benchmarks/bench_phase.py --rows default --torch-beta-stride 1   # torch on all 90 betas (~40 min)
    python benchmarks/bench_phase.py --quick                  # toy sizes (seconds)

Prints a table and writes JSON (``--out``, default ``bench_phase.json``).
"""

from __future__ import annotations

import argparse
import compileall
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):  # allow `python benchmarks/bench_phase.py`
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import (atomic_write_json, attention_flops, machine_info, matmul_rate,  # noqa: E402
                               settings_line)

ROOT = Path(__file__).resolve().parents[1]
TORCH_SCRIPT = ROOT / "benchmarks" / "phase_torch.py"
#: the peers' default diagram and its small and d = 128 variants (every row: n = 32, t1 = 30, dt = 0.1,
#: 200 checkpoints); ``beta``: linspace(start, stop, num)
#: ``rounds`` / ``torch_beta_stride``: the row's defaults (the peers' diagram takes the torch script about
#: 40 minutes a round on a 2-core CPU: one round, torch on every 10th beta, its time scaled by 10)
ROWS = {
    "small": {"systems": 256, "beta": (0.1, 9.0, 10), "d": 2},
    "default": {"systems": 2048, "beta": (0.1, 9.0, 90), "d": 2, "rounds": 1, "torch_beta_stride": 10},
    "d128": {"systems": 256, "beta": (0.1, 9.0, 10), "d": 128},
    # the (beta, sigma) diagram: the small row at two noise strengths (stochastic layers on both sides)
    "noise": {"systems": 256, "beta": (0.1, 9.0, 10), "d": 2, "sigma": (0.25, 0.5)},
}
#: toy sizes of the same rows (``--quick``)
QUICK_ROWS = {
    "small": {"systems": 32, "beta": (0.1, 9.0, 4), "d": 2, "t1": 3.0, "checkpoints": 20},
    "d128": {"systems": 16, "beta": (0.1, 9.0, 2), "d": 128, "t1": 3.0, "checkpoints": 20},
    "noise": {"systems": 32, "beta": (0.1, 9.0, 4), "d": 2, "t1": 3.0, "checkpoints": 20, "sigma": (0.5,)},
}
COMMON = {"n": 32, "t1": 30.0, "dt": 0.1, "checkpoints": 200, "threshold": 0.999}
#: the statistics both programs write (their per-beta means are compared)
OBSERVABLES = ("pairs_clustered", "clusters", "energy", "span", "ip_min", "ip_mean", "ip_max")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="toy sizes (seconds), for a smoke run")
    p.add_argument("--rows", default=None, help="comma-separated rows among small, default, d128, noise (default: all)")
    p.add_argument("--rounds", type=int, default=None,
                   help="interleaved rounds per row (default 3; the default row 1)")
    p.add_argument("--no-torch", action="store_true", help="time attnflow only")
    p.add_argument("--threads", type=int, default=0,
                   help="torch threads (default 0: time 1 and 2 on the small row and use the faster)")
    p.add_argument("--torch-beta-stride", type=int, default=None,
                   help="torch runs every S-th beta and its time is scaled by the beta count (default 1: all "
                        "betas; the default row 10)")
    p.add_argument("--out", type=Path, default=Path("bench_phase.json"), help="JSON output (default bench_phase.json)")
    return p.parse_args(argv)


def _config_text(row: dict) -> str:
    start, stop, num = row["beta"]
    return "\n".join([
        'kind = "phase"', "seed = 0", f"beta = {{start = {start}, stop = {stop}, num = {num}}}",
        f"n = {row['n']}", f"d = {row['d']}", f"systems = {row['systems']}", f"t1 = {row['t1']}", f"dt = {row['dt']}",
        f"checkpoints = {row['checkpoints']}", f"threshold = {row['threshold']}", 'dtype = "float64"',
        *([f"sigma = {list(row['sigma'])}"] if row.get("sigma") else []),
        "[run]", "progress = false", ""])


def _start_clouds(row: dict, path: Path) -> None:
    """The attnflow job's start clouds of the row, for the torch script's ``--x0``."""
    import jax
    import numpy as np

    from attnflow.phase import check_phase_config, load_phase_config, start_clouds

    cfg = load_phase_config(None)
    cfg.update(beta={"start": row["beta"][0], "stop": row["beta"][1], "num": row["beta"][2]},
               **{k: row[k] for k in ("n", "d", "systems", "t1", "dt", "checkpoints", "threshold")})
    with jax.enable_x64(True):
        config = check_phase_config(cfg)
        np.save(path, start_clouds(config, config.groups[0], np.arange(config.systems)))


def _timed(cmd: list[str], env: dict | None = None) -> float:
    t = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, env=env)
    elapsed = time.perf_counter() - t
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return elapsed


def _torch_cmd(row: dict, work: Path, threads: int, stride: int) -> tuple[list[str], int]:
    """The torch command of a row (every ``stride``-th beta) and the number of betas it runs."""
    import numpy as np

    start, stop, num = row["beta"]
    betas = np.linspace(start, stop, num)[::stride]
    # every stride-th beta of the grid: an evenly spaced grid itself
    b_stop = betas[-1] if len(betas) > 1 else betas[0]
    cmd = [sys.executable, str(TORCH_SCRIPT), "--x0", str(work / "x0.npy"), "--betas", repr(float(betas[0])),
           repr(float(b_stop)), str(len(betas)), "--t1", str(row["t1"]), "--dt", str(row["dt"]),
           "--checkpoints", str(row["checkpoints"]), "--threshold", str(row["threshold"]),
           "--threads", str(threads), "--out", str(work / "torch.csv")]
    if row.get("sigma"):
        cmd += ["--sigma", *map(repr, map(float, row["sigma"]))]
    return cmd, len(betas)


#: the statistics whose interval cells.csv holds: a noisy row's differences are read against its half-width
WITH_INTERVALS = ("pairs_clustered", "clusters", "energy")


def _means(path: Path, columns=OBSERVABLES) -> dict:
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    return {(round(float(r.get("sigma", 0.0)), 9), round(float(r["beta"]), 9), int(r["layer"])):
            {k: float(r[k]) for k in columns} for r in rows}


def _largest_difference(cells: Path, torch_csv: Path, noisy: bool = False) -> dict:
    """The largest |attnflow - torch| of every per-beta mean, over the (sigma, beta, layer) rows both wrote. A
    noisy row's two programs draw other Brownian paths, so their means differ by sampling noise: also the largest
    |difference| over sqrt(2) times attnflow's interval half-width (``in_half_widths``; about 2 or less for the
    same law, sqrt(2) for a spread taken as alike on both sides)."""
    a, b = _means(cells), _means(torch_csv)
    common = sorted(set(a) & set(b))
    out = {k: max(abs(a[key][k] - b[key][k]) for key in common) for k in OBSERVABLES} | {"rows": len(common)}
    if noisy:
        hw = _means(cells, [f"{k}_{end}" for k in WITH_INTERVALS for end in ("lo", "hi")])
        ratios = {}
        for k in WITH_INTERVALS:
            r = [abs(a[key][k] - b[key][k]) / (2 ** 0.5 * (hw[key][f"{k}_hi"] - hw[key][f"{k}_lo"]) / 2)
                 for key in common if hw[key][f"{k}_hi"] > hw[key][f"{k}_lo"]]
            ratios[k] = max(r) if r else None
        out["in_half_widths"] = ratios
    return out


def _spread(values: list[float]) -> dict:
    return {"min": min(values), "median": statistics.median(values), "max": max(values)}


def _row(name: str, spec: dict, args, rate: float, torch_threads: int | None, work_root: Path) -> dict:
    row = {**COMMON, **spec}
    rounds = args.rounds or row.get("rounds", 3)
    stride = args.torch_beta_stride or row.get("torch_beta_stride", 1)
    work = work_root / name
    work.mkdir()
    (work / "phase.toml").write_text(_config_text(row))
    layers = round(row["t1"] / row["dt"])
    pairs = row["systems"] * row["beta"][2] * len(row.get("sigma") or (0.0,))
    flops = layers * attention_flops(pairs, row["n"], row["d"])
    # Q = K = V = I: neither program multiplies by the weights; its matmuls are the scores and P x
    flops_computed = layers * pairs * 4.0 * row["n"] ** 2 * row["d"]
    attnflow_cmd = [sys.executable, "-m", "attnflow", "phase", str(work / "phase.toml"), "--out", "OUT"]
    tables_cmd = attnflow_cmd + ["--no-figures"]
    use_torch = torch_threads is not None
    if use_torch:
        _start_clouds(row, work / "x0.npy")
        torch_cmd, torch_betas = _torch_cmd(row, work, torch_threads, stride)
        scale = row["beta"][2] / torch_betas
    load_before = os.getloadavg()
    # the command keeps its compiled programs (attnflow.runs.enable_compile_cache): a folder of the row's own, so
    # that round 0 is a machine's first run (XLA compiles) and the later rounds read the kept programs
    # (the command without figures keeps its own, so that its round 0 is a first run as well)
    cache_env = {**os.environ, "ATTNFLOW_COMPILE_CACHE": str(work / "xla")}
    tables_env = {**os.environ, "ATTNFLOW_COMPILE_CACHE": str(work / "xla-tables")}
    times = {"attnflow": [], "attnflow_tables": [], "torch": []}
    commands = {"attnflow": (attnflow_cmd, cache_env), "attnflow_tables": (tables_cmd, tables_env)}
    for j in range(rounds):
        # the three commands in an order rotated each round: none always runs first, or last
        order = ["attnflow", "attnflow_tables", "torch"]
        order = order[j % 3:] + order[:j % 3]
        for who in order:
            if who in commands:
                cmd, env = commands[who]
                out = work / f"{who.replace('_', '-')}-{j}"
                times[who].append(_timed([out.as_posix() if c == "OUT" else c for c in cmd], env))
            elif use_torch:
                times["torch"].append(_timed(torch_cmd) * scale)
        print(f"  {name} round {j}: attnflow {times['attnflow'][-1]:.1f} s, without figures "
              f"{times['attnflow_tables'][-1]:.1f} s" + (f", torch {times['torch'][-1]:.1f} s" if use_torch else ""),
              file=sys.stderr, flush=True)
    result = {"row": name, **{k: row[k] for k in ("systems", "n", "d", "t1", "dt", "checkpoints", "threshold")},
              "sigma": list(row.get("sigma") or (0.0,)),
              "betas": row["beta"][2], "beta_range": row["beta"][:2], "layers": layers, "system_steps": pairs * layers,
              "flops": flops, "flops_without_projections": flops_computed, "rounds": rounds, "load_before": load_before, "load_after": os.getloadavg(),
              "attnflow_s": times["attnflow"], "attnflow_command": " ".join(attnflow_cmd),
              "attnflow_tables_s": times["attnflow_tables"], "attnflow_tables_command": " ".join(tables_cmd)}
    med = statistics.median(times["attnflow"])
    result.update(attnflow_s_per_system_step=med / (pairs * layers), attnflow_fraction_of_matmul=flops / med / rate,
                  attnflow_fraction_of_matmul_without_projections=flops_computed / med / rate)
    if use_torch:
        ratios = [t / a for t, a in zip(times["torch"], times["attnflow"])]
        tmed = statistics.median(times["torch"])
        result.update(torch_s=times["torch"], torch_threads=torch_threads, torch_command=" ".join(torch_cmd),
                      torch_betas_run=torch_betas, torch_time_scaled_by=scale, ratio=_spread(ratios),
                      ratio_first_run=ratios[0], ratio_kept_programs=_spread(ratios[1:]) if len(ratios) > 1 else None,
                      **_tables_ratios(times["torch"], times["attnflow_tables"]),
                      torch_s_per_system_step=tmed / (pairs * layers), torch_fraction_of_matmul=flops / tmed / rate,
                      torch_fraction_of_matmul_without_projections=flops_computed / tmed / rate,
                      largest_difference_of_means=_largest_difference(work / "attnflow-0" / "cells.csv",
                                                                      work / "torch.csv", bool(row.get("sigma"))))
    return result


def _tables_ratios(torch_s: list[float], tables_s: list[float]) -> dict:
    """torch / attnflow without figures, round by round: the spread, the first run's, the kept programs' spread."""
    ratios = [t / a for t, a in zip(torch_s, tables_s)]
    return {"ratio_tables": _spread(ratios), "ratio_tables_first_run": ratios[0],
            "ratio_tables_kept_programs": _spread(ratios[1:]) if len(ratios) > 1 else None}


def _choose_threads(spec: dict, work_root: Path) -> dict:
    """Time the torch script once with 1 and with 2 threads on a row (the small one); the faster is used for
    every row."""
    row = {**COMMON, **spec}
    work = work_root / "threads"
    work.mkdir()
    _start_clouds(row, work / "x0.npy")
    seconds = {t: _timed(_torch_cmd(row, work, t, 1)[0]) for t in (1, 2)}
    return {"seconds": seconds, "chosen": min(seconds, key=seconds.get)}


def _first_and_kept(label: str, seconds: list[float], first: float, kept: dict | None) -> str:
    """One line: the first run's seconds and ratio, then the later runs' median seconds and ratio spread."""
    later = (f"{statistics.median(seconds[1:]):.2f} s, ratio {kept['min']:.2f}/{kept['median']:.2f}/{kept['max']:.2f}"
             if kept else "-")
    return f"  {label} the first run (XLA compiles) {seconds[0]:.2f} s, ratio {first:.2f}; later runs (kept programs) {later}"


def format_result(result: dict) -> str:
    lines = [f"phase job vs PyTorch ({result['machine']['cpu']}, {result['machine']['cpu_count']} cores; float64 "
             f"matmul {result['matmul_f64']['flops_per_s'] / 1e9:.1f} GFLOP/s; torch threads "
             f"{result.get('torch_threads', {}).get('chosen', '-')}; load average before the rows "
             f"{' '.join(f'{x:.1f}' for x in result['rows'][0]['load_before']) if result['rows'] else '-'})"]
    if settings := settings_line(result["machine"]):
        lines.append(settings)
    head = (f"{'row':>8} {'systems x betas':>16} {'d':>4} {'attnflow s':>11} {'torch s':>9} {'ratio min/med/max':>20} "
            f"{'ns/sys-step a | t':>20} {'GFLOP':>8} {'of matmul a | t':>18} {'(no projections)':>18}")
    lines += [head, "-" * len(head)]
    for r in result["rows"]:
        a = statistics.median(r["attnflow_s"])
        t = statistics.median(r["torch_s"]) if "torch_s" in r else float("nan")
        ratio = r.get("ratio")
        spread = f"{ratio['min']:.1f}/{ratio['median']:.1f}/{ratio['max']:.1f}" if ratio else "-"
        per = f"{r['attnflow_s_per_system_step'] * 1e9:.0f} | {r.get('torch_s_per_system_step', float('nan')) * 1e9:.0f}"
        frac = f"{r['attnflow_fraction_of_matmul']:.2%} | {r.get('torch_fraction_of_matmul', float('nan')):.2%}"
        bare = (f"{r['attnflow_fraction_of_matmul_without_projections']:.2%} | "
                f"{r.get('torch_fraction_of_matmul_without_projections', float('nan')):.2%}")
        lines.append(f"{r['row']:>8} {r['systems']:>8} x {r['betas']:<5} {r['d']:>4} {a:>11.1f} {t:>9.1f} {spread:>20} "
                     f"{per:>20} {r['flops'] / 1e9:>8.1f} {frac:>18} {bare:>18}")
    for r in result["rows"]:
        for label, times, key in ((f"{r['row']}:", "attnflow_s", "ratio"),
                                  (f"{r['row']} without figures (the torch script's outputs: tables only):",
                                   "attnflow_tables_s", "ratio_tables")):
            if r.get(f"{key}_first_run") is not None:
                lines.append(_first_and_kept(label, r[times], r[f"{key}_first_run"], r.get(f"{key}_kept_programs")))
    return "\n".join(lines)


def run(quick: bool, torch: bool, out: Path, *, rows: list[str] | None = None, rounds: int | None = None,
        threads: int = 0, torch_beta_stride: int | None = None) -> dict:
    """Time the rows (``quick``: toy sizes) against the torch script (``torch``), write the JSON to ``out``,
    return it. ``rounds`` / ``torch_beta_stride`` (None: each row's own) apply to every row."""
    import jax

    table = QUICK_ROWS if quick else ROWS
    names = rows or list(table)
    unknown = [r for r in names if r not in table]
    if unknown:
        raise SystemExit(f"bench_phase: unknown row(s) {unknown}; choose among {list(table)}.")
    args = argparse.Namespace(rounds=rounds or (2 if quick else None), torch_beta_stride=torch_beta_stride)
    # both sides start from byte-compiled Python, as installed packages do (pip compiles torch's modules;
    # an editable attnflow under PYTHONDONTWRITEBYTECODE would recompile its sources in every command)
    compileall.compile_dir(str(ROOT / "attnflow"), quiet=1)
    if torch:
        try:
            import torch as _  # noqa: F401
        except ImportError:
            torch = False
    with jax.enable_x64(True):  # the rate of the work's own dtype
        rate = matmul_rate("float64", n=512 if quick else 2048)
    result = {"kind": "bench_phase", "quick": quick, "machine": machine_info(), "matmul_f64": rate, "rows": []}
    with tempfile.TemporaryDirectory(prefix="bench_phase_") as tmp:
        work_root = Path(tmp)
        torch_threads = None
        if torch:
            if threads:
                result["torch_threads"] = {"chosen": threads, "seconds": None}
            else:
                result["torch_threads"] = _choose_threads(table["small"], work_root)
            torch_threads = result["torch_threads"]["chosen"]
        for name in names:
            result["rows"].append(_row(name, table[name], args, rate["flops_per_s"], torch_threads, work_root))
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_json(out, result)
    return result


def main(argv=None) -> int:
    args = parse(argv)
    rows = args.rows.split(",") if args.rows else None
    result = run(args.quick, not args.no_torch, args.out, rows=rows, rounds=args.rounds, threads=args.threads,
                 torch_beta_stride=args.torch_beta_stride)
    print(format_result(result))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
