r"""``attnflow phase``: a phase diagram over a grid, resumable and sharded like the sweeps.

The grid's (beta, system) pairs of each (n, d, heads, epsilon) group are cut into chunks
(``run.chunk_size`` pairs), each computed in one compiled program for all its betas
(:mod:`attnflow.phase._engine`) and written atomically with a checksum; a killed run started again
skips the finished chunks and writes the same tables. The run folder holds:

* ``cells.csv`` (and ``cells.parquet``): one row per (grid cell, checkpoint), columns
  :data:`~attnflow.phase.CELL_COLUMNS` (means and confidence intervals);
* ``metastability.csv``: one row per grid cell: the first metastable plateau (:mod:`attnflow.phase._metastability`'s
  rule): systems with one, still waiting for one (``pending``), merges inside the run (``events``), the
  censored fraction, the Kaplan-Meier quartiles of its lifetime, its median cluster count and start, and
  whether the cell enters the fit of log T against beta (``in_fit``); the fits (pooled, and per cluster
  count of the first plateau; left-truncated, intervals clustered by cloud) are in ``summary.json``
  (``lifetime_fits``) and read in ``report.md``, with a per-beta table and the run's precision (a float32 run
  checks a sample in float64, ``dtype_check``);
* ``systems/g<k>.npz``: per-system arrays of group k (every observable at every checkpoint);
* heat maps (beta x t) of every observable, curves at fixed t, the energy staircase and the first plateau's
  lifetime against beta (pooled and per cluster count), per group; ``report.md``, ``summary.json``, ``config.json``, ``provenance.json``.
"""

from __future__ import annotations

import contextlib
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from .. import runs
from .._resources import check_fits
from .._x64 import in_float64
from ..kernels.sphere import sphere_degree
from ..observables import ENERGY_REL_TOL, HOLD_RATIO, first_plateaus
from ..plot._workers import FigureWorkers, worker_count
from ..runs import check_table_memory, concat, plan_chunks, start_chunked, write_table, write_tables
from ._config import DEFAULT_CONFIG, PhaseConfig, PhaseGroup, check_phase_config, log_step_scale
from ._engine import OBSERVABLES, circle_statistics_modes, column_layout, group_pairs, make_chunk_fn
from ._engine import sphere_statistics_bound
from ._figures import MAPS
from ._metastability import MIN_FIT_CELLS, MIN_FIT_CLUSTERS, MIN_RETAINED, lifetime_slope, lifetime_summary
from ._tables import CELL_COLUMNS, cell_rows, finite_rows, grid_of
from ._theory import equiangular_time

#: the module of the job's figure functions (drawn in figure worker processes)
FIGURE_MODULE = "attnflow.phase._figures"
#: the columns of metastability.csv
META_COLUMNS = ["beta", "n", "d", "heads", "epsilon", "sigma", "systems", "with_plateau", "pending", "events",
                "censored_fraction", "median", "q25", "q75", "median_censored", "plateau_count", "plateau_start",
                "mean_merges", "mean_plateaus", "mean_energy_plateaus", "in_fit"]
#: the columns of plateaus.csv (prepared starts: every metastable plateau of every system; ``start_smallest_gap``
#: and ``start_spread`` are the cluster geometry of the system's start cloud, the same for every beta)
PLATEAU_COLUMNS = ["beta", "n", "d", "sigma", "system", "index", "count", "start", "end", "lifetime", "censored",
                   "truncation", "start_smallest_gap", "start_spread"]
#: a cell's lifetimes enter the fit of log T against beta when at least this fraction of its systems reached a
#: metastable plateau (below it most clouds collapse to one cluster with no metastable state to time)
FIT_MIN_PLATEAU_FRACTION = 0.5
#: a fit restricted to the first plateaus of c clusters is reported with at least this many merges, over at
#: least MIN_FIT_CELLS betas (fewer give intervals too wide to read)
BY_COUNT_MIN_EVENTS = 10
#: the float32 check: a float64 re-run, from the same float32 start clouds, of this many betas (evenly spread over
#: the grid, both ends included: the precision matters most at large beta, where clusters sit near each other for
#: long and a merge's timing depends on rounding) ...
DTYPE_CHECK_BETAS = 5
#: ... and of this many clouds per beta (the first ones), per group: 1.4% of the shipped grid's runs
DTYPE_CHECK_SYSTEMS = 32
#: the report's per-beta table shows at most this many betas, evenly spread over the grid with both ends
REPORT_BETAS = 8
#: bytes of one cell-table row while it is written (columns, concatenation, CSV text), with room to spare
CELL_ROW_BYTES = 1024
#: copies of a cloud's state one pair holds while it runs (state, field, the step's temporaries)
STATE_COPIES = 6


def check_phase_sizes(config: PhaseConfig, devices: int) -> dict:
    """Refuse a grid whose chunk, per-system arrays or cell table cannot fit in memory; return the sizes
    (bytes and counts) that the job prints before it starts."""
    default = runs.load_config(None, DEFAULT_CONFIG)
    item = 8 if config.dtype == "float64" else 4
    n, d, heads = max(config.n), max(config.d), max(config.heads)
    K = len(config.checkpoint_layers)
    saved = (config.num_layers + 1) * (len(OBSERVABLES) + 1) * item  # the save_fn's buffers
    # n x n arrays for the groups with a dense Gram matrix; the large clouds in the plane read their statistics from
    # the sorted angles (attnflow.observables.circle_gram_statistics), with a few arrays of n K; those in R^3 from a
    # k-d tree on the host (a few arrays of n), their sphere path's blocks of at most 4096 tokens x (L + 1)^2
    modes = {g.index: circle_statistics_modes(config, g) for g in config.groups}
    bounds = {g.index: sphere_statistics_bound(config, g) for g in config.groups}
    dense_n = max((g.n for g in config.groups if modes[g.index] is None and bounds[g.index] is None), default=0)
    circle_nk = max((g.n * (modes[g.index] + 2) for g in config.groups if modes[g.index] is not None), default=0)
    sphere_nh = max((min(g.n, 4096) * (sphere_degree(bounds[g.index], config.dtype) + 1) ** 2 + 8 * g.n
                     for g in config.groups if bounds[g.index] is not None), default=0)
    one = (STATE_COPIES * heads * n * d * item + heads * dense_n * dense_n * item + 4 * circle_nk * item
           + 4 * sphere_nh * 8 + saved + 3 * heads * d * d * 8)
    if config.dynamics.name == "layered":
        one += 2.0 * config.num_layers * 3 * d * d * item
    per_device = -(-min(config.run.chunk_size, group_pairs(config)) // devices)
    chunk_bytes = per_device * one
    # each pair holds n x n arrays (scores, the Gram matrix of its statistics): the key that grew most is named
    default_n = default["n"] if isinstance(default["n"], int) else max(default["n"])
    check_fits(f"a chunk of the phase diagram ({per_device} (beta, system) pairs per device, n = {max(dense_n, 1)} "
               "tokens with a dense Gram matrix)",
               chunk_bytes, [("run.chunk_size", min(config.run.chunk_size, group_pairs(config)),
                              default["run"]["chunk_size"], 1), ("n", max(dense_n, 1), default_n, 2)])
    # process 0 holds every group's per-system columns at once, with as much again for the chunk transfers, the
    # tables and the metastability rule's scratch arrays
    columns_bytes = 2.0 * len(config.groups) * group_pairs(config) * K * len(OBSERVABLES) * item
    check_fits(f"the per-system arrays ({len(config.groups)} group(s) x {group_pairs(config)} pairs x {K} "
               "checkpoints)", columns_bytes,
               [("systems", config.systems, default["systems"], 1), ("checkpoints", config.checkpoints,
                                                                    default["checkpoints"], 1)])
    rows = len(config.groups) * len(config.beta) * K
    check_table_memory("the phase diagram", "checkpoints", config.checkpoints, default["checkpoints"], rows,
                       CELL_ROW_BYTES)
    pairs = len(config.groups) * group_pairs(config)
    return {"groups": len(config.groups), "cells": len(config.groups) * len(config.beta), "pairs": pairs,
            "pair_layers": float(pairs) * config.num_layers, "chunk_bytes": chunk_bytes, "rows": rows}


def _gib(b: float) -> str:
    return f"{b / 2**30:.2f} GiB" if b >= 2**28 else f"{b / 2**20:.1f} MiB"


@in_float64
@runs.releases_output_dirs
def run_phase(config: PhaseConfig | dict, out: str | Path, *, num_devices: int | None = None,
              progress: bool | None = None, processes: dict | None = None,
              figure_workers: int | FigureWorkers | None = None, dtype_check: bool = True,
              figures: bool = True) -> dict:
    """Run (or resume) the phase diagram of ``config`` (a table, parsed here, or parsed) into ``out``;
    returns the summary.

    The figures are drawn by ``figure_workers`` worker processes (default: one per figure, at most 4
    and at most the cores, none on one core; :class:`attnflow.plot._workers.FigureWorkers`), started
    before the chunks compile so that they have imported matplotlib when the results come; 0 draws
    them in this process; a :class:`~attnflow.plot._workers.FigureWorkers` of the caller's (started
    earlier still, as ``attnflow phase`` does before it imports JAX) is used and left open. The files
    are the same either way. ``figures=False`` draws none and starts no worker (the tables and summary are
    the same, report.md says that no figure was drawn; the same call with figures resumes every chunk and
    draws them).
    The chunk programs stay built in the process (the last 8): the same config run again (a resume, another
    folder, :func:`~attnflow.phase.ensemble`) traces and compiles none.

    A float32 run re-runs :data:`DTYPE_CHECK_BETAS` betas x :data:`DTYPE_CHECK_SYSTEMS` clouds per group in
    float64 from the same float32 start clouds and says in ``report.md`` (``summary.json``: ``dtype_check``)
    whether the precision moved the mean cluster count or clustered pairs beyond the cells' intervals
    (``dtype_check=False`` skips it; a float64 run has none).

    Example:
        >>> import tempfile, pathlib
        >>> from attnflow.phase import load_phase_config, run_phase
        >>> cfg = load_phase_config(None)
        >>> cfg.update(beta=[1.0, 4.0], d=2, n=6, systems=3, t1=2.0, checkpoints=5)
        >>> cfg["run"]["progress"] = False
        >>> s = run_phase(cfg, pathlib.Path(tempfile.mkdtemp()) / "out")
        >>> s["cells"], s["rows"]
        (2, 10)
    """
    config = check_phase_config(config)
    draw = bool(figures)  # (the name figures is the figures' futures below)
    sizes = {}

    def check_sizes(devices):
        sizes.update(check_phase_sizes(config, devices))

    sw = start_chunked(config, out, "phase", num_devices=num_devices, progress=progress, processes=processes,
                     check_sizes=check_sizes)
    groups = config.groups
    if sw.progress:
        print(f"phase diagram: {sizes['cells']} cells ({len(config.beta)} beta x {sizes['groups']} group(s)) x "
              f"{config.systems} systems = {sizes['pairs']} runs of {config.num_layers} layers "
              f"({sizes['pair_layers']:.3g} cloud-layers), statistics at {len(config.checkpoint_layers)} "
              f"checkpoints; {_gib(sizes['chunk_bytes'])} per chunk and device", file=sys.stderr, flush=True)
    chunks = plan_chunks([group_pairs(config)] * len(groups), config.run.chunk_size)
    fns: dict[int, object] = {}
    # process 0 gathers every group's columns: the chunks it computes are copied into them straight from the
    # devices' buffers (no second copy when the chunks are joined), the others once read from their files
    layout = column_layout(config)
    by_group = {g.index: {k: np.empty((group_pairs(config), *shape), dtype) for k, (dtype, shape) in layout.items()}
                for g in groups} if sw.process_index == 0 else {}

    programs: dict = {}  # the compiled programs, shared by the groups of a (beta, sigma) grid

    def compute(c):
        if c.group not in fns:
            fns[c.group] = make_chunk_fn(config, groups[c.group], sw.mesh, programs=programs)
        into = {k: v[c.start:c.stop] for k, v in by_group[c.group].items()} if by_group else None
        return fns[c.group](c.start, c.stop, into=into)

    if not draw:
        pool = FigureWorkers(draw=False)
    elif isinstance(figure_workers, FigureWorkers):
        pool = contextlib.nullcontext(figure_workers)
    else:
        if sw.process_index != 0:
            figure_workers = 0  # process 0 writes the results
        elif figure_workers is None:
            figure_workers = worker_count(4 * len(groups))
        pool = FigureWorkers(figure_workers, preload=(FIGURE_MODULE,))
    # they import matplotlib while the chunks compile; the last chunk's file is written while the tables and
    # figures are made (leaving the block waits for it)
    with pool as drawing, runs.WriteBehind() as chunk_writer:
        parts, processes_info = sw.run_chunks(chunks, compute, "phase diagram", writer=chunk_writer)
        if sw.process_index != 0:
            return processes_info
        for c, part in zip(chunks, parts):  # chunks resumed from their files, or recomputed after a damage
            for k, dest in by_group[c.group].items():
                if not np.may_share_memory(part[k], dest):
                    dest[c.start:c.stop] = part[k]
        del parts
        (sw.out / "systems").mkdir(exist_ok=True)
        # the per-system files (hashing, deflating and writing a GiB takes seconds) are written on a thread of
        # their own while this one makes the tables and fits: zlib, hashlib, file writes and NumPy's large
        # loops release the GIL
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="attnflow-systems-writer") as writer:
            saved = [writer.submit(runs.save_verified_npz, sw.out / "systems" / f"g{g.index:03d}.npz",
                                   {k: np.asarray(by_group[g.index][k]) for k in ("beta_index", "system", "finite",
                                                                                  "t_nonfinite", *OBSERVABLES)},
                                   {"kind": "phase-systems", "group": g.label}, compress=True) for g in groups]
            cells = [cell_rows(config, g, by_group[g.index]) for g in groups]
            cell_cols = concat(cells)
            t = np.round(np.asarray(config.checkpoint_layers) * config.dt, 12)
            theory = {g.index: _theory_line(config, g, cell_cols) for g in groups}
            figures = {g.index: _cell_figures(drawing, config, g, t, cell_cols, theory[g.index], sw.out)
                       for g in groups}
            noise = _noise_families(config, groups, cell_cols)
            noise_figures = [drawing.submit(
                f"{FIGURE_MODULE}:noise_curves", sw.out / f"noise_{k:03d}.png", fam["sigma"], list(config.betas_at(fam["n"])),
                fam["order"], fam["order_lo"], fam["order_hi"], 1 / np.sqrt(fam["n"]), fam["title"])
                for k, fam in enumerate(noise)]
            write_tables(sw.out, cells, CELL_COLUMNS, sw.formats, name="cells")
            meta, fits = [], []
            for g in groups:
                cols = by_group[g.index]
                figures[g.index].append(_staircase_figure(drawing, config, g, t, cols, sw.out))
                rows, fit = _metastability(config, g, cols, t)
                meta.append(rows)
                fits.append(fit)
                figures[g.index].append(drawing.submit(
                    f"{FIGURE_MODULE}:lifetimes", sw.out / f"lifetime_g{g.index:03d}.png", rows, fit,
                    f"{_group_title(g)}: first metastable plateau"))
            for done in saved:
                done.result()
        write_table(sw.out / "metastability.csv", meta, META_COLUMNS)
        if config.prepared:
            write_table(sw.out / "plateaus.csv", [_every_plateau(config, g, by_group[g.index], t) for g in groups],
                        PLATEAU_COLUMNS)
        precision = _dtype_check(config, sw, by_group, cell_cols, t) if dtype_check else None
        summary = _summary(config, groups, cell_cols, fits, sizes)
        for head, g, rows in zip(summary["groups"], groups, meta):
            head["per_beta"] = _per_beta(config, g, cell_cols, rows)
        summary.update(devices=int(sw.mesh.shape["batch"]), rows=int(len(cell_cols["beta"])), theory={
            groups[k].label: v for k, v in theory.items()}, dtype_check=precision)
        summary["noise"] = [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in fam.items() if k != "title"}
                            for fam in noise]
        runs.atomic_write_json(sw.out / "summary.json", summary)
        names = {k: [x for f in futures for x in f.result() if x.endswith(".png")] for k, futures in figures.items()}
        names["noise"] = [x for f in noise_figures for x in f.result() if x.endswith(".png")]
    _report(config, summary, names if draw else None, sw.out)
    return dict(summary, **processes_info)


def _noise_families(config: PhaseConfig, groups, cells: dict) -> list[dict]:
    """Per (n, d, heads, epsilon) of a grid over several sigma: the order parameter at the last checkpoint and its
    interval as (len(beta), len(sigma)) arrays (the (beta, sigma) phase diagram's reading); none without a sigma
    list."""
    if len(config.sigma) < 2:
        return []
    out = []
    families = {}
    for g in groups:
        families.setdefault((g.n, g.d, g.heads, g.epsilon), []).append(g)
    for (n, d, heads, epsilon), members in families.items():
        members = sorted(members, key=lambda g: g.sigma)
        fam = {"n": n, "d": d, "heads": heads, "epsilon": epsilon, "sigma": [g.sigma for g in members],
               "title": f"n = {n}, d = {d}: {config.systems} systems per cell, t = {config.t1:g}"}
        for name in ("order", "order_lo", "order_hi"):
            fam[name] = np.stack([grid_of(cells, g, config, name)[:, -1] for g in members], axis=1)
        out.append(fam)
    return out


def _noise_lines(config: PhaseConfig, summary: dict, names: list[str]) -> list[str]:
    """The report's noise section: per family, the order parameter at t1 by beta (rows) and sigma (columns)."""
    if not summary.get("noise"):
        return []
    lines = ["## Noise: the order parameter", "",
             f"The order parameter r = |mean of the directions u_i| at t = {summary['t_last']:g} (mean over the "
             f"finite systems and its {config.confidence:.0%} interval; from the recorded mean inner product, "
             "r^2 = (1 + (n - 1) ip_mean) / n exactly). 1 is one cluster; n independent uniform directions give "
             "r of about 1/sqrt(n) (E r^2 = 1/n), the finite-n floor of a disordered state. Every sigma runs the "
             "same clouds on the same Brownian paths, scaled by sigma.", ""]
    for fam, name in zip(summary["noise"], names + [None] * len(summary["noise"])):
        lines += [f"n = {fam['n']}, d = {fam['d']} (floor 1/sqrt(n) = {1 / np.sqrt(fam['n']):.3f}):", "",
                  "| beta | " + " | ".join(f"sigma = {x:g}" for x in fam["sigma"]) + " |",
                  "| --- |" + " --- |" * len(fam["sigma"])]
        for b, r, lo, hi in zip(config.betas_at(fam["n"]), fam["order"], fam["order_lo"], fam["order_hi"]):
            lines.append(f"| {b:g} | " + " | ".join(f"{x:.3f} [{a:.3f}, {z:.3f}]" for x, a, z in zip(r, lo, hi)) + " |")
        lines.append("")
        if name:
            lines += [f"![{name}]({name})", ""]
    return lines


def _group_title(g: PhaseGroup) -> str:
    """The group in a figure's title: n and d, and the noise when there is some."""
    return f"n = {g.n}, d = {g.d}" + (f", sigma = {g.sigma:g}" if g.sigma else "")


def _metastability(config: PhaseConfig, g: PhaseGroup, cols: dict, t: np.ndarray) -> tuple[dict, dict]:
    """One group's metastability.csv rows (per beta: first metastable plateaus, Kaplan-Meier quartiles) and the
    censored fit of log T against beta over the cells with a metastable plateau in most systems."""
    rows = {c: [] for c in META_COLUMNS}
    fit_beta, fit_life, fit_cen, fit_cut, fit_cloud, all_first = [], [], [], [], [], []
    for (sel, m, _), beta in zip(finite_rows(cols, len(config.beta)), config.betas_at(g.n)):
        first = first_plateaus(t, np.rint(cols["clusters"][sel]).astype(int), energy=cols["energy"][sel],
                               prepared=config.prepared)
        first["cloud"] = np.asarray(cols["system"][sel])  # the same cloud at every beta: the fits cluster on it
        s = lifetime_summary(first)
        all_first.append((beta, first))
        has = np.isfinite(first["lifetime"])
        in_fit = m > 0 and s["with_plateau"] >= FIT_MIN_PLATEAU_FRACTION * m
        if in_fit:
            fit_beta.append(np.full(int(has.sum()), beta))
            fit_life.append(first["lifetime"][has])
            fit_cen.append(first["censored"][has])
            fit_cut.append(first["truncation"][has])
            fit_cloud.append(first["cloud"][has])

        def mean(a):
            return float(np.mean(a)) if len(a) else np.nan

        def median(a):
            return float(np.median(a)) if len(a) else np.nan

        values = {"beta": beta, "n": g.n, "d": g.d, "heads": g.heads, "epsilon": g.epsilon, "sigma": g.sigma,
                  "systems": m,
                  "plateau_count": median(first["count"][has]), "plateau_start": median(first["start"][has]),
                  "mean_merges": mean(first["merges"]), "mean_plateaus": mean(first["plateaus"]),
                  "mean_energy_plateaus": mean(first["energy_plateaus"]), "in_fit": bool(in_fit)}
        values.update({k: np.nan if s[k] is None else s[k] for k in
                       ("with_plateau", "pending", "events", "censored_fraction", "median", "q25", "q75")})
        values["median_censored"] = bool(s["median_censored"])  # False also where no system has a plateau
        for key in META_COLUMNS:
            rows[key].append(values[key])
    rows = {k: np.asarray(v) for k, v in rows.items()}
    cat = (lambda parts: np.concatenate(parts) if parts else np.zeros(0))
    fit = lifetime_slope(cat(fit_beta), cat(fit_life), cat(fit_cen).astype(bool), config.confidence,
                         truncation=cat(fit_cut), clusters=cat(fit_cloud))
    lifetimes = cat(fit_cen)
    fit.update(group=g.label, n=g.n, d=g.d, sigma=g.sigma,
               censored_fraction=float(lifetimes.mean()) if lifetimes.size else None,
               **dict(zip(("by_count", "by_count_not_identified"), _fits_by_count(config, all_first))))
    return rows, fit


def _every_plateau(config: PhaseConfig, g: PhaseGroup, cols: dict, t: np.ndarray) -> dict:
    """One group's plateaus.csv rows (prepared starts): every metastable plateau of every finite run
    (:func:`attnflow.observables.plateau_table`, timed from t = 0), with the geometry of the system's start cloud
    (:func:`attnflow.observables.cluster_geometry`: smallest gap between the prepared clusters and their spread)."""
    from ..observables import cluster_geometry, plateau_table
    from ._engine import start_clouds

    rows = {c: [] for c in PLATEAU_COLUMNS}
    systems = np.arange(config.systems)
    start_geometry = [cluster_geometry(x, config.threshold) for x in start_clouds(config, g, systems)]
    gap = np.array([s["smallest_gap"] for s in start_geometry])
    spread = np.array([s["spread"] for s in start_geometry])
    for (sel, m, _), beta in zip(finite_rows(cols, len(config.beta)), config.betas_at(g.n)):
        table = plateau_table(t, np.rint(cols["clusters"][sel]).astype(int), prepared=True)
        system = np.asarray(cols["system"][sel])[table["system"]]
        size = len(system)
        columns = {"beta": np.full(size, beta), "n": np.full(size, g.n), "d": np.full(size, g.d),
                   "sigma": np.full(size, g.sigma), "system": system, "start_smallest_gap": gap[system],
                   "start_spread": spread[system],
                   **{k: table[k] for k in ("index", "count", "start", "end", "lifetime", "censored", "truncation")}}
        for key in PLATEAU_COLUMNS:
            rows[key].append(columns[key])
    return {k: np.concatenate(v) if v else np.zeros(0) for k, v in rows.items()}


def _fits_by_count(config: PhaseConfig, firsts: list[tuple[float, dict]]) -> tuple[list[dict], list[dict]]:
    """The fit of log T against beta restricted to the systems whose first metastable plateau has c clusters,
    for every c with a fit (the pooled fit mixes counts that grow with beta), with the per-beta Kaplan-Meier
    medians of those systems; and the counts with enough merges whose fit is not identified (with the reason)."""
    beta = np.concatenate([np.full(len(f["count"]), b) for b, f in firsts])
    first = {k: np.concatenate([f[k] for _, f in firsts]) for k in ("count", "lifetime", "censored", "truncation",
                                                                    "cloud")}
    out, skipped = [], []
    for c in sorted({int(c) for c in first["count"] if c >= 2}):
        sel = first["count"] == c
        fit = lifetime_slope(beta[sel], first["lifetime"][sel], first["censored"][sel], config.confidence,
                             truncation=first["truncation"][sel], clusters=first["cloud"][sel])
        if fit["slope"] is None and fit["events"] >= BY_COUNT_MIN_EVENTS and fit["not_fitted"].startswith("not id"):
            skipped.append({"count": c, "not_fitted": fit["not_fitted"]})
        if fit["slope"] is None or fit["events"] < BY_COUNT_MIN_EVENTS:  # (fewer than MIN_FIT_CELLS betas: None)
            continue
        medians, censored = [], []
        for b, _ in firsts:  # every beta of the group (a beta_law: gamma g(n)), in the grid's order
            s = lifetime_summary({k: first[k][sel & (beta == b)] for k in ("lifetime", "censored")})
            medians.append(np.nan if s["median"] is None else s["median"])
            censored.append(bool(s["median_censored"]))
        out.append({"count": c, **fit, "median": medians, "median_censored": censored})
    return out, skipped


def _spread(count: int, most: int) -> np.ndarray:
    """At most ``most`` indices of ``count`` evenly spread, the first and the last included."""
    return np.unique(np.round(np.linspace(0, count - 1, min(most, count))).astype(int))


def _per_beta(config: PhaseConfig, g: PhaseGroup, cells: dict, meta: dict) -> list[dict]:
    """The report's per-beta rows of one group (:data:`REPORT_BETAS` betas): the clouds, the mean cluster count and
    clustered pairs at the last checkpoint with their intervals, the clouds with a metastable plateau and the
    Kaplan-Meier median of its lifetime (``median_censored``: a lower bound)."""
    def at_t1(name):
        return grid_of(cells, g, config, name)[:, -1]

    out = []
    clouds = grid_of(cells, g, config, "systems")[:, 0]
    for b in _spread(len(config.beta), REPORT_BETAS):
        row = {"beta": float(config.betas_at(g.n)[b]), "systems": int(clouds[b]),
               "with_plateau": None if not np.isfinite(meta["with_plateau"][b]) else int(meta["with_plateau"][b]),
               "median": None if not np.isfinite(meta["median"][b]) else float(meta["median"][b]),
               "median_censored": bool(meta["median_censored"][b])}
        for name in ("clusters", "pairs_clustered"):
            row[name] = [float(at_t1(name)[b]), float(at_t1(f"{name}_lo")[b]), float(at_t1(f"{name}_hi")[b])]
        out.append(row)
    return out


def _dtype_check(config: PhaseConfig, sw, by_group: dict, cells: dict, t: np.ndarray) -> dict | None:
    """A float32 run's precision check (:func:`run_phase`): the float64 re-run of a sample of its pairs from the
    same float32 start clouds, compared paired with the run's own columns (:func:`compare_columns`); per group the
    largest move of the mean cluster count and clustered pairs relative to the half-width of the full cell's
    interval, and the clouds whose first metastable plateau changed. None for a float64 run."""
    if config.dtype != "float32":
        return None
    if sw.process_count > 1:
        return {"run": False, "reason": "the float64 check runs in one process; this run used several"}
    import dataclasses

    import jax.numpy as jnp

    from ._compare import compare_columns

    idx = _spread(len(config.beta), DTYPE_CHECK_BETAS)
    m = min(config.systems, DTYPE_CHECK_SYSTEMS)
    betas = tuple(config.beta[i] for i in idx)
    source = {**config.source, "beta": list(betas), "systems": m}
    sample = dataclasses.replace(config, beta=betas, systems=m, source=source)
    sample64 = dataclasses.replace(sample, dtype="float64", source={**source, "dtype": "float64"})
    pairs = (idx[:, None] * config.systems + np.arange(m)[None, :]).reshape(-1)  # beta-major, as the job's
    ours, check = {}, {}
    for g in sample64.groups:
        check[g.label] = make_chunk_fn(sample64, g, sw.mesh, cloud_dtype=jnp.float32)(0, len(betas) * m)
        full = by_group[g.index]
        ours[g.label] = {**{k: np.asarray(full[k][pairs]) for k in ("finite", *OBSERVABLES)},
                         "beta_index": np.repeat(np.arange(len(betas)), m), "system": np.tile(np.arange(m), len(betas))}
    names = ("clusters", "pairs_clustered")
    c = compare_columns(sample, ours, sample64, check, observables=names, paired=True,
                        where="the float32 run and its float64 check")
    rows, K = c["rows"], len(t)
    out = []
    for g in sample.groups:
        in_group = ((rows["n"] == g.n) & (rows["d"] == g.d) & (rows["heads"] == g.heads)
                    & (rows["epsilon"] == g.epsilon) & (rows["sigma"] == g.sigma))
        entry = {"group": g.label, "n": g.n, "d": g.d}
        for name in names:
            sel = in_group & (rows["observable"] == name)
            diff, lo, hi = (rows[k][sel].reshape(len(betas), K) for k in ("diff", "diff_lo", "diff_hi"))
            half = 0.5 * (grid_of(cells, g, config, f"{name}_hi") - grid_of(cells, g, config, f"{name}_lo"))[idx]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = np.where(half > 0, np.abs(diff) / half, np.where(np.abs(diff) > 0, np.inf, 0.0))
            ratio = np.where(np.isfinite(diff), ratio, np.nan)  # a cell without finite systems: not compared
            if np.all(np.isnan(ratio)):
                entry[name] = None
                continue
            b, k = np.unravel_index(np.nanargmax(ratio), ratio.shape)
            entry[name] = {"beta": float(betas[b]), "t": float(t[k]), "diff": float(diff[b, k]),
                           "diff_lo": float(lo[b, k]), "diff_hi": float(hi[b, k]), "half_width": float(half[b, k]),
                           "ratio": float(ratio[b, k]), "beyond": bool(ratio[b, k] > 1)}
        a, r = ours[g.label], check[g.label]
        ok = np.asarray(a["finite"], bool) & np.asarray(r["finite"], bool)
        fa, fr = (first_plateaus(t, np.rint(np.asarray(x["clusters"])[ok]).astype(int)) for x in (a, r))
        same = ((fa["count"] == fr["count"]) & (fa["censored"] == fr["censored"])
                & (np.nan_to_num(fa["lifetime"], nan=-1.0) == np.nan_to_num(fr["lifetime"], nan=-1.0)))
        entry.update(clouds=int(ok.sum()), plateau_changed=int((~same).sum()),
                     clusters_t1_changed=int((np.asarray(a["clusters"])[ok, -1]
                                              != np.asarray(r["clusters"])[ok, -1]).sum()))
        out.append(entry)
    spec = config.dynamics  # its per-system draws are made in the run's dtype: the check's float64 ones differ
    own = {"layered": "per-layer perturbations", "block": "MLP weights"}.get(spec.name) or (
        "feed-forward W" if spec.name == "feedforward" and spec.ff_weight == "random" else None)
    return {"run": True, "betas": list(betas), "systems": m, "groups": out, "other_draws": own,
            "beyond_interval": any(e[n] is not None and e[n]["beyond"] for e in out for n in names)}


def _theory_line(config: PhaseConfig, g: PhaseGroup, cells: dict) -> dict | None:
    """The equiangular model's time to the threshold per beta, from the cells' initial mean inner product;
    only where it is the model's own dynamics (sphere, Q = K = V = I)."""
    if not (config.dynamics.name == "sphere" and config.v_ensemble == "identity" and config.qk_ensemble == "identity"):
        return None
    rho0 = grid_of(cells, g, config, "ip_mean")[:, 0]
    times = [equiangular_time(float(r), config.threshold, b, g.n, config.normalisation)
             for r, b in zip(rho0, config.betas_at(g.n))]
    if config.normalisation == "mean":  # in the job's rescaled time tau = s(beta) t (phase.step_scale)
        times = [float(np.exp(np.log(t) + log_step_scale(b))) if t > 0 else t
                 for t, b in zip(times, config.beta)]
    return {"beta": list(config.betas_at(g.n)), "t": times, "rho0": rho0.tolist()}


def _summary(config, groups, cells, fits, sizes) -> dict:
    last = np.asarray(config.checkpoint_layers)[-1] * config.dt
    heads = []
    for g in groups:
        frac = grid_of(cells, g, config, "pairs_clustered")
        half = []
        for b in range(len(config.beta)):
            above = np.flatnonzero(frac[b] >= 0.5)
            half.append(round(float(np.asarray(config.checkpoint_layers)[above[0]] * config.dt), 12) if above.size else None)
        heads.append({"group": g.label, "n": g.n, "d": g.d, "heads": g.heads, "epsilon": g.epsilon, "sigma": g.sigma,
                      "pairs_clustered_at_t1": {"beta_min": float(frac[0, -1]), "beta_max": float(frac[-1, -1])},
                      "time_half_pairs_clustered": dict(zip(map(str, config.betas_at(g.n)), half)),
                      **({} if config.beta_law == "constant" else {"beta": list(config.betas_at(g.n))})})
    nonfinite = int(np.sum(cells["nonfinite"][cells["layer"] == 0]))
    return {"kind": "phase", "dynamics": config.dynamics.record(), "normalisation": config.normalisation,
            "v_ensemble": config.v_ensemble, "qk_ensemble": config.qk_ensemble, "weights": config.weights,
            "beta": list(config.beta), "n": list(config.n), "d": list(config.d), "sigma": list(config.sigma),
            **({} if config.beta_law == "constant" else {"beta_law": {"law": config.beta_law, "power": config.beta_power,
                                                                     "grid_is": "gamma"}}),
            "systems": config.systems,
            "t1": config.t1, "dt": config.dt, "step_scale": list(config.step_scales),
            "effective_dt": [config.dt / sc for sc in config.step_scales], "t_last": float(last),
            "threshold": config.threshold,
            "checkpoints": len(config.checkpoint_layers), "spacing": config.spacing, "dtype": config.dtype,
            "cells": sizes["cells"], "runs": sizes["pairs"], "nonfinite_runs": nonfinite,
            "plateau_rule": {"hold_ratio": HOLD_RATIO, "min_duration": 0.0, "energy_rel_tol": ENERGY_REL_TOL,
                             "fit_min_plateau_fraction": FIT_MIN_PLATEAU_FRACTION, "min_fit_cells": MIN_FIT_CELLS,
                             "min_fit_clusters": MIN_FIT_CLUSTERS, "min_retained": MIN_RETAINED},
            "groups": heads, "lifetime_fits": fits}


def _cell_figures(drawing: FigureWorkers, config: PhaseConfig, g: PhaseGroup, t: np.ndarray, cells: dict,
                  line: dict | None, out: Path) -> list:
    """Hand one group's heat maps and fixed-t curves (from the cell table; ``t``: the checkpoint times) to the
    figure workers; their futures."""
    log_t = config.spacing == "log"
    tt = np.where(t > 0, t, t[1] / 2 if len(t) > 1 else 1.0) if log_t else t  # t = 0 on a log axis
    overlay = None
    if line is not None:
        ok = np.isfinite(line["t"]) & (np.asarray(line["t"]) <= t[-1])
        overlay = (np.asarray(line["t"])[ok], np.asarray(line["beta"])[ok],
                   f"equiangular model reaches {config.threshold:g}")
    tag = f"g{g.index:03d}"
    grids = {name: grid_of(cells, g, config, name) for name, _, _ in MAPS}
    maps = drawing.submit(f"{FIGURE_MODULE}:heat_maps", out / f"phase_{tag}.png", grids, list(config.betas_at(g.n)), tt,
                          log_t=log_t, overlay=overlay, n=g.n, d=g.d,
                          title=f"{config.dynamics.name}, {_group_title(g)}: {config.systems} systems per cell")
    lo, hi = (grid_of(cells, g, config, f"pairs_clustered_{end}") for end in ("lo", "hi"))
    curves = drawing.submit(f"{FIGURE_MODULE}:curves", out / f"curves_{tag}.png", grids["pairs_clustered"], lo, hi,
                            list(config.betas_at(g.n)), t, [t[len(t) // 8], t[len(t) // 2], t[-1]],
                            f"{_group_title(g)}: mean and {config.confidence:.0%} interval")
    return [maps, curves]


def _staircase_figure(drawing: FigureWorkers, config: PhaseConfig, g: PhaseGroup, t: np.ndarray, cols: dict,
                      out: Path):
    """Hand the energy staircase of the first four finite systems at the middle beta to the figure workers."""
    b = len(config.beta) // 2
    sel = np.flatnonzero((cols["beta_index"] == b) & cols["finite"])[:4]
    return drawing.submit(f"{FIGURE_MODULE}:staircase", out / f"staircase_g{g.index:03d}.png", t,
                          np.asarray(cols["energy"][sel]), np.asarray(cols["clusters"][sel]),
                          rf"$\beta$ = {config.betas_at(g.n)[b]:g}, n = {g.n}, d = {g.d}")


def _lifetime_sentence(fit: dict, confidence: float) -> str:
    """The report's reading of one group's fits of log T against beta (pooled, then per cluster count), with
    their betas and their censoring; a fit that is not made says why."""
    if not fit["betas"]:
        return "No cell has a metastable plateau in most of its systems: no lifetime to fit against beta."
    betas = fit["betas"]
    where = (f"{fit['cells']} cells, beta = {betas[0]:.3g} to {betas[-1]:.3g}, {fit['systems']} systems with a "
             f"metastable plateau, {fit['events']} of them ending in a merge inside the run "
             f"({fit['censored_fraction']:.0%} censored)")
    if fit["slope"] is None:
        text = f"First metastable plateau, log T against beta (pooled): not fitted: {fit['not_fitted']} ({where})."
    else:
        lo, hi = fit["slope_lo"], fit["slope_hi"]
        verdict = ("the median lifetime grows with beta" if lo > 0 else
                   "the median lifetime decreases with beta" if hi < 0 else "no growth with beta is resolved")
        sign = "+" if fit["slope"] >= 0 else "-"
        text = (f"First metastable plateau: log T = {fit['intercept']:.2f} {sign} {abs(fit['slope']):.3f} beta, slope "
                f"{confidence:.0%} interval [{lo:.3f}, {hi:.3f}] (clustered by cloud, {fit['clusters']} clouds; a "
                f"factor {np.exp(fit['slope']):.2f} per unit of beta; spread sigma = {fit['sigma']:.2f} in log T): "
                f"{verdict} ({where}).")
    if fit["censored_fraction"] > 0.5:
        text += (" Most lifetimes outlive the run: the fits lean on the log-normal model's extrapolation past the "
                 "horizon; a longer, log-spaced run (configs/phase-metastability.toml) measures them.")
    parts = [f"c = {p['count']}: {p['slope']:.2f} [{p['slope_lo']:.2f}, {p['slope_hi']:.2f}] (beta {p['betas'][0]:.3g} "
             f"to {p['betas'][-1]:.3g}, {p['systems']} systems, {p['events']} merges)" for p in fit.get("by_count", [])]
    if parts:
        text += (" The number c of clusters of the first plateau depends on beta, so the pooled fit mixes states of "
                 "different geometry; restricted to the systems whose first plateau has c clusters (a fixed "
                 "configuration's lifetime grows exponentially in beta), the slope of log T against beta is "
                 + "; ".join(parts) + ".")
    skipped = fit.get("by_count_not_identified", [])
    return text + "".join(f" c = {p['count']}: not fitted: {p['not_fitted']}." for p in skipped)


def _interval(values: list, digits: int) -> str:
    """``mean [lo, hi]`` of a ``[mean, lo, hi]`` triple (``-`` where there is none)."""
    mean, lo, hi = values
    if not np.isfinite(mean):
        return "-"
    return f"{mean:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]"


def _per_beta_table(rows: list[dict], t1: float, confidence: float) -> list[str]:
    """The report's per-beta table of one group (:func:`_per_beta`'s rows) as Markdown."""
    lines = [f"| beta | clouds | clusters at t = {t1:g} ({confidence:.0%}) | clustered pairs at t = {t1:g} "
             f"({confidence:.0%}) | with a plateau | median lifetime |", "| --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        median = "-" if r["median"] is None else (">" if r["median_censored"] else "") + f"{r['median']:.3g}"
        plateau = "-" if r["with_plateau"] is None else str(r["with_plateau"])
        lines.append(f"| {r['beta']:g} | {r['systems']} | {_interval(r['clusters'], 2)} | "
                     f"{_interval(r['pairs_clustered'], 3)} | {plateau} | {median} |")
    return lines


def _precision_lines(config: PhaseConfig, check: dict | None) -> list[str]:
    """The report's paragraph on the run's precision (:func:`_dtype_check`)."""
    if config.dtype == "float64":
        return ["**Precision.** float64. (A float32 run re-runs a sample of its cells in float64 from the same "
                "start clouds and says here whether the precision moved its statistics beyond their intervals; a "
                "float32 run of the same seed starts from other clouds, so attnflow.phase.compare_runs compares the "
                "two folders unpaired.)"]
    if check is None or not check.get("run"):
        why = "it was not asked for" if check is None else check["reason"]
        return ["**Precision: float32, not checked** (" + why + "). Float32 results at large beta are "
                "dtype-sensitive: where clusters sit close for long, a merge's timing depends on rounding "
                "(docs/guide/phase.md, Metastability, measures an example); rerun a sample in float64."]
    words = {"clusters": ("mean cluster count", 3), "pairs_clustered": ("fraction of clustered pairs", 4)}
    parts = []
    for e in check["groups"]:
        moves = []
        for name, (label, digits) in words.items():
            m = e.get(name)
            if m is None:
                continue
            if m["ratio"] == 0:
                moves.append(f"the {label} not at all")
                continue
            moves.append(f"the {label} by up to {m['diff']:+.{digits}f} [{m['diff_lo']:+.{digits}f}, "
                         f"{m['diff_hi']:+.{digits}f}] (beta = {m['beta']:g}, t = {m['t']:g}; the cell's interval "
                         f"is +-{m['half_width']:.{digits}f}: {'**beyond it**' if m['beyond'] else 'within it'})")
        parts.append(f"for n = {e['n']}, d = {e['d']} it moved " + " and ".join(moves) + f"; the cluster count at "
                     f"t1 changed in {e['clusters_t1_changed']} and the first metastable plateau in "
                     f"{e['plateau_changed']} of {e['clouds']} clouds")
    changed = sum(e["clusters_t1_changed"] + e["plateau_changed"] for e in check["groups"])
    verdict = ("**The precision moves the statistics beyond the diagram's intervals: use dtype = \"float64\" for "
               "these cells.**" if check["beyond_interval"] else
               "The means stay within the diagram's intervals on this sample" + (
                   "; single clouds change, so per-cloud results (lifetimes, merges) at these betas depend on the "
                   "precision." if changed else "."))
    other = "" if not check.get("other_draws") else (
        f" (the dynamics' {check['other_draws']} are drawn in each precision: the re-run's differ, so the check "
        "also holds their sampling error)")
    return [f"**Precision: float32.** A float64 re-run of {len(check['betas'])} betas "
            f"({', '.join(f'{b:g}' for b in check['betas'])}) x {check['systems']} clouds per group from the same "
            f"float32 start clouds{other} (paired differences, as attnflow.phase.compare_runs computes them): "
            + "; ".join(parts) + ". " + verdict]


def _report(config: PhaseConfig, summary: dict, figures: dict | None, out: Path) -> None:
    """report.md; ``figures`` None: the run drew none (``figures=False``), which the report says."""
    drawn = figures is not None
    figures = figures if drawn else {}
    lines = [f"# Phase diagram: {config.dynamics.name} dynamics", "",
             f"{summary['cells']} grid cells, {config.systems} systems each ({summary['runs']} runs of "
             f"{config.num_layers} layers, dt = {config.dt:g}, {config.dtype}); statistics at "
             f"{summary['checkpoints']} {config.spacing} checkpoints; pairs count as clustered when "
             f"<x_i, x_j> >= {config.threshold:g}. Weights: Q^T K {config.qk_ensemble}, V {config.v_ensemble} "
             f"({config.weights}).", ""]
    if config.normalisation == "mean":
        eff = summary["effective_dt"]
        lines += [f"**1/n normalisation:** the field is divided by s(beta) = max(sqrt(beta) e^(beta - 1/2), 1), so "
                  "every time here is that of the rescaled flow dx/dtau = f(x) / s(beta), the 1/n flow at time "
                  f"tau / s(beta); its effective step dt / s(beta) is {eff[0]:.3g} at beta = {config.beta[0]:g} and "
                  f"{eff[-1]:.3g} at beta = {config.beta[-1]:g} (summary.json: step_scale, effective_dt).", ""]
    if config.prepared:
        where = (f"at the given centres {list(config.start_centres)}" if config.start_centres
                 else "around centres drawn uniformly on the sphere per system")
        masses = f"masses {list(config.start_masses)}" if config.start_masses else "equal masses"
        lines += [f"**Prepared start:** every system starts as {config.start_clusters} tight clusters {where} "
                  f"({masses}, angular spread {config.start_spread:g}). The metastability rule times every state "
                  "from t = 0 (prepared=True: the first state is the prepared one, the hold test measures the time "
                  "since the start), and plateaus.csv lists every plateau of every system with the start cloud's "
                  "smallest gap and spread.", ""]
    if summary["nonfinite_runs"]:
        lines += [f"**{summary['nonfinite_runs']} run(s) became non-finite** and are excluded from every mean "
                  "(counted in the `nonfinite` column of cells.csv).", ""]
    lines += _precision_lines(config, summary.get("dtype_check")) + [""]
    if not drawn:
        lines += [("Figures: not drawn (figures=False, `--no-figures`); the same run with figures resumes every "
                   "chunk and draws them."), ""]
    for g, head, fit in zip(config.groups, summary["groups"], summary["lifetime_fits"]):
        lines += [f"## n = {g.n}, d = {g.d}" + (f", heads = {g.heads}" if config.dynamics.name == "multihead" else "")
                  + (f", epsilon = {g.epsilon:g}" if config.dynamics.name == "layered" else "")
                  + (f", noise sigma = {g.sigma:g}" if len(config.sigma) > 1 or g.sigma else ""), ""]
        p = head["pairs_clustered_at_t1"]
        betas = config.betas_at(g.n)
        lines.append(f"At t = {summary['t_last']:g} the fraction of clustered pairs is {p['beta_min']:.3f} at "
                     f"beta = {betas[0]:g} and {p['beta_max']:.3f} at beta = {betas[-1]:g}.")
        lines.append(_lifetime_sentence(fit, config.confidence))
        lines.append("")
        lines += _per_beta_table(head["per_beta"], summary["t_last"], config.confidence)
        if len(head["per_beta"]) < len(betas):  # a long grid: a spread of its betas, every one in the tables
            lines.append(f"({len(head['per_beta'])} of the {len(betas)} betas, spread over the grid; every beta's "
                         "row is in cells.csv and metastability.csv.)")
        lines.append("")
        lines += [f"![{name}]({name})" for name in figures.get(g.index, [])]
        lines.append("")
    lines += _noise_lines(config, summary, figures.get("noise", []))
    rule = summary["plateau_rule"]
    lines += ["## Reading", "",
              "**Metastable plateaus.** On each system's cluster counts, after the cloud has gathered (count at most "
              "half the initial one) and reading the running minimum (merges are irreversible; a count above an "
              "earlier one is the threshold flickering), a run of c >= 2 clusters from t_a to the first merge t_b "
              f"is a metastable plateau when t_b - t_a >= {rule['hold_ratio']:g} t_a (it lasts long compared with "
              "the time the cloud took to reach it; the fast clustering fails this test). The first one's lifetime "
              "t_b - t_a is right-censored when no merge happens before the last checkpoint; systems with no "
              "plateau either end as one cluster or are still on a run too young to qualify at the end (`pending` "
              "in metastability.csv). Per cell, metastability.csv gives the Kaplan-Meier quartiles of the "
              "lifetimes (censored ones as lower bounds; a median that the survival curve does not reach is "
              "marked `median_censored` and drawn open at the largest lifetime; like the lifetimes, they are those "
              "of the states that lasted the hold test's time). Per group, log T = a + b beta + sigma eps is fitted "
              "by maximum likelihood (log-normal lifetimes, censored ones through their survival probability, each "
              f"divided by the survival at the least lifetime the hold test admits, {rule['hold_ratio']:g} t_a: the "
              "lifetimes are left-truncated there) over the cells where at least "
              f"{rule['fit_min_plateau_fraction']:.0%} of the systems reach a plateau (`in_fit`), and not on fewer "
              f"than {rule['min_fit_cells']} betas or {rule['min_fit_clusters']} clouds, nor where it would say that "
              f"fewer than {rule['min_retained']:.0%} of the states reached pass their bound (not identified: the "
              "recorded lifetimes then say nothing of the states below it). System s starts from the "
              "same cloud at every beta, so b's interval is clustered by cloud (a sandwich of the clouds' score "
              "sums). For a fixed configuration of well-separated clusters the lifetime grows exponentially in "
              "beta; the pooled fit mixes configurations (their number of clusters grows with beta), hence the "
              "per-count fits. The energy staircase's "
              f"steps are runs over which E_beta stays within {rule['energy_rel_tol']:.0%} of its value at the "
              "run's start and which pass the same hold test (`mean_energy_plateaus`).", "",
              "The dashed line on the first heat map (sphere, Q = K = V = I; on a grid of fewer than 8 betas, a "
              "diamond on each beta's curve) is the time an equiangular cloud with the cells' initial mean inner "
              "product needs to reach the threshold: exact for n <= d, where such a cloud exists, a heuristic for "
              "n > d, where a random cloud is read as if it were equiangular (the figure's legend says which).", "",
              "Files: cells.csv (per cell and checkpoint: means and intervals), metastability.csv, "
              + ("plateaus.csv (every plateau of every system), " if config.prepared else "")
              + "systems/*.npz (per-system arrays), summary.json, config.json, provenance.json."]
    runs.atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
