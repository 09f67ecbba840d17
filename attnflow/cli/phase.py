"""``attnflow phase CONFIG --out DIR``: a phase diagram of clustering over beta, n, d and time."""

from __future__ import annotations

import argparse

from ._commands import summary


def add_parser(subparsers) -> None:
    p = subparsers.add_parser(
        "phase",
        help=summary("phase"),
        description="Run the phase diagram described by CONFIG (the shipped configs/phase.toml is the default and "
        "the schema: tokens on the sphere, Q = K = V = I, 90 values of beta in [0.1, 9], d = 2 and 3). For every "
        "grid cell it steps `systems` random clouds and records, at each checkpoint, the fraction of clustered "
        "pairs, the number of clusters, the interaction energy, the dimension of the span and the range of "
        "inner products; it writes cells.csv (means with confidence intervals), metastability.csv (plateaus "
        "of the cluster count and their lifetimes), per-system arrays, heat maps and report.md. Finished "
        "chunks are kept: the same command after an interruption resumes.",
    )
    p.add_argument("config", nargs="?", default=None,
                   help="TOML config (a path, or the name of a shipped config); default: configs/phase.toml")
    p.add_argument("--out", required=True, help="output folder (created; an earlier run of the same config resumes)")
    p.add_argument("--devices", type=int, default=None, help="local devices to shard over (default: config run.devices; 0 = all)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group(
        "several processes (hosts)",
        "Split the chunks over P processes that share the output folder, as for `attnflow sweep`.")
    g.add_argument("--coordinator", metavar="HOST:PORT", help="address of process 0 (the same for all processes)")
    g.add_argument("--num-processes", type=int, metavar="P", help="number of processes")
    g.add_argument("--process-id", type=int, metavar="I", help="this process's index, 0 .. P-1")
    p.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    from ..phase import check_phase_config, load_phase_config, run_phase

    config = check_phase_config(load_phase_config(args.config))
    processes = {k: v for k, v in (("coordinator", args.coordinator), ("num_processes", args.num_processes),
                                   ("process_id", args.process_id)) if v is not None}
    s = run_phase(config, args.out, num_devices=args.devices, progress=False if args.no_progress else None,
                  processes=processes or None)
    if s.get("process_index", 0) != 0:
        print(f"process {s['process_index']} of {s['process_count']}: computed {s['chunks_computed_here']} chunks")
        return 0
    for g in s["groups"]:
        p = g["pairs_clustered_at_t1"]
        print(f"n = {g['n']}, d = {g['d']}: fraction of clustered pairs at t = {s['t_last']:g}: "
              f"{p['beta_min']:.3f} at beta = {s['beta'][0]:g}, {p['beta_max']:.3f} at beta = {s['beta'][-1]:g}")
    for fit in s["lifetime_fits"]:
        if fit["slope"] is not None:
            print(f"n = {fit['n']}, d = {fit['d']}: first plateau lifetime ~ exp({fit['slope']:.3f} beta) "
                  f"[{fit['slope_lo']:.3f}, {fit['slope_hi']:.3f}]")
    done = s["chunks"] - s["chunks_computed_here"]
    print(f"{s['cells']} cells, {s['runs']} runs ({s['nonfinite_runs']} non-finite, excluded); {s['chunks']} chunks: "
          f"{done} resumed, {s['chunks_computed_here']} computed; results in {args.out}")
    return 0
