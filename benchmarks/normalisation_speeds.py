#!/usr/bin/env python
r"""Where the layer normalisation sits, and how fast the tokens collapse: post-LN, pre-LN, Peri-LN, Mix-LN, nGPT.

Three parts (attnflow.equiangular, the registry's fields ``sphere``, ``prenorm``, ``periln``, ``mixln``,
``ngpt``; `docs/guide/long-context.md` reads the numbers):

* **The equiangular laws**: 1 - rho(t) of a simplex cloud (n = 64, rho = 0, Q = K = V = I, beta = 1) under each
  scheme, from :func:`attnflow.equiangular.equiangular_path`, with the late-time law fitted: an exponential
  rate for post-LN and nGPT (alpha = 0.5), a power of t for pre-LN and Peri-LN; Mix-LN switches at t = 2.
* **Random clouds**: the same fields on Gaussian clouds (n = 64, d = 16, normalised, 8 clouds; tsit5 at
  rtol 1e-8), 1 - the mean inner product of the directions against t, and the same fits: does a cloud that is
  not a simplex follow the simplex's law?
* **A phase diagram per normalisation**: the phase job's ensemble (:func:`attnflow.phase.ensemble`, n = 32,
  d = 3, 64 systems, 8 values of beta in [0.5, 9], t = 0..30, dt = 0.1) for ``dynamics`` = sphere, prenorm,
  periln and ngpt: the fraction of clustered pairs at t = 5 and t = 30 against beta.

Writes a JSON record and a figure (``--out``, ``--figure``) and prints the tables; the figure is labelled with
the machine. ``--quick``: fewer clouds, systems and betas (seconds).
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

SCHEMES = {"post": ("sphere", {}), "pre": ("prenorm", {}), "peri": ("periln", {}), "mix": ("mixln", {"switch": 2.0}),
           "ngpt": ("ngpt", {"alpha": 0.5})}
N, D, BETA = 64, 16, 1.0
TIMES = np.geomspace(0.05, 200.0, 40)
PHASE_DYNAMICS = ("sphere", "prenorm", "periln", "ngpt")


def _fit(t: np.ndarray, gap: np.ndarray, scheme: str) -> dict:
    """The late-time law of 1 - rho over the last quarter of the times where it is above 1e-12: log-linear
    (exponential rate) for post-LN / nGPT / Mix-LN's post part, log-log (power) for the others."""
    keep = np.isfinite(gap) & (gap > 1e-12)
    t, g = t[keep], gap[keep]
    late = slice(3 * len(t) // 4, None)
    if len(t[late]) < 3:
        return {"law": None}
    if scheme in ("post", "ngpt"):
        slope = np.polyfit(t[late], np.log(g[late]), 1)[0]
        return {"law": "exp", "rate": float(-slope), "window": [float(t[late][0]), float(t[late][-1])]}
    slope = np.polyfit(np.log(t[late]), np.log(g[late]), 1)[0]
    return {"law": "power", "power": float(-slope), "window": [float(t[late][0]), float(t[late][-1])]}


def law_part() -> dict:
    from attnflow.equiangular import equiangular_path

    out = {}
    for scheme, (_, options) in SCHEMES.items():
        path = equiangular_path(scheme, 0.0, BETA, N, TIMES, step=0.01, **options)
        gap = 1.0 - path["rho"]
        out[scheme] = {"gap": gap.tolist(), "radius": path["radius"].tolist(), **_fit(TIMES, gap, scheme)}
    return out


def cloud_part(clouds: int) -> dict:
    import jax
    import jax.numpy as jnp

    import attnflow
    from attnflow.fields import build_field
    from attnflow.integrate import ODESolver

    x = jax.random.normal(jax.random.key(0), (clouds, N, D))
    x = x / jnp.linalg.norm(x, axis=-1, keepdims=True)
    eye = jnp.eye(D)
    solver = ODESolver(0.0, float(TIMES[-1]), ts=jnp.asarray(TIMES), solver="tsit5", rtol=1e-8, atol=1e-10,
                       max_steps=100_000)
    out = {}
    for scheme, (name, options) in SCHEMES.items():
        t = time.perf_counter()
        field = build_field(name, eye, eye, eye, beta=BETA, stepper="ode", **options)
        sim = attnflow.simulate(x, field, solver, batch="x0", dtype="float64")
        xs = np.asarray(sim.states)  # (cloud, time, n, d)
        u = xs / np.linalg.norm(xs, axis=-1, keepdims=True)
        off = ~np.eye(N, dtype=bool)
        gap = 1.0 - np.einsum("ctid,ctjd->ctij", u, u)[:, :, off].mean(axis=-1)  # (cloud, time)
        finite = np.isfinite(gap).all(axis=1)
        mean_gap = gap[finite].mean(axis=0)
        out[scheme] = {"gap": mean_gap.tolist(), "nonfinite_clouds": int((~finite).sum()),
                       "seconds": time.perf_counter() - t, **_fit(TIMES, mean_gap, scheme)}
        print(f"clouds, {scheme}: {out[scheme]['seconds']:.1f} s", file=sys.stderr, flush=True)
    return out


def phase_part(systems: int, betas: int) -> dict:
    from attnflow.phase import ensemble, load_phase_config

    out = {}
    for dyn in PHASE_DYNAMICS:
        cfg = load_phase_config(None)
        cfg.update(beta={"start": 0.5, "stop": 9.0, "num": betas}, n=[32], d=[3], systems=systems, t1=30.0, dt=0.1,
                   checkpoints=31, dynamics=dyn)
        t = time.perf_counter()
        e = ensemble(cfg)
        times = np.asarray(e["t"])
        at = {lab: int(np.argmin(np.abs(times - s))) for lab, s in (("t5", 5.0), ("t30", 30.0))}
        pairs = np.asarray(e["pairs_clustered"])  # (beta, system, checkpoint)
        finite = np.asarray(e["finite"])
        row = {"beta": np.asarray(e["beta"]).tolist(), "seconds": time.perf_counter() - t,
               "nonfinite": int((~finite).sum())}
        for lab, k in at.items():
            row[lab] = [float(pairs[b, finite[b], k].mean()) if finite[b].any() else None for b in range(len(pairs))]
        out[dyn] = row
        print(f"phase, {dyn}: {row['seconds']:.1f} s", file=sys.stderr, flush=True)
    return out


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="2 clouds, 8 systems, 3 betas (seconds)")
    add_record_arguments(p, "normalisation_speeds")
    args = p.parse_args(argv)
    saved = redrawn(args, _figure)
    if saved is not None:
        return saved
    import jax

    start = time.perf_counter()
    with jax.enable_x64(True):
        record = {"machine": machine_info(), "n": N, "d": D, "beta": BETA, "t": TIMES.tolist(),
                  "schemes": {k: {"field": f, **o} for k, (f, o) in SCHEMES.items()},
                  "laws": law_part(), "clouds": cloud_part(2 if args.quick else 8),
                  "phase": phase_part(8 if args.quick else 64, 3 if args.quick else 8)}
    record["seconds"] = time.perf_counter() - start
    args.out.write_text(json.dumps(record, indent=1) + "\n")
    _print(record)
    _figure(record, args.figure)
    return record


def _law_text(f: dict) -> str:
    if f.get("law") == "exp":
        return f"e^(-{f['rate']:.3f} t)"
    if f.get("law") == "power":
        return f"t^(-{f['power']:.3f})"
    return "-"


def _print(record: dict) -> None:
    print(f"1 - rho late in time (n = {record['n']}, beta = {record['beta']}): the simplex's law / random clouds "
          f"(d = {record['d']})")
    for scheme in record["laws"]:
        law, cloud = record["laws"][scheme], record["clouds"][scheme]
        w = law.get("window") or [math.nan, math.nan]
        print(f"  {scheme:>5}: {_law_text(law):>16} / {_law_text(cloud):>16}  (t in [{w[0]:.3g}, {w[1]:.3g}]; "
              f"1 - rho at t = 1: {law['gap'][int(np.argmin(np.abs(np.asarray(record['t']) - 1.0)))]:.3g}, "
              f"non-finite clouds {cloud['nonfinite_clouds']})")
    print("phase diagrams (n = 32, d = 3): fraction of clustered pairs at t = 5 / t = 30")
    for dyn, row in record["phase"].items():
        cells = " ".join(f"{b:.2g}: {a if a is None else f'{a:.2f}'}/{c if c is None else f'{c:.2f}'}"
                         for b, a, c in zip(row["beta"], row["t5"], row["t30"]))
        print(f"  {dyn:>8}: {cells}  ({row['seconds']:.1f} s, {row['nonfinite']} non-finite)")


def _figure(record: dict, path: Path) -> None:
    import attnflow.plot as ap

    fig, axes = ap.new_figure(3, panel=(4.4, 3.6))
    left, mid, right = axes.ravel()
    t = np.asarray(record["t"])
    for (scheme, law), colour in zip(record["laws"].items(), ap.colours(len(record["laws"]))):
        left.plot(t, law["gap"], "-", color=colour, lw=1.3, label=f"{scheme}: {_law_text(law)}")
        mid.plot(t, record["clouds"][scheme]["gap"], "-", color=colour, lw=1.3,
                 label=f"{scheme}: {_law_text(record['clouds'][scheme])}")
        mid.plot(t, law["gap"], ":", color=colour, lw=0.9)
    for ax, title in ((left, f"simplex, n = {record['n']} (equiangular law)"),
                      (mid, f"random clouds, n = {record['n']}, d = {record['d']} (dotted: the simplex)")):
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_ylim(1e-12, 2)
        ax.set_xlabel("t")
        ax.set_ylabel(r"$1 - \rho$ (mean inner product of directions)")
        ax.set_title(title, fontsize="small")
        ax.legend(fontsize="x-small")
    for (dyn, row), colour in zip(record["phase"].items(), ap.colours(len(record["phase"]))):
        right.plot(row["beta"], [np.nan if a is None else a for a in row["t5"]], "--", marker="o", ms=3, color=colour)
        right.plot(row["beta"], [np.nan if a is None else a for a in row["t30"]], "-", marker="o", ms=3, color=colour,
                   label=dyn)
    right.set_xlabel(r"$\beta$")
    right.set_ylabel("fraction of clustered pairs")
    right.set_title("phase job, n = 32, d = 3 (dashed t = 5, solid t = 30)", fontsize="small")
    right.legend(fontsize="x-small")
    m = record["machine"]
    fig.suptitle(f"normalisation as speed: post-LN, pre-LN, Peri-LN, Mix-LN, nGPT ({m.get('cpu', '')}, "
                 f"{m.get('cpu_count', '')} cores)", fontsize="medium")
    ap.save(fig, path, close=True)


if __name__ == "__main__":
    main()
