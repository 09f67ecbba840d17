"""``attnflow phase CONFIG --out DIR``: a phase diagram of clustering over beta, n, d and time."""

from __future__ import annotations

import argparse

from ._commands import add_run_options, cpu_device_per_core, run_options, share_line, summary


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
    p.add_argument("--no-figures", action="store_true",
                   help="write the tables, summary and report.md only (no heat maps or other figures; the same "
                   "command without it later resumes every chunk and draws them)")
    add_run_options(p)
    p.set_defaults(func=_run, before_jax=_figure_workers)


def _figure_workers(args: argparse.Namespace):
    """The figure workers (:class:`attnflow.plot._workers.FigureWorkers`), started before JAX is imported: they
    import matplotlib on the cores this process leaves idle while it imports JAX (a process other than the first
    of a multi-process run draws nothing)."""
    from ..plot._workers import FigureWorkers, worker_count

    drawing = (run_options(args)["processes"] or {}).get("process_id", 0) == 0 and not args.no_figures
    return FigureWorkers(worker_count(4), preload=("attnflow.phase._figures",), draw=drawing)


def _run(args: argparse.Namespace, pool) -> int:
    return _phase(args, run_options(args), pool)


def _phase(args: argparse.Namespace, options: dict, pool) -> int:
    from ..phase import check_phase_config, load_phase_config, run_phase

    config = check_phase_config(load_phase_config(args.config))
    # the sphere's program has no LAPACK call inside it (the span's reduction is pure jnp): it can run on one
    # XLA:CPU device per core; the rescaled pictures' solves and exponentials (batched LAPACK) would risk the
    # thread-pool deadlock of several CPU devices (attnflow.sweep.needs_per_system_loop), so they keep one
    if config.dynamics.name == "sphere" and options["processes"] is None and not config.run.distributed:
        cpu_device_per_core(config.run.devices if options["num_devices"] is None else options["num_devices"])
    s = run_phase(config, args.out, figure_workers=pool, figures=not args.no_figures, **options)
    several = s.get("process_count", 1) > 1
    if several:  # each process says what it did; process 0 also writes the results
        print(share_line(s, s["chunks_computed_here"], s["chunks"], "chunks",
                         f"{s.get('chunks_resumed_here', 0)} of its share resumed from an earlier run"))
    if s.get("process_index", 0) != 0:
        return 0
    for g in s["groups"]:
        p = g["pairs_clustered_at_t1"]
        noise = f", sigma = {g['sigma']:g}" if g.get("sigma") else ""
        print(f"n = {g['n']}, d = {g['d']}{noise}: fraction of clustered pairs at t = {s['t_last']:g}: "
              f"{p['beta_min']:.3f} at beta = {s['beta'][0]:g}, {p['beta_max']:.3f} at beta = {s['beta'][-1]:g}")
    for fit in s["lifetime_fits"]:
        noise = f", sigma = {fit['sigma']:g}" if fit.get("sigma") else ""
        where = f"n = {fit['n']}, d = {fit['d']}{noise}: first plateau lifetime"
        if fit["slope"] is not None:
            print(f"{where} ~ exp({fit['slope']:.3f} beta) [{fit['slope_lo']:.3f}, {fit['slope_hi']:.3f}] (pooled)")
        else:
            print(f"{where}, pooled over cluster counts: not fitted: {fit['not_fitted']}")
        for p in fit.get("by_count", []):  # a fixed cluster configuration: the law the theory speaks of
            print(f"{where} with {p['count']} clusters ~ exp({p['slope']:.3f} beta) "
                  f"[{p['slope_lo']:.3f}, {p['slope_hi']:.3f}]")
    done = s["chunks"] - s["chunks_computed_here"]
    chunks = "" if several else f"{s['chunks']} chunks: {done} resumed, {s['chunks_computed_here']} computed; "
    print(f"{s['cells']} cells, {s['runs']} runs ({s['nonfinite_runs']} non-finite, excluded); {chunks}"
          f"results in {args.out}")
    return 0
