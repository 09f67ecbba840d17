"""``attnflow extensions``: studies beyond the theorems (feed-forward, heads, per-layer weights, causal, sphere)."""

from __future__ import annotations

import argparse

from ._commands import DEFAULT_OUTS, EXTENSION_STUDIES, summary


def add_parser(subparsers) -> argparse.ArgumentParser:
    DEFAULT_OUT, STUDIES = DEFAULT_OUTS["extensions"], EXTENSION_STUDIES

    p = subparsers.add_parser(
        "extensions",
        help=summary("extensions"),
        description="Run the studies beyond the theorems (configs/extensions.toml): predicted vs observed with fixed "
        "tolerances, measurements where nothing is proved, figures. Writes report.md, summary.json, "
        "config.json, provenance.json and PNG figures into --out.",
    )
    p.add_argument("--out", default=DEFAULT_OUT, help=f"output folder (default: {DEFAULT_OUT}); an existing "
                   "folder must be a previous extensions run")
    p.add_argument("--config", default=None, help="TOML file overriding keys of configs/extensions.toml")
    p.add_argument("--quick", action="store_true", help="smoke run: 2 clouds per setting instead of 4 (same n and horizon, which the graded limits need)")
    p.add_argument("--study", action="append", default=None, metavar="NAME", choices=list(STUDIES),
                   help=f"run only this study (repeatable): {', '.join(STUDIES)}")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_main)
    return p


def _main(args) -> int:
    from ..report._extensions import run_extensions

    summary = run_extensions(args.out, config=args.config, quick=args.quick, studies=args.study,
                             progress=not args.no_progress)
    for name, st in summary["studies"].items():
        graded = [c for c in st["checks"] if c["passed"] is not None]
        failed = [c["name"] for c in graded if not c["passed"]]
        print(f"{name:10s} {sum(c['passed'] for c in graded)}/{len(graded)} pass  ({st['seconds']:.1f} s)"
              + (f"  FAILED: {'; '.join(failed)}" if failed else ""))
    print(f"{summary['num_passed']} of {summary['num_graded']} checks pass "
          f"({summary['num_checks'] - summary['num_graded']} measurements); report: {args.out}/report.md")
    return 0
