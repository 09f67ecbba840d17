#!/usr/bin/env python
r"""The noisy phase transition on the sphere S^2 through the mean-field PDE (1/n attention).

For beta = 1.2 (below beta*(3) = 1.8162: a continuous transition) and beta = 4 (above it: discontinuous, with a
bistable range), the order parameter r = |int x rho(x) dx| at t1 against sigma / sigma_c (sigma_c the closed form
for d = 3), from a nearly uniform start (1 + 0.02 sqrt(3) z) / 4 pi and from a clustered one (von Mises-Fisher,
kappa = 4), by attnflow.meanfield.noisy_sphere_transition (spectral to degree L, integrating-factor RK4).

Sizes: beta = 1.2 has broad states (degree 8, steps 0.04, t1 = 200: critical slowing down near sigma_c is the cost);
beta = 4 has a sharp ordered state (r ~ 0.97; degree 16, steps 0.008, t1 = 60: its transport is fast).
``--quick``: 5 ratios, degree 6 / 10, shorter runs (a smoke run, not a measurement).

Usage: ``python benchmarks/noise_sphere_transition.py [--quick] [--out FILE.json] [--figure FILE.png]``; prints
the threshold bracket against sigma_c, the bistable range, the smallest density and the non-finite runs.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from attnflow.meanfield import critical_noise, noisy_sphere_transition, tricritical_beta
from benchmarks.common import machine_info

FULL = {1.2: {"degree": 8, "dt": 0.04, "t1": 200.0}, 4.0: {"degree": 16, "dt": 0.008, "t1": 60.0}}
QUICK = {1.2: {"degree": 6, "dt": 0.05, "t1": 80.0}, 4.0: {"degree": 10, "dt": 0.015, "t1": 30.0}}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="5 ratios, small degrees, short runs (smoke run)")
    p.add_argument("--out", type=Path, help="write the record as JSON here")
    p.add_argument("--figure", type=Path, help="draw r against sigma / sigma_c for both betas into this PNG")
    args = p.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    ratios = np.linspace(0.8, 1.2, 5 if args.quick else 11)
    machine = machine_info()
    runs = []
    for beta, size in sizes.items():
        sc = float(critical_noise(beta, 3, "mean"))
        start = time.perf_counter()
        out = noisy_sphere_transition(beta, ratios * sc, normalisation="mean", **size)
        seconds = time.perf_counter() - start
        th = out["threshold"]
        run = {"beta": beta, **size, "sigma_c": sc, "ratio": ratios.tolist(),
               "from_uniform": out["from_uniform"].tolist(), "from_clustered": out["from_clustered"].tolist(),
               "drift": out["drift"].tolist(), "min_density": out["min_density"].tolist(),
               "threshold_ratio": [None if th["lo"] is None else th["lo"] / sc,
                                   None if th["hi"] is None else th["hi"] / sc],
               "contains_sigma_c": th["contains_sigma_c"], "bistable_ratio": (out["bistable"] / sc).tolist(),
               "nonfinite_ratio": (out["nonfinite"] / sc).tolist(), "discarded": out["discarded"],
               "seconds": seconds}
        runs.append(run)
        print(f"beta = {beta:g} (sigma_c = {sc:.4f}; degree {size['degree']}, dt {size['dt']}, t1 {size['t1']:g}; "
              f"{seconds:.0f} s)")
        print("  sigma/sigma_c  r(uniform start)  r(clustered start)  min density")
        for q, u, c, low in zip(ratios, out["from_uniform"], out["from_clustered"], out["min_density"]):
            print(f"  {q:12.3f}  {u:16.4f}  {c:18.4f}  {low.min():+.4f}")
        print(f"  threshold in sigma/sigma_c: {run['threshold_ratio']} (contains 1: {th['contains_sigma_c']}); "
              f"bistable at {np.round(run['bistable_ratio'], 3).tolist()}; non-finite at "
              f"{np.round(run['nonfinite_ratio'], 3).tolist()}; vMF start discarded above L: {out['discarded']:.2g}")
    record = {"machine": machine, "normalisation": "mean", "beta_star": tricritical_beta(3), "quick": args.quick,
              "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(record, indent=1))
    if args.figure:
        _figure(record, args.figure)
    return record


def _figure(record: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(len(record["runs"]), panel=(5.0, 4.0))
    for ax, run in zip(axes[0], record["runs"]):
        ap.order_vs_noise(np.asarray(run["ratio"]), np.asarray(run["from_uniform"]),
                          np.asarray(run["from_clustered"]), beta=run["beta"], beta_star=record["beta_star"], ax=ax)
        ax.set_ylabel(r"order parameter $r = |\int x\,\rho|$")
    m = record["machine"]
    fig.suptitle(f"noisy transition on $S^2$, mean-field PDE, 1/n attention - {m.get('cpu', '')} "
                 f"({m.get('cpu_count', '')} cores, {m.get('jax_backend', '')})", fontsize=9)
    path.parent.mkdir(parents=True, exist_ok=True)
    ap.save(fig, path, formats=("png",), dpi=120, close=True)


if __name__ == "__main__":
    main()
