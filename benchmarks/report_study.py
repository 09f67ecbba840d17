"""Stability of the report's verdicts as n grows (8 to 1024) and under rounding (float32 vs float64).

For each n the Thm 3.1 and Thm 4.2 (2-d) cases and the negative controls run with one initial
configuration (figures off); then every case runs in float32 at the default sizes. Prints a
Markdown table per part: graded checks passed / graded, and the names of the failed ones.

    PYTHONPATH=. python benchmarks/report_study.py [--ns 8 32 128 512 1024] [--json out.json]

Not a test (minutes on a 2-core CPU).
"""

from __future__ import annotations

import argparse
import json
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
    from attnflow.report import case_names, reproduce

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ns", type=int, nargs="+", default=[8, 32, 128, 512, 1024])
    p.add_argument("--json", default=None)
    args = p.parse_args()
    tmp = Path(tempfile.mkdtemp())
    out = {"n": {}, "dtype": {}}
    cases = ["thm3_1", "thm4_2_2d"]
    print("| n | case | passed | failed checks | seconds |\n|---|---|---|---|---|")
    for n in args.ns:
        over = {"batch": 1, "gif_frames": 0, "num_saves": 41, "thm3_1": {"n": n}, "thm4_2_2d": {"n": n},
                "negative_controls": {"n": min(n, 128)}}
        t = time.time()
        s = reproduce(tmp / f"n{n}", cases=cases + ["negative_controls"], progress=False, figures=False,
                      overrides=over)
        out["n"][n] = s
        for case in cases + ["negative_controls"]:
            ok, failed = _row(s, case)
            print(f"| {n} | {case} | {ok} | {failed or '-'} | {s['cases'][case]['seconds']:.0f} |", flush=True)
        del t
    print("\n| case | float64 | float32 | failed in float32 |\n|---|---|---|---|")
    all_cases = case_names()
    res = {}
    for dtype in ("float64", "float32"):
        res[dtype] = reproduce(tmp / dtype, cases=all_cases, progress=False, figures=False,
                               overrides={"batch": 2, "gif_frames": 0, "dtype": dtype})
    out["dtype"] = res
    for case in all_cases:
        ok64, _ = _row(res["float64"], case)
        ok32, failed32 = _row(res["float32"], case)
        print(f"| {case} | {ok64} | {ok32} | {failed32 or '-'} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(out, default=str))


if __name__ == "__main__":
    with jax.enable_x64(True):
        main()
