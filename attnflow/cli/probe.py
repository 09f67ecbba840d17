"""``attnflow probe CONFIG --out DIR``: gradient-based probing of the paper's assumptions."""

from __future__ import annotations

import argparse

from ._commands import summary


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "probe",
        help=summary("probe"),
        description="Run the probe study described by CONFIG (study = \"distance-to-failure\", \"beyond-pd\" or "
        "\"sensitivity\"; the shipped configs/probe-*.toml are the defaults and the schema; every key is checked before "
        "anything runs; distance-to-failure takes your own Q, K, V from [weights] or system.weights_file). Writes "
        "report.md, summary.json, CSV tables, figures and provenance to --out; running the same command again after an "
        "interruption resumes.",
    )
    p.add_argument("config", help="TOML config (a path, or a shipped name such as probe-sensitivity.toml)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--no-progress", action="store_true", help="no progress bars")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..probe import read_probe_config, run_probe

    config = read_probe_config(args.config)  # parsed once, every key checked
    run_probe(config, args.out, progress=not args.no_progress)
    print(f"{config.study}: report in {args.out}/report.md")
    return 0
