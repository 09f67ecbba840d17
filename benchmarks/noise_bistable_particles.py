#!/usr/bin/env python
r"""The finite-n side of the discontinuous noisy transition: n noisy particles in the bistable range above beta*.

At beta = 4 (above beta*(2) = 2.4469 and beta*(3) = 1.8162; 1/n attention) the mean field has a clustered and a
uniform stable state for sigma a little above sigma_c. For the circle at sigma = 1.02 sigma_c and for S^2 at 1.12
sigma_c (inside the PDE's bistable ranges, near their upper edges), ``--systems`` clouds of n particles
(:func:`attnflow.meanfield.particle_escape_times`) start from the PDE's stationary clustered state
(:func:`attnflow.meanfield.stationary_clustered_state`) or from the uniform law and run in the rescaled time
tau = e^beta t (the drift divided by e^beta, the noise by e^(beta/2); stochastic layers of dtau = 0.1 renormalised
onto the sphere). Measured:

* each branch's order parameter r (time averages from tau = burn to the escape) against the PDE's (clustered: its
  r; uniform: 0, and the finite-n law n E r^2 = sigma^2 / (sigma^2 - sigma_c^2));
* the escape time of the clustered state (the first reading with r below half the PDE's r; right-censored at t1):
  Kaplan-Meier median, the exponential law's mean lifetime with its chi-square interval, and the censored log-normal
  fit of log T = a + b n (:func:`attnflow.stats.censored_lognormal_fit`).

Writes a JSON record and a figure (``--out``, ``--figure``) and prints the tables; every figure is labelled with the
machine. ``--quick``: two n per geometry, 4 systems, short runs (a smoke run, not a measurement).
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

from benchmarks.common import add_record_arguments, machine_info  # noqa: E402

BETA = 4.0
#: per geometry: the noise ratio, the n of the escape study, its end time, the n of the uniform branch, the burn-in
FULL = {2: {"ratio": 1.02, "ns": [50, 100, 200, 400, 800, 1600], "t1": 1500.0, "uniform_ns": [400, 1600],
            "uniform_t1": 1500.0, "burn": 300.0},
        3: {"ratio": 1.12, "ns": [25, 50, 100, 200, 400], "t1": 1000.0, "uniform_ns": [100, 400],
            "uniform_t1": 1000.0, "burn": 200.0}}
QUICK = {2: {"ratio": 1.02, "ns": [50, 100], "t1": 100.0, "uniform_ns": [100], "uniform_t1": 100.0, "burn": 20.0},
         3: {"ratio": 1.12, "ns": [25, 50], "t1": 100.0, "uniform_ns": [50], "uniform_t1": 100.0, "burn": 20.0}}
DT = 0.1


def _finite(x):
    return None if x is None or not np.isfinite(x) else float(x)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--systems", type=int, default=32, help="clouds per n for the escape study (default 32)")
    p.add_argument("--uniform-systems", type=int, default=16, help="clouds per n from the uniform start (default 16)")
    p.add_argument("--quick", action="store_true", help="two n per geometry, 4 systems, t1 = 100 (seconds)")
    add_record_arguments(p, "noise_bistable_particles", redraw=False)
    args = p.parse_args(argv)
    from attnflow.meanfield import particle_escape_times, stationary_clustered_state
    from attnflow.stats import censored_lognormal_fit

    plan = QUICK if args.quick else FULL
    systems, uniform_systems = (4, 4) if args.quick else (args.systems, args.uniform_systems)
    machine = machine_info()
    start = time.perf_counter()
    geometries = []
    for d, size in plan.items():
        t = time.perf_counter()
        state = stationary_clustered_state(BETA, size["ratio"], d=d)
        pde_seconds = time.perf_counter() - t
        rows, lifetimes = [], []
        for n in size["ns"]:
            t = time.perf_counter()
            out = particle_escape_times(BETA, size["ratio"], n, d=d, start="clustered", systems=systems,
                                        t1=size["t1"], dt=DT, burn=size["burn"] if size["burn"] < size["t1"] else 0.0,
                                        clustered=state, seed=n)
            rows.append(_row(out, time.perf_counter() - t))
            lifetimes.append(out)
            print(f"d = {d}, n = {n}, clustered: {rows[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
        x = np.concatenate([np.full(o["lifetime"].size, o["n"], float) for o in lifetimes])
        life = np.concatenate([o["lifetime"] for o in lifetimes])
        cen = np.concatenate([o["censored"] for o in lifetimes])
        fit = censored_lognormal_fit(x, life, cen)
        uniform = []
        for n in size["uniform_ns"]:
            t = time.perf_counter()
            out = particle_escape_times(BETA, size["ratio"], n, d=d, start="uniform", systems=uniform_systems,
                                        t1=size["uniform_t1"], dt=DT, burn=size["burn"], clustered=state,
                                        seed=10_000 + n)
            uniform.append(_row(out, time.perf_counter() - t))
            print(f"d = {d}, n = {n}, uniform: {uniform[-1]['seconds']:.1f} s", file=sys.stderr, flush=True)
        geometries.append({"d": d, **size, "sigma_c": state["sigma_c"], "sigma_c_rescaled":
                           state["sigma_c"] * math.exp(-BETA / 2), "pde_r": state["r"], "pde_drift": state["drift"],
                           "pde_min_density": state["min_density"], "pde_seconds": pde_seconds,
                           "threshold": lifetimes[0]["threshold"], "clustered": rows, "uniform": uniform,
                           "fit": {k: (_finite(v) if isinstance(v, float) else v) for k, v in fit.items()}})
    record = {"machine": machine, "beta": BETA, "normalisation": "mean", "dt": DT, "systems": systems,
              "uniform_systems": uniform_systems, "quick": args.quick, "geometries": geometries,
              "seconds": time.perf_counter() - start}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    _figure(record, args.figure)
    return record


def _row(out: dict, seconds: float) -> dict:
    km_t, km_s = out["km"]
    return {"n": out["n"], "seconds": seconds, "events": out["events"], "systems": int(out["lifetime"].size),
            "nonfinite": out["nonfinite"], "median": out["median"], "surviving": out["surviving"],
            "mean_lifetime": [_finite(v) for v in out["mean_lifetime"]], "branch_r": out["branch_r"],
            "branch_n_r2": out["branch_n_r2"], "branch_systems": out["branch_systems"],
            "n_r2_theory": out["n_r2_theory"], "clipped": out["clipped"], "km_times": km_t.tolist(),
            "km_survival": km_s.tolist(), "lifetime": [_finite(v) for v in out["lifetime"]],
            "censored": out["censored"].tolist(), "t1": float(out["times"][-1])}


def _print(record: dict) -> None:
    m = record["machine"]
    print(f"beta = {record['beta']:g}, 1/n attention, rescaled time tau = e^beta t, dtau = {record['dt']} "
          f"({m.get('cpu', '')}, {m.get('cpu_count', '')} cores; {record['seconds']:.0f} s)")
    for g in record["geometries"]:
        print(f"\nd = {g['d']}: sigma = {g['ratio']} sigma_c (sigma_c = {g['sigma_c']:.4f}, rescaled "
              f"{g['sigma_c_rescaled']:.4f}); PDE clustered r = {g['pde_r']:.4f} (drift {g['pde_drift']:.1e}); "
              f"threshold r < {g['threshold']:.3f}; t1 = {g['t1']:g}")
        print(f"{'n':>6} {'escaped':>9} {'KM median':>10} {'mean lifetime [95%]':>30} {'surviving [95%]':>24} "
              f"{'branch r [95%]':>24}")
        for row in g["clustered"]:
            ml, s, br = row["mean_lifetime"], row["surviving"], row["branch_r"]
            fmt = lambda v: "inf" if v is None else f"{v:.0f}"
            print(f"{row['n']:>6} {row['events']:>4}/{row['systems']:<4} "
                  f"{'-' if row['median'] is None else format(row['median'], '.0f'):>10} "
                  f"{fmt(ml[0]):>10} [{fmt(ml[1])}, {fmt(ml[2])}]".ljust(58)
                  + f" {s[0]:.2f} [{s[1]:.2f}, {s[2]:.2f}]   {br[0]:.3f} [{br[1]:.3f}, {br[2]:.3f}]")
        f = g["fit"]
        if f.get("slope") is not None:
            print(f"log T = a + b n (censored log-normal): b = {f['slope']:.4f} [{f['slope_lo']:.4f}, "
                  f"{f['slope_hi']:.4f}], sigma = {f['sigma']:.2f}, {f['events']} events")
        print(f"{'n':>6} uniform start: {'r [95%]':>24} {'n r^2 [95%]':>26} {'law':>6} {'nucleated':>10}")
        for row in g["uniform"]:
            br, q = row["branch_r"], row["branch_n_r2"]
            print(f"{row['n']:>6} {'':>15}{br[0]:.3f} [{br[1]:.3f}, {br[2]:.3f}]   {q[0]:7.2f} [{q[1]:.2f}, {q[2]:.2f}] "
                  f"{row['n_r2_theory']:6.2f} {row['events']:>5}/{row['systems']}")


def _figure(record: dict, path: Path) -> None:
    import attnflow.plot as ap

    geos = record["geometries"]
    fig, axes = ap.new_figure(3, len(geos), panel=(4.2, 3.3))
    for row_axes, g in zip(np.atleast_2d(axes), geos):
        km, life, branch = row_axes
        name = "circle" if g["d"] == 2 else "$S^2$"
        for row, colour in zip(g["clustered"], ap.colours(len(g["clustered"]))):
            t = np.concatenate([[0.0], row["km_times"], [row["t1"]]])
            s = np.concatenate([[1.0], row["km_survival"], [row["km_survival"][-1] if row["km_survival"] else 1.0]])
            km.step(t, s, where="post", color=colour, label=f"n = {row['n']}")
        km.set_xlabel(r"$\tau = e^\beta t$")
        km.set_ylabel("clustered clouds surviving (Kaplan-Meier)")
        km.set_title(f"{name}, $\\sigma = {g['ratio']}\\,\\sigma_c$", fontsize="medium")
        km.legend(fontsize="x-small")
        ns = np.array([row["n"] for row in g["clustered"]], float)
        mean = np.array([np.nan if row["mean_lifetime"][0] is None else row["mean_lifetime"][0]
                         for row in g["clustered"]])
        lo = np.array([row["mean_lifetime"][1] for row in g["clustered"]], float)
        hi = np.array([np.nan if row["mean_lifetime"][2] is None else row["mean_lifetime"][2]
                       for row in g["clustered"]])
        seen = np.isfinite(mean)
        life.errorbar(ns[seen], mean[seen], yerr=[mean[seen] - lo[seen], hi[seen] - mean[seen]], fmt="o", ms=4,
                      color="C0", label="mean lifetime (exponential MLE)")
        if (~seen).any():
            life.plot(ns[~seen], lo[~seen], "^", color="C0", label="lower bound (no escape)")
        f = g["fit"]
        if f.get("slope") is not None:
            hit = ns[[row["events"] > 0 for row in g["clustered"]]]  # the fit drawn over the n with escapes
            grid = np.linspace(hit.min(), hit.max(), 50)
            life.plot(grid, np.exp(f["intercept"] + f["slope"] * grid), "k--", lw=1,
                      label=f"log-normal fit: median $\\propto e^{{{f['slope']:.4f}n}}$")
        life.set_yscale("log")
        life.set_xlabel("n")
        life.set_ylabel(r"escape time $\tau$")
        life.legend(fontsize="x-small")
        br = np.array([row["branch_r"] for row in g["clustered"]])
        branch.errorbar(ns, br[:, 0], yerr=[br[:, 0] - br[:, 1], br[:, 2] - br[:, 0]], fmt="o", ms=4, color="C1",
                        label="particles, clustered start")
        if g["uniform"]:
            un = np.array([row["n"] for row in g["uniform"]], float)
            ur = np.array([row["branch_r"] for row in g["uniform"]])
            branch.errorbar(un, ur[:, 0], yerr=[ur[:, 0] - ur[:, 1], ur[:, 2] - ur[:, 0]], fmt="s", ms=4,
                            color="C2", label="particles, uniform start")
            fine = np.geomspace(min(ns.min(), un.min()), max(ns.max(), un.max()), 50)
            branch.plot(fine, np.sqrt(g["uniform"][0]["n_r2_theory"] / fine), "C2:", lw=1,
                        label=r"$\sqrt{\sigma^2/(n(\sigma^2-\sigma_c^2))}$")
        branch.axhline(g["pde_r"], color="k", lw=1, label="PDE, clustered")
        branch.axhline(0.0, color="k", lw=1, ls="--", label="PDE, uniform")
        branch.axhline(g["threshold"], color="0.6", lw=1, ls=":", label="escape threshold")
        branch.set_xscale("log")
        branch.minorticks_off()
        branch.set_xlabel("n")
        branch.set_ylabel("order parameter r of the branch")
        branch.legend(fontsize="x-small")
    m = record["machine"]
    fig.suptitle(f"noisy particles in the bistable range, beta = {record['beta']:g}, 1/n attention "
                 f"({m.get('cpu_count', '')}-core {m.get('cpu', '')}, jax {m.get('versions', {}).get('jax', '')} "
                 f"{str(m.get('jax_backend', '')).upper()})", fontsize="medium")
    path.parent.mkdir(parents=True, exist_ok=True)
    ap.save(fig, path, formats=("png",), dpi=110, close=True)


if __name__ == "__main__":
    main()
