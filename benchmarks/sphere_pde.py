#!/usr/bin/env python
r"""The continuity equation on S^2 (attnflow.meanfield.solve_sphere_continuity): its accuracy, its cost, and the
particles against it.

Measured, in float64, for the softmax flow at beta = 4:

* the order in dt: RK4 from an analytic start (a von Mises bump times (1 + 0.3 x y), degree 12) to t = 2 in 5, 10,
  20 and 40 steps, against 320 steps; the slope of log(error) against log(dt) with its 95% interval;
* spectral convergence in the degree L: the density at t = 1 (200 points) at L = 4, 8, ..., 20 against L = 28; the
  slope r of log(error) against L (error ~ e^{-r L}) with its interval;
* the mass drift over a long nonlinear run (t = 5, with and without noise);
* the cost of one evaluation of the right-hand side and of one RK4 step at L = 8, 16, 32, 64;
* particles against the PDE: n i.i.d. particles from rho_0 = (1 + 0.3 Y_20 + 0.3 Y_11) / (4 pi) moved by the sphere
  flow (RK4, dt = 0.04, the attention ``--attention-impl``) and the PDE at degree 16; at t = 0, 0.4, ..., 1.6 the
  distance D = sqrt(E_1 + E_2 + E_3) of the difference of their harmonic coefficients of degrees 1 to 3
  (sphere_degree_energies of sphere_empirical_coefficients - PDE; an MMD with the kernel sum_{l=1..3}
  (2l+1) P_l), ``--seeds`` draws per n, and per time the slope of log D against log n over all (n, seed) with its
  interval (i.i.d. draws: E D^2 = 15/n at t = 0, the rate 1/2).

Writes a JSON record (``--out``) and prints tables. ``--quick``: smaller sizes, n = 1000 and 4000 (a smoke run).
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

from benchmarks.common import machine_info  # noqa: E402

BETA = 4.0
TIMES = (0.0, 0.4, 0.8, 1.2, 1.6)


def bump(L: int):
    """The coefficients (degree L) of the analytic start e^{2 <x, p>} (1 + 0.3 x y) / Z."""
    import jax.numpy as jnp

    from attnflow.meanfield import sphere_density_coefficients, sphere_grid

    grid = sphere_grid(max(48, L + 8))
    x = np.asarray(grid.points)
    p = np.array([0.3, -0.4, 0.866])
    f = np.exp(2.0 * x @ (p / np.linalg.norm(p))) * (1 + 0.3 * x[..., 0] * x[..., 1])
    a = sphere_density_coefficients(jnp.asarray(f), L)
    return a / (4 * np.pi * a[0])


def _fit(x, y) -> dict:
    from attnflow.stats import fit_slope

    fit = fit_slope(np.asarray(x, float), np.asarray(y, float))
    return {key: fit[key] for key in ("slope", "lo", "hi", "points")}


def order_in_dt(quick: bool) -> dict:
    import jax.numpy as jnp

    from attnflow.meanfield import solve_sphere_continuity

    L = 8 if quick else 12
    a = bump(L)
    ts = jnp.array([0.0, 2.0])
    steps = (5, 10, 20) if quick else (5, 10, 20, 40)
    reference = solve_sphere_continuity(a, BETA, ts, steps_per_save=320).coefficients[-1]
    errors = [float(jnp.abs(solve_sphere_continuity(a, BETA, ts, steps_per_save=k).coefficients[-1]
                            - reference).max()) for k in steps]
    dts = [2.0 / k for k in steps]
    return {"degree": L, "t": 2.0, "dt": dts, "error": errors, "fit": _fit(np.log(dts), np.log(errors))}


def order_in_degree(quick: bool) -> dict:
    import jax.numpy as jnp

    from attnflow.meanfield import solve_sphere_continuity, sphere_density_at

    rng = np.random.default_rng(0)
    points = rng.normal(size=(200, 3))
    points /= np.linalg.norm(points, axis=1, keepdims=True)
    start = bump(36)
    ts = jnp.linspace(0.0, 1.0, 11)
    ref_degree = 20 if quick else 28
    ref = solve_sphere_continuity(start, BETA, ts, degree=ref_degree, steps_per_save=20)
    target = sphere_density_at(ref.coefficients[-1], points)
    degrees = (4, 8, 12) if quick else (4, 8, 12, 16, 20)
    errors, discarded, min_density = [], [], []
    for L in degrees:
        path = solve_sphere_continuity(start, BETA, ts, degree=L, steps_per_save=20)
        errors.append(float(jnp.abs(sphere_density_at(path.coefficients[-1], points) - target).max()))
        discarded.append(float(path.discarded))
        min_density.append(float(path.min_density.min()))
    fit = _fit(degrees, np.log(errors))
    return {"t": 1.0, "reference_degree": ref_degree, "degree": list(degrees), "error": errors,
            "discarded": discarded, "min_density": min_density,
            "fit": {"rate": -fit["slope"], "lo": -fit["hi"], "hi": -fit["lo"], "points": fit["points"]}}


def mass_drift(quick: bool) -> dict:
    import jax.numpy as jnp

    from attnflow.meanfield import solve_sphere_continuity

    out = {}
    a = bump(12)
    for sigma in (0.0, 0.5):
        path = solve_sphere_continuity(a, BETA, jnp.linspace(0.0, 5.0, 11), steps_per_save=50, sigma=sigma)
        out[f"sigma={sigma:g}"] = {"max_abs_drift": float(jnp.abs(path.mass - path.mass[0]).max()),
                                   "mass0_minus_1": float(path.mass[0] - 1),
                                   "min_density": float(path.min_density.min())}
    return out


def cost(quick: bool) -> list[dict]:
    import jax
    import jax.numpy as jnp

    from attnflow.fields import build_field
    from attnflow.meanfield import solve_sphere_continuity

    rows = []
    I3 = jnp.eye(3)
    for L in ((8, 16) if quick else (8, 16, 32, 64)):
        a = bump(L)
        field = build_field("sphere_continuity", I3, I3, I3, beta=BETA, degree=L)
        rhs = jax.jit(lambda y: field(0.0, y))
        jax.block_until_ready(rhs(a))
        reps, rounds = 50, []
        for _ in range(5):  # the fastest of 5 rounds (a shared machine)
            t = time.perf_counter()
            for _ in range(reps):
                jax.block_until_ready(rhs(a))
            rounds.append((time.perf_counter() - t) / reps)
        per_rhs = min(rounds)
        ts = jnp.array([0.0, 0.05])
        timed = {}
        for steps in (25, 425):  # a step: the difference of two compiled solves, over 400 steps
            t = time.perf_counter()
            jax.block_until_ready(solve_sphere_continuity(a, BETA, ts, steps_per_save=steps).coefficients)
            timed[f"first_{steps}"] = time.perf_counter() - t
            calls = []
            for k in range(3):
                t = time.perf_counter()
                jax.block_until_ready(solve_sphere_continuity(a, BETA, ts * (1 + 1e-4 * (k + 1)),
                                                              steps_per_save=steps).coefficients)
                calls.append(time.perf_counter() - t)
            timed[steps] = min(calls)
        first = timed["first_25"]
        per_step = (timed[425] - timed[25]) / 400
        rows.append({"degree": L, "grid": list(field.grid_shape), "coefficients": (L + 1) ** 2,
                     "rhs_s": per_rhs, "rk4_step_s": per_step, "first_solve_s": first})
    return rows


def particles_vs_pde(ns, seeds: int, attention_impl: str) -> dict:
    import jax
    import jax.numpy as jnp

    from attnflow.fields import build_field
    from attnflow.integrate import RKStepper, sphere_shift
    from attnflow.meanfield import (perturbed_uniform_sphere_density, sample_sphere_density,
                                    solve_sphere_continuity, sphere_degree_energies, sphere_empirical_coefficients)

    L = 16
    uniform = perturbed_uniform_sphere_density(L, 0, 0.0)
    a0 = uniform + 0.3 * (perturbed_uniform_sphere_density(L, 2, 1.0) - uniform) \
        + 0.3 * (perturbed_uniform_sphere_density(L, 1, 1.0, 1) - uniform)
    ts = jnp.asarray(TIMES)
    pde = solve_sphere_continuity(a0, BETA, ts, steps_per_save=40)
    top = 3
    size = (top + 1) ** 2
    I3 = jnp.eye(3)
    field = build_field("sphere", I3, I3, I3, beta=BETA, stepper="ode", attention_impl=attention_impl)
    stepper = RKStepper("rk4", ts=ts, steps_per_save=10, shift=sphere_shift)  # dt = 0.04
    run = jax.jit(lambda x: jax.vmap(lambda y: sphere_empirical_coefficients(y, top))(stepper.solve(field, x).ys))
    distance = np.full((len(ns), seeds, len(TIMES)), np.nan)
    seconds = []
    for i, n in enumerate(ns):
        t = time.perf_counter()
        for s in range(seeds):
            x0 = sample_sphere_density(jax.random.fold_in(jax.random.key(1), n * 1000 + s), a0, n)
            coefficients = run(x0)
            diff = coefficients - pde.coefficients[:, :size]
            distance[i, s] = np.sqrt(np.asarray(sphere_degree_energies(diff))[:, 1:].sum(axis=1))
        seconds.append(time.perf_counter() - t)
        print(f"particles n = {n}: {seconds[-1]:.1f} s for {seeds} seeds", file=sys.stderr, flush=True)
    fits = []
    for j in range(len(TIMES)):
        x = np.repeat(np.log(np.asarray(ns, float)), seeds)
        fit = _fit(x, np.log(distance[:, :, j].reshape(-1)))
        fits.append({"t": TIMES[j], "rate": -fit["slope"], "lo": -fit["hi"], "hi": -fit["lo"], "points": fit["points"]})
    moved = np.sqrt(np.asarray(sphere_degree_energies(pde.coefficients[:, :size] - pde.coefficients[0, :size]))
                    [:, 1:].sum(axis=1))
    return {"degree": L, "top_degree": top, "times": list(TIMES), "ns": list(ns), "seeds": seeds,
            "attention_impl": attention_impl, "particle_dt": 0.04, "distance": distance.tolist(),
            "mean_distance": distance.mean(axis=1).tolist(), "fits": fits, "pde_moved": moved.tolist(),
            "pde_min_density": np.asarray(pde.min_density).tolist(), "seconds": seconds}


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, nargs="+", default=[1000, 10000], help="particle counts (default 1000 10000)")
    p.add_argument("--seeds", type=int, default=4, help="independent draws per n (default 4)")
    p.add_argument("--attention-impl", default="auto",
                   help="the particles' attention (attnflow.attend's impl names; default auto)")
    p.add_argument("--quick", action="store_true", help="smaller sizes, n = 1000 and 4000, 2 seeds (a smoke run)")
    p.add_argument("--out", type=Path, default=Path("sphere_pde.json"), help="JSON record (default sphere_pde.json)")
    args = p.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)  # a script: its own process, measured in float64
    start = time.perf_counter()
    machine = machine_info()
    record = {"machine": machine, "beta": BETA, "normalisation": "softmax"}
    record["order_in_dt"] = order_in_dt(args.quick)
    record["order_in_degree"] = order_in_degree(args.quick)
    record["mass"] = mass_drift(args.quick)
    record["cost"] = cost(args.quick)
    ns, seeds = ([1000, 4000], 2) if args.quick else (args.n, args.seeds)
    record["particles"] = particles_vs_pde(ns, seeds, args.attention_impl)
    record["seconds"] = time.perf_counter() - start
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    return record


def _print(r: dict) -> None:
    m = r["machine"]
    print(f"softmax, beta = {r['beta']:g}, float64 ({m.get('cpu', '')}, {m.get('cpu_count', '')} cores, jax "
          f"{m['versions'].get('jax')} {m.get('jax_backend')}); {r['seconds']:.0f} s in all")
    o = r["order_in_dt"]
    print(f"\norder in dt (RK4, degree {o['degree']}, t = {o['t']:g}, max coefficient error against 320 steps)")
    for dt, e in zip(o["dt"], o["error"]):
        print(f"  dt = {dt:<6.4g} error {e:.3e}")
    f = o["fit"]
    print(f"  fitted order {f['slope']:.2f} [{f['lo']:.2f}, {f['hi']:.2f}]")
    o = r["order_in_degree"]
    print(f"\nconvergence in L (t = {o['t']:g}, max error at 200 points against L = {o['reference_degree']})")
    for L, e, d in zip(o["degree"], o["error"], o["discarded"]):
        print(f"  L = {L:<3d} error {e:.3e}   start discarded {d:.1e}")
    f = o["fit"]
    print(f"  error ~ exp(-r L), r = {f['rate']:.2f} [{f['lo']:.2f}, {f['hi']:.2f}]")
    print("\nmass drift to t = 5 (50 RK4 steps per 0.5)")
    for key, row in r["mass"].items():
        print(f"  {key}: max |mass(t) - mass(0)| = {row['max_abs_drift']:.1e}, "
              f"mass(0) - 1 = {row['mass0_minus_1']:.1e}")
    print("\ncost (jitted; one right-hand side; one RK4 step, from solves of 25 and 425 steps)")
    for row in r["cost"]:
        print(f"  L = {row['degree']:<3d} grid {row['grid'][0]} x {row['grid'][1]:<4d} {row['coefficients']:>5d} "
              f"coefficients: rhs {row['rhs_s'] * 1e3:.3f} ms, step {row['rk4_step_s'] * 1e3:.3f} ms, first solve "
              f"(with compile) {row['first_solve_s']:.2f} s")
    pp = r["particles"]
    print(f"\nparticles against the PDE (degree {pp['degree']}): D = sqrt(E_1 + E_2 + E_3) of the difference, mean "
          f"over {pp['seeds']} seeds; attention {pp['attention_impl']}")
    print("  " + f"{'t':>5} " + " ".join(f"{'n = ' + str(n):>12}" for n in pp["ns"]) + f" {'rate in n':>24} "
          f"{'PDE moved':>10}")
    for j, t in enumerate(pp["times"]):
        cells = " ".join(f"{pp['mean_distance'][i][j]:>12.4f}" for i in range(len(pp["ns"])))
        f = pp["fits"][j]
        print(f"  {t:>5.2f} {cells} {f['rate']:>8.3f} [{f['lo']:.3f}, {f['hi']:.3f}] {pp['pde_moved'][j]:>10.3f}")


if __name__ == "__main__":
    main()
