r"""``attnflow phase``: a phase diagram over a grid, resumable and sharded like the sweeps.

The grid's (beta, system) pairs of each (n, d, heads, epsilon) group are cut into chunks
(``run.chunk_size`` pairs), each computed in one compiled program for all its betas
(:mod:`attnflow.phase._engine`) and written atomically with a checksum; a killed run started again
skips the finished chunks and writes the same tables. The run folder holds:

* ``cells.csv`` (and ``cells.parquet``): one row per (grid cell, checkpoint), columns
  :data:`~attnflow.phase.CELL_COLUMNS` (means and confidence intervals);
* ``metastability.csv``: one row per grid cell: the first plateau's lifetime distribution;
* ``systems/g<k>.npz``: per-system arrays of group k (every observable at every checkpoint);
* heat maps (beta x t) of every observable, curves at fixed t, the energy staircase and the lifetime
  against beta, per group; ``report.md``, ``summary.json``, ``config.json``, ``provenance.json``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from .. import runio
from .._resources import check_fits
from .._x64 import in_float64
from ..sweep._chunks import concat, plan_chunks
from ..sweep._runner import check_table_memory, start_sweep
from ..sweep._tables import write_table, write_tables
from ._config import DEFAULT_CONFIG, PhaseConfig, PhaseGroup, check_phase_config
from ._engine import OBSERVABLES, group_pairs, make_chunk_fn
from ._metastability import default_min_duration, first_plateaus, lifetime_slope, lifetime_summary
from ._tables import CELL_COLUMNS, cell_rows, grid_of
from ._theory import equiangular_time

#: the columns of metastability.csv
META_COLUMNS = ["beta", "n", "d", "heads", "epsilon", "systems", "with_plateau", "median", "q25", "q75",
                "censored_fraction", "median_censored", "mean_merges", "mean_plateaus"]
#: bytes of one cell-table row while it is written (columns, concatenation, CSV text), with room to spare
CELL_ROW_BYTES = 1024
#: copies of a cloud's state one pair holds while it runs (state, field, the step's temporaries)
STATE_COPIES = 6


def check_phase_sizes(config: PhaseConfig, devices: int) -> dict:
    """Refuse a grid whose chunk, per-system arrays or cell table cannot fit in memory; return the sizes
    (bytes and counts) that the job prints before it starts."""
    default = runio.load_config(None, DEFAULT_CONFIG)
    item = 8 if config.dtype == "float64" else 4
    n, d, heads = max(config.n), max(config.d), max(config.heads)
    K = len(config.checkpoint_layers)
    saved = (config.num_layers + 1) * (len(OBSERVABLES) + 1) * item  # the save_fn's buffers
    one = STATE_COPIES * heads * n * d * item + heads * n * n * item + saved + 3 * heads * d * d * 8
    if config.dynamics.name == "layered":
        one += 2.0 * config.num_layers * 3 * d * d * item
    per_device = -(-min(config.run.chunk_size, group_pairs(config)) // devices)
    chunk_bytes = per_device * one
    check_fits(f"a chunk of the phase diagram ({per_device} (beta, system) pairs per device)", chunk_bytes,
               [("run.chunk_size", config.run.chunk_size, default["run"]["chunk_size"], 1)])
    group_bytes = float(group_pairs(config)) * K * len(OBSERVABLES) * 8 * 3  # chunks, concatenation, npz buffer
    check_fits(f"the per-system arrays of one group ({group_pairs(config)} pairs x {K} checkpoints)", group_bytes,
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
@runio.releases_output_dirs
def run_phase(config: PhaseConfig | dict, out: str | Path, *, num_devices: int | None = None,
              progress: bool | None = None, processes: dict | None = None) -> dict:
    """Run (or resume) the phase diagram of ``config`` (a table, parsed here, or parsed) into ``out``;
    returns the summary.

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
    sizes = {}

    def check_sizes(devices):
        sizes.update(check_phase_sizes(config, devices))

    sw = start_sweep(config, out, "phase", num_devices=num_devices, progress=progress, processes=processes,
                     check_sizes=check_sizes)
    groups = config.groups
    if sw.progress:
        print(f"phase diagram: {sizes['cells']} cells ({len(config.beta)} beta x {sizes['groups']} group(s)) x "
              f"{config.systems} systems = {sizes['pairs']} runs of {config.num_layers} layers "
              f"({sizes['pair_layers']:.3g} cloud-layers), statistics at {len(config.checkpoint_layers)} "
              f"checkpoints; {_gib(sizes['chunk_bytes'])} per chunk and device", file=sys.stderr, flush=True)
    chunks = plan_chunks([group_pairs(config)] * len(groups), config.run.chunk_size)
    fns: dict[int, object] = {}

    def compute(c):
        if c.group not in fns:
            fns[c.group] = make_chunk_fn(config, groups[c.group], sw.mesh)
        return fns[c.group](c.start, c.stop)

    parts, processes_info = sw.run_chunks(chunks, compute, "phase diagram")
    if sw.process_index != 0:
        return processes_info
    by_group = {g.index: concat([p for c, p in zip(chunks, parts) if c.group == g.index]) for g in groups}
    cells = [cell_rows(config, g, by_group[g.index]) for g in groups]
    write_tables(sw.out, cells, CELL_COLUMNS, sw.formats, name="cells")
    cell_cols = concat(cells)
    t = np.round(np.asarray(config.checkpoint_layers) * config.dt, 12)
    min_duration = default_min_duration(config.t1)
    meta, fits, theory = [], [], {}
    (sw.out / "systems").mkdir(exist_ok=True)
    for g in groups:
        cols = by_group[g.index]
        runio.save_verified_npz(sw.out / "systems" / f"g{g.index:03d}.npz",
                                {k: np.asarray(cols[k]) for k in ("beta_index", "system", "finite", "t_nonfinite",
                                                                  *OBSERVABLES)},
                                {"kind": "phase-systems", "group": g.label}, compress=True)
        rows = {c: [] for c in META_COLUMNS}
        for b, beta in enumerate(config.beta):
            sel = (cols["beta_index"] == b) & cols["finite"]
            first = first_plateaus(t, np.rint(cols["clusters"][sel]).astype(int), min_duration)
            s = lifetime_summary(first)
            for key, value in (("beta", beta), ("n", g.n), ("d", g.d), ("heads", g.heads), ("epsilon", g.epsilon),
                               ("systems", int(sel.sum())), ("mean_merges", float(first["merges"].mean())
                                                             if sel.any() else np.nan),
                               ("mean_plateaus", float(first["plateaus"].mean()) if sel.any() else np.nan)):
                rows[key].append(value)
            for key in ("with_plateau", "median", "q25", "q75", "censored_fraction", "median_censored"):
                rows[key].append(np.nan if s[key] is None else s[key])
        rows = {k: np.asarray(v) for k, v in rows.items()}
        meta.append(rows)
        fit = lifetime_slope(rows["beta"], rows["median"], rows["median_censored"].astype(float) > 0.5,
                             config.confidence)
        fits.append({"group": g.label, "n": g.n, "d": g.d, **fit})
        theory[g.index] = _theory_line(config, g, cell_cols)
    write_table(sw.out / "metastability.csv", meta, META_COLUMNS)
    summary = _summary(config, groups, cell_cols, fits, sizes, min_duration)
    summary.update(devices=int(sw.mesh.shape["batch"]), rows=int(len(cell_cols["beta"])), theory={
        groups[k].label: v for k, v in theory.items()})
    runio.atomic_write_json(sw.out / "summary.json", summary)
    figures = _figures(config, groups, cell_cols, by_group, meta, fits, theory, sw.out)
    _report(config, summary, figures, sw.out)
    return dict(summary, **processes_info)


def _theory_line(config: PhaseConfig, g: PhaseGroup, cells: dict) -> dict | None:
    """The equiangular model's time to the threshold per beta, from the cells' initial mean inner product;
    only where it is the model's own dynamics (sphere, Q = K = V = I)."""
    if not (config.dynamics.name == "sphere" and config.v_ensemble == "identity" and config.qk_ensemble == "identity"):
        return None
    rho0 = grid_of(cells, g, config, "ip_mean")[:, 0]
    times = [equiangular_time(float(r), config.threshold, b, g.n, config.normalisation)
             for r, b in zip(rho0, config.beta)]
    return {"beta": list(config.beta), "t": times, "rho0": rho0.tolist()}


def _summary(config, groups, cells, fits, sizes, min_duration) -> dict:
    last = np.asarray(config.checkpoint_layers)[-1] * config.dt
    heads = []
    for g in groups:
        frac = grid_of(cells, g, config, "pairs_clustered")
        half = []
        for b in range(len(config.beta)):
            above = np.flatnonzero(frac[b] >= 0.5)
            half.append(round(float(np.asarray(config.checkpoint_layers)[above[0]] * config.dt), 12) if above.size else None)
        heads.append({"group": g.label, "n": g.n, "d": g.d, "heads": g.heads, "epsilon": g.epsilon,
                      "pairs_clustered_at_t1": {"beta_min": float(frac[0, -1]), "beta_max": float(frac[-1, -1])},
                      "time_half_pairs_clustered": dict(zip(map(str, config.beta), half))})
    nonfinite = int(np.sum(cells["nonfinite"][cells["layer"] == 0]))
    return {"kind": "phase", "dynamics": config.dynamics.record(), "normalisation": config.normalisation,
            "v_ensemble": config.v_ensemble, "qk_ensemble": config.qk_ensemble, "weights": config.weights,
            "beta": list(config.beta), "n": list(config.n), "d": list(config.d), "systems": config.systems,
            "t1": config.t1, "dt": config.dt, "t_last": float(last), "threshold": config.threshold,
            "checkpoints": len(config.checkpoint_layers), "spacing": config.spacing, "dtype": config.dtype,
            "cells": sizes["cells"], "runs": sizes["pairs"], "nonfinite_runs": nonfinite,
            "plateau_min_duration": min_duration, "groups": heads, "lifetime_fits": fits}


_MAPS = (("pairs_clustered", "fraction of pairs clustered", False),
         ("clusters", "clusters (mean)", True),
         ("energy", "E_beta / e^beta / (2 beta) (mean; 1: one cluster)", False),
         ("span", "dimension of the span (mean)", False))


def _figures(config, groups, cells, by_group, meta, fits, theory, out: Path) -> dict:
    from .. import plot as ap

    t = np.round(np.asarray(config.checkpoint_layers) * config.dt, 12)
    log_t = config.spacing == "log"
    tt = np.where(t > 0, t, t[1] / 2 if len(t) > 1 else 1.0) if log_t else t  # t = 0 on a log axis
    figures = {}
    for g in groups:
        tag = f"g{g.index:03d}"
        names = []
        fig, axes = ap.new_figure(2, 2, panel=(5.2, 4.0))
        for ax, (name, label, log) in zip(axes.ravel(), _MAPS):
            overlay = None
            line = theory.get(g.index)
            if name == "pairs_clustered" and line is not None:
                ok = np.isfinite(line["t"]) & (np.asarray(line["t"]) <= t[-1])
                overlay = (np.asarray(line["t"])[ok], np.asarray(line["beta"])[ok],
                           f"equiangular model reaches {config.threshold:g}")
            values = grid_of(cells, g, config, name)
            if name == "energy":  # relative to its largest value, e^beta / (2 beta): comparable across beta
                beta = np.asarray(config.beta)[:, None]
                values = values * 2 * beta * np.exp(-beta)
            ap.phase_diagram(values, beta=config.beta, t=tt, ax=ax, log_color=log,
                             log_t=log_t, label=label, overlay=overlay, title=label)
        fig.suptitle(f"{config.dynamics.name}, n = {g.n}, d = {g.d}: {config.systems} systems per cell")
        names += ap.save(fig, out / f"phase_{tag}.png", close=True)
        frac = grid_of(cells, g, config, "pairs_clustered")
        at = [t[len(t) // 8], t[len(t) // 2], t[-1]]
        ax = ap.curves_at_fixed_t(frac, beta=config.beta, t=t, at=at, lo=grid_of(cells, g, config, "pairs_clustered_lo"),
                                  hi=grid_of(cells, g, config, "pairs_clustered_hi"),
                                  title=f"n = {g.n}, d = {g.d}: mean and {config.confidence:.0%} interval")
        names += ap.save(ax.figure, out / f"curves_{tag}.png", close=True)
        cols = by_group[g.index]
        b = len(config.beta) // 2
        sel = np.flatnonzero((cols["beta_index"] == b) & cols["finite"])[:4]
        ax = ap.staircase(t, cols["energy"][sel], clusters=cols["clusters"][sel],
                          title=f"beta = {config.beta[b]:g}, n = {g.n}, d = {g.d}")
        names += ap.save(ax.figure, out / f"staircase_{tag}.png", close=True)
        m = meta[g.index]
        ax = ap.lifetime_vs_beta(m["beta"], m["median"], q25=m["q25"], q75=m["q75"],
                                 censored=m["median_censored"].astype(float) > 0.5, fit=fits[g.index],
                                 title=f"n = {g.n}, d = {g.d}")
        names += ap.save(ax.figure, out / f"lifetime_{tag}.png", close=True)
        figures[g.index] = [x for x in names if x.endswith(".png")]
    return figures


def _report(config: PhaseConfig, summary: dict, figures: dict, out: Path) -> None:
    lines = [f"# Phase diagram: {config.dynamics.name} dynamics", "",
             f"{summary['cells']} grid cells, {config.systems} systems each ({summary['runs']} runs of "
             f"{config.num_layers} layers, dt = {config.dt:g}, {config.dtype}); statistics at "
             f"{summary['checkpoints']} {config.spacing} checkpoints; pairs count as clustered when "
             f"<x_i, x_j> >= {config.threshold:g}. Weights: Q^T K {config.qk_ensemble}, V {config.v_ensemble} "
             f"({config.weights}).", ""]
    if summary["nonfinite_runs"]:
        lines += [f"**{summary['nonfinite_runs']} run(s) became non-finite** and are excluded from every mean "
                  "(counted in the `nonfinite` column of cells.csv).", ""]
    for g, head, fit in zip(config.groups, summary["groups"], summary["lifetime_fits"]):
        lines += [f"## n = {g.n}, d = {g.d}" + (f", heads = {g.heads}" if config.dynamics.name == "multihead" else "")
                  + (f", epsilon = {g.epsilon:g}" if config.dynamics.name == "layered" else ""), ""]
        p = head["pairs_clustered_at_t1"]
        lines.append(f"At t = {summary['t_last']:g} the fraction of clustered pairs is {p['beta_min']:.3f} at "
                     f"beta = {config.beta[0]:g} and {p['beta_max']:.3f} at beta = {config.beta[-1]:g}.")
        if fit["slope"] is not None:
            lines.append(f"The median lifetime of the first plateau of the cluster count grows like "
                         f"exp({fit['slope']:.3f} beta), slope interval [{fit['slope_lo']:.3f}, {fit['slope_hi']:.3f}] "
                         f"({config.confidence:.0%}, {fit['cells']} cells whose median is not censored).")
        else:
            lines.append(f"Too few cells ({fit['cells']}) have an uncensored median plateau lifetime for a fit of "
                         "log T against beta.")
        lines.append("")
        lines += [f"![{name}]({name})" for name in figures[g.index]]
        lines.append("")
    lines += ["## Reading", "",
              "A plateau is a run of constant cluster count (>= 2) lasting at least "
              f"{summary['plateau_min_duration']:g} time units; its lifetime is censored when it lasts to the end "
              "(metastability.csv). The dashed line on the first heat map (sphere, Q = K = V = I) is the time an "
              "equiangular cloud with the cells' initial mean inner product needs to reach the threshold.", "",
              "Files: cells.csv (per cell and checkpoint: means and intervals), metastability.csv, systems/*.npz "
              "(per-system arrays), summary.json, config.json, provenance.json."]
    runio.atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
