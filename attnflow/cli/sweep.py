"""``attnflow sweep CONFIG --out DIR``: a spectral or dynamics sweep over random weights."""

from __future__ import annotations

import argparse


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "sweep",
        help="spectral or dynamics sweep over random weight ensembles (resumable)",
        description="Run the sweep described by CONFIG (kind = \"spectral\" or \"dynamics\"; the shipped "
        "configs/ginibre-spectral.toml and configs/ginibre-dynamics.toml are the defaults and the schema). "
        "Finished chunks are kept: running the same command again after an interruption resumes.",
    )
    p.add_argument("config", help="TOML config (a path, or the name of a shipped config such as ginibre-spectral.toml)")
    p.add_argument("--out", required=True, help="output folder (created; an earlier run of the same config resumes)")
    p.add_argument("--devices", type=int, default=None, help="local devices to shard over (default: config run.devices; 0 = all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import json

    from ..sweep import load_sweep_config, run_sweep

    config = load_sweep_config(args.config)
    summary = run_sweep(config, args.out, num_devices=args.devices, progress=False if args.no_progress else None)
    if summary:
        if summary.get("headline"):
            print(summary["headline"])
        elif "crosstab_predicted_observed" in summary:
            print(f"{summary['systems']} systems; predicted -> observed counts:")
            print(json.dumps(summary["crosstab_predicted_observed"], indent=1))
        print(f"results in {args.out}")
    return 0
