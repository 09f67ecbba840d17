#!/usr/bin/env python
r"""Two source trees of attnflow timed side by side: the same benchmark rows, interleaved, in one run.

Did a change make anything slower? Export the older tree (``git archive <commit> | tar -x -C DIR``) and run

    python benchmarks/bench_trees.py --old DIR --rounds 2

Each round runs, for each tree in alternating order, every part below as its own process (the tree's
``attnflow`` and ``benchmarks`` on ``PYTHONPATH``, this virtual environment's packages):

* ``suite``: ``python -m benchmarks.suite`` at ``--sizes`` without the baselines (the Euler, Tsit5 and adaptive
  rows of ``make bench``; ``--budget`` seconds a row);
* ``phase``: ``benchmarks/bench_phase.py --rows small --no-torch`` (the phase job as a whole command);
* ``meanfield``: ``benchmarks/bench_meanfield.py`` (the direct and Fourier paths at large n).

The rows both trees have are matched by their keys and compared by their median times over the rounds
(new / old, with the spread of the per-round ratios). A row only one tree has is listed, not compared.
Writes a JSON record (``--out``) and prints the table with the machine and its load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine_info  # noqa: E402

HERE = Path(__file__).resolve().parents[1]
PARTS = ("suite", "phase", "meanfield")


def _commands(part: str, out: Path, args) -> list[str]:
    py = sys.executable
    if part == "suite":
        return [py, "-m", "benchmarks.suite", "--sizes", args.sizes, "--no-torch", "--no-models", "--no-gradients",
                "--no-phase", "--no-meanfield", "--no-tiny", "--budget", str(args.budget), "--out", str(out)]
    if part == "phase":
        return [py, "benchmarks/bench_phase.py", "--rows", "small", "--no-torch", "--rounds", "1",
                "--out", str(out / "phase.json")]
    # a folder: it writes meanfield.json there (without the PyTorch row: not attnflow's time)
    return [py, "benchmarks/bench_meanfield.py", "--no-torch", "--out", str(out)]


def _rows(part: str, out: Path) -> dict[str, float]:
    """Row key -> seconds (the row's median) of one part's output."""
    if part == "suite":
        s = json.loads((out / "summary.json").read_text())
        return {f"{r['method']} {r['dtype']} B={r['B']} n={r['n']} d={r['d']}": r["median_s"]
                for r in s["rows"] if r.get("median_s")}
    if part == "phase":
        s = json.loads((out / "phase.json").read_text())
        rows = s["rows"] if isinstance(s, dict) and "rows" in s else s
        return {f"phase {r['row']} (whole command)": float(r["attnflow_s"][0] if isinstance(r["attnflow_s"], list)
                                                           else r["attnflow_s"]) for r in rows}
    s = json.loads((out / "meanfield.json").read_text())
    # the crossover rows time one evaluation per path instead; beta tells the Fourier rows of one n apart
    return {f"meanfield {r['name']} {r['dtype']} n={r['n']} d={r.get('d', 2)} beta={r.get('beta')}": r["step_median_s"]
            for r in s["rows"] if "step_median_s" in r}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", type=Path, required=True, help="the older source tree (holding attnflow/ and benchmarks/)")
    p.add_argument("--new", type=Path, default=HERE, help="the newer tree (default: this checkout)")
    p.add_argument("--rounds", type=int, default=2, help="interleaved rounds (default 2)")
    p.add_argument("--parts", default=",".join(PARTS), help=f"comma-separated among {', '.join(PARTS)}")
    p.add_argument("--sizes", default="64x256x128,16x1024x64,1x4096x64", help="the suite's sizes (B x n x d)")
    p.add_argument("--budget", type=float, default=8.0, help="the suite's seconds of timed repeats per row")
    p.add_argument("--out", type=Path, default=Path("bench_trees.json"), help="JSON record (default %(default)s)")
    args = p.parse_args(argv)
    parts = [x for x in args.parts.split(",") if x]
    bad = [x for x in parts if x not in PARTS]
    if bad or args.rounds < 1:
        p.error(f"--parts must name parts among {PARTS} and --rounds must be >= 1, got {args.parts!r}, {args.rounds}")
    for tree in (args.old, args.new):
        if not (tree / "attnflow" / "__init__.py").is_file() or not (tree / "benchmarks").is_dir():
            p.error(f"{tree} is not an attnflow source tree (attnflow/__init__.py and benchmarks/ expected)")
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    times: dict[str, dict[str, list[float]]] = {"old": {}, "new": {}}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="attnflow-trees-") as work:
        for j in range(args.rounds):
            order = ("old", "new") if j % 2 == 0 else ("new", "old")
            for part in parts:
                for name in order:
                    out = Path(work) / f"{name}-{part}-{j}"
                    out.mkdir()
                    env = {**os.environ, "PYTHONPATH": str(trees[name])}
                    subprocess.run([sys.executable, "-m", "compileall", "-q", "attnflow", "benchmarks"],
                                   cwd=trees[name], env=env, check=True)
                    t = time.perf_counter()
                    proc = subprocess.run(_commands(part, out, args), cwd=trees[name], env=env,
                                          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                    if proc.returncode != 0:
                        raise SystemExit(f"{name} tree, {part}: exit {proc.returncode}\n{proc.stderr[-2000:]}")
                    for key, s in _rows(part, out).items():
                        times[name].setdefault(key, []).append(s)
                    # every finished part is kept: an interrupted comparison leaves what it measured
                    args.out.write_text(json.dumps({"partial": True, "times": times}, indent=1) + "\n")
                    print(f"round {j + 1}, {name}, {part}: {time.perf_counter() - t:.0f} s", file=sys.stderr,
                          flush=True)
    import numpy as np

    table = []
    for key in sorted(set(times["old"]) | set(times["new"])):
        old, new = times["old"].get(key), times["new"].get(key)
        row = {"row": key, "old_s": old, "new_s": new}
        if old and new and len(old) == len(new):
            ratios = np.asarray(new) / np.asarray(old)
            row.update(ratio_median=float(np.median(new) / np.median(old)), ratio_min=float(ratios.min()),
                       ratio_max=float(ratios.max()))
        table.append(row)
    record = {"machine": machine_info(), "trees": {k: str(v) for k, v in trees.items()}, "rounds": args.rounds,
              "parts": parts, "sizes": args.sizes, "load_before": load_before, "load_after": os.getloadavg(),
              "rows": table}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    m = record["machine"]
    print(f"new / old median time per row ({m.get('cpu', '')}, {m.get('cpu_count', '')} cores; load "
          f"{load_before[0]:.1f} -> {record['load_after'][0]:.1f}); > 1 means the new tree is slower")
    for r in table:
        if "ratio_median" in r:
            print(f"  {r['ratio_median']:6.3f} [{r['ratio_min']:.3f}, {r['ratio_max']:.3f}]  {r['row']}  "
                  f"(old {np.median(r['old_s']):.4g} s, new {np.median(r['new_s']):.4g} s)")
        else:
            print(f"  {'only ' + ('old' if r['new_s'] is None else 'new'):>21}  {r['row']}")
    return record


if __name__ == "__main__":
    main()
