"""``attnflow reproduce``: the theorem-by-theorem reproduction report."""

from __future__ import annotations

import argparse

from ._commands import DEFAULT_OUTS, summary


def add_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser(
        "reproduce",
        help=summary("reproduce"),
        description="Check each theorem of Geshkovski et al. (2023) numerically: hypotheses, predicted vs "
        "observed with pass/fail and margin, figures. Writes report.md, summary.json, checks.csv, PNG/GIF "
        "figures, the resolved config and provenance into --out.",
    )
    DEFAULT_OUT = DEFAULT_OUTS["reproduce"]
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT}); an existing "
                   "folder must be a previous reproduce report, which is replaced only when the run succeeds")
    p.add_argument("--config", default=None, help="TOML file overriding keys of configs/reproduce.toml")
    p.add_argument("--quick", action="store_true",
                   help="smoke run of about a minute (tiny n, short horizon: not a reproduction; checks that need a "
                        "long horizon fail)")
    p.add_argument("--case", action="append", default=None, metavar="NAME",
                   help="run only this case (repeatable); see --list")
    p.add_argument("--list", action="store_true", help="list the case names and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.epilog = "Exit status: 0 when every graded check passes, 1 when a check or a case failed (the report is " \
               "written either way), 2 on bad input, 130 when interrupted (Ctrl-C; the previous report is kept)."
    p.set_defaults(func=_main)
    return p


def _main(args) -> int:
    from ..report import CASES, case_names, reproduce

    if args.list:
        for name in case_names():
            print(f"{name:22s} {CASES[name][0]}")
        return 0
    summary = reproduce(args.out, config=args.config, quick=args.quick, cases=args.case,
                        progress=not args.no_progress)
    for name, case in summary["cases"].items():
        checks = [c for c in summary["checks"] if c["case"] == name]
        graded = [c for c in checks if c["passed"] is not None]
        failed = [c["name"] for c in graded if not c["passed"]]
        print(f"{name:20s} {sum(bool(c['passed']) for c in graded)}/{len(graded)} pass"
              + (f"  FAILED: {'; '.join(failed)}" if failed else ""))
        for h in case["hypotheses"]:
            print(f"    {'ok  ' if h['holds'] else 'FAIL'} {h['text']}")
        if case.get("error"):
            print(f"    CASE FAILED: {case['error']}")
    print(f"{summary['num_passed']} of {summary['num_graded']} checks pass "
          f"({summary['num_checks'] - summary['num_graded']} measurements); report: {args.out}/report.md")
    return 0 if summary["all_passed"] else 1
