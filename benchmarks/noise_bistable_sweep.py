#!/usr/bin/env python
r"""Escapes across the bistable range: n noisy particles' clustered state against the computed free-energy barrier.

At beta = 4 on the circle (1/n attention) the clustered and the uniform states are both stable for sigma_c < sigma <
sigma_fold = 1.0290 sigma_c (:func:`attnflow.meanfield.stationary_branch`). Across that range, at sigma / sigma_c =
``--ratios``, this script computes the barrier :math:`b(\sigma) = \frac{2}{\sigma^2}(F[\text{saddle}] -
F[\text{cluster}])` (:func:`attnflow.meanfield.noise_barrier`), under which n particles escape after
:math:`T \approx C e^{nb}` for :math:`nb \gg 1`, and measures the escape times of ``--systems`` clouds of each n
(:func:`attnflow.meanfield.particle_escape_times`: clouds started from the PDE's stationary clustered state, stochastic
layers of dtau = 0.1 in the rescaled time tau = e^beta t; a cloud has escaped when r falls below ``--past`` times the
saddle's r, i.e. once it is past the saddle (half the cluster's r, the default of ``particle_escape_times``, lies above
the saddle's r for sigma below about 1.02 sigma_c there: a fluctuation would count); censored at ``--t1``): the
exponential law's mean lifetime with its chi-square interval, and the slope of log T against n b
over every (sigma, n) (1 in the barrier's regime): by maximum likelihood from each (sigma, n)'s escape count and
time at risk, so that the (sigma, n) without an escape count as lower bounds
(:func:`attnflow.stats.censored_exponential_fit`, ``censored_fit``), and, as first recorded, by least squares
through the (sigma, n) with escapes only (``fit``). ``--refit RECORD`` adds the first to a saved record.

Writes a JSON record and a figure (``--out``, ``--figure``) and prints the table, labelled with the machine.
``--quick``: two ratios, n = 50 and 100, 8 clouds, t1 = 300 (seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.common import add_record_arguments, machine_info, redrawn  # noqa: E402

BETA = 4.0


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--d", type=int, choices=(2, 3), default=2,
                   help="2: the circle (default); 3: S^2 (bistable up to 1.124 sigma_c at beta = 4)")
    p.add_argument("--ratios", type=float, nargs="+", default=None,
                   help="sigma / sigma_c inside the bistable range (default 1.005 .. 1.025 on the circle, "
                        "1.10 .. 1.12 on S^2, below its fold 1.124)")
    p.add_argument("--n", type=int, nargs="+", default=[100, 200, 400], help="particles per cloud")
    p.add_argument("--systems", type=int, default=32, help="clouds per (sigma, n) (default 32)")
    p.add_argument("--t1", type=float, default=1500.0, help="end time tau (default 1500)")
    p.add_argument("--past", type=float, default=0.75,
                   help="escape when r falls below this fraction of the saddle's r (default 0.75)")
    p.add_argument("--quick", action="store_true", help="two ratios, n = 50 and 100, 8 clouds, t1 = 300")
    p.add_argument("--refit", type=Path, default=None,
                   help="add the censored fit to this saved record, rewrite it and redraw the figure, then stop")
    add_record_arguments(p, "noise_bistable_sweep")
    args = p.parse_args(argv)
    if args.refit is not None:
        record = json.loads(args.refit.read_text())
        record["censored_fit"] = _censored_fit(record)
        args.refit.write_text(json.dumps(record, indent=1) + "\n")
        _print(record)
        _figure(record, args.figure)
        return record
    record = redrawn(args, _figure)
    if record is not None:
        return record
    from attnflow.meanfield import noise_barrier, particle_escape_times, stationary_clustered_state
    from attnflow.stats import fit_slope

    if args.ratios is None:
        args.ratios = [1.005, 1.01, 1.015, 1.02, 1.025] if args.d == 2 else [1.10, 1.105, 1.11, 1.115, 1.12]
    if args.quick:
        args.ratios, args.n, args.systems, args.t1 = args.ratios[1:4:2], [50, 100], 8, 300.0
    machine = machine_info()
    start = time.perf_counter()
    rows = []
    for ratio in args.ratios:
        barrier = noise_barrier(BETA, ratio, d=args.d)
        state = stationary_clustered_state(BETA, ratio, d=args.d)
        for n in args.n:
            t = time.perf_counter()
            out = particle_escape_times(BETA, ratio, n, d=args.d, systems=args.systems, t1=args.t1, dt=0.1,
                                        burn=min(300.0, args.t1 / 5), clustered=state, seed=int(1000 * ratio) + n,
                                        threshold=args.past * barrier["saddle_r"])
            mean = out["mean_lifetime"]
            rows.append({"ratio": ratio, "n": n, "barrier": barrier["slope"], "n_barrier": n * barrier["slope"],
                         "stable_r": barrier["stable_r"], "saddle_r": barrier["saddle_r"], "pde_r": state["r"],
                         "threshold": args.past * barrier["saddle_r"],
                         "events": out["events"], "systems": int(out["lifetime"].size),
                         "exposure": float(np.nansum(out["lifetime"])),
                         "mean_lifetime": [None if not math.isfinite(x) else float(x) for x in mean],
                         "median": out["median"], "nonfinite": out["nonfinite"], "seconds": time.perf_counter() - t})
            print(f"ratio {ratio:g}, n = {n}: b = {barrier['slope']:.5f}, n b = {n * barrier['slope']:.2f}, "
                  f"{out['events']}/{rows[-1]['systems']} escaped, mean lifetime "
                  f"{mean[0]:.4g} [{mean[1]:.4g}, {mean[2]:.4g}], {rows[-1]['seconds']:.0f} s", file=sys.stderr,
                  flush=True)
    seen = [r for r in rows if r["events"] > 0 and r["mean_lifetime"][0] is not None]
    fit = None
    if len(seen) >= 3:
        f = fit_slope(np.array([r["n_barrier"] for r in seen]), np.log([r["mean_lifetime"][0] for r in seen]))
        fit = {"slope": f["slope"], "lo": f["lo"], "hi": f["hi"], "intercept": f["intercept"], "points": len(seen)}
    record = {"machine": machine, "beta": BETA, "d": args.d, "normalisation": "mean", "dt": 0.1, "t1": args.t1,
              "past": args.past,
              "systems": args.systems, "rows": rows, "fit": fit, "quick": args.quick,
              "seconds": time.perf_counter() - start}
    record["censored_fit"] = _censored_fit(record)
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    _figure(record, args.figure)
    return record


def _exposure(row: dict) -> float:
    """A row's time at risk: recorded, or (records written before it was) read back from the exponential law's
    estimates: mean x events, or, with no escape, the 95% lower bound x -log(0.05)."""
    if "exposure" in row:
        return row["exposure"]
    mean = row["mean_lifetime"]
    return mean[0] * row["events"] if row["events"] else mean[1] * -math.log(0.05)


def _censored_fit(r: dict) -> dict:
    from attnflow.stats import censored_exponential_fit

    rows = r["rows"]
    return censored_exponential_fit([row["n_barrier"] for row in rows], [row["events"] for row in rows],
                                    [_exposure(row) for row in rows])


def _print(r: dict) -> None:
    m = r["machine"]
    print(f"{_where(r)}, beta = {r['beta']:g}, 1/n attention, {r['systems']} clouds, tau to {r['t1']:g} "
          f"({m.get('cpu', '')}, {m.get('cpu_count', '')} cores; {r['seconds']:.0f} s)")
    print(f"{'sigma/sigma_c':>13} {'b':>9} {'n':>5} {'n b':>6} {'escaped':>8} {'mean lifetime [95%]':>30}")
    for row in r["rows"]:
        ml = row["mean_lifetime"]
        cell = "inf" if ml[0] is None else f"{ml[0]:.4g}"
        hi = "inf" if ml[2] is None else f"{ml[2]:.4g}"
        print(f"{row['ratio']:>13g} {row['barrier']:>9.5f} {row['n']:>5} {row['n_barrier']:>6.2f} "
              f"{row['events']:>4}/{row['systems']:<3} {cell:>12} [{ml[1]:.4g}, {hi}]")
    f = r["fit"]
    if f:
        print(f"log T against n b over {f['points']} (sigma, n) with escapes: slope {f['slope']:.3f} "
              f"[{f['lo']:.3f}, {f['hi']:.3f}] (the barrier's regime: 1)")
    c = r.get("censored_fit")
    if c and c["slope"] is not None:
        hi = "inf" if c["slope_hi"] is None else f"{c['slope_hi']:.3f}"
        print(f"log T against n b over all {c['groups']} (sigma, n), censored ones included (maximum likelihood, "
              f"{c['events']} escapes): slope {c['slope']:.3f} [{c['slope_lo']:.3f}, {hi}]")


def _where(r: dict, tex: bool = False) -> str:
    return "circle" if r.get("d", 2) == 2 else ("$S^2$" if tex else "S^2")


def _figure(r: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(1, panel=(5.2, 4.0))
    ax = axes[0][0]
    ratios = sorted({row["ratio"] for row in r["rows"]})
    for ratio, colour in zip(ratios, ap.colours(len(ratios))):
        rows = [row for row in r["rows"] if row["ratio"] == ratio]
        x = np.array([row["n_barrier"] for row in rows])
        for row, xi in zip(rows, x):
            ml = row["mean_lifetime"]
            if ml[0] is None:  # nothing escaped: a lower bound
                ax.plot(xi, ml[1], "^", color=colour, mfc="none", ms=6)
            else:
                hi = ml[2] if ml[2] is not None else ml[0]
                ax.errorbar(xi, ml[0], yerr=[[ml[0] - ml[1]], [hi - ml[0]]], fmt="o", color=colour, ms=4)
        ax.plot([], [], "o", color=colour, label=f"$\\sigma$ = {ratio:g} $\\sigma_c$ (n = "
                f"{', '.join(str(row['n']) for row in rows)})")
    f = r["fit"]
    if f:
        grid = np.linspace(0, max(row["n_barrier"] for row in r["rows"] if row["events"] > 0), 50)
        ax.plot(grid, np.exp(f["intercept"] + f["slope"] * grid), "k:", lw=1,
                label=f"least squares, escapes only: slope {f['slope']:.2f} [{f['lo']:.2f}, {f['hi']:.2f}]")
    c = r.get("censored_fit")
    if c and c["slope"] is not None:
        grid = np.linspace(0, max(row["n_barrier"] for row in r["rows"] if row["events"] > 0), 50)
        hi = "inf" if c["slope_hi"] is None else f"{c['slope_hi']:.2f}"
        ax.plot(grid, np.exp(c["intercept"] + c["slope"] * grid), "k--", lw=1,
                label=f"censored likelihood, all: slope {c['slope']:.2f} [{c['slope_lo']:.2f}, {hi}] (barrier law: 1)")
    ax.set_yscale("log")
    ax.set_xlabel(r"$n\,b$,  $b = \frac{2}{\sigma^2}(F[\mathrm{saddle}] - F[\mathrm{cluster}])$")
    ax.set_ylabel(r"mean escape time $\tau$ (open: lower bound)")
    ax.legend(fontsize="x-small")
    m = r["machine"]
    fig.suptitle(f"Escapes across the bistable range, {_where(r, tex=True)}, $\\beta$ = {r['beta']:g} "
                 f"({m.get('cpu', '')})",
                 fontsize=9)
    ap.save(fig, path, formats=("png",), dpi=130, close=True)


if __name__ == "__main__":
    main()
