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
    g = p.add_argument_group(
        "several processes (hosts)",
        "Split the chunks over P processes that share the output folder: start the same command once per "
        "process with these three options (process 0 serves the coordinator and writes the table). Under "
        "SLURM, Open MPI or Kubernetes set run.distributed = true in the config instead.")
    g.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0 (the same for all processes)")
    g.add_argument("--num-processes", type=int, metavar="P", help="number of processes")
    g.add_argument("--process-id", type=int, metavar="I", help="this process's index, 0 .. P-1")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    import json

    from ..sweep import load_sweep_config, parse_sweep_config, run_sweep

    config = parse_sweep_config(load_sweep_config(args.config))
    processes = {k: v for k, v in (("coordinator", args.coordinator), ("num_processes", args.num_processes),
                                   ("process_id", args.process_id)) if v is not None}
    summary = run_sweep(config, args.out, num_devices=args.devices, progress=False if args.no_progress else None,
                        processes=processes or None)
    if summary.get("process_count", 1) > 1:
        print(f"process {summary['process_index']} of {summary['process_count']}: computed "
              f"{summary['chunks_computed_here']} of {summary['chunks']} chunks")
    if summary.get("process_index", 0) == 0:
        if summary.get("headline"):
            print(summary["headline"])
        elif "crosstab_predicted_observed" in summary:
            print(f"{summary['systems']} systems; predicted -> observed counts:")
            print(json.dumps(summary["crosstab_predicted_observed"], indent=1))
        print(f"results in {args.out}")
    return 0
