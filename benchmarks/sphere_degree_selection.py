#!/usr/bin/env python
r"""Degree selection on S^2: which harmonic degree of a nearly uniform cloud grows fastest, and what clusters form.

Linearised at the uniform measure on S^2, the degree-l harmonics of the empirical measure grow at
:math:`\lambda_l = l(l+1)\hat K_l/\beta` (divided by :math:`\hat K_0` for softmax; :func:`attnflow.meanfield.
sphere_growth_rates`), fastest at :math:`l^*(\beta)` (1, 2, 5, 11 for beta = 1, 4, 16, 64). Here n tokens drawn
uniformly on S^2 (their sampling fluctuations seed every degree, energy about (2l+1)/n) follow the layer stepper
(forward Euler renormalised onto the sphere, :class:`attnflow.dynamics.IdentitySphereFlow` on the O(n L^2) sphere
path) with steps of 0.02 / lambda_max: time is read in units of :math:`1/\lambda_{max}` (tau = lambda_max t), and
the layer map multiplies degree l by exactly :math:`1 + 0.02\,\lambda_l/\lambda_{max}` in the linear regime, so
the prediction per unit tau is :math:`\log(1 + 0.02\,\lambda_l/\lambda_{max})/0.02`. For 1/n attention the field is
divided by :math:`\lambda_{max}` (``log_scale``), the same map.

Measured: the degree energies :math:`E_l(\tau)` (:func:`attnflow.kernels.sphere.degree_energies`) every 5 layers;
the growth rate of each degree is the slope of :math:`\log\sqrt{E_l}` over the joint linear window (every degree
until the largest amplitude passes ``--window``; :func:`attnflow.meanfield.fit_growth_rates`, 95% Student-t
intervals); the fastest measured degree against :math:`l^*`; and the cluster count on S^2 over time
(:func:`attnflow.meanfield.sphere_cluster_count`, cells of 32 x 64 with at least 1% of the mass) to tau = ``--tau``.
Writes a JSON record and a figure (the rates against the prediction, one panel per beta), labelled with the machine.
``--quick``: n = 4000, beta = 1 and 4, tau = 6 (a smoke run, seconds).
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

STEP = 0.02  # layer step in units of 1 / lambda_max
SAVE_EVERY = 5


def run(beta: float, normalisation: str, n: int, tau: float, seed: int, window: float, dtype: str) -> dict:
    import jax
    import jax.numpy as jnp

    from attnflow.dynamics import IdentitySphereFlow, normalise
    from attnflow.integrate import EulerStepper, sphere_shift
    from attnflow.kernels.sphere import degree_energies
    from attnflow.meanfield import fit_growth_rates, sphere_cluster_count, sphere_growth_rates

    with jax.enable_x64(True):
        lam = np.asarray(sphere_growth_rates(beta, 3, 40, normalisation), float)
    star = int(np.argmax(lam))
    top = max(star + 4, 6)
    lam, lam_max = lam[: top + 1], float(lam[star])
    predicted = np.log1p(STEP * lam / lam_max) / STEP  # per unit tau, the layer map's
    layers = int(round(tau / STEP))
    if normalisation == "softmax":
        field, dt = IdentitySphereFlow(beta, attention_impl="auto"), STEP / lam_max
    else:
        field, dt = IdentitySphereFlow(beta, normalisation="mean", log_scale=math.log(lam_max), attention_impl="auto"), STEP
    x0 = normalise(jax.random.normal(jax.random.key(seed), (n, 3), jnp.dtype(dtype)))

    def observe(t, y, args):
        return degree_energies(y, top), sphere_cluster_count(y)

    stepper = EulerStepper(dt, layers, shift=sphere_shift, save_every=SAVE_EVERY)
    start = time.perf_counter()
    traj = jax.jit(lambda x: stepper.solve(field, x, save_fn=observe))(x0)
    energies, clusters = (np.asarray(a) for a in traj.ys)
    seconds = time.perf_counter() - start
    taus = np.arange(energies.shape[0]) * SAVE_EVERY * STEP
    finite = np.all(np.isfinite(energies), axis=1)
    amps = np.sqrt(np.clip(energies[:, 1:], 0, None))
    fit = fit_growth_rates(taus[finite], amps[finite], max_amplitude=window)
    measured_star = int(np.nanargmax(fit["rate"])) + 1 if np.any(np.isfinite(fit["rate"])) else None
    uses = fit["points"]
    return {"beta": beta, "normalisation": normalisation, "n": n, "seed": seed, "dtype": dtype,
            "path": "harmonic" if field.harmonic is not None and field.harmonic.applies(n, 3, jnp.dtype(dtype))
            else "direct", "seconds": seconds, "l_star": star, "measured_l_star": measured_star,
            "lambda": lam[1:].tolist(), "predicted_per_tau": predicted[1:].tolist(),
            "rate": fit["rate"].tolist(), "lo": fit["lo"].tolist(), "hi": fit["hi"].tolist(),
            "window_points": uses.tolist(), "window_end_tau": float(taus[finite][min(int(uses.max()), int(finite.sum()) - 1)]),
            "tau": taus.tolist(), "amplitude": amps.tolist(), "clusters": clusters.astype(int).tolist(),
            "nonfinite_saves": int((~finite).sum())}


def figure(rows: list[dict], path: Path, machine: str) -> None:
    """Top: the measured rates (95% intervals) against the layer map's prediction, one panel per beta (in units of
    lambda_max the prediction is the same for both normalisations). Bottom: the cluster count against tau, with the
    heuristic count of maxima of a random degree-l* harmonic, l*^2 / (2 sqrt 3) for large l* (1 and 2 for degrees 1
    and 2; guide: docs/guide/meanfield.md)."""
    import attnflow.plot as ap

    betas = sorted({r["beta"] for r in rows})
    fig, axes = ap.new_figure(len(betas), 2, panel=(3.6, 3.1))
    for j, beta in enumerate(betas):
        mine = [r for r in rows if r["beta"] == beta]
        top, bottom = axes[0][j], axes[1][j]
        l = np.arange(1, len(mine[0]["rate"]) + 1)
        top.plot(l, mine[0]["predicted_per_tau"], "-", color="0.5", lw=1, label="theory (layer map)")
        for r, marker in zip(mine, "osdv^<>"):
            rate, lo, hi = (np.asarray(r[k], float) for k in ("rate", "lo", "hi"))
            shift = 0.1 if r["normalisation"] == "mean" else -0.1
            label = f"{r['normalisation']}, seed {r['seed']}"
            top.errorbar(l + shift, rate, yerr=[np.nan_to_num(rate - lo), np.nan_to_num(hi - rate)], fmt=marker,
                         ms=3.5, lw=0.8, label=label)
            bottom.plot(r["tau"], r["clusters"], marker="", lw=1.2, label=label)
        star = mine[0]["l_star"]
        top.axhline(0, color="0.85", lw=0.6)
        top.set_title(f"$\\beta$ = {beta:g} ($l^*$ = {star})", fontsize=9)
        top.set_xlabel("degree $l$")
        if star <= 2:  # a generic harmonic of degree 1 has one maximum, of degree 2 two (antipodal)
            bottom.axhline(star, color="0.5", ls="--", lw=1, label=f"maxima of a degree-{star} harmonic")
        else:
            bottom.axhline(star ** 2 / (2 * math.sqrt(3)), color="0.5", ls="--", lw=1,
                           label=r"$l^{*2}/(2\sqrt{3})$ (random harmonic, large $l$)")
        bottom.set_xlabel(r"$\tau = \lambda_{max} t$")
    axes[0][0].set_ylabel(r"growth rate / $\lambda_{max}$")
    axes[1][0].set_ylabel("clusters (cells with >= 1% of the mass)")
    axes[0][-1].legend(fontsize=6)
    axes[1][-1].legend(fontsize=6)
    n = rows[0]["n"]
    fig.suptitle(f"Degree selection on $S^2$ from {n} uniform tokens (layer map, steps 0.02/$\\lambda_{{max}}$); {machine}",
                 fontsize=8)
    ap.save(fig, path, formats=("png",), dpi=130, close=True)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog=__doc__.split("\n\n", 1)[1],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--betas", type=float, nargs="+", default=[1.0, 4.0, 16.0, 64.0], help="inverse temperatures")
    p.add_argument("--normalisations", nargs="+", default=["softmax", "mean"], choices=["softmax", "mean"])
    p.add_argument("--n", type=int, default=50_000, help="tokens (default 50000)")
    p.add_argument("--seeds", type=int, default=1, help="independent clouds per (beta, normalisation) (default 1)")
    p.add_argument("--tau", type=float, default=12.0, help="run length in units of 1/lambda_max (default 12)")
    p.add_argument("--window", type=float, default=0.1, help="amplitude sqrt(E_l) that ends the linear window (0.1)")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64"], help="the tokens' dtype")
    p.add_argument("--quick", action="store_true", help="n = 4000, beta = 1 and 4, tau = 6 (seconds)")
    add_record_arguments(p, "sphere_degree_selection")
    args = p.parse_args(argv)
    if args.redraw is not None:
        out = json.loads(args.redraw.read_text())
        figure(out["rows"], args.figure, f"{out['machine'].get('cpu', '')}, {out['rows'][0]['dtype']}")
        return out
    if args.quick:
        args.n, args.betas, args.tau = 4000, [1.0, 4.0], 6.0
    machine = machine_info()
    rows = []
    for beta in args.betas:
        for normalisation in args.normalisations:
            for seed in range(args.seeds):
                r = run(beta, normalisation, args.n, args.tau, seed, args.window, args.dtype)
                rows.append(r)
                rel = np.asarray(r["rate"]) / np.asarray(r["predicted_per_tau"]) - 1
                print(f"beta {beta:g} {normalisation:7s} seed {seed}: l* = {r['l_star']}, fastest measured "
                      f"{r['measured_l_star']}, rate/theory - 1 over l = 1..{len(rel)}: "
                      f"{np.array2string(rel, precision=3)}, window to tau = {r['window_end_tau']:.2f}, clusters at "
                      f"the end {r['clusters'][-1]}, {r['seconds']:.1f} s ({r['path']})", flush=True)
    out = {"machine": machine, "rows": rows, "step": STEP, "window": args.window}
    args.out.write_text(json.dumps(out) + "\n")
    figure(rows, args.figure, f"{machine.get('cpu', '')}, {args.dtype}")
    return out


if __name__ == "__main__":
    main()
