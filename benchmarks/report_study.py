"""Stability of the report's verdicts as n grows (8 to 1024), under rounding (float32 vs float64)
and over seeds.

Part "n": for each n the Thm 3.1 and Thm 4.2 (2-d) cases and the negative controls run with one
initial configuration (figures off). Part "dtype": every case runs in float32 at the default sizes.
Part "seeds": the whole default report (4 configurations per case) once per seed. Prints a Markdown
table per part: graded checks passed / graded, and the names of the failed ones; the seeds part
also prints the largest solver step count and the Remark 3.3 times as multiples of the mechanism's
ln(1/rel_tol)/kappa (the check passes up to 2).

    PYTHONPATH=. python benchmarks/report_study.py [--parts n dtype seeds] [--ns 8 32 128 512 1024]
        [--seeds 0 1 ... 11] [--json out.json]

Not a test (minutes on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import tempfile
import time
from pathlib import Path

import jax


def _row(summary, case):
    g = [c for c in summary["checks"] if c["case"] == case and c["passed"] is not None]
    failed = [c["name"] for c in g if not c["passed"]]
    err = summary["failed_cases"].get(case)
    return f"{sum(bool(c['passed']) for c in g)}/{len(g)}", "; ".join(failed) + (f" [{err[:80]}]" if err else "")


def main() -> None:
    from attnflow.report import case_names

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--parts", nargs="+", choices=("n", "dtype", "seeds"), default=["n", "dtype"],
                   help="which studies to run (default: n dtype; seeds runs the whole report once per seed)")
    p.add_argument("--ns", type=int, nargs="+", default=[8, 32, 128, 512, 1024])
    p.add_argument("--seeds", type=int, nargs="+", default=list(range(12)))
    p.add_argument("--json", default=None)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    out = {"n": {}, "dtype": {}, "seeds": {}}
    if "n" in args.parts:
        _n_part(args, tmp, out)
    if "dtype" in args.parts:
        _dtype_part(tmp, out, case_names())
    if "seeds" in args.parts:
        _seeds_part(args, tmp, out)
    if args.json:
        Path(args.json).write_text(json.dumps(out, default=str))


def _remark33_ratios(summary) -> tuple[float, float]:
    """The largest Remark 3.3 times over the report, as multiples of ln(1/rel_tol)/kappa: (75% of
    the tokens, every token). The check's limit is 2 of these units (its predicted text ends with
    '= limit'; its observed text lists the per-run times)."""
    most, every = 0.0, 0.0
    for c in summary["checks"]:
        if c["name"] != "Remark 3.3: clustered early" or c["passed"] is None:
            continue
        unit = float(re.search(r"= ([0-9.e+-]+)$", c["predicted"]).group(1)) / 2
        t_most, t_all = (max(float(v) for v in re.findall(r"inf|nan|-?[0-9.]+(?:e[+-]?[0-9]+)?", part))
                         for part in re.findall(r"\[([^\]]*)\]", c["observed"])[:2])
        most, every = max(most, t_most / unit), max(every, t_all / unit)
    return most, every


def _seeds_part(args, tmp, out) -> None:
    from attnflow.report import reproduce

    print("\n| seed | passed | failed checks | most solver steps (case) | Remark 3.3 75% / every token "
          "(x ln(1/rel)/kappa) | seconds |\n|---|---|---|---|---|---|")
    for seed in args.seeds:
        t = time.time()
        folder = tmp / f"seed{seed}"
        s = reproduce(folder, progress=False, figures=False, overrides={"seed": seed, "gif_frames": 0})
        failed = [f"{c['case']}: {c['name']}" for c in s["checks"] if c["passed"] is False]
        failed += [f"{case} [{err[:60]}]" for case, err in s["failed_cases"].items()]
        steps = [(int(r["solver_steps"]), r["case"]) for r in csv.DictReader(open(folder / "systems.csv"))
                 if r.get("solver_steps") not in (None, "")]
        most_steps = max(steps) if steps else (0, "-")
        most, every = _remark33_ratios(s)
        out["seeds"][seed] = {"passed": s["num_passed"], "graded": s["num_graded"], "failed": failed,
                              "most_steps": most_steps, "remark33": [most, every]}
        print(f"| {seed} | {s['num_passed']}/{s['num_graded']} | {'; '.join(failed) or '-'} | "
              f"{most_steps[0]} ({most_steps[1]}) | {most:.2f} / {every:.2f} | {time.time() - t:.0f} |", flush=True)


def _n_part(args, tmp, out) -> None:
    from attnflow.report import reproduce

    cases = ["thm3_1", "thm4_2_2d"]
    print("| n | case | passed | failed checks | seconds |\n|---|---|---|---|---|")
    for n in args.ns:
        over = {"batch": 1, "gif_frames": 0, "num_saves": 41, "thm3_1": {"n": n}, "thm4_2_2d": {"n": n},
                "negative_controls": {"n": min(n, 128)}}
        s = reproduce(tmp / f"n{n}", cases=cases + ["negative_controls"], progress=False, figures=False,
                      overrides=over)
        out["n"][n] = s
        for case in cases + ["negative_controls"]:
            ok, failed = _row(s, case)
            print(f"| {n} | {case} | {ok} | {failed or '-'} | {s['cases'][case]['seconds']:.0f} |", flush=True)


def _dtype_part(tmp, out, all_cases) -> None:
    from attnflow.report import reproduce

    print("\n| case | float64 | float32 | failed in float32 |\n|---|---|---|---|")
    res = {}
    for dtype in ("float64", "float32"):
        res[dtype] = reproduce(tmp / dtype, cases=all_cases, progress=False, figures=False,
                               overrides={"batch": 2, "gif_frames": 0, "dtype": dtype})
    out["dtype"] = res
    for case in all_cases:
        ok64, _ = _row(res["float64"], case)
        ok32, failed32 = _row(res["float32"], case)
        print(f"| {case} | {ok64} | {ok32} | {failed32 or '-'} |", flush=True)


if __name__ == "__main__":
    with jax.enable_x64(True):
        main()
