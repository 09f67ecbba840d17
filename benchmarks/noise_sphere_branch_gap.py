#!/usr/bin/env python
r"""Where the noisy particles' clustered branch on S^2 parts from the mean field's: resolution, step or n.

At beta = 4 and sigma = 1.12 sigma_c (1/n attention, d = 3, inside the bistable range near its upper edge) n
noisy particles started from the PDE's stationary clustered state hold an order parameter r below the PDE's
(``benchmarks/noise_bistable_particles.py``: 0.724 [0.692, 0.757] at n = 400 against 0.789). Three causes can enter
and this script separates them, all else fixed:

* **the PDE's resolution**: :func:`attnflow.meanfield.stationary_clustered_state` at degrees 12, 16, 24, 32 (and
  its steps halved at degree 24);
* **the PDE near the fold**: r at sigma / sigma_c from 1.10 to 1.125 (how far a small shift of the effective noise
  moves r there);
* **the particles' step and n** (:func:`attnflow.meanfield.particle_escape_times`, stochastic layers in the
  rescaled time tau = e^beta t, renormalised onto the sphere): the branch r (time averages from tau = ``burn`` to
  each cloud's escape, a 95% Student-t interval over the clouds) at steps dtau = 0.1, 0.05, 0.025 for n = 400 and
  at n = 100, 400, 1600, 6400 for dtau = 0.1 (6400 on the harmonic path).

Writes a JSON record (``--out``) and prints the tables, labelled with the machine. ``--quick``: a smoke run.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.common import machine_info  # noqa: E402

BETA, RATIO, D = 4.0, 1.12, 3
DEGREES = (12, 16, 24, 32)
RATIOS = (1.10, 1.11, 1.115, 1.12, 1.125)
#: (n, dtau, clouds, t1, burn) of the particle runs
PARTICLES = ((400, 0.1, 16, 400.0, 100.0), (400, 0.05, 16, 400.0, 100.0), (400, 0.025, 16, 400.0, 100.0),
             (100, 0.1, 16, 400.0, 100.0), (1600, 0.1, 16, 400.0, 100.0), (6400, 0.1, 16, 400.0, 100.0))
QUICK = ((100, 0.1, 4, 60.0, 20.0), (100, 0.05, 4, 60.0, 20.0))


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="two degrees, two ratios, n = 100 only (seconds)")
    p.add_argument("--out", type=Path, default=Path("noise_sphere_branch_gap.json"),
                   help="JSON record (default %(default)s)")
    args = p.parse_args(argv)
    from attnflow.meanfield import particle_escape_times, stationary_clustered_state

    machine = machine_info()
    start = time.perf_counter()
    resolution = []
    for L in (DEGREES[:2] if args.quick else DEGREES):
        t = time.perf_counter()
        s = stationary_clustered_state(BETA, RATIO, d=D, resolution=L)
        resolution.append({"degree": L, "dt": 0.008, "r": s["r"], "drift": s["drift"],
                           "min_density": s["min_density"], "seconds": time.perf_counter() - t})
        print(f"PDE degree {L}: r = {s['r']:.4f}", file=sys.stderr, flush=True)
    if not args.quick:
        s = stationary_clustered_state(BETA, RATIO, d=D, resolution=24, dt=0.004)
        resolution.append({"degree": 24, "dt": 0.004, "r": s["r"], "drift": s["drift"],
                           "min_density": s["min_density"], "seconds": None})
    fold = []
    for ratio in (RATIOS[-2:] if args.quick else RATIOS):
        s = stationary_clustered_state(BETA, ratio, d=D)
        fold.append({"ratio": ratio, "r": s["r"], "drift": s["drift"], "ordered": bool(s["ordered"])})
    state = stationary_clustered_state(BETA, RATIO, d=D)
    particles = []
    for n, dt, systems, t1, burn in (QUICK if args.quick else PARTICLES):
        t = time.perf_counter()
        out = particle_escape_times(BETA, RATIO, n, d=D, start="clustered", systems=systems, t1=t1, dt=dt, burn=burn,
                                    clustered=state, seed=n)
        particles.append({"n": n, "dt": dt, "systems": systems, "t1": t1, "burn": burn, "branch_r": out["branch_r"],
                          "branch_systems": out["branch_systems"], "events": out["events"],
                          "nonfinite": out["nonfinite"], "seconds": time.perf_counter() - t})
        print(f"particles n = {n}, dtau = {dt}: r = {out['branch_r'][0]:.4f}, "
              f"{particles[-1]['seconds']:.0f} s", file=sys.stderr, flush=True)
    record = {"machine": machine, "beta": BETA, "ratio": RATIO, "d": D, "normalisation": "mean",
              "pde_r": state["r"], "resolution": resolution, "fold": fold, "particles": particles,
              "quick": args.quick, "seconds": time.perf_counter() - start}
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    return record


def _print(r: dict) -> None:
    m = r["machine"]
    print(f"S^2, beta = {r['beta']:g}, sigma = {r['ratio']} sigma_c, 1/n attention ({m.get('cpu', '')}, "
          f"{m.get('cpu_count', '')} cores; {r['seconds']:.0f} s)")
    print("\nthe PDE's clustered state against its resolution")
    for row in r["resolution"]:
        print(f"  degree {row['degree']:>3}, steps {row['dt']:<6g} r = {row['r']:.4f}  (drift {row['drift']:.1e}, "
              f"smallest density {row['min_density']:.2e})")
    print("\nthe PDE's clustered state near the fold")
    for row in r["fold"]:
        print(f"  sigma = {row['ratio']:<6g} sigma_c: r = {row['r']:.4f}  ordered {row['ordered']}")
    print("\nparticles from the PDE's clustered state: branch r [95%] (time averages to each escape)")
    for row in r["particles"]:
        b = row["branch_r"]
        print(f"  n = {row['n']:>5}, dtau = {row['dt']:<6g} {row['systems']:>3} clouds to tau = {row['t1']:g}: "
              f"{b[0]:.4f} [{b[1]:.4f}, {b[2]:.4f}]  escaped {row['events']}, {row['seconds']:.0f} s")


if __name__ == "__main__":
    main()
