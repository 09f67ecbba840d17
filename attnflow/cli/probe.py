"""``attnflow probe CONFIG --out DIR``: gradient-based probing of the paper's assumptions."""

from __future__ import annotations

import argparse

from ._commands import add_process_options, process_options, share_line, summary


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
    add_process_options(p, "independent units (the searches of distance-to-failure, the systems of sensitivity; "
                        "beyond-pd runs on process 0)")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..probe import read_probe_config, run_probe
    from ..runs import init_distributed

    processes = process_options(args)
    if processes is not None:  # joined before the config's memory check starts JAX
        init_distributed(False, **processes)
    config = read_probe_config(args.config)  # parsed once, every key checked
    s = run_probe(config, args.out, progress=not args.no_progress, processes=processes)
    if s.get("process_count", 1) > 1:
        print(share_line(s, s["units_computed"], s["units"], "units", s.get("note", "")))
        if s["process_index"] != 0:
            return 0
    print(f"{config.study}: report in {args.out}/report.md")
    return 0
