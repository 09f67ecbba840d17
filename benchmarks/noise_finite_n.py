#!/usr/bin/env python
r"""The finite-n side of the noisy transition on the circle: n noisy particles at stationarity against the mean field.

For beta = 1.5 (below beta* = 2.4469: a continuous transition; 1/n attention) and n in ``--n``, ``--systems``
independent clouds per noise strength sigma = ratio x sigma_c (:func:`attnflow.meanfield.particle_transition`:
stochastic layers of dt = 0.02 renormalised onto the circle, readings every 10 layers after t = 20, to t = 200),
against

* the mean field's order parameter r at t = 300 from a nearly uniform start (:func:`attnflow.meanfield.noisy_transition`,
  G = 64, RK4 steps of 0.01) on the ordered side, and
* the linear-response law of the disordered side, :math:`n E r^2 = \sigma^2/(\sigma^2 - \sigma_c^2)`
  (:func:`attnflow.meanfield.disordered_fluctuations`).

Writes a JSON record and a figure (``--out``, ``--figure``) and prints a table; every figure is labelled with the
machine. ``--quick``: n = 100 and 1000, 4 systems, t = 60 (a smoke run).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from benchmarks.common import add_record_arguments, machine_info  # noqa: E402

BETA = 1.5
RATIOS = (0.8, 0.9, 0.95, 1.05, 1.1, 1.25, 1.5, 2.0)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[100, 1000, 10000], help="particle counts (default 100 1000 10000)")
    p.add_argument("--systems", type=int, default=8, help="independent clouds per (n, sigma) (default 8)")
    p.add_argument("--quick", action="store_true", help="n = 100 and 1000, 4 systems, t = 60 (seconds)")
    add_record_arguments(p, "noise_finite_n", redraw=False)
    args = p.parse_args(argv)
    from attnflow.meanfield import disordered_fluctuations, noisy_transition, particle_transition

    ns, systems, t1 = ([100, 1000], 4, 60.0) if args.quick else (args.n, args.systems, 200.0)
    machine = machine_info()
    ratios = np.asarray(RATIOS)
    start = time.perf_counter()
    pde = noisy_transition(BETA, ratios * noisy_sigma_c(BETA), t1=60.0 if args.quick else 300.0, dt=0.01)
    rows = []
    for n in ns:
        t = time.perf_counter()
        out = particle_transition(BETA, ratios, n, systems=systems, t1=t1, burn=20.0, dt=0.02)
        seconds = time.perf_counter() - t
        rows.append({"n": n, "seconds": seconds, "r": out["r"].tolist(), "n_r2": out["n_r2"].tolist(),
                     "nonfinite": out["nonfinite"].tolist(), "samples": out["samples"]})
        print(f"n = {n}: {seconds:.1f} s", file=sys.stderr, flush=True)
    record = {"machine": machine, "beta": BETA, "normalisation": "mean", "ratios": ratios.tolist(),
              "sigma_c": float(pde["sigma_c"]), "systems": systems, "t1": t1, "dt": 0.02, "burn": 20.0,
              "pde_r": pde["from_uniform"].tolist(), "n_r2_theory": [None if not np.isfinite(x) else float(x)
                                                                    for x in disordered_fluctuations(ratios)],
              "rows": rows, "seconds": time.perf_counter() - start}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    print(f"beta = {BETA}, 1/n attention, sigma_c = {pde['sigma_c']:.4f}; {systems} systems per cell, t = 20..{t1:g} "
          f"({machine.get('cpu', '')}, {machine.get('cpu_count', '')} cores)")
    print(f"{'ratio':>6} {'PDE r':>7} " + " ".join(f"{'r, n=' + str(n):>22} {'n r^2, n=' + str(n):>24}" for n in ns)
          + f" {'theory n r^2':>13}")
    for i, q in enumerate(ratios):
        cells = " ".join(f"{r['r'][i][0]:>8.3f} [{r['r'][i][1]:.3f},{r['r'][i][2]:.3f}] "
                         f"{r['n_r2'][i][0]:>10.3f} [{r['n_r2'][i][1]:.2f},{r['n_r2'][i][2]:.2f}]" for r in rows)
        th = record["n_r2_theory"][i]
        print(f"{q:>6.2f} {pde['from_uniform'][i]:>7.3f} {cells} {'-' if th is None else f'{th:.3f}':>13}")
    _figure(record, args.figure)
    return record


def noisy_sigma_c(beta: float) -> float:
    from attnflow.meanfield import critical_noise

    return float(critical_noise(beta, 2, "mean"))


def _figure(record: dict, path: Path) -> None:
    import attnflow.plot as ap

    ratios = np.asarray(record["ratios"])
    fig, axes = ap.new_figure(2, panel=(4.6, 3.6))
    left, right = axes.ravel()
    left.plot(ratios, record["pde_r"], "k.-", lw=1.2, label="mean field (PDE, the grid's points joined)")
    for row, colour in zip(record["rows"], ap.colours(len(record["rows"]))):
        r = np.asarray(row["r"])
        left.errorbar(ratios, r[:, 0], yerr=[r[:, 0] - r[:, 1], r[:, 2] - r[:, 0]], fmt="o", ms=3.5, color=colour,
                      label=f"n = {row['n']}")
        q = np.asarray(row["n_r2"])
        above = ratios > 1
        right.errorbar(ratios[above], q[above, 0], yerr=[q[above, 0] - q[above, 1], q[above, 2] - q[above, 0]],
                       fmt="o", ms=3.5, color=colour, label=f"n = {row['n']}")
    fine = np.linspace(1.02, ratios.max(), 200)
    right.plot(fine, fine**2 / (fine**2 - 1), "k-", lw=1.5, label=r"$\sigma^2/(\sigma^2-\sigma_c^2)$")
    for ax in (left, right):
        ax.axvline(1.0, color="0.5", lw=1, ls=":")
        ax.set_xlabel(r"$\sigma/\sigma_c$")
        ax.legend(fontsize="small")
    left.set_ylabel(r"order parameter $r$ at stationarity")
    right.set_ylabel(r"$n\,E\,r^2$ (disordered side)")
    right.set_yscale("log")
    m = record["machine"]
    fig.suptitle(f"noisy particles against the mean field, beta = {record['beta']:g}, 1/n attention "
                 f"({m.get('cpu', '')}, {m.get('cpu_count', '')} cores)", fontsize="medium")
    ap.save(fig, path, close=True)


if __name__ == "__main__":
    main()
