"""Accuracy of the phase job: the layer map's convergence order, and the diagram at dt = 0.1 against dt = 0.01.

Part 1: :func:`attnflow.phase.sphere_convergence` on random clouds (fixed seeds) for d = 2 and 3 and a few
betas: the projected-Euler error at a fixed time against diffrax Tsit5 (float64, rtol = atol = 1e-12) for a
ladder of dt, and the fitted order with its interval. Part 2: the same phase grid run at dt = 0.1 and 0.01
(common random numbers: the same start clouds), compared cell by cell and checkpoint by checkpoint by
:func:`attnflow.phase.compare_runs` (paired intervals), with the shift of the time at which half of the pairs
are clustered. Writes ``summary.json``, ``convergence.png``, ``compare.png`` and the two run folders under
``--out`` (a second call resumes the runs).

    PYTHONPATH=. python benchmarks/phase_accuracy.py --out results/phase-accuracy            # minutes
    PYTHONPATH=. python benchmarks/phase_accuracy.py --quick --out /tmp/phase-accuracy      # smoke, ~1 min

Not a test.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

#: the phase grid of part 2 per size: checkpoints at the same times for every dt (t1 / (checkpoints - 1) is
#: a multiple of both dt)
SIZES = {
    "full": {"beta": {"start": 0.1, "stop": 9.0, "num": 30}, "systems": 128, "n": 32, "d": [2, 3], "t1": 30.0,
             "checkpoints": 61},
    "quick": {"beta": [0.5, 4.0, 8.0], "systems": 8, "n": 8, "d": [2], "t1": 2.0, "checkpoints": 5},
}
#: part 1 per size: clouds per (d, beta), tokens, time, betas, the dt ladder
LADDERS = {
    "full": {"clouds": 8, "n": 32, "t": 5.0, "beta": [1.0, 4.0, 9.0], "d": [2, 3],
             "dts": [0.2, 0.1, 0.05, 0.025, 0.0125, 0.00625]},
    "quick": {"clouds": 2, "n": 8, "t": 1.0, "beta": [1.0, 4.0], "d": [2], "dts": [0.04, 0.02, 0.01]},
}
DTS = (0.1, 0.01)


def study_config(size: str, dt: float) -> dict:
    """The phase config of the study at one dt (the same seeds, grid and checkpoint times for every dt)."""
    from attnflow.phase import load_phase_config

    cfg = load_phase_config(None)
    cfg.update(SIZES[size], dt=dt, spacing="uniform", dtype="float64")
    cfg["run"]["progress"] = False
    return cfg


def convergence(size: str, seed: int = 0, normalisation: str = "softmax") -> list[dict]:
    """Part 1: per (d, beta) the errors at every dt and the fitted order. With ``normalisation="mean"``
    (the job's 1/n layers, whose field is divided by :func:`attnflow.phase.step_scale`) each row also
    records the largest step dt |f| of the start clouds at dt = 0.1, unscaled and scaled."""
    from attnflow.phase import sphere_convergence, step_scale

    ladder = LADDERS[size]
    out = []
    for d in ladder["d"]:
        for k, beta in enumerate(ladder["beta"]):
            x0 = np.random.default_rng([seed, d, k]).standard_normal((ladder["clouds"], ladder["n"], d))
            start = time.perf_counter()
            r = sphere_convergence(x0, beta, ladder["t"], ladder["dts"], normalisation=normalisation)
            row = {"d": d, "beta": beta, "t": ladder["t"], "n": ladder["n"], "clouds": ladder["clouds"],
                   "dt": r["dt"].tolist(), "error_max": r["error"].max(axis=0).tolist(),
                   "error_median": np.median(r["error"], axis=0).tolist(), "order": r["order"],
                   "order_lo": r["order_lo"], "order_hi": r["order_hi"]}
            line = (f"d = {d}, beta = {beta:g}: order {r['order']:.3f} [{r['order_lo']:.3f}, {r['order_hi']:.3f}]; "
                    f"max error {r['error'].max(axis=0)[0]:.2e} at dt = {ladder['dts'][0]:g}, "
                    f"{r['error'].max(axis=0)[-1]:.2e} at dt = {ladder['dts'][-1]:g}")
            if normalisation == "mean":
                unscaled, scale = _largest_step(x0, beta, 0.1), step_scale(beta)
                row.update({"step_scale": scale, "largest_step_unscaled_dt0.1": unscaled,
                            "largest_step_scaled_dt0.1": unscaled / scale})
                line += (f"; s = {scale:.4g}, largest step at dt = 0.1: {unscaled:.3g} rad unscaled, "
                         f"{unscaled / scale:.3g} scaled")
            out.append({**row, "seconds": time.perf_counter() - start})
            print(line, flush=True)
    return out


def _largest_step(x0: np.ndarray, beta: float, dt: float) -> float:
    """max_i dt |f_i| of the unscaled 1/n sphere field on the normalised clouds ``x0`` (float64)."""
    import jax
    import jax.numpy as jnp

    from attnflow.dynamics import normalise, sphere_flow

    with jax.enable_x64(True):
        I = jnp.eye(x0.shape[-1], dtype=jnp.float64)
        f = jax.vmap(lambda x: sphere_flow(I, I, I, beta, normalisation="mean")(0.0, x))(normalise(jnp.asarray(x0)))
        return float(dt * jnp.linalg.norm(f, axis=-1).max())


def phase_pair(size: str, out: Path) -> dict:
    """Part 2: the two runs (resumed when present) and their paired comparison."""
    from attnflow.phase import compare_runs, run_phase

    seconds = {}
    for dt in DTS:
        start = time.perf_counter()
        run_phase(study_config(size, dt), out / f"dt={dt:g}")
        seconds[f"{dt:g}"] = time.perf_counter() - start
        print(f"phase run at dt = {dt:g}: {seconds[f'{dt:g}']:.0f} s (a resumed run only rewrites its tables)",
              flush=True)
    c = compare_runs(out / f"dt={DTS[0]:g}", out / f"dt={DTS[1]:g}")
    return {"seconds": seconds, **c}


def _crossing_table(c: dict) -> list[dict]:
    x = c["crossing"]
    return [{k: (float(x[k][i]) if k not in ("n", "d", "systems", "never") else int(x[k][i])) for k in x}
            for i in range(len(x["beta"]))]


def _largest_differences(c: dict, observable: str, k: int = 5) -> list[dict]:
    rows = c["rows"]
    sel = np.flatnonzero(rows["observable"] == observable)
    top = sel[np.argsort(-np.abs(rows["diff"][sel]))[:k]]
    return [{"d": int(rows["d"][i]), "beta": float(rows["beta"][i]), "t": float(rows["t"][i]),
             "diff": float(rows["diff"][i]), "diff_lo": float(rows["diff_lo"][i]), "diff_hi": float(rows["diff_hi"][i]),
             "mean_reference": float(rows["mean_reference"][i]),
             "reference_half_width": float(rows["reference_half_width"][i])} for i in top]


def _by_time(c: dict, observable: str, edges=(0.0, 2.5, 5.0, 8.0, 12.0, 20.0, np.inf)) -> list[dict]:
    """Per d and time band: the fraction of cells that do not agree, the largest |difference| and the largest
    |difference| relative to the reference's own interval half-width (cells with a zero-width one left out)."""
    rows = c["rows"]
    out = []
    for d in sorted({int(x) for x in rows["d"]}):
        for lo, hi in zip(edges[:-1], edges[1:]):
            s = (rows["observable"] == observable) & (rows["d"] == d) & (rows["t"] >= lo) & (rows["t"] < hi)
            if not s.any():
                continue
            half = rows["reference_half_width"][s]
            rel = np.abs(rows["diff"][s])[half > 0] / half[half > 0]
            out.append({"d": d, "t_from": lo, "t_to": float(hi), "cells": int(s.sum()),
                        "disagree_fraction": float(np.mean(~rows["agrees"][s])),
                        "max_abs_diff": float(np.abs(rows["diff"][s]).max()),
                        "max_diff_over_half_width": float(rel.max()) if rel.size else None})
    return out


def figures(conv: list[dict], c: dict, out: Path) -> list[str]:
    """convergence.png (error against dt, log-log) and compare.png (the paired difference of the clustered
    pairs over beta x t per d, the cells that do not agree dotted, and the crossing-time shift against beta)."""
    import attnflow.plot as ap

    names = []
    fig, axes = ap.new_figure(1, 1, panel=(5.2, 4.0))
    ax = np.ravel(axes)[0]
    cs = ap.colours(len(conv))
    for colour, r in zip(cs, conv):
        ax.loglog(r["dt"], r["error_max"], "o-", color=colour, label=f"d = {r['d']}, beta = {r['beta']:g}: "
                                                                     f"order {r['order']:.3f}")
    dt = np.asarray(conv[0]["dt"])
    ax.loglog(dt, conv[0]["error_max"][0] * dt / dt[0], "k:", label="slope 1")
    ap.legend(ax, max_inside=8)
    ax.set_xlabel("layer step dt")
    ax.set_ylabel(f"max_i |x_i(t) - x_i^flow(t)| at t = {conv[0]['t']:g}")
    ax.set_title("projected Euler against the sphere flow (Tsit5, float64)")
    names += ap.save(fig, out / "convergence.png", close=True)

    rows = c["rows"]
    ds = sorted({int(d) for d in rows["d"]})
    fig, axes = ap.new_figure(len(ds) + 1, 1, panel=(5.8, 4.2))
    axes = np.ravel(axes)
    sel_all = rows["observable"] == "pairs_clustered"
    for ax, d in zip(axes, ds):
        sel = sel_all & (rows["d"] == d)
        beta, t = np.unique(rows["beta"][sel]), np.unique(rows["t"][sel])
        grid = np.full((beta.size, t.size), np.nan)
        bad = np.zeros_like(grid, bool)
        for i in np.flatnonzero(sel):
            a, b = np.searchsorted(beta, rows["beta"][i]), np.searchsorted(t, rows["t"][i])
            grid[a, b], bad[a, b] = rows["diff"][i], not rows["agrees"][i]
        lim = float(np.nanmax(np.abs(grid))) or 1.0
        ap.phase_diagram(grid, beta=beta, t=t, ax=ax, vmin=-lim, vmax=lim, cmap="RdBu_r",
                         label="dt 0.1 - dt 0.01 (paired mean)", title=f"clustered pairs, d = {d}")
        bb, tt = np.nonzero(bad)
        ax.plot(t[tt], beta[bb], ".", color="k", ms=2, label="interval excludes 0")
        ap.legend(ax)
    ax = axes[-1]
    x = c["crossing"]
    for colour, d in zip(ap.colours(len(ds)), ds):
        sel = x["d"] == d
        ax.errorbar(x["beta"][sel], x["shift"][sel], yerr=[x["shift"][sel] - x["shift_lo"][sel],
                                                          x["shift_hi"][sel] - x["shift"][sel]],
                    fmt="o", ms=3, color=colour, capsize=2, label=f"d = {d}")
    ax.axhline(0.0, color="0.5", lw=0.8)
    ax.set_xlabel("beta (inverse temperature)")
    ax.set_ylabel(f"shift of the time to {c['level']:g} of pairs clustered")
    ax.set_title("dt = 0.1 minus dt = 0.01 (paired, 95%)")
    ap.legend(ax)
    names += ap.save(fig, out / "compare.png", close=True)
    return [n for n in names if n.endswith(".png")]


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="folder for summary.json, the figures and the two run folders")
    p.add_argument("--quick", action="store_true", help="toy sizes (smoke test, about a minute)")
    p.add_argument("--skip-convergence", action="store_true", help="only part 2")
    args = p.parse_args()
    size = "quick" if args.quick else "full"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    from attnflow.runs import atomic_write_json

    start = time.perf_counter()
    conv = [] if args.skip_convergence else convergence(size)
    c = phase_pair(size, out / "runs")
    summary = {"size": size, "phase_grid": SIZES[size], "ladder": LADDERS[size], "convergence": conv,
               "phase_seconds": c["seconds"], "comparison": c["summary"], "excluded_systems": c["excluded"],
               "confidence": c["confidence"], "crossing_level": c["level"], "crossing": _crossing_table(c),
               "largest_differences": {o: _largest_differences(c, o) for o in ("pairs_clustered", "clusters",
                                                                                 "energy")},
               "by_time": {o: _by_time(c, o) for o in ("pairs_clustered", "clusters", "energy")}}
    if conv:
        summary["figures"] = figures(conv, c, out)
    summary["seconds"] = time.perf_counter() - start
    atomic_write_json(out / "summary.json", summary)
    for s in c["summary"]:
        print(f"d = {s['d']}, {s['observable']}: {s['agree_fraction']:.0%} of {s['cells']} cells agree (paired), "
              f"{s['within_interval_fraction']:.0%} within the dt = 0.01 interval; disagreeing: beta "
              f"{s['disagree_beta']}, t {s['disagree_t']}; largest |difference| {s['max_abs_diff']:.3g} at "
              f"{s['max_at']}")
    print(json.dumps({"out": str(out), "seconds": round(summary["seconds"], 1)}))


if __name__ == "__main__":
    main()
